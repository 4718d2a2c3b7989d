"""The DVP demo of ``cloudloop dev --provider dvp``: a parent DVP cluster beside the dev cluster,
its VMs as initialized Nodes, an LB Service, a CloudProbe, a node group and the cluster's masters.

The parent is a second control plane of the stack (``kube/parent``) serving the virtualization
CRDs, with :mod:`devstack.dvp_simulator` in the dev process standing in for DVP's controllers
(disks Ready, VMs Running with an IP) and the parent's load-balancer controller. Two
VirtualMachines labelled as this cluster's (``dvp.deckhouse.io/cluster-uuid``) run in the parent
namespace ``demo-dvp``; kwok Nodes named like them wait for node sync (providerID ``dvp://<vm>``,
addresses). The LB Service ``demo-web`` gets a Service of type LoadBalancer in the parent
namespace, whose ingress becomes its EXTERNAL-IP. The Cluster API manager runs on the dev
control plane: a ``DVPInstanceClass`` ``demo-workers`` is rendered (as ``cloudloop nodegroup
render`` does) into a ``DeckhouseMachineTemplate`` and a MachineDeployment in namespace
``demo-capi``, scaled 0 → 2: each ``Machine`` workflow makes a VM, its disks and its cloud-init
Secret in the parent, and the VM joins as a Node. And the cluster's masters: the ``Standard``
layout of ``deploy/layouts/examples/dvp-standard.yaml`` (one master: root and etcd disks, VM) is
applied for prefix ``dev-layout`` and its converge Schedule runs a pass.

Rules:
- The parent is seeded through its API as a DVP user would; the simulator's steps take tenths
  of a second to seconds (:data:`DEMO_TIMINGS`), so ``Pending``, ``Starting`` and ``Running``
  show; the layout's config holds the parent's kubeconfig (mode 0600).
- Storage goes through CSI (:mod:`.storage`): the chart-shaped controller and sidecars, a PVC of
  the default StorageClass (the parent's first) mounted by a pod on a demo node; the CSINode's
  node ID is the VM's name, as the node plugin reports it; the disk is a VirtualDisk in the
  parent, hot-plugged by a VirtualMachineBlockDeviceAttachment.
"""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import Any

import yaml

from cloudloop.cloud.dvp import resources as dvp
from cloudloop.cloud.dvp.capi import INFRA_KINDS as DVP_KINDS
from cloudloop.cloud.dvp.capi import NODE_TEMPLATES as DVP_TEMPLATES
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.resources import SERVICES
from devstack.backends.dvp import create_node_vms, dvp_settings
from devstack.demos.common import (
    DEMO_LABEL,
    DEPLOYMENTS,
    create_demo_node,
    create_probe,
    seed_node_group,
)
from devstack.demos.storage import CLAIM, DemoStorage, registered_node
from devstack.dvp_simulator import (
    CLUSTER_IMAGE,
    NAMESPACES,
    STORAGE_CLASSES,
    VM_CLASS,
    DvpParent,
    SimulatorTimings,
)
from devstack.kube import CAPI, KubeOptions
from devstack.local import LocalStack, StackOptions

#: The VMs a DVP user made for the cluster before its cloud controller ran.
DEMO_VMS = ["demo-node-0", "demo-node-1"]
#: The parent namespace every VM and disk of the demo cluster lives in, and the cluster's UUID.
PARENT_NAMESPACE = "demo-dvp"
CLUSTER_UUID = "5b0e2c1a-8f7d-4c3e-9a6b-1d2e3f4a5b6c"
#: Slow enough to watch a disk provision and a VM start.
DEMO_TIMINGS = SimulatorTimings(disk_ready_s=1.0, vm_start_s=1.0, vm_running_s=1.5, vm_stop_s=1.0)
#: The StorageClass of the demo's claim: the discovery's default (the parent's first class).
STORAGE_CLASS = sorted(STORAGE_CLASSES)[0]
#: The node group: its namespace, name and size.
GROUP_NAMESPACE = "demo-capi"
GROUP = "demo-workers"
GROUP_SIZE = 2
#: The layout's example.
LAYOUT_EXAMPLE = (
    Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples" / "dvp-standard.yaml"
)
LAYOUT_FILE = "dvp-cluster.yaml"


