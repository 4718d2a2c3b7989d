"""Models and activity names of the CloudProbe round trip (the foundation's demo capability)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from cloudloop.cloud.models import Zone
from cloudloop.kube.resources import ObjectRef


class ProbeActivity:
    DISCOVER_ZONES = "cloud.discover_zones"


class CloudCallInput(BaseModel):
    provider: str


class ZoneList(BaseModel):
    zones: list[Zone] = Field(default_factory=list)


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


def workflow_id(input: ProbeInput) -> str:
    ref = input.object
    return f"probe/{ref.namespace}/{ref.name}/{ref.uid}/g{input.generation}"
