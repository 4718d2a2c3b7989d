"""Models, signal and activity names of Cluster API machine provisioning (``MachineWorkflow``).

The workflow input carries only the bootstrap Secret's *name*: the data is secret, so an activity
reads it and hands the bytes to the driver; it never enters workflow history.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from cloudloop.cloud.models import Machine as Machine
from cloudloop.cloud.models import MachineSpec, NodeAddress
from cloudloop.kube.resources import ObjectRef

ConditionStatus = Literal["True", "False", "Unknown"]


class MachineActivity:
    CREATE = "machine.create"
    OBSERVE = "machine.observe"
    DELETE = "machine.delete"
    REPORT = "machine.report"
    REMOVE_FINALIZER = "machine.remove_finalizer"


class MachineSignal:
    #: The InfraMachine's desired state as the starter sees it (:class:`MachineDesired`).
    DESIRED = "desired"
    #: Retry a failed provisioning now (:class:`RetryRequest`).
    RETRY = "retry"


class MachineQuery:
    PROGRESS = "progress"


def workflow_id(namespace: str, name: str, uid: str) -> str:
    return f"machine/{namespace}/{name}/{uid}"


class MachineCondition(BaseModel):
    type: str
    status: ConditionStatus
    reason: str
    message: str


class MachineDesired(BaseModel):
    """What the InfraMachine, its Machine and its Cluster ask for right now."""

    spec: MachineSpec
    infrastructure_ready: bool
    #: ``Machine.spec.bootstrap.dataSecretName`` (in the InfraMachine's namespace); empty: not yet.
    bootstrap_secret: str = ""
    paused: bool = False
    deleting: bool = False
    #: The ``cloudloop.io/retry`` annotation; a new value retries a failed provisioning.
    retry_token: str = ""


class PollSchedule(BaseModel):
    """How often a waiting activity asks the cloud: ``initial_s``, growing by ``factor`` up to
    ``max_s``."""

    initial_s: float = 0.1
    factor: float = 1.5
    max_s: float = 2.0

    def after(self, delay: float) -> float:
        return min(delay * self.factor, self.max_s)


class MachineTimings(BaseModel):
    """How the workflow waits; the defaults suit production, tests shorten them."""

    heartbeat_timeout_s: float = 15.0
    #: Longest single wait inside an activity polling the VM before it reports back.
    observe_window_s: float = 60.0
    poll: PollSchedule = Field(default_factory=PollSchedule)
    #: How often a provisioned machine's VM is looked at again.
    refresh_interval_s: float = 300.0
    #: First and longest pause before a failed (retryable) provisioning is tried again.
    retry_backoff_s: float = 10.0
    retry_backoff_max_s: float = 300.0


class MachineInput(BaseModel):
    """Input of :class:`workflows.machine.MachineWorkflow` (also its continue-as-new state)."""

    object: ObjectRef
    provider: str
    finalizer: str
    desired: MachineDesired
    #: ``spec`` field that takes the cloud's VM ID (zVirt ``id``), if any.
    id_field: str = ""
    timings: MachineTimings = Field(default_factory=MachineTimings)
    # -- carried over by continue-as-new ---------------------------------------------------
    provisioned: Machine | None = None
    attempts: int = 0
    #: Failed provisioning attempts in a row (the retry backoff's exponent).
    failures: int = 0
    #: Failed deletions in a row (the delete retry backoff's exponent).
    delete_failures: int = 0
    #: The run continued as new in the middle of an attempt: it goes on, not a new attempt.
    resume_attempt: bool = False


class RetryRequest(BaseModel):
    token: str
    source: str = ""  # cli | annotation


class MachineProgress(BaseModel):
    """What the workflow is doing (query ``progress``)."""

    phase: Literal["Waiting", "Provisioning", "Provisioned", "Failed", "Deleting", "Deleted"]
    attempts: int = 0
    reason: str = ""
    message: str = ""
    provider_id: str = ""


class MachineResult(BaseModel):
    attempts: int
    provider_id: str = ""


class SecretName(BaseModel):
    namespace: str
    name: str


class ObserveMachineInput(BaseModel):
    spec: MachineSpec
    #: Return as soon as the VM's reason differs from this one (or the window ends).
    last_reason: str
    window_s: float
    poll: PollSchedule = Field(default_factory=PollSchedule)


class ObserveMachineResult(BaseModel):
    machine: Machine | None
    reason: str
    polls: int = 0
    #: ``CreateMachineInput.creating`` and ``.provisioned`` were written by the activity.
    creating_reported: bool = False
    provisioned_reported: bool = False


class DeleteMachineInput(BaseModel):
    spec: MachineSpec
    poll: PollSchedule = Field(default_factory=PollSchedule)


class DeleteMachineResult(BaseModel):
    attempts: int


class MachineEvent(BaseModel):
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


class ReportMachineInput(BaseModel):
    """Write the InfraMachine's providerID (and ID field) and status; ``None`` leaves a field."""

    object: ObjectRef
    conditions: list[MachineCondition]
    provider_id: str = ""
    id_field: str = ""
    machine_id: str = ""
    addresses: list[NodeAddress] | None = None
    ready: bool | None = None
    provisioned: bool | None = None
    #: An Event recorded on the object once the status is written (it names the workflow).
    event: MachineEvent | None = None


class CreateMachineInput(BaseModel):
    """Create (or adopt) the VM, then watch it like :class:`ObserveMachineInput` says.

    ``creating``: the status written before the create (the workflow's "creating" report, in
    this activity rather than a local activity before it). ``provisioned``: the status written
    once the VM runs with an address (providerID, addresses, ready, the ``Provisioned`` Event;
    ``{provider_id}`` in the Event's message is filled in), only if the object is unchanged
    since ``creating`` was written — otherwise the workflow writes it, as it did before.
    """

    spec: MachineSpec
    bootstrap: SecretName
    window_s: float = 0.0
    poll: PollSchedule = Field(default_factory=PollSchedule)
    creating: ReportMachineInput | None = None
    provisioned: ReportMachineInput | None = None


class RemoveFinalizerInput(BaseModel):
    object: ObjectRef
    finalizer: str
