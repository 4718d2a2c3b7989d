"""The Cluster API kinds of vSphere: VSphereCluster, VSphereMachine, VSphereMachineTemplate (CAPV).

Served by the CRDs in ``deploy/crds`` with CAPV's group, version (``v1beta1``) and field names,
as Deckhouse uses them; the finalizer is CAPV's. Node groups come from ``VsphereInstanceClass``
through ``template.yaml`` beside this module.
"""

from __future__ import annotations

from cloudloop.cloud.capi import INFRA_GROUP, InfraKinds, NodeTemplates
from cloudloop.kube.resources import Resource

INFRA_KINDS = InfraKinds(
    provider="vsphere",
    machine=Resource(INFRA_GROUP, "v1beta1", "vspheremachines", "VSphereMachine"),
    cluster=Resource(INFRA_GROUP, "v1beta1", "vsphereclusters", "VSphereCluster"),
    template=Resource(INFRA_GROUP, "v1beta1", "vspheremachinetemplates", "VSphereMachineTemplate"),
    finalizer="vspheremachine.infrastructure.cluster.x-k8s.io",
    written_spec_fields=("providerID",),
)

NODE_TEMPLATES = NodeTemplates(
    provider="vsphere",
    instance_class=Resource(
        "deckhouse.io", "v1", "vsphereinstanceclasses", "VsphereInstanceClass", namespaced=False
    ),
    package=__package__ or "cloudloop.cloud.vsphere",
)
