"""Cluster API names: the core resources, the infrastructure kinds this project provides, and the
labels, annotations, finalizers and condition reasons of the infra-provider contract.

Pure data (no I/O), so workflows may import it through ``cloudloop.messages.machine``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cloudloop.kube.resources import Resource

CAPI_GROUP = "cluster.x-k8s.io"
INFRA_GROUP = "infrastructure.cluster.x-k8s.io"

#: Cluster API core kinds as the v1beta2 contract serves them.
CLUSTERS = Resource(CAPI_GROUP, "v1beta2", "clusters", "Cluster")
MACHINES = Resource(CAPI_GROUP, "v1beta2", "machines", "Machine")

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


@dataclass(frozen=True)
class InfraKinds:
    """One provider's infrastructure kinds: its InfraMachine, InfraCluster and template."""

    provider: str
    machine: Resource
    cluster: Resource
    template: Resource
    #: The InfraMachine's finalizer (Deckhouse's name).
    finalizer: str
    #: ``spec`` fields the provider writes (never part of the desired VM).
    written_spec_fields: tuple[str, ...] = ("providerID",)
    #: ``spec`` field that takes the cloud's VM ID (zVirt ``spec.id``), if any.
    id_field: str = ""

    def desired_spec(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The InfraMachine's spec without the fields the provider writes back."""
        spec = dict(obj.get("spec") or {})
        for field in self.written_spec_fields:
            spec.pop(field, None)
        return spec


DVP = InfraKinds(
    provider="dvp",
    machine=Resource(INFRA_GROUP, "v1alpha1", "deckhousemachines", "DeckhouseMachine"),
    cluster=Resource(INFRA_GROUP, "v1alpha1", "deckhouseclusters", "DeckhouseCluster"),
    template=Resource(
        INFRA_GROUP, "v1alpha1", "deckhousemachinetemplates", "DeckhouseMachineTemplate"
    ),
    finalizer="deckhousemachine.infrastructure.cluster.x-k8s.io",
)
ZVIRT = InfraKinds(
    provider="zvirt",
    machine=Resource(INFRA_GROUP, "v1", "zvirtmachines", "ZvirtMachine"),
    cluster=Resource(INFRA_GROUP, "v1", "zvirtclusters", "ZvirtCluster"),
    template=Resource(INFRA_GROUP, "v1", "zvirtmachinetemplates", "ZvirtMachineTemplate"),
    finalizer="zvirtmachine.infrastructure.cluster.x-k8s.io",
    written_spec_fields=("providerID", "id"),
    id_field="id",
)

#: The infrastructure kinds per provider that has a Cluster API provider here.
INFRA_KINDS: dict[str, InfraKinds] = {kinds.provider: kinds for kinds in (DVP, ZVIRT)}


def infra_kinds_by_machine_kind(kind: str) -> InfraKinds | None:
    return next((k for k in INFRA_KINDS.values() if k.machine.kind == kind), None)


def is_paused(obj: dict[str, Any] | None) -> bool:
    """The object carries ``cluster.x-k8s.io/paused`` (any value)."""
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return PAUSED_ANNOTATION in annotations


def cluster_paused(cluster: dict[str, Any] | None) -> bool:
    return bool(((cluster or {}).get("spec") or {}).get("paused"))


def cluster_infrastructure_ready(cluster: dict[str, Any] | None) -> bool:
    """v1beta2 ``status.initialization.infrastructureProvisioned``, v1beta1
    ``status.infrastructureReady``."""
    status = (cluster or {}).get("status") or {}
    provisioned = (status.get("initialization") or {}).get("infrastructureProvisioned")
    return bool(provisioned or status.get("infrastructureReady"))


def owner(obj: dict[str, Any], kind: str, group: str = CAPI_GROUP) -> str | None:
    """The name of ``obj``'s owner of ``kind`` in ``group`` (any version), if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        api_version = str(ref.get("apiVersion", ""))
        if ref.get("kind") == kind and api_version.split("/", 1)[0] == group:
            return str(ref.get("name", "")) or None
    return None
