"""Models and activity names of the node termination handler: interruption events, the drain
workflow's input and result, the inputs and outputs of its activities, and the notices the IMDS
node agent records on its own Node (:class:`NodeNotices`, the annotation
:data:`NOTICES_ANNOTATION`) for the leader-elected starter to drain."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from cloudloop.cloud.termination import MANAGED_TAG as MANAGED_TAG
from cloudloop.cloud.termination import TAINT_KEYS as TAINT_KEYS
from cloudloop.cloud.termination import TAINT_PREFIX as TAINT_PREFIX
from cloudloop.cloud.termination import EventKind as EventKind
from cloudloop.cloud.termination import InterruptionEvent as InterruptionEvent
from cloudloop.cloud.termination import LifecycleAction as LifecycleAction
from cloudloop.cloud.termination import QueueInfo as QueueInfo
from cloudloop.cloud.termination import QueueSpec as QueueSpec
from cloudloop.cloud.termination import label_value as label_value


class DrainActivity:
    TAINT_NODE = "drain.taint_node"
    CORDON_NODE = "drain.cordon_node"
    LIST_PODS = "drain.list_pods"
    EVICT_PODS = "drain.evict_pods"
    WAIT_VOLUME_ATTACHMENTS = "drain.wait_volume_attachments"
    SEND_WEBHOOK = "drain.send_webhook"
    RECORD_OUTCOME = "drain.record_outcome"
    COMPLETE_LIFECYCLE_ACTION = "drain.complete_lifecycle_action"
    RECORD_LIFECYCLE_HEARTBEAT = "drain.record_lifecycle_heartbeat"
    ENSURE_QUEUE = "drain.ensure_queue"
    ENSURE_QUEUE_RULES = "drain.ensure_queue_rules"
    ENSURE_LIFECYCLE_HOOKS = "drain.ensure_lifecycle_hooks"
    REMOVE_QUEUE = "drain.remove_queue"


class DrainOptions(BaseModel):
    """How to drain, fixed when the workflow starts (from the starter's ``NthSettings``)."""

    cordon_only: bool = False
    taint_effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"
    node_termination_grace_period_s: float = 120.0
    pod_termination_grace_period_s: int = -1
    ignore_daemonsets: bool = True
    delete_emptydir_data: bool = True
    force: bool = True
    heartbeat_interval_s: float = 60.0
    heartbeat_until_s: float = 172800.0
    eviction_retry_interval_s: float = 5.0
    drain_poll_interval_s: float = 1.0
    drain_round_s: float = 30.0
    activity_heartbeat_timeout_s: float = 15.0
    wait_for_volume_attachments: bool = False
    volume_attachment_timeout_s: float = 300.0


class DrainInput(BaseModel):
    """Input of :class:`workflows.termination.DrainNodeWorkflow`; more events arrive by signal."""

    node: str
    cluster: str
    instance_id: str
    #: The instance's launch time: a later launch is a new incarnation with its own drain.
    instance_launch_time: datetime | None = None
    instance_type: str = ""
    zone: str = ""
    provider_id: str = ""
    event: InterruptionEvent
    options: DrainOptions = Field(default_factory=DrainOptions)


class DrainResult(BaseModel):
    node: str
    #: ``cordon`` or ``cordon-and-drain`` (upstream's action names).
    action: str
    node_found: bool = True
    event_ids: list[str] = Field(default_factory=list)
    evicted: int = 0
    lifecycle_actions_completed: list[str] = Field(default_factory=list)


class LifecycleInput(BaseModel):
    """Input of :class:`workflows.termination.CompleteLifecycleWorkflow` (a late ASG event)."""

    node: str
    cluster: str
    action: LifecycleAction


# -- the IMDS node agent's notices ----------------------------------------------------------
#: The annotation the IMDS node agent (``cloudloop termination-imds``) writes on its own Node: a
#: JSON :class:`NodeNotices`. The only field of a Node the agent may change (its
#: ValidatingAdmissionPolicy), read by the starter's ``ImdsNotices``.
NOTICES_ANNOTATION = "termination.cloudloop.io/imds-notices"
#: At most this many notices are kept (the newest): scheduled events accumulate.
MAX_NOTICES = 16


class NodeNotices(BaseModel):
    """What the instance metadata service told the agent of one Node: the instance behind the
    Node (its incarnation: the identity document's ``pendingTime``) and the interruption notices
    seen for it. A new incarnation replaces the notices of the old one."""

    instance_id: str = Field(pattern=r"^i-[0-9a-zA-Z]{1,32}$")
    instance_launch_time: datetime | None = None
    zone: str = Field(default="", max_length=64)
    instance_type: str = Field(default="", max_length=64)
    notices: list[InterruptionEvent] = Field(default_factory=list, max_length=MAX_NOTICES)


# -- activities ------------------------------------------------------------------------------
class NodeTaint(BaseModel):
    key: str
    value: str
    effect: str = "NoSchedule"


class TaintNodeInput(BaseModel):
    node: str
    taints: list[NodeTaint]


class CordonNodeInput(BaseModel):
    node: str


class PodRef(BaseModel):
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class PodNote(BaseModel):
    """A pod with why it is skipped, refused, blocked or failed."""

    pod: PodRef
    reason: str


class ListPodsInput(BaseModel):
    node: str
    ignore_daemonsets: bool = True
    delete_emptydir_data: bool = True
    force: bool = True


class PodPlan(BaseModel):
    """kubectl drain's filters applied to the node's pods."""

    evict: list[PodRef] = Field(default_factory=list)
    skipped: list[PodNote] = Field(default_factory=list)
    #: Pods the settings forbid to evict (DaemonSet, emptyDir, unmanaged): the drain fails.
    refused: list[PodNote] = Field(default_factory=list)


class EvictPodsInput(BaseModel):
    node: str
    pods: list[PodRef]
    #: ``deleteOptions.gracePeriodSeconds``; ``None`` uses each pod's own.
    grace_period_s: int | None = None
    retry_interval_s: float = 5.0
    poll_interval_s: float = 0.25
    #: The drain's global deadline and the end of this round, whichever comes first.
    deadline: datetime
    round_s: float = 30.0
    workflow_id: str = ""


class EvictPodsResult(BaseModel):
    #: Pods still on the node (not yet evicted, blocked or terminating).
    remaining: list[PodRef] = Field(default_factory=list)
    #: Pods this round evicted (an eviction request answered 2xx).
    evicted: list[PodRef] = Field(default_factory=list)
    blocked: list[PodNote] = Field(default_factory=list)
    #: Eviction errors that retrying will not heal (e.g. several PDBs cover the pod).
    failed: list[PodNote] = Field(default_factory=list)


class WaitVolumeAttachmentsInput(BaseModel):
    node: str
    timeout_s: float
    poll_interval_s: float = 1.0


class WebhookInput(BaseModel):
    """The fields upstream's webhook template sees."""

    event_id: str
    kind: str
    instance_id: str
    node_name: str
    description: str
    start_time: datetime
    state: str = ""
    auto_scaling_group: str = ""
    instance_type: str = ""
    availability_zone: str = ""
    provider_id: str = ""


class OutcomeInput(BaseModel):
    """An Event on the Node and one ``actions`` count."""

    node: str
    action: str
    ok: bool
    reason: str
    message: str


class LifecycleActionInput(BaseModel):
    action: LifecycleAction
    result: Literal["CONTINUE", "ABANDON"] = "CONTINUE"


#: The signal every further event of one interruption is sent to the drain workflow as.
DRAIN_SIGNAL = "add_event"


def incarnation(launch_time: datetime | None) -> str:
    return launch_time.strftime("%Y%m%dT%H%M%SZ") if launch_time else "unknown-launch"


def drain_workflow_id(
    node: str, instance_id: str, launch_time: datetime | None, *, cordon_only: bool = False
) -> str:
    """``drain/<node>/<instance-id>/<launch>``: the same for every message about one
    interruption of one instance incarnation; cordon-only work has its own ID."""
    wf_id = f"drain/{node}/{instance_id}/{incarnation(launch_time)}"
    return wf_id + "/cordon" if cordon_only else wf_id


def lifecycle_workflow_id(action: LifecycleAction) -> str:
    return f"lifecycle/{action.instance_id}/{action.token}"


def queue_workflow_id(cluster: str, *, remove: bool = False) -> str:
    """One install and one removal per cluster at a time (a second start joins the first)."""
    return f"nth-queue-{'remove' if remove else 'install'}/{cluster}"


# -- the queue's infrastructure --------------------------------------------------------------
class QueueSetupInput(BaseModel):
    """Input of :class:`workflows.termination.TerminationQueueWorkflow`: make (or remove) the
    interruption queue, its rules and the lifecycle hooks."""

    spec: QueueSpec
    remove: bool = False


class QueueRulesInput(BaseModel):
    spec: QueueSpec
    queue: QueueInfo


class QueueSetupResult(BaseModel):
    queue_url: str = ""
    queue_arn: str = ""
    rules: list[str] = Field(default_factory=list)
    hooks: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
