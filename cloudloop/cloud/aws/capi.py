"""The Cluster API kinds of AWS: AWSCluster, AWSMachine, AWSMachineTemplate (CAPA's names).

Deckhouse has no Cluster API provider for AWS (its AWS node groups run on MCM's
``AWSMachineClass``), so there is no Deckhouse kind to copy: cloudloop serves the kinds of
Cluster API Provider AWS (CAPA, ``infrastructure.cluster.x-k8s.io/v1beta2``) with CAPA's field
names for the subset it implements (``instanceType``, ``ami.id``, ``iamInstanceProfile``,
``additionalSecurityGroups[].id``, ``subnet.id``, ``rootVolume``, ``spotMarketOptions``,
``additionalTags``, ``publicIP``, ``sshKeyName``; written back: ``providerID``, ``instanceID``),
so users of CAPA recognise the objects. The finalizer is CAPA's too. Served by the CRDs in
``deploy/crds`` (which therefore cannot coexist with CAPA's own in one cluster). Node groups come
from ``AWSInstanceClass`` through ``template.yaml`` beside this module.
"""

from __future__ import annotations

from cloudloop.cloud.capi import INFRA_GROUP, InfraKinds, NodeTemplates
from cloudloop.kube.resources import Resource

VERSION = "v1beta2"

INFRA_KINDS = InfraKinds(
    provider="aws",
    machine=Resource(INFRA_GROUP, VERSION, "awsmachines", "AWSMachine"),
    cluster=Resource(INFRA_GROUP, VERSION, "awsclusters", "AWSCluster"),
    template=Resource(INFRA_GROUP, VERSION, "awsmachinetemplates", "AWSMachineTemplate"),
    finalizer="awsmachine.infrastructure.cluster.x-k8s.io",
    written_spec_fields=("providerID", "instanceID"),
    id_field="instanceID",
)

NODE_TEMPLATES = NodeTemplates(
    provider="aws",
    instance_class=Resource(
        "deckhouse.io", "v1", "awsinstanceclasses", "AWSInstanceClass", namespaced=False
    ),
    package=__package__ or "cloudloop.cloud.aws",
)
