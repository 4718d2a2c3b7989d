"""Seeds a running vcsim with what the tests and the demo need, the way an operator would.

Node VMs are cloned powered off, customized with a fixed IP and host name (``CustomizeVM_Task``),
resized, then powered on, so ``guest.net``, ``FindByIp`` and ``FindByDnsName`` answer; the region
and zone tag categories get their tags attached to the datacenter, clusters, hosts, VMs and
datastores through the tagging REST paths.

Rules:
- Only pyvmomi and the product's tagging client talk to vcsim: no simulator-only hooks.
- Task results are read through the property collector: vcsim puts a non-entity in
  ``Task.info.entity``, which pyvmomi's ``task.info`` rejects.
- Idempotent where tests need it: categories and tags are found by name before being created.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cloudloop.cloud.vsphere.tagging import ObjectId, TaggingClient
from cloudloop.cloud.vsphere.vmomi import PC, smart_connect, vim
from cloudloop.cloud.vsphere.vmomi import disconnect as _disconnect
from devstack.vcsim import VcsimEndpoint

REGION_CATEGORY = "k8s-region"
ZONE_CATEGORY = "k8s-zone"
DATACENTER = "DC0"
#: The VM of each cluster's first resource pool that node VMs are cloned from.
TEMPLATE = "{cluster}_RP0_VM0"
NETMASK = "255.255.255.0"


def connect(endpoint: VcsimEndpoint) -> Any:
    """A pyvmomi ``ServiceInstance`` logged in to vcsim (TLS verified with the stack's CA)."""
    return smart_connect(
        host=endpoint.host,
        port=endpoint.port,
        user=endpoint.username,
        pwd=endpoint.password,
        sslContext=endpoint.ssl_context(),
    )


def disconnect(si: Any) -> None:
    _disconnect(si)


def tagging_client(endpoint: VcsimEndpoint) -> TaggingClient:
    return TaggingClient(
        endpoint.url,
        lambda: (endpoint.username, endpoint.password),
        ca_file=endpoint.ca_file,
    )


def wait_task(si: Any, task: Any, timeout: float = 60.0) -> Any:
    """The task's result once it succeeded; its fault raised when it failed."""
    collector = si.content.propertyCollector
    spec = PC.FilterSpec(
        objectSet=[PC.ObjectSpec(obj=task)],
        propSet=[
            PC.PropertySpec(type=vim.Task, pathSet=["info.state", "info.error", "info.result"])
        ],
    )
    deadline = time.monotonic() + timeout
    while True:
        props = {p.name: p.val for p in collector.RetrieveContents([spec])[0].propSet}
        state = props.get("info.state")
        if state == "success":
            return props.get("info.result")
        if state == "error":
            raise props["info.error"]
        if time.monotonic() > deadline:
            raise TimeoutError(f"task {task} still {state}")
        time.sleep(0.05)


def find(si: Any, path: str) -> Any:
    """An inventory object by path (``DC0/host/DC0_C0``); ``LookupError`` when absent."""
    found = si.content.searchIndex.FindByInventoryPath(path)
    if found is None:
        raise LookupError(path)
    return found


@dataclass(frozen=True)
class NodeVm:
    """A node VM to make: where it runs and how the guest is set up."""

    name: str
    ip: str
    cluster: str = "DC0_C0"
    #: Index of the host in the cluster it is placed on.
    host: int = 0
    cpus: int = 2
    memory_mb: int = 4096
    guest_id: str = "ubuntu64Guest"
    gateway: str = ""
    power_on: bool = True


@dataclass(frozen=True)
class VmRecord:
    name: str
    moref: str
    uuid: str
    ip: str

    @property
    def provider_id(self) -> str:
        return f"vsphere://{self.uuid}"


def clone_node_vm(si: Any, node: NodeVm, *, datacenter: str = DATACENTER) -> VmRecord:
    """Clone ``node`` from its cluster's template VM, customize its guest, power it on."""
    cluster = find(si, f"{datacenter}/host/{node.cluster}")
    template = find(si, f"{datacenter}/vm/{TEMPLATE.format(cluster=node.cluster)}")
    folder = find(si, f"{datacenter}/vm")
    relocate = vim.vm.RelocateSpec(pool=cluster.resourcePool, host=cluster.host[node.host])
    spec = vim.vm.CloneSpec(location=relocate, powerOn=False, template=False)
    vm = wait_task(si, template.CloneVM_Task(folder=folder, name=node.name, spec=spec))
    wait_task(
        si,
        vm.ReconfigVM_Task(
            spec=vim.vm.ConfigSpec(
                numCPUs=node.cpus, memoryMB=node.memory_mb, guestId=node.guest_id
            )
        ),
    )
    gateway = node.gateway or str(
        next(ipaddress.ip_network(f"{node.ip}/{NETMASK}", strict=False).hosts())
    )
    customization = vim.vm.customization.Specification(
        identity=vim.vm.customization.LinuxPrep(
            hostName=vim.vm.customization.FixedName(name=node.name), domain="cluster.local"
        ),
        globalIPSettings=vim.vm.customization.GlobalIPSettings(),
        nicSettingMap=[
            vim.vm.customization.AdapterMapping(
                adapter=vim.vm.customization.IPSettings(
                    ip=vim.vm.customization.FixedIp(ipAddress=node.ip),
                    subnetMask=NETMASK,
                    gateway=[gateway],
                )
            )
        ],
    )
    wait_task(si, vm.CustomizeVM_Task(spec=customization))
    if node.power_on:
        wait_task(si, vm.PowerOnVM_Task())
    return VmRecord(name=node.name, moref=vm._moId, uuid=vm.config.uuid, ip=node.ip)


def object_id(entity: Any) -> ObjectId:
    """The tagging service's name for a pyvmomi managed object."""
    return ObjectId(entity._moId, entity._wsdlName)


@dataclass
class Tags:
    """Find-or-create categories and tags by name and attach them (one client, cached IDs)."""

    client: TaggingClient
    categories: dict[str, str] = field(default_factory=dict)
    tags: dict[tuple[str, str], str] = field(default_factory=dict)

    def category(self, name: str) -> str:
        if name not in self.categories:
            for category in self.client.list_categories():
                self.categories.setdefault(category.name, category.id)
        if name not in self.categories:
            self.categories[name] = self.client.create_category(name)
        return self.categories[name]

    def tag(self, category: str, name: str) -> str:
        key = (category, name)
        if key not in self.tags:
            category_id = self.category(category)
            for tag in self.client.tags_in_category(category_id):
                self.tags.setdefault((category, tag.name), tag.id)
            if key not in self.tags:
                self.tags[key] = self.client.create_tag(name, category_id)
        return self.tags[key]

    def attach(self, category: str, name: str, objects: Iterable[Any]) -> None:
        tag_id = self.tag(category, name)
        for obj in objects:
            self.client.attach(tag_id, obj if isinstance(obj, ObjectId) else object_id(obj))

    def detach(self, category: str, name: str, objects: Iterable[Any]) -> None:
        tag_id = self.tag(category, name)
        for obj in objects:
            self.client.detach(tag_id, obj if isinstance(obj, ObjectId) else object_id(obj))


@dataclass(frozen=True)
class ZoneLayout:
    """Deckhouse's layout: the region tag on the datacenter, a zone tag per cluster, and each
    datastore tagged with the zone it serves."""

    region: str = "region-a"
    zones: dict[str, str] = field(default_factory=lambda: {"zone-a": "DC0_C0", "zone-b": "DC0_C1"})
    datastores: dict[str, str] = field(
        default_factory=lambda: {"LocalDS_0": "zone-a", "LocalDS_1": "zone-b"}
    )
    region_category: str = REGION_CATEGORY
    zone_category: str = ZONE_CATEGORY


def seed_zones(si: Any, tags: Tags, layout: ZoneLayout, *, datacenter: str = DATACENTER) -> None:
    tags.attach(layout.region_category, layout.region, [find(si, datacenter)])
    for zone, cluster in layout.zones.items():
        tags.attach(layout.zone_category, zone, [find(si, f"{datacenter}/host/{cluster}")])
    for datastore, zone in layout.datastores.items():
        tags.attach(layout.zone_category, zone, [find(si, f"{datacenter}/datastore/{datastore}")])


@dataclass(frozen=True)
class Inventory:
    """What :func:`seed` made."""

    vms: dict[str, VmRecord]
    layout: ZoneLayout | None


def seed(
    endpoint: VcsimEndpoint, nodes: Sequence[NodeVm], layout: ZoneLayout | None = None
) -> Inventory:
    """Node VMs and (unless ``layout`` is ``None``) the zone tags, on a running vcsim."""
    si = connect(endpoint)
    try:
        vms = {node.name: clone_node_vm(si, node) for node in nodes}
        if layout is not None:
            client = tagging_client(endpoint)
            try:
                seed_zones(si, Tags(client), layout)
            finally:
                client.logout()
        return Inventory(vms=vms, layout=layout)
    finally:
        disconnect(si)
