"""The Cluster API infrastructure-provider contract: core resources, labels, annotations,
finalizers, condition reasons, and the pure checks on Cluster and Machine objects.

Pure data and functions (no I/O), so workflows may import it. Each provider declares its own
infrastructure kinds (:class:`~cloudloop.cloud.capi.InfraKinds`) in its package.
"""

from __future__ import annotations

from pydantic import BaseModel

from cloudloop.cloud.capi import CAPI_GROUP as CAPI_GROUP
from cloudloop.cloud.capi import INFRA_GROUP as INFRA_GROUP
from cloudloop.cloud.capi import InfraKinds as InfraKinds
from cloudloop.cloud.models import InstanceState, Machine
from cloudloop.kube.bodies import CapiCluster, CapiMachine, InfraObject
from cloudloop.kube.resources import Resource
from cloudloop.messages.machine import ConditionStatus, MachineCondition

#: Cluster API core kinds as the v1beta2 contract serves them.
CLUSTERS: Resource[CapiCluster] = Resource(CAPI_GROUP, "v1beta2", "clusters", "Cluster")
MACHINES: Resource[CapiMachine] = Resource(CAPI_GROUP, "v1beta2", "machines", "Machine")
#: Read and written as the API sends them (the node-group reconciler compares their fields).
MACHINE_DEPLOYMENTS: Resource = Resource(
    CAPI_GROUP, "v1beta2", "machinedeployments", "MachineDeployment"
)

CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
CONTROL_PLANE_LABEL = "cluster.x-k8s.io/control-plane"
PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"
#: An InfraCluster carrying this annotation is managed by someone else: leave it alone.
MANAGED_BY_ANNOTATION = "cluster.x-k8s.io/managed-by"
#: Any new value asks cloudloop to retry a failed machine provisioning (``cloudloop retry``).
RETRY_ANNOTATION = "cloudloop.io/retry"
#: The key of the bootstrap data in ``Machine.spec.bootstrap.dataSecretName``.
BOOTSTRAP_DATA_KEY = "value"

# Condition types and reasons (Deckhouse capdvp/capz and the CAPI v1beta2 conventions).
READY = "Ready"
VM_READY = "VirtualMachineReady"
PAUSED = "Paused"
REASON_READY = "Ready"
REASON_VM_RUNNING = "VMRunning"
REASON_VM_NOT_READY = "VMNotReady"
REASON_VM_ERROR = "VMError"
REASON_VM_FAILED = "VMInFailedState"
REASON_VM_STOPPED = "VMInStoppedState"
REASON_WAITING_FOR_INFRASTRUCTURE = "WaitingForClusterInfrastructure"
REASON_WAITING_FOR_BOOTSTRAP = "WaitingForBootstrapScript"
REASON_DELETING = "Deleting"
REASON_PAUSED = "Paused"
REASON_NOT_PAUSED = "NotPaused"
REASON_PROVISIONED = "Provisioned"


def is_paused(obj: InfraObject | None) -> bool:
    """The object carries ``cluster.x-k8s.io/paused`` (any value)."""
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return PAUSED_ANNOTATION in annotations


def cluster_paused(cluster: CapiCluster | None) -> bool:
    return bool(((cluster or {}).get("spec") or {}).get("paused"))


def cluster_infrastructure_ready(cluster: CapiCluster | None) -> bool:
    """v1beta2 ``status.initialization.infrastructureProvisioned``, v1beta1
    ``status.infrastructureReady``."""
    status = (cluster or {}).get("status") or {}
    provisioned = (status.get("initialization") or {}).get("infrastructureProvisioned")
    return bool(provisioned or status.get("infrastructureReady"))


def owner(obj: InfraObject, kind: str, group: str = CAPI_GROUP) -> str | None:
    """The name of ``obj``'s owner of ``kind`` in ``group`` (any version), if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        api_version = str(ref.get("apiVersion", ""))
        if ref.get("kind") == kind and api_version.split("/", 1)[0] == group:
            return str(ref.get("name", "")) or None
    return None


class VmVerdict(BaseModel):
    """The ``VirtualMachineReady`` condition a VM's state means."""

    reason: str
    status: ConditionStatus
    message: str

    @property
    def provisioned(self) -> bool:
        return self.reason == REASON_VM_RUNNING


def classify(machine: Machine | None) -> VmVerdict:
    """Deckhouse's phase handling: Running → ready, Stopped → VMInStoppedState, Degraded →
    VMInFailedState, anything else → VMNotReady; a missing VM is a VMError."""
    if machine is None:
        return VmVerdict(reason=REASON_VM_ERROR, status="False", message="VirtualMachine not found")
    if machine.provisioned:
        return VmVerdict(reason=REASON_VM_RUNNING, status="True", message="VM is running and ready")
    detail = f": {machine.message}" if machine.message else ""
    if machine.failed:
        return VmVerdict(
            reason=REASON_VM_FAILED,
            status="False",
            message=f"VM in degraded state: {machine.phase or 'unknown'}{detail}",
        )
    if machine.state is InstanceState.STOPPED:
        return VmVerdict(
            reason=REASON_VM_STOPPED,
            status="False",
            message=f"VM is in Stopped state, waiting for it to be brought back up{detail}",
        )
    waiting = (
        " (running, waiting for an IP address)" if machine.state is InstanceState.RUNNING else ""
    )
    return VmVerdict(
        reason=REASON_VM_NOT_READY,
        status="Unknown",
        message=(
            f"VM is not ready, state is {machine.phase or machine.state.value}{waiting}{detail}"
        ),
    )


def vm_conditions(verdict: VmVerdict) -> list[MachineCondition]:
    """``VirtualMachineReady`` from the verdict, and ``Ready`` mirroring it."""
    return [
        MachineCondition(
            type=VM_READY,
            status=verdict.status,
            reason=verdict.reason,
            message=verdict.message,
        ),
        MachineCondition(
            type=READY,
            status="True" if verdict.provisioned else "False",
            reason=REASON_READY if verdict.provisioned else verdict.reason,
            message=verdict.message,
        ),
    ]