class DvpDemo:
    """A parent DVP cluster instead of moto; the settings name its kubeconfig, the parent
    namespace and the cluster's UUID."""

    name = "dvp"

    def __init__(self) -> None:
        self.parent: DvpParent | None = None
        self.storage: DemoStorage | None = None

    def stack_options(self, options: StackOptions) -> StackOptions:
        main, *others = options.kube
        with_capi = dataclasses.replace(main, components=(*main.components, CAPI))
        return dataclasses.replace(
            options, kube=(with_capi, *others, KubeOptions(name="parent")), moto=False
        )

    def seed(self, stack: LocalStack, kube: Kube, settings: Settings) -> Settings:
        self.parent = parent = DvpParent.attach(
            stack.clusters["parent"].kubeconfig, timings=DEMO_TIMINGS
        )
        try:
            parent.kube.create(NAMESPACES, {"metadata": {"name": PARENT_NAMESPACE}})
        except KubeError as exc:
            if not exc.conflict:
                raise
        section = dvp_settings(parent, PARENT_NAMESPACE, cluster_uuid=CLUSTER_UUID)
        labels = {dvp.MANAGED_BY_LABEL: dvp.MANAGED_BY_VALUE, dvp.CLUSTER_UUID_LABEL: CLUSTER_UUID}
        create_node_vms(parent, PARENT_NAMESPACE, labels, DEMO_VMS)
        for name in DEMO_VMS:
            create_demo_node(kube, name)
        _seed_workload(kube)
        create_probe(kube, self.name)
        settings = settings.model_copy(update={"provider": self.name, "dvp": section})
        for name in DEMO_VMS:  # the CSI node plugin's node ID is the VM's name
            registered_node(kube, name, driver=settings.csi.driver_name, node_id=name, topology={})
        self.storage = DemoStorage(settings, stack.kubeconfig, stack.state_dir / "logs")
        self.storage.start(kube, STORAGE_CLASS, {DEMO_LABEL: "true"})
        seed_node_group(
            kube,
            instance_class={
                "apiVersion": "deckhouse.io/v1alpha1",
                "kind": DVP_TEMPLATES.instance_class.kind,
                "metadata": {"name": GROUP},
                "spec": {
                    "virtualMachine": {
                        "cpu": {"cores": 2},
                        "memory": {"size": "2Gi"},
                        "virtualMachineClassName": VM_CLASS,
                    },
                    "rootDisk": {
                        "size": "10Gi",
                        "storageClass": STORAGE_CLASSES[0],
                        "image": {"kind": "ClusterVirtualImage", "name": CLUSTER_IMAGE},
                    },
                },
            },
            kinds=DVP_KINDS,
            templates=DVP_TEMPLATES,
            namespace=GROUP_NAMESPACE,
            size=GROUP_SIZE,
        )
        return settings

    def layout_config(self, folder: Path, prefix: str) -> Path | None:
        """The ``Standard`` example on the parent: one master with its root and etcd disks."""
        if self.parent is None:
            return None
        return _layout_config(folder / LAYOUT_FILE, self.parent, prefix)

    def stop(self) -> None:
        """The CSI controller and its sidecars, the simulator and the parent's load-balancer
        controller (the stack stops the parent's control plane after them)."""
        if self.storage is not None:
            self.storage.stop()
        if self.parent is not None:
            self.parent.stop()

    def endpoints(self, stack: LocalStack) -> list[str]:
        parent = stack.clusters["parent"].kubeconfig
        return [
            f"  DVP parent  : {parent} (namespace {PARENT_NAMESPACE}, cluster UUID "
            f"{CLUSTER_UUID}; the simulator plays DVP's controllers)",
            f"  layout      : {stack.state_dir / 'layouts' / LAYOUT_FILE} (Standard, one master)",
        ]

    def watch(self, stack: LocalStack, kubectl: Path) -> list[str]:
        parent = stack.clusters["parent"].kubeconfig
        return [
            f"  {kubectl} get nodes -o custom-columns=NAME:.metadata.name,"
            "PROVIDER:.spec.providerID",
            f"  {kubectl} get services demo-web   # EXTERNAL-IP: the parent Service's ingress",
            f"  {kubectl} --kubeconfig {parent} -n {PARENT_NAMESPACE} get "
            "virtualmachines,virtualdisks,services",
            f"  {kubectl} get cloudprobes -o wide",
            f"  {kubectl} get pvc,volumeattachments   # {CLAIM}: Bound to a VirtualDisk of "
            f"{STORAGE_CLASS}, attached to its pod's VM",
            f"  {kubectl} -n {GROUP_NAMESPACE} get "
            f"nodegroups,machinedeployments,machines,deckhousemachines"
            f"   # the node group: {GROUP_SIZE} machines, one VM each",
            f"  temporal workflow list --address {stack.temporal_address} "
            "--query \"CloudloopKind='Machine'\"",
            "  Temporal UI → Schedules: layout-converge/dev-layout   # the layout's converge",
        ]


def _seed_workload(kube: Kube) -> None:
    """A Deployment and its LB Service."""
    kube.create(
        DEPLOYMENTS,
        {
            "metadata": {"name": "demo-web", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "demo-web"}},
                "template": {
                    "metadata": {"labels": {"app": "demo-web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                },
            },
        },
        "default",
    )
    kube.create(
        SERVICES,
        {
            "metadata": {"name": "demo-web", "namespace": "default"},
            "spec": {
                "type": "LoadBalancer",
                "selector": {"app": "demo-web"},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            },
        },
        "default",
    )


def _layout_config(path: Path, parent: DvpParent, prefix: str) -> Path:
    """The Standard example for ``prefix`` on the parent namespace, one master on the parent's
    VM class, image and StorageClasses, written where the worker reads it (mode 0600: it holds
    the parent's kubeconfig)."""
    docs = list(yaml.safe_load_all(LAYOUT_EXAMPLE.read_text()))
    kubeconfig = base64.b64encode(parent.kubeconfig.read_bytes()).decode()
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            doc["cloud"]["prefix"] = prefix
            continue
        doc["provider"] = {"kubeconfigDataBase64": kubeconfig, "namespace": PARENT_NAMESPACE}
        doc["masterNodeGroup"]["replicas"] = 1
        master: dict[str, Any] = doc["masterNodeGroup"]["instanceClass"]
        master["virtualMachine"].update(virtualMachineClassName=VM_CLASS, memory={"size": "2Gi"})
        master["rootDisk"] = {
            "size": "10Gi",
            "storageClass": STORAGE_CLASSES[0],
            "image": {"kind": "ClusterVirtualImage", "name": CLUSTER_IMAGE},
        }
        master["etcdDisk"] = {"size": "10Gi", "storageClass": STORAGE_CLASSES[1]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump_all(docs))
    return path
