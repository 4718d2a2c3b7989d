"""The vSphere demo of ``cloudloop dev --provider vsphere``: vcsim with VMs in two tagged zones.

vcsim joins the stack; two node VMs are cloned into two clusters whose ``k8s-zone`` tags name
``zone-a`` and ``zone-b`` (the datacenter carries the ``k8s-region`` tag ``region-a``, each
datastore its zone's tag); kwok Nodes named after the guests' host names wait for node sync to
initialize them (providerID, zone/region labels, instance type, addresses); storage goes through
CSI (:mod:`.storage`): the chart-shaped controller and sidecars make the StorageClasses from
discovery (one per zoned datastore), and the claim ``demo-data`` of the default class is bound
to a first-class disk in its datastore's zone and attached to its pod's node. The Cluster
API manager runs on the control plane: a node group ``demo-workers`` rendered from the
``VsphereInstanceClass`` ``demo-workers`` (as ``cloudloop nodegroup render`` does) scales 0 → 2,
each VSphereMachine a ``Machine`` workflow cloning vcsim's first VM; a ``GuestAgent`` plays the
guests' VMware Tools (their IPs).

Rules:
- vcsim is seeded as an operator would (:mod:`devstack.vcsim_inventory`: pyvmomi and the tagging
  REST paths); the worker logs in with the password from a file in the state folder.
- The CSINode of each demo node names the VM's BIOS UUID (the node plugin's node ID) and its
  zone under the driver's topology key (the zone tag category), as node-driver-registrar would.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cloudloop.cloud.registry import Settings
from cloudloop.cloud.vsphere import PROVIDER as VSPHERE
from cloudloop.cloud.vsphere.driver import VsphereDriver
from cloudloop.cloud.vsphere.settings import VsphereSettings
from cloudloop.kube.api import Kube
from devstack.demos.common import create_demo_node, seed_node_group
from devstack.demos.storage import CLAIM, DemoStorage, default_storage_class, registered_node
from devstack.kube import CAPI
from devstack.local import LocalStack, StackOptions
from devstack.vcsim import VcsimEndpoint, VcsimOptions
from devstack.vcsim_guest import GuestAgent
from devstack.vcsim_inventory import NodeVm, ZoneLayout, seed

DEMO_NODES = (
    NodeVm("demo-node-a", "10.0.1.10", cluster="DC0_C0"),
    NodeVm("demo-node-b", "10.0.2.10", cluster="DC0_C1"),
)
LAYOUT = ZoneLayout()
#: The demo node group: its InstanceClass, MachineDeployment prefix, namespace and size.
NODE_GROUP = "demo-workers"
NODE_GROUP_NAMESPACE = "default"
NODE_GROUP_REPLICAS = 2


class VsphereDemo:
    """vcsim instead of moto; the settings name the vCenter, its region and zones."""

    name = "vsphere"

    def __init__(self) -> None:
        self.storage: DemoStorage | None = None

    def stack_options(self, options: StackOptions) -> StackOptions:
        kube = tuple(
            dataclasses.replace(k, components=(*k.components, CAPI)) if i == 0 else k
            for i, k in enumerate(options.kube)
        )
        return dataclasses.replace(options, vcsim=VcsimOptions(), moto=False, kube=kube)

    def seed(self, stack: LocalStack, kube: Kube, settings: Settings) -> Settings:
        endpoint = _endpoint(stack)
        inventory = seed(endpoint, DEMO_NODES, LAYOUT)
        password = stack.state_dir / "vcsim" / "password"  # written by the stack, mode 0600
        settings = _settings(settings, endpoint, password)
        for vm in inventory.vms.values():
            create_demo_node(kube, vm.name)
        driver = VsphereDriver(VSPHERE.section(settings))
        try:
            topology_key = driver.volumes.volume_topology_key
            storage_class = default_storage_class(driver)
        finally:
            driver.close()
        zones = {cluster: zone for zone, cluster in LAYOUT.zones.items()}
        for node in DEMO_NODES:
            registered_node(
                kube,
                node.name,
                driver=settings.csi.driver_name,
                node_id=inventory.vms[node.name].uuid.lower(),
                topology={topology_key: zones[node.cluster]},
            )
        self.storage = DemoStorage(settings, stack.kubeconfig, stack.state_dir / "logs")
        self.storage.start(kube, storage_class, {"cloudloop.io/demo": "true"})
        GuestAgent(endpoint).__enter__()  # a daemon thread for the stack's life
        _node_group(kube)
        return settings

    def endpoints(self, stack: LocalStack) -> list[str]:
        endpoint = _endpoint(stack)
        return [
            f"  vcsim       : {endpoint.url}/sdk (user {endpoint.username}, password in "
            f"{stack.state_dir / 'vcsim' / 'password'})"
        ]

    def layout_config(self, folder: Path, prefix: str) -> Path | None:
        return None  # the demo's converge pass is AWS's

    def stop(self) -> None:
        """The CSI controller and its sidecars (the stack stops after them)."""
        if self.storage is not None:
            self.storage.stop()

    def watch(self, stack: LocalStack, kubectl: Path) -> list[str]:
        return [
            f"  {kubectl} get nodes -l cloudloop.io/demo=true "
            "-L topology.kubernetes.io/region -o wide",
            f"  {kubectl} get storageclasses,pvc,volumeattachments   # {CLAIM}: Bound to a "
            "first-class disk in its datastore's zone, attached to its pod's node",
            f"  temporal workflow list --address {stack.temporal_address} "
            "--query \"CloudloopKind='Volume'\"",
            f"  {kubectl} -n kube-system get secret d8-cloud-provider-discovery-data "
            "-o jsonpath='{.data.discovery-data\\.json}' | base64 -d",
            f"  {kubectl} -n {NODE_GROUP_NAMESPACE} get nodegroups,machinedeployments,machines,"
            "vspheremachines   # the demo node group",
            f"  temporal workflow list --address {stack.temporal_address} "
            "--query \"CloudloopKind='Machine'\"",
        ]


def _endpoint(stack: LocalStack) -> VcsimEndpoint:
    if stack.vcsim is None:
        raise RuntimeError("the vSphere demo needs vcsim in the stack")
    return stack.vcsim


def _settings(settings: Settings, endpoint: VcsimEndpoint, password: Path) -> Settings:
    vsphere = VsphereSettings(
        server=endpoint.server,
        username=endpoint.username,
        password_file=password,
        ca_bundle=endpoint.ca_file,
        region=LAYOUT.region,
        zones=sorted(LAYOUT.zones),
        region_tag_category=LAYOUT.region_category,
        zone_tag_category=LAYOUT.zone_category,
        timeout_s=10,
    )
    return settings.model_copy(update={"provider": "vsphere", "vsphere": vsphere})


def _node_group(kube: Kube) -> None:
    """The demo node group: a VsphereInstanceClass, a CAPI Cluster and a NodeGroup of 2 in the
    first tagged zone (its machines go to the compute cluster carrying its tag)."""
    from cloudloop.cloud.vsphere.capi import INFRA_KINDS, NODE_TEMPLATES
    from devstack.backends.vsphere import instance_class_spec

    seed_node_group(
        kube,
        instance_class={
            "apiVersion": "deckhouse.io/v1",
            "kind": NODE_TEMPLATES.instance_class.kind,
            "metadata": {"name": NODE_GROUP},
            "spec": instance_class_spec(numCPUs=2, memory=2048),
        },
        kinds=INFRA_KINDS,
        templates=NODE_TEMPLATES,
        namespace=NODE_GROUP_NAMESPACE,
        size=NODE_GROUP_REPLICAS,
        zones=(sorted(LAYOUT.zones)[0],),
    )
