"""The zVirt demo of ``cloudloop dev --provider zvirt``: the oVirt Engine emulator with two VMs
whose kwok Nodes node sync initializes, a CloudProbe, a node group and a cluster's own masters.

The emulator joins the stack (TLS with its own CA, the admin password in a file of the state
folder, as Deckhouse mounts it). Two VMs are cloned from the seed template through ovirtsdk4, as
an operator (or Deckhouse's node manager) makes them, given a NIC on the seed vNIC profile and
started; kwok Nodes named like the VMs wait for node sync to initialize them (providerID
``zvirt://<vm id>``, addresses the guest agent reports, instance type). The Cluster API manager
runs on the control plane: a ``ZvirtInstanceClass`` ``demo-workers`` is rendered (as ``cloudloop
nodegroup render`` does) into a ``ZvirtMachineTemplate`` and a MachineDeployment in namespace
``demo-capi``, scaled 0 → 2: each ``Machine`` workflow clones, resizes, wires and starts a VM, and
the VM joins as a Node. And the cluster's masters: the ``Standard`` layout of
``deploy/layouts/examples/zvirt-standard.yaml`` (one master: its data disk and VM) is applied
for prefix ``dev-layout`` and its converge Schedule runs a pass (the demo's converge pass).

Rules:
- The emulator is seeded through the official SDK only; the engine's transitions take tenths
  of a second to a few seconds (:data:`DEMO_DELAYS`), so ``image_locked``, ``wait_for_launch``
  and ``powering_down`` show; zVirt has no load balancers or routes, so the demo has neither.
- Storage goes through CSI (:mod:`.storage`): the chart-shaped controller and sidecars, a PVC of
  the default StorageClass (the first storage domain) mounted by a pod on a demo node; the
  CSINode's node ID is the VM's ID, as the node plugin reports it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from cloudloop.cloud.registry import Settings
from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT_KINDS
from cloudloop.cloud.zvirt.capi import NODE_TEMPLATES as ZVIRT_TEMPLATES
from cloudloop.cloud.zvirt.settings import ZvirtSettings
from cloudloop.kube.api import Kube
from devstack.backends.zvirt import machine_spec, seed_node_vms
from devstack.demos.common import DEMO_LABEL, create_demo_node, create_probe, seed_node_group
from devstack.demos.storage import CLAIM, DemoStorage, registered_node
from devstack.kube import CAPI
from devstack.local import LocalStack, StackOptions
from devstack.ovirt_emulator import Delays, OvirtEmulatorEndpoint, OvirtEmulatorOptions
from devstack.ovirt_emulator.engine import seed_id

#: The VMs an operator made before the cluster's cloud controller ran.
DEMO_VMS = ("demo-node-0", "demo-node-1")
#: Slow enough to watch a clone, a boot and a shutdown in the Temporal UI and the engine's state.
DEMO_DELAYS = Delays(
    clone_s=1.5, boot_s=1.5, guest_ip_s=1.0, shutdown_s=1.0, disk_resize_s=0.5, remove_s=0.5
)
#: The engine's admin password (written to the state folder, mode 0600).
PASSWORD = "dev-zvirt"
#: The storage domain the layout's master disks are made on (one of the emulator's seed).
STORAGE_DOMAIN_ID = seed_id("storagedomain", "nfs-shared")
#: The StorageClass of the demo's claim: the discovery's default (the first storage domain).
STORAGE_CLASS = "data-fast"
#: The node group: its namespace, name and size.
GROUP_NAMESPACE = "demo-capi"
GROUP = "demo-workers"
GROUP_SIZE = 2
#: The layout's example.
LAYOUT_EXAMPLE = (
    Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples" / "zvirt-standard.yaml"
)
LAYOUT_FILE = "zvirt-cluster.yaml"


class ZvirtDemo:
    """The oVirt Engine emulator instead of moto; the settings name the engine, its CA and the
    zVirt cluster."""

    name = "zvirt"

    def __init__(self) -> None:
        self.endpoint: OvirtEmulatorEndpoint | None = None
        self.storage: DemoStorage | None = None

    def stack_options(self, options: StackOptions) -> StackOptions:
        main, *others = options.kube
        with_capi = dataclasses.replace(main, components=(*main.components, CAPI))
        return dataclasses.replace(
            options,
            kube=(with_capi, *others),
            moto=False,
            ovirt_emulator=OvirtEmulatorOptions(password=PASSWORD, delays=DEMO_DELAYS),
        )

    def seed(self, stack: LocalStack, kube: Kube, settings: Settings) -> Settings:
        endpoint = _endpoint(stack)
        self.endpoint = endpoint
        password = stack.state_dir / "ovirt" / "password"
        password.parent.mkdir(parents=True, exist_ok=True)
        password.touch(mode=0o600)
        password.write_text(endpoint.password)
        vm_ids = seed_node_vms(endpoint, DEMO_VMS)
        for name in DEMO_VMS:
            create_demo_node(kube, name)
        create_probe(kube, self.name)
        zvirt = ZvirtSettings(
            api_url=endpoint.api_url,
            username=endpoint.username,
            password_file=password,
            ca_bundle=endpoint.ca_file,
            cluster_id=endpoint.cluster_id,
            timeout_s=10,
            wait_timeout_s=60,
            poll_interval_s=0.5,
            shutdown_timeout_s=10,
        )
        settings = settings.model_copy(update={"provider": self.name, "zvirt": zvirt})
        for name, vm_id in vm_ids.items():  # the CSI node plugin's node ID is the VM's ID
            registered_node(kube, name, driver=settings.csi.driver_name, node_id=vm_id, topology={})
        self.storage = DemoStorage(settings, stack.kubeconfig, stack.state_dir / "logs")
        self.storage.start(kube, STORAGE_CLASS, {DEMO_LABEL: "true"})
        seed_node_group(
            kube,
            instance_class={
                "apiVersion": "deckhouse.io/v1",
                "kind": ZVIRT_TEMPLATES.instance_class.kind,
                "metadata": {"name": GROUP},
                "spec": machine_spec(endpoint, numCPUs=2),
            },
            kinds=ZVIRT_KINDS,
            templates=ZVIRT_TEMPLATES,
            namespace=GROUP_NAMESPACE,
            size=GROUP_SIZE,
        )
        return settings

    def layout_config(self, folder: Path, prefix: str) -> Path | None:
        """The ``Standard`` example on the emulator: one master VM with its data disk."""
        if self.endpoint is None:
            return None
        return _layout_config(folder / LAYOUT_FILE, self.endpoint, prefix)

    def stop(self) -> None:
        """The CSI controller and its sidecars (the stack stops after them)."""
        if self.storage is not None:
            self.storage.stop()

    def endpoints(self, stack: LocalStack) -> list[str]:
        endpoint = _endpoint(stack)
        return [
            f"  zVirt       : {endpoint.api_url} (oVirt Engine API; user {endpoint.username}, "
            f"password in {stack.state_dir / 'ovirt' / 'password'})",
            f"  emulator    : {endpoint.admin_url}/state (admin API: state, faults)",
            f"  layout      : {stack.state_dir / 'layouts' / LAYOUT_FILE} (Standard, one master)",
        ]

    def watch(self, stack: LocalStack, kubectl: Path) -> list[str]:
        endpoint = _endpoint(stack)
        return [
            f"  {kubectl} get nodes -o custom-columns=NAME:.metadata.name,"
            "PROVIDER:.spec.providerID,TYPE:.metadata.labels.node\\.kubernetes\\.io/"
            "instance-type",
            f"  curl -s {endpoint.admin_url}/state | python3 -m json.tool | less"
            "   # vms, disks, their status",
            f"  {kubectl} get cloudprobes -o wide",
            f"  {kubectl} get pvc,volumeattachments   # {CLAIM}: Bound to a disk on storage "
            f"domain {STORAGE_CLASS}, attached to its pod's VM",
            f"  {kubectl} -n {GROUP_NAMESPACE} get "
            f"nodegroups,machinedeployments,machines,zvirtmachines"
            f"   # the node group: {GROUP_SIZE} machines, one VM each",
            f"  temporal workflow list --address {stack.temporal_address} "
            "--query \"CloudloopKind='Machine'\"",
            "  Temporal UI → Schedules: layout-converge/dev-layout   # the layout's converge",
        ]


def _endpoint(stack: LocalStack) -> OvirtEmulatorEndpoint:
    if stack.ovirt is None:
        raise RuntimeError("the zVirt demo needs the oVirt Engine emulator in the stack")
    return stack.ovirt


def _layout_config(path: Path, endpoint: OvirtEmulatorEndpoint, prefix: str) -> Path:
    """The Standard example for ``prefix`` on the emulator (its CA, cluster, template, vNIC
    profile and a seed storage domain), one master, written where the worker reads it (mode
    0600: it holds the password)."""
    docs = list(yaml.safe_load_all(LAYOUT_EXAMPLE.read_text()))
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            doc["cloud"]["prefix"] = prefix
            continue
        provider: dict[str, Any] = {
            "server": endpoint.api_url,
            "username": endpoint.username,
            "password": endpoint.password,
        }
        if endpoint.ca_file is not None:
            provider["caBundle"] = endpoint.ca_file.read_text()
        doc["clusterID"] = endpoint.cluster_id
        doc["provider"] = provider
        doc["masterNodeGroup"]["replicas"] = 1
        doc["masterNodeGroup"]["instanceClass"].update(
            numCPUs=2,
            memory=2048,
            template=endpoint.template,
            vnicProfileID=endpoint.vnic_profile_id,
            storageDomainID=STORAGE_DOMAIN_ID,
            rootDiskSizeGb=20,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump_all(docs))
    return path
