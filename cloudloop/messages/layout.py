"""Models, IDs, query and activity names of the layout workflows (``Layout``, ``LayoutModule``).

One ``Layout`` workflow per cluster (``layout/<prefix>``) runs an action (apply, destroy, plan)
over the layout's definitions; apply and destroy run a ``LayoutModule`` child per module
instance (``layout/<prefix>/base``, ``…/master-<i>``, ``…/static-<ng>-<i>``), one activity per
resource. Inputs carry only the :class:`ConfigSource` (a file or Secret reference) and
non-secret definitions; the activities read the credentials themselves.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource, LayoutDef, ModuleDef, ResourceDef
from cloudloop.layouts.tfstate import StateResource
from cloudloop.messages.scope import scoped_id

Action = Literal["apply", "destroy", "plan", "adopt"]
#: What a plan says about one resource.
PlanAction = Literal["create", "update", "delete", "no-op"]
#: What a step did to one resource.
#: (``adopted``: found by the ID a Terraform state gave and made findable; ``missing``: the
#: state lists it, the cloud does not have it.)
StepAction = Literal["created", "updated", "unchanged", "deleted", "absent", "adopted", "missing"]
StepState = Literal["pending", "running", "done", "failed"]
ChangeHow = Literal["repair", "replace", "kept"]


class LayoutActivity:
    DEFINE = "layout.define"
    ENSURE = "layout.ensure_resource"
    DELETE = "layout.delete_resource"
    PLAN = "layout.plan_module"
    CHECK_DESTROY = "layout.check_destroy"
    CHECK_APPLY = "layout.check_apply"
    MAP_STATE = "layout.map_state"
    ADOPT = "layout.adopt_resource"
    CLEAR_CLUSTER = "layout.clear_cluster"


#: The steps of destroy's first phase (with ``--kubeconfig``), in dhctl's order: the cluster is
#: checked to be this one, its LoadBalancer Services deleted and waited for, its PDBs,
#: StorageClasses, PVCs (and the Pods using them) deleted and the claims and PersistentVolumes
#: waited for, its Cluster API MachineDeployments deleted and their Machines waited for.
CLEAR_STEPS: tuple[str, ...] = (
    "verify-cluster",
    "delete-services",
    "wait-services",
    "delete-volumes",
    "wait-volumes",
    "delete-machines",
    "wait-machines",
)


class LayoutQuery:
    PROGRESS = "progress"


def workflow_id(prefix: str, scope: str = "") -> str:
    """``[<scope>/]layout/<prefix>``: the cloud prefix is unique within one cloud account
    only, so the cluster's ID scope (:mod:`cloudloop.messages.scope`) comes first."""
    return scoped_id(scope, f"layout/{prefix}")


def module_workflow_id(prefix: str, module_id: str, scope: str = "") -> str:
    return scoped_id(scope, f"layout/{prefix}/{module_id}")


def plan_workflow_id(prefix: str, scope: str = "") -> str:
    return scoped_id(scope, f"layout/{prefix}/plan")


class LayoutTimings(BaseModel):
    """Activity timeouts: a dead worker costs at most ``heartbeat_timeout_s`` (or the short
    ``start_to_close`` of a quick step)."""

    heartbeat_timeout_s: float = 15.0
    #: The longest a step may take (a NAT gateway or an instance to become available).
    step_timeout_s: float = 900.0
    #: A read-only step (define, plan, check): no heartbeat, a short deadline.
    read_timeout_s: float = 15.0
    max_attempts: int = 8
    #: How long destroy waits for the cluster's Services, volumes and Machines to go (each).
    cluster_wait_s: float = 600.0


class LayoutInput(BaseModel):
    action: Action
    provider: str
    source: ConfigSource
    cluster: ClusterIdentity
    timings: LayoutTimings = Field(default_factory=LayoutTimings)
    #: A plan of the destroy: what exists is listed as ``delete``.
    plan_destroy: bool = False
    #: For ``adopt``: the upstream Terraform state's resources (IDs and identity attributes
    #: only, never the state's secrets).
    state: list[StateResource] = Field(default_factory=list)
    #: For ``destroy``: the kubeconfig the workers read (a path, never its content); set, the
    #: destroy first deletes the cluster's own cloud-backed objects through its API.
    kubeconfig: str = ""
    #: The workflow-ID scope of the cluster's queues (``TemporalSettings.id_scope``): the
    #: modules' IDs carry it as the layout's own does ("" in runs started before it existed).
    id_scope: str = ""


class DefineInput(BaseModel):
    provider: str
    source: ConfigSource
    cluster: ClusterIdentity
    #: Also read each node group's bootstrap data from the cluster, where dhctl's converge
    #: does (:data:`cloudloop.layouts.bootstrap.CLUSTER_SECRET_NAMESPACE`); a group named in
    #: ``source.cloud_config`` keeps its file.
    bootstrap_from_cluster: bool = False


