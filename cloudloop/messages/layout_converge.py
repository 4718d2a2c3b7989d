"""Models, IDs and names of the in-cluster converge (``LayoutConverge``, terraform-manager's job).

A Temporal Schedule per cluster (``[<scope>/]layout-converge/<prefix>``) starts one
``LayoutConverge`` pass every interval: it plans the layout, reports each module's status (the
statuses of Deckhouse's terraform-state-exporter), applies what is safe when auto-converge is on
and holds every destructive step (:class:`HeldStep`) until ``cloudloop layout approve`` sends the
``approve`` Update. Nothing secret is in these models: statuses, counts, resource keys and the
fields that differ (values as plan shows them: IDs, sizes, names; bootstrap data as a digest).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import FieldChange, LayoutTimings
from cloudloop.messages.scope import scoped_id

#: terraform-state-exporter's statuses, worst first (its "worst-case status" order).
ConvergeStatus = Literal["error", "destructively_changed", "abandoned", "absent", "changed", "ok"]
STATUSES: tuple[ConvergeStatus, ...] = (
    "error",
    "destructively_changed",
    "abandoned",
    "absent",
    "changed",
    "ok",
)
#: What a held step does once approved (``replace``: delete, then the module's apply).
StepKind = Literal["replace"]
StepOutcome = Literal["waiting", "approved", "done", "failed", "held"]


class ConvergeActivity:
    REPORT = "layout.converge_report"


class ConvergeUpdate:
    APPROVE = "approve"


class ConvergeQuery:
    STATE = "converge"


def schedule_id(prefix: str, scope: str = "") -> str:
    """The cluster's converge Schedule: ``[<scope>/]layout-converge/<prefix>``."""
    return scoped_id(scope, f"layout-converge/{prefix}")


def pass_workflow_id(prefix: str, scope: str = "") -> str:
    """The ID a pass is started with (the Schedule appends its start time to it)."""
    return scoped_id(scope, f"layout-converge/{prefix}/pass")


class ConvergeInput(BaseModel):
    provider: str
    source: ConfigSource
    cluster: ClusterIdentity
    timings: LayoutTimings = Field(default_factory=LayoutTimings)
    id_scope: str = ""
    #: Apply what is safe (creations, in-place repairs) in the same pass; hold the rest.
    auto: bool = False
    #: How long a pass waits for a held step's approval before it ends with the step held (the
    #: next pass asks again).
    approval_wait_s: float = Field(default=3600.0, gt=0)
    #: Read each node group's bootstrap data where dhctl's converge does
    #: (``d8-cloud-instance-manager/manual-bootstrap-for-<group>``), beside ``source.cloud_config``.
    bootstrap_from_cluster: bool = True


class ModuleStatus(BaseModel):
    """One module's status in a pass (``node_group``/``name`` empty for the base)."""

    module: str
    status: ConvergeStatus
    node_group: str = ""
    name: str = ""
    to_create: int = 0
    to_change: int = 0
    to_replace: int = 0
    #: Why the status is ``error`` or why a safe change was not applied (never a value).
    note: str = ""


class HeldStep(BaseModel):
    """A destructive step waiting for approval, with the diff it would act on."""

    key: str
    module: str
    resource: str
    kind: StepKind = "replace"
    changes: list[FieldChange] = Field(default_factory=list)
    outcome: StepOutcome = "waiting"
    error: str = ""


class ApproveInput(BaseModel):
    """Approve one held step by its key, or (``step`` empty) every step held now."""

    step: str = ""


class ApproveResult(BaseModel):
    #: The steps this call approved (an approval given twice approves nothing the second time).
    approved: list[str] = Field(default_factory=list)
    #: Steps approved before (the call changed nothing for them).
    already: list[str] = Field(default_factory=list)


class ConvergeState(BaseModel):
    """What the ``converge`` query shows (and the Temporal UI with it)."""

    phase: str = "planning"
    statuses: list[ModuleStatus] = Field(default_factory=list)
    held: list[HeldStep] = Field(default_factory=list)
    applied: list[str] = Field(default_factory=list)
    error: str = ""


class ConvergeResult(BaseModel):
    prefix: str
    #: The cluster's status: the worst of the modules'.
    status: ConvergeStatus
    statuses: list[ModuleStatus] = Field(default_factory=list)
    #: The modules whose safe changes this pass applied.
    applied: list[str] = Field(default_factory=list)
    held: list[HeldStep] = Field(default_factory=list)
    error: str = ""


class ReportInput(BaseModel):
    """What a pass writes into the cluster: its statuses (and, after a plan that could read
    the cloud, the Terraform-state Secrets of what it found)."""

    provider: str
    cluster: ClusterIdentity
    result: ConvergeResult
    #: ``module`` → ``resource key`` → the found resource's outputs (its ``id`` first).
    found: dict[str, dict[str, dict[str, object]]] = Field(default_factory=dict)
    #: ``module`` → node name (node modules only).
    nodes: dict[str, str] = Field(default_factory=dict)
    #: When the pass started (ISO 8601, the workflow's clock).
    started: str = ""


class ReportResult(BaseModel):
    written: list[str] = Field(default_factory=list)
    #: The cluster status before this report ("" when none was recorded).
    previous: str = ""
