"""The Cluster API kinds of zVirt: ZvirtCluster, ZvirtMachine, ZvirtMachineTemplate (capz).

Served by the CRDs in ``deploy/crds``; the finalizer and version are Deckhouse's.
"""

from __future__ import annotations

from cloudloop.cloud.capi import INFRA_GROUP, InfraKinds
from cloudloop.kube.resources import Resource

INFRA_KINDS = InfraKinds(
    provider="zvirt",
    machine=Resource(INFRA_GROUP, "v1", "zvirtmachines", "ZvirtMachine"),
    cluster=Resource(INFRA_GROUP, "v1", "zvirtclusters", "ZvirtCluster"),
    template=Resource(INFRA_GROUP, "v1", "zvirtmachinetemplates", "ZvirtMachineTemplate"),
    finalizer="zvirtmachine.infrastructure.cluster.x-k8s.io",
    written_spec_fields=("providerID", "id"),
    id_field="id",
)
