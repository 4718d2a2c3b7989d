"""The Cluster API kinds of OpenStack: OpenStackCluster, OpenStackMachine, OpenStackMachineTemplate.

Cluster API provider OpenStack's kinds (``infrastructure.cluster.x-k8s.io/v1beta1``) with its field
names, as Deckhouse uses them; served by the CRDs in ``deploy/crds``. Node groups come from
``OpenStackInstanceClass`` through ``template.yaml`` beside this module. The provider writes
``spec.providerID`` and the server's ID into ``spec.instanceID`` (CAPO v1beta1 keeps it in
``status.instanceID``; the machine engine writes IDs into the spec).
"""

from __future__ import annotations

from cloudloop.cloud.capi import INFRA_GROUP, InfraKinds, NodeTemplates
from cloudloop.kube.resources import Resource

VERSION = "v1beta1"

INFRA_KINDS = InfraKinds(
    provider="openstack",
    machine=Resource(INFRA_GROUP, VERSION, "openstackmachines", "OpenStackMachine"),
    cluster=Resource(INFRA_GROUP, VERSION, "openstackclusters", "OpenStackCluster"),
    template=Resource(
        INFRA_GROUP, VERSION, "openstackmachinetemplates", "OpenStackMachineTemplate"
    ),
    finalizer="openstackmachine.infrastructure.cluster.x-k8s.io",
    written_spec_fields=("providerID", "instanceID"),
    id_field="instanceID",
)

NODE_TEMPLATES = NodeTemplates(
    provider="openstack",
    instance_class=Resource(
        "deckhouse.io", "v1", "openstackinstanceclasses", "OpenStackInstanceClass", namespaced=False
    ),
    package=__package__ or "cloudloop.cloud.openstack",
)
