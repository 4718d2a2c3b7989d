"""Models and activity names of the generic Kubernetes activities (status patches, Events)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from cloudloop.kube.models import EventSource as EventSource
from cloudloop.kube.resources import ObjectRef


class KubeActivity:
    PATCH_STATUS = "kube.patch_status"
    RECORD_EVENT = "kube.record_event"


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
    #: The reporting controller (an :class:`EventSource` name).
    component: str = EventSource.PROBE
