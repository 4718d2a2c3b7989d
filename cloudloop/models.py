"""Inputs and outputs of workflows and activities: one pydantic model per call.

Workflows import only this module (plus the standard library and temporalio), so it must stay
free of I/O and of the kubernetes and cloud SDKs. Activity names live here too: workflows call
activities by name, and the activity modules register under the same names.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from cloudloop.cloud.models import Zone
from cloudloop.kube.resources import ObjectRef


class ActivityName:
    """Registered activity names (workflows refer to activities by these)."""

    DISCOVER_ZONES = "cloud.discover_zones"
    PATCH_STATUS = "kube.patch_status"
    RECORD_EVENT = "kube.record_event"


class CloudCallInput(BaseModel):
    provider: str


class ZoneList(BaseModel):
    zones: list[Zone] = Field(default_factory=list)


class ConditionUpdate(BaseModel):
    type: str
    status: bool
    reason: str
    message: str


class PatchStatusInput(BaseModel):
    """Merge ``status`` into the object's status and set ``condition`` (if given)."""

    object: ObjectRef
    status: dict[str, Any] = Field(default_factory=dict)
    condition: ConditionUpdate | None = None
    observed_generation: int | None = None


class RecordEventInput(BaseModel):
    object: ObjectRef
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


class ProbeInput(BaseModel):
    """Input of :class:`workflows.probe.CloudProbeWorkflow`."""

    object: ObjectRef
    generation: int
    provider: str
    cluster: str


class ProbeResult(BaseModel):
    ok: bool
    reason: str
    message: str
    zones: list[str] = Field(default_factory=list)
