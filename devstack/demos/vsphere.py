"""The vSphere demo of ``cloudloop dev --provider vsphere``: vcsim with VMs in two tagged zones.

vcsim joins the stack; two node VMs are cloned into two clusters whose ``k8s-zone`` tags name
``zone-a`` and ``zone-b`` (the datacenter carries the ``k8s-region`` tag ``region-a``, each
datastore its zone's tag); kwok Nodes named after the guests' host names wait for node sync to
initialize them (providerID, zone/region labels, instance type, addresses); a first-class disk is
created in ``zone-a`` and attached to that zone's node through the volume workflows. The Cluster
API manager runs on the control plane: a node group ``demo-workers`` rendered from the
``VsphereInstanceClass`` ``demo-workers`` (as ``cloudloop nodegroup render`` does) scales 0 → 2,
each VSphereMachine a ``Machine`` workflow cloning vcsim's first VM; a ``GuestAgent`` plays the
guests' VMware Tools (their IPs).

Rules:
- vcsim is seeded as an operator would (:mod:`devstack.vcsim_inventory`: pyvmomi and the tagging
  REST paths); the worker logs in with the password from a file in the state folder.
- The volume's workflows start from a side thread as soon as the seed is done: a workflow start
  needs no worker, its result waits for the one ``cloudloop dev`` starts next. What it ends with
  (volume ID, attachment or error) is written to ``vsphere-demo.json`` in the state folder.
- Without the CSI driver on main there is no PVC: the disk is the volume workflows' own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
from pathlib import Path
from typing import Any

from cloudloop import temporal
from cloudloop.cloud.registry import Settings
from cloudloop.cloud.vsphere.settings import VsphereSettings
from cloudloop.csi.operations import VolumeOperations
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import NODES, Resource
from cloudloop.messages.volume import (
    AttachVolumeRequest,
    CapacityRange,
    Code,
    CreateVolumeRequest,
    Topology,
)
from cloudloop.rules.node import UNINITIALIZED_TAINT
from devstack.kube import CAPI, KWOK_NODE_ANNOTATION
from devstack.local import LocalStack, StackOptions
from devstack.vcsim import VcsimEndpoint, VcsimOptions
from devstack.vcsim_guest import GuestAgent
from devstack.vcsim_inventory import NodeVm, ZoneLayout, seed

log = logging.getLogger(__name__)

MACHINE_DEPLOYMENTS = Resource(
    "cluster.x-k8s.io", "v1beta2", "machinedeployments", "MachineDeployment"
)

DEMO_NODES = (
    NodeVm("demo-node-a", "10.0.1.10", cluster="DC0_C0"),
    NodeVm("demo-node-b", "10.0.2.10", cluster="DC0_C1"),
)
LAYOUT = ZoneLayout()
DEMO_DISK = "demo-disk"
DEMO_FILE = "vsphere-demo.json"
GIB = 1024**3
#: The demo node group: its InstanceClass, MachineDeployment prefix, namespace and size.
NODE_GROUP = "demo-workers"
NODE_GROUP_NAMESPACE = "default"
NODE_GROUP_REPLICAS = 2


class VsphereDemo:
    """vcsim instead of moto; the settings name the vCenter, its region and zones."""

    name = "vsphere"

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
            _create_node(kube, vm.name)
        node_a = inventory.vms[DEMO_NODES[0].name]
        thread = threading.Thread(
            target=_make_disk,
            args=(settings, node_a.provider_id, stack.state_dir / DEMO_FILE),
            name="vsphere-demo-disk",
            daemon=True,
        )
        thread.start()
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
        """Nothing of the demo runs beside the stack."""

    def watch(self, stack: LocalStack, kubectl: Path) -> list[str]:
        return [
            f"  {kubectl} get nodes -l cloudloop.io/demo=true "
            "-L topology.kubernetes.io/region -o wide",
            f"  cat {stack.state_dir / DEMO_FILE}   # the demo disk and its attachment",
            f"  temporal workflow list --address {stack.temporal_address} "
            "--query \"CloudloopKind='Volume'\"",
            f"  {kubectl} -n kube-system get secret d8-cloud-provider-discovery-data "
            "-o jsonpath='{.data.discovery-data\\.json}' | base64 -d",
            f"  {kubectl} -n {NODE_GROUP_NAMESPACE} get machinedeployments,machines,"
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
    """The demo node group: a VsphereInstanceClass, a CAPI Cluster, and what ``cloudloop
    nodegroup render`` makes of them (a VSphereMachineTemplate and a MachineDeployment of 2)."""
    from cloudloop.cloud.vsphere.capi import INFRA_KINDS, NODE_TEMPLATES
    from cloudloop.nodegroup.render import Bootstrap, NodeGroup, render_node_group
    from devstack import machine_fixtures
    from devstack.backends.vsphere import instance_class_spec

    namespace = NODE_GROUP_NAMESPACE
    instance_class = {
        "apiVersion": "deckhouse.io/v1",
        "kind": NODE_TEMPLATES.instance_class.kind,
        "metadata": {"name": NODE_GROUP},
        "spec": instance_class_spec(numCPUs=2, memory=2048),
    }
    kube.create(NODE_TEMPLATES.instance_class, instance_class)
    machine_fixtures.create_cluster(kube, namespace, "demo", INFRA_KINDS)
    bootstrap = f"{NODE_GROUP}-bootstrap"
    machine_fixtures.create_bootstrap_secret(
        kube, namespace, bootstrap, b"#cloud-config\nruncmd: [echo demo-worker]\n"
    )
    group = NodeGroup(
        name=NODE_GROUP,
        instance_class=instance_class,
        cluster="demo",
        namespace=namespace,
        bootstrap=Bootstrap(data_secret_name=bootstrap),
        replicas=NODE_GROUP_REPLICAS,
        # a tagged zone: its machines go to the compute cluster carrying its tag
        zones=(sorted(LAYOUT.zones)[0],),
        max_surge=0,
        max_unavailable=1,
    )
    template, deployment = render_node_group(group, INFRA_KINDS, NODE_TEMPLATES)
    kube.create(INFRA_KINDS.template, template, namespace)
    kube.create(MACHINE_DEPLOYMENTS, deployment, namespace)


def _create_node(kube: Kube, name: str) -> None:
    """A kwok Node as kubelet on a vSphere VM registers it: named after the guest's host name,
    no providerID, tainted until the cloud controller initializes it."""
    kube.create(
        NODES,
        {
            "metadata": {
                "name": name,
                "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                "labels": {"cloudloop.io/demo": "true", "kubernetes.io/hostname": name},
            },
            "spec": {
                "taints": [{"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]
            },
        },
    )


def _make_disk(settings: Settings, node: str, out: Path) -> None:
    """Create the demo disk in zone-a and attach it to ``node``, through the volume workflows."""
    try:
        record = asyncio.run(_disk_through_workflows(settings, node))
    except Exception as exc:  # the demo goes on without its disk; the reason is on record
        log.warning("vsphere demo: the demo disk was not made: %s", exc)
        record = {"error": str(exc)}
    out.write_text(json.dumps(record, indent=2))


async def _disk_through_workflows(settings: Settings, node: str) -> dict[str, Any]:
    client = await temporal.connect(settings.temporal)
    ops = VolumeOperations.from_settings(client, settings)
    zone = sorted(LAYOUT.zones)[0]
    created = await ops.create(
        CreateVolumeRequest(
            name=DEMO_DISK,
            capacity=CapacityRange(required_bytes=GIB),
            topology=Topology(requisite=[zone]),
        )
    )
    if created.code is not Code.OK or created.volume is None:
        return {"error": f"create: {created.code.name}: {created.message}"}
    volume = created.volume
    attached = await ops.attach(AttachVolumeRequest(volume_id=volume.id, node_id=node))
    if attached.code is not Code.OK:
        return {
            "volume_id": volume.id,
            "error": f"attach: {attached.code.name}: {attached.message}",
        }
    log.info("vsphere demo: disk %s in %s attached to %s", volume.id, volume.zone, node)
    return {
        "volume_id": volume.id,
        "name": DEMO_DISK,
        "zone": volume.zone,
        "size_gib": volume.size_gib,
        "attached_to": node,
        "device": attached.device,
        "create_workflow": created.workflow_id,
        "attach_workflow": attached.workflow_id,
    }
