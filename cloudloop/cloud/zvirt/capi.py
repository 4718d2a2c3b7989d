"""The Cluster API kinds of zVirt: ZvirtCluster, ZvirtMachine, ZvirtMachineTemplate (capz).

Served by the CRDs in ``deploy/crds``; the finalizer and version are Deckhouse's. Node groups
come from ``ZvirtInstanceClass`` through ``template.yaml`` beside this module.
"""

from __future__ import annotations

from cloudloop.cloud.capi import INFRA_GROUP, InfraKinds, NodeTemplates
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

NODE_TEMPLATES = NodeTemplates(
    provider="zvirt",
    instance_class=Resource(
        "deckhouse.io", "v1", "zvirtinstanceclasses", "ZvirtInstanceClass", namespaced=False
    ),
    package=__package__ or "cloudloop.cloud.zvirt",
)