class FieldChange(BaseModel):
    field: str
    have: Any = None
    want: Any = None
    #: How apply meets it: ``repair`` in place; ``replace`` only by a delete and a create,
    #: which apply never does itself (a converge pass holds it for approval,
    #: :mod:`cloudloop.rules.converge`); ``kept``: left as it is on purpose (the field names why).
    how: ChangeHow = "repair"


class ResourcePlan(BaseModel):
    key: str
    kind: str
    name: str
    action: PlanAction
    changes: list[FieldChange] = Field(default_factory=list)
    #: What was found (``id`` and the definition's outputs); empty when absent.
    outputs: dict[str, Any] = Field(default_factory=dict)


class PlanModuleInput(BaseModel):
    provider: str
    source: ConfigSource
    module: ModuleDef
    #: Found outputs of other modules' resources (the base's, for a node module).
    external: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: Plan the destroy: whatever exists is a ``delete``.
    destroy: bool = False


class PlanModuleResult(BaseModel):
    module: str
    resources: list[ResourcePlan]


class StepInput(BaseModel):
    """One resource's step (ensure or delete); ``inputs`` = the outputs it refers to."""

    provider: str
    source: ConfigSource
    resource: ResourceDef
    inputs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: For an adoption step: the resource's cloud ID from the Terraform state ("" = not in it).
    cloud_id: str = ""


class StepResult(BaseModel):
    key: str
    action: StepAction
    changes: list[FieldChange] = Field(default_factory=list)
    outputs: dict[str, Any] = Field(default_factory=dict)


class CheckDestroyInput(BaseModel):
    provider: str
    source: ConfigSource
    layout: LayoutDef
    found: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: The cluster's own objects were deleted through its API first (destroy ``--kubeconfig``).
    cleared: bool = False


class CheckApplyInput(BaseModel):
    """The refusals an apply of ``layout`` would meet, looked for before the first create."""

    provider: str
    source: ConfigSource
    layout: LayoutDef


class ClearClusterInput(BaseModel):
    """One step of destroy's "delete the cluster's resources" phase (:data:`CLEAR_STEPS`)."""

    kubeconfig: str
    cluster: ClusterIdentity
    step: str
    wait_s: float = 600.0


class ClearClusterResult(BaseModel):
    step: str
    #: What the step deleted (``namespace/name``), or what it waited for.
    objects: list[str] = Field(default_factory=list)


class MapStateInput(BaseModel):
    provider: str
    source: ConfigSource
    layout: LayoutDef
    state: list[StateResource] = Field(default_factory=list)


class ModuleInput(BaseModel):
    action: Literal["apply", "destroy", "adopt"]
    provider: str
    source: ConfigSource
    module: ModuleDef
    external: dict[str, dict[str, Any]] = Field(default_factory=dict)
    timings: LayoutTimings = Field(default_factory=LayoutTimings)
    #: For ``adopt``: resource key → cloud ID (this module's, from the state).
    adopt: dict[str, str] = Field(default_factory=dict)


class ResourceStatus(BaseModel):
    key: str
    state: StepState = "pending"
    action: StepAction | None = None
    changes: list[FieldChange] = Field(default_factory=list)
    error: str = ""


class ModuleProgress(BaseModel):
    module: str
    action: str
    resources: list[ResourceStatus] = Field(default_factory=list)


class ModuleResult(BaseModel):
    module: str
    steps: list[StepResult]
    #: The module's outputs with references resolved (``master_ip_address_for_ssh``...).
    outputs: dict[str, Any] = Field(default_factory=dict)
    node_name: str = ""


class ModuleState(BaseModel):
    module: str
    workflow_id: str
    state: StepState = "pending"
    error: str = ""


class LayoutProgress(BaseModel):
    action: Action
    phase: str = "defining"
    modules: list[ModuleState] = Field(default_factory=list)
    error: str = ""


class LayoutResult(BaseModel):
    action: Action
    layout: str
    prefix: str
    modules: list[ModuleResult] = Field(default_factory=list)
    plan: list[PlanModuleResult] = Field(default_factory=list)
    #: ``cloud_discovery_data`` (apply; the upstream document).
    cloud_discovery_data: dict[str, Any] = Field(default_factory=dict)
    #: ``bastion_ip_address_for_ssh`` when the layout has a bastion.
    outputs: dict[str, Any] = Field(default_factory=dict)
    #: ``adopt``: resource key → the Terraform addresses taken over as it.
    adopted: dict[str, list[str]] = Field(default_factory=dict)
    #: ``adopt``: the state's records not placed (``address: why``).
    unmapped: list[str] = Field(default_factory=list)
