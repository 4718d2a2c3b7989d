"""The Cluster API kinds of DVP: DeckhouseCluster, DeckhouseMachine, DeckhouseMachineTemplate.

Served by the CRDs in ``deploy/crds``; the finalizer and version are Deckhouse's. Node groups
come from ``DVPInstanceClass`` through ``template.yaml`` beside this module.
"""

from __future__ import annotations

from cloudloop.cloud.capi import INFRA_GROUP, InfraKinds, NodeTemplates
from cloudloop.kube.resources import Resource

INFRA_KINDS = InfraKinds(
    provider="dvp",
    machine=Resource(INFRA_GROUP, "v1alpha1", "deckhousemachines", "DeckhouseMachine"),
    cluster=Resource(INFRA_GROUP, "v1alpha1", "deckhouseclusters", "DeckhouseCluster"),
    template=Resource(
        INFRA_GROUP, "v1alpha1", "deckhousemachinetemplates", "DeckhouseMachineTemplate"
    ),
    finalizer="deckhousemachine.infrastructure.cluster.x-k8s.io",
)

NODE_TEMPLATES = NodeTemplates(
    provider="dvp",
    instance_class=Resource(
        "deckhouse.io", "v1alpha1", "dvpinstanceclasses", "DVPInstanceClass", namespaced=False
    ),
    package=__package__ or "cloudloop.cloud.dvp",
)
