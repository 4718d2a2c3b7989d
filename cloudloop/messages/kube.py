"""Models and activity names of the generic Kubernetes activities (status patches, Events)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from cloudloop.kube.resources import ObjectRef


class KubeActivity:
    PATCH_STATUS = "kube.patch_status"
    RECORD_EVENT = "kube.record_event"


class EventSource:
    """Reporting controller names of Events (``source.component``): upstream's for the CCM's
    controllers (kubernetes/cloud-provider), cloudloop's own for the rest."""

    NODE = "cloud-node-controller"
    NODE_LIFECYCLE = "cloud-node-lifecycle-controller"
    SERVICE = "service-controller"
    ROUTE = "route-controller"
    MACHINE = "cloudloop-machine-controller"
    TERMINATION = "cloudloop-termination-handler"
    PROBE = "cloudloop"


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
