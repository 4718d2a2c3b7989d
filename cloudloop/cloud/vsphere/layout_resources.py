"""vSphere layout resources through pyVmomi: find by inventory path or tag, create, repair, delete.

One handler per kind of :mod:`cloudloop.cloud.vsphere.layout`, on a
:class:`~cloudloop.cloud.vsphere.machines.VsphereMachines` of its own session logged in with the
document's ``provider``; the worker's vSphere section gives timeouts and polling.
Why: docs/decisions/0043-vsphere-layout-standard.md.

Rules:
- Datacenter and compute clusters are found by their tags, never created; none or several is
  an error naming them. Everything else is found at its inventory or datastore path, so a
  retried step finds what the first attempt made; a clone in flight is waited for, never repeated.
- Drift repaired in place: CPUs, memory, root disk grown, data disk attached, power (a VM found
  off is brought to the definition again). A larger root disk is reported, never shrunk;
  extraConfig changes are ignored. A second ensure of an unchanged resource makes only reads.
- Bootstrap data is written at the clone and before the first power-on (``cloudloop.booted``
  marks a booted VM); a booted VM keeps its data: other data is an immutable change.
- ``delete`` is idempotent; a pool or folder still holding anything is refused, never emptied.
- ``blockers``: foreign VMs in the layout's folder or pools, and this cluster's CSI disks.
- ``adopt`` renames what a Terraform state names by ID when it hangs where the layout's does,
  refuses one elsewhere (never moved). Cloud errors end the step with the cloud's message.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from cloudloop.cloud import errors, models
from cloudloop.cloud.layouts import Drift, Ensured, Found, user_data_drift
from cloudloop.cloud.vsphere import layout as defs
from cloudloop.cloud.vsphere.base import VsphereBase
from cloudloop.cloud.vsphere.layout_state import STATE_TYPES
from cloudloop.cloud.vsphere.machines import VmState, VsphereMachines
from cloudloop.cloud.vsphere.machinespec import GIB, VsphereMachineSpec, parse_machine_spec
from cloudloop.cloud.vsphere.mapping import PROVIDER, Inventory
from cloudloop.cloud.vsphere.settings import VsphereSettings
from cloudloop.cloud.vsphere.vmomi import PC, vim
from cloudloop.cloud.vsphere.volumes import fcd_manager
from cloudloop.layouts import bootstrap
from cloudloop.layouts.config import VsphereClusterConfiguration
from cloudloop.layouts.model import LayoutDef, ResourceDef
from cloudloop.layouts.tfstate import StateMapping
from cloudloop.tls import ca_file

log = logging.getLogger(__name__)
Props = dict[str, Any]
#: Every operation a layout step may make that changes vCenter (the rest only read).
MUTATING = frozenset(
    {
        "CreateFolder",
        "CreateResourcePool",
        "MakeDirectory",
        "CreateVirtualDisk",
        "DeleteVirtualDisk",
        "DestroyFolder",
        "DestroyResourcePool",
        "CloneVM",
        "ReconfigVM",
        "PowerOnVM",
        "PowerOffVM",
        "DestroyVM",
        "AttachTag",
        "RenameEntity",
    }
)
_VM_PATHS = [
    "name",
    "config.uuid",
    "config.instanceUuid",
    "config.hardware.numCPU",
    "config.hardware.memoryMB",
    "config.hardware.device",
    "config.cpuHotAddEnabled",
    "config.memoryHotAddEnabled",
    "runtime.powerState",
    "guest.ipAddress",
    "config.extraConfig",
]
#: Where the guest reads its bootstrap data (Deckhouse's master and static node modules).
USERDATA_KEY = "guestinfo.userdata"
#: Set in the reconfigure before a VM's first power-on: from then on its bootstrap data is kept.
BOOTED_KEY = "cloudloop.booted"


@dataclass
class VmRaw:
    moref: str
    name: str
    uuid: str
    instance_uuid: str
    num_cpus: int
    memory_mb: int
    devices: list[Any]
    cpu_hot_add: bool
    memory_hot_add: bool
    power_state: str
    ip: str
    #: SHA-256 of the ``guestinfo.userdata`` the VM holds (None: it holds none).
    user_data_sha256: str | None = None
    #: It has been powered on by a layout (``BOOTED_KEY``): its bootstrap data is kept.
    booted: bool = False

    @property
    def state(self) -> VmState:
        return VmState(
            moref=self.moref,
            name=self.name,
            uuid=self.uuid,
            instance_uuid=self.instance_uuid,
            power_state=self.power_state,
            ips=(self.ip,) if self.ip else (),
        )

    def disks(self) -> list[Any]:
        return [d for d in self.devices if isinstance(d, vim.vm.device.VirtualDisk)]

    def disk_file(self, disk: Any) -> str:
        return str(getattr(disk.backing, "fileName", "") or "")


def _user_data(props: Props) -> bytes:
    return bootstrap.data_of(props.get("user_data")) or b""


def _userdata_digest(options: list[Any]) -> str | None:
    """SHA-256 of the bootstrap data in a VM's extraConfig (decoded as its encoding says)."""
    values = {str(o.key): str(o.value) for o in options if getattr(o, "key", None)}
    text = values.get(USERDATA_KEY)
    if not text:
        return None
    data = text.encode()
    if values.get(f"{USERDATA_KEY}.encoding") in ("base64", "b64"):
        with contextlib.suppress(ValueError):  # not what it says: the digest of what is there
            data = base64.b64decode(text, validate=True)
    return hashlib.sha256(data).hexdigest()


def _entity_path(inventory: Inventory, moref: str) -> str:
    names: list[str] = []
    entity = inventory.entities.get(moref)
    while entity is not None and entity.parent:
        names.append(entity.name)
        entity = inventory.entities.get(entity.parent)
    return "/" + "/".join(reversed(names))


def _ancestors(inventory: Inventory, moref: str) -> set[str]:
    seen: set[str] = set()
    entity = inventory.entities.get(moref)
    while entity is not None:
        seen.add(entity.moref)
        entity = inventory.entities.get(entity.parent) if entity.parent else None
    return seen


class VsphereLayoutResources(VsphereMachines):
    """The vSphere :class:`~cloudloop.cloud.layouts.LayoutResources`."""

    def __init__(self, settings: VsphereSettings, config: VsphereClusterConfiguration) -> None:
        super().__init__(VsphereBase(settings))
        self.config = config

    # -- the contract ----------------------------------------------------------------------
    def _handlers(self, resource: ResourceDef) -> str:
        suffix = {
            defs.DATACENTER: "dc",
            defs.FOLDER: "folder",
            defs.CLUSTER: "cluster",
            defs.POOL: "pool",
            defs.DISK: "disk",
            defs.VM: "vm",
        }.get(resource.kind)
        if suffix is None:
            raise errors.NotSupported(PROVIDER, f"layout resource {resource.kind}")
        return suffix

    def layout_zones(self) -> list[str]:
        """The zone tags on the compute clusters of the region's datacenter."""
        inventory = self.session.inventory()
        dc = self._region_dc(inventory, self.config.region, self.config.regionTagCategory)
        if dc is None:
            raise errors.InvalidRequest(
                PROVIDER,
                "FindDatacenter",
                f"no datacenter carries the tag {self.config.region!r} of category "
                f"{self.config.regionTagCategory!r}",
            )
        tags = self.session.tags_by_object([self.config.zoneTagCategory])
        zones: set[str] = set()
        for moref, attached in tags.items():
            entity = inventory.entities.get(moref)
            if entity is None or entity.type != "ClusterComputeResource":
                continue
            if dc not in _ancestors(inventory, moref):
                continue
            zones.update(t for c, t in attached if c == self.config.zoneTagCategory)
        return sorted(zones)

    def inspect(self, resource: ResourceDef, properties: Props) -> Found | None:
        suffix = self._handlers(resource)
        raw = getattr(self, f"_find_{suffix}")(resource, properties)
        if raw is None:
            return None
        drift: list[Drift] = []
        if suffix == "vm":
            drift = self._drift_vm(properties, raw)
        return Found(outputs=self._outputs(resource, raw), drift=drift)

    def ensure(self, resource: ResourceDef, properties: Props) -> Ensured:
        suffix = self._handlers(resource)
        if suffix == "vm":
            return self._ensure_vm(resource, properties)
        raw = getattr(self, f"_find_{suffix}")(resource, properties)
        if raw is not None:
            return Ensured("unchanged", self._outputs(resource, raw))
        raw = getattr(self, f"_create_{suffix}")(resource, properties)
        return Ensured("created", self._outputs(resource, raw))

    def delete(self, resource: ResourceDef, properties: Props) -> bool:
        suffix = self._handlers(resource)
        if resource.read_only:
            return False
        raw = getattr(self, f"_find_{suffix}")(resource, properties)
        if raw is None:
            return False
        getattr(self, f"_delete_{suffix}")(resource, properties, raw)
        return True

    def refusals(self, resource: ResourceDef, properties: Props) -> list[str]:
        """What the create of a VM or a data disk would not find: the template, the datastore,
        the networks (the datacenter and compute clusters are the engine's lookups)."""
        dc_name = properties.get("datacenter")
        if resource.kind not in (defs.VM, defs.DISK) or not dc_name:
            return []
        checks: list[Callable[[], Any]] = []
        if properties.get("datastore"):
            checks.append(lambda: self._check_datastore(dc_name, properties["datastore"]))
        if resource.kind == defs.VM:
            checks.append(lambda: self._template(str(properties["template"]), dc_name))
            checks.append(
                lambda: self._networks(self._dc_ref(dc_name), list(properties["networks"]))
            )
        refusals: list[str] = []
        for check in checks:
            try:
                check()
            except errors.InvalidRequest as exc:  # "not found" (or ambiguous), named
                refusals.append(f"{resource.key}: {exc.message}")
        return refusals

    def adopt(self, resource: ResourceDef, properties: Props, cloud_id: str) -> Found | None:
        """The folder, pool or VM the Terraform state names (by moref; a VM by BIOS UUID),
        renamed to the layout's name when it hangs where the layout's does (an object
        elsewhere is refused: moved, never); a disk's path is its identity (refused when the
        state's differs). ``None`` when vCenter has no such object."""
        if resource.kind == defs.DISK:
            if cloud_id != self._disk_name(properties):
                raise errors.InvalidRequest(
                    PROVIDER,
                    "adopt",
                    f"{resource.key}: the state's disk is {cloud_id!r} (the path is its identity)",
                )
        elif resource.kind in (defs.FOLDER, defs.POOL, defs.VM):
            moref = self._adopted_moref(resource, cloud_id)
            if moref is None:
                return None
            if resource.kind == defs.FOLDER:
                want = self._folder_path(properties)
            elif resource.kind == defs.POOL:
                want = self._pool_path(properties)
            else:
                want = self._vm_path(properties, resource.name)
            if not self._adopt_entity(resource, moref, want):
                return None
        found = self.inspect(resource, properties)
        if found is not None and resource.kind in (defs.FOLDER, defs.POOL, defs.VM):
            ids = {str(found.outputs.get(k) or "").lower() for k in ("id", "uuid")}
            if cloud_id.lower() not in ids:
                raw_id = found.outputs.get("id")
                raise errors.AlreadyExists(
                    PROVIDER, "adopt", f"{resource.key} is {raw_id}, not {cloud_id}"
                )
        return found

    def _adopted_moref(self, resource: ResourceDef, cloud_id: str) -> str | None:
        if resource.kind != defs.VM or cloud_id.startswith("vm-"):
            return cloud_id  # a moref (a VM's: the state ``publish`` writes)
        found = self.session.call(
            "FindByUuid",
            lambda si: si.content.searchIndex.FindByUuid(None, cloud_id, True, False),
        )
        return None if found is None else str(found._moId)

    def _adopt_entity(self, resource: ResourceDef, moref: str, want: str) -> bool:
        """Renamed to ``want``'s name when it hangs under ``want``'s parent (compared by
        moref); elsewhere refused. False when vCenter has no such object."""
        kind = {defs.FOLDER: vim.Folder, defs.POOL: vim.ResourcePool}.get(
            resource.kind, vim.VirtualMachine
        )
        try:
            name, parent = self.session.call(
                "GetEntity",
                lambda si: (lambda o: (str(o.name), str(o.parent._moId)))(kind(moref, si._stub)),
            )
        except errors.NotFound:
            return False
        parent_path, _, want_name = want.rpartition("/")
        want_parent = self._find_by_path(parent_path)
        if want_parent is None or str(want_parent._moId) != parent:
            raise errors.InvalidRequest(
                PROVIDER,
                "adopt",
                f"{resource.key}: the state's {moref} ({name!r}) is not under {parent_path!r} "
                "(moved, never: adopt refuses)",
            )
        if name == want_name:
            return True
        if self._find_by_path(want) is not None:
            raise errors.AlreadyExists(
                PROVIDER, "adopt", f"{resource.key}: {want} exists already; the state names {moref}"
            )
        if resource.kind == defs.POOL:  # a pool is renamed by its config (no Rename_Task)
            self.session.call(
                "RenameEntity",
                lambda si: vim.ResourcePool(moref, si._stub).UpdateConfig(
                    name=want_name, config=None
                ),
            )
        else:
            task = self.session.call(
                "RenameEntity", lambda si: kind(moref, si._stub).Rename_Task(newName=want_name)
            )
            self.session.wait_task("RenameEntity", task._moId)
        log.info("vsphere: adopted %s (%s) as %s", moref, name, want)
        return True

    def blockers(self, layout: LayoutDef, found: dict[str, dict[str, Any]]) -> list[str]:
        """VMs the layout did not make in its folder (named ``<prefix>-…`` when the folder
        pre-exists) or in its resource pools (ephemeral nodes), and the cluster's CSI disks."""
        return self._stray_vms(layout, found) + self._csi_disks(layout)

    def _csi_disks(self, layout: LayoutDef) -> list[str]:
        """First Class Disks our CSI driver made for this cluster: tagged in the category
        ``cluster_tag_category`` with the cluster's name (its UUID or its prefix; the layout's
        own data disks are plain vmdk files, never tagged). Another cluster's are not."""
        category = self.session.settings.cluster_tag_category
        disks: set[str] = set()
        for tag in sorted({layout.uuid, layout.prefix}):

            def tagged(si: Any, tag: str = tag) -> Any:
                return fcd_manager(si).ListVStorageObjectsAttachedToTag(category, tag)

            try:
                ids = self.session.call("ListVStorageObjectsAttachedToTag", tagged)
            except errors.NotFound:
                continue  # no such tag or category: no disk was tagged for it
            disks |= {str(i.id) for i in ids or []}
        if not disks:
            return []
        # a deleted disk's tag association may outlive it (vcsim keeps it): only the disks a
        # datastore still lists count

        def existing(si: Any) -> dict[str, str]:
            view = si.content.viewManager.CreateContainerView(
                si.content.rootFolder, [vim.Datastore], True
            )
            try:
                return {
                    str(i.id): str(store.name)
                    for store in view.view
                    for i in fcd_manager(si).ListVStorageObject(store) or []
                }
            finally:
                view.Destroy()

        present = self.session.call("ListVStorageObject", existing)
        return [f"disk {d} ({present[d]})" for d in sorted(disks) if d in present]

    def _stray_vms(self, layout: LayoutDef, found: dict[str, dict[str, Any]]) -> list[str]:
        ours = {r.name for m in layout.modules for r in m.resources if r.kind == defs.VM}
        folder = found.get(f"{defs.FOLDER}/{self.config.vmFolderPath.strip('/')}", {}).get("id")
        pools = {
            str(v.get("id"))
            for k, v in found.items()
            if k.startswith(f"{defs.POOL}/") and v.get("id")
        }
        inventory = self.session.inventory()
        blockers: list[str] = []
        for vm in inventory.vms.values():
            if vm.name in ours:
                continue
            in_pool = vm.resource_pool in pools
            in_folder = bool(folder) and vm.parent == folder
            if not folder and self.config.vmFolderExists:
                dc = (found.get(f"{defs.DATACENTER}/{self.config.region}") or {}).get("name")
                path = f"/{dc}/vm/{self.config.vmFolderPath.strip('/')}"
                in_folder = _entity_path(inventory, vm.parent) == path and vm.name.startswith(
                    f"{layout.prefix}-"
                )
            if in_pool or in_folder:
                blockers.append(f"VM {vm.name}")
        return sorted(blockers)

    # -- outputs ---------------------------------------------------------------------------
    def _outputs(self, resource: ResourceDef, raw: Any) -> dict[str, Any]:
        if isinstance(raw, VmRaw):
            values: dict[str, Any] = {
                "id": raw.moref,
                "uuid": raw.uuid,
                "default_ip": raw.ip or None,
            }
        else:
            values = dict(raw)
        return {k: values.get(k) for k in resource.outputs}

    # -- datacenter and compute clusters (looked up) ---------------------------------------
    def _region_dc(self, inventory: Inventory, region: str, category: str) -> str | None:
        tagged = [
            moref
            for moref, attached in self.session.tags_by_object([category]).items()
            if (category, region) in attached
            and (inventory.entities.get(moref) is not None)
            and inventory.entities[moref].type == "Datacenter"
        ]
        if len(tagged) > 1:
            raise errors.InvalidRequest(
                PROVIDER,
                "FindDatacenter",
                f"the region tag {region!r} is on {len(tagged)} datacenters; it must be on one",
            )
        return tagged[0] if tagged else None

    def _find_dc(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        inventory = self.session.inventory()
        moref = self._region_dc(inventory, props["region"], props["category"])
        if moref is None:
            return None
        return {"id": moref, "name": inventory.entities[moref].name}

    def _find_cluster(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        inventory = self.session.inventory()
        dc = self._find_by_path(f"/{props['datacenter']}")
        dc_moref = str(dc._moId) if dc is not None else ""
        tagged = [
            moref
            for moref, attached in self.session.tags_by_object([props["category"]]).items()
            if (props["category"], props["zone"]) in attached
            and (e := inventory.entities.get(moref)) is not None
            and e.type == "ClusterComputeResource"
            and dc_moref in _ancestors(inventory, moref)
        ]
        if len(tagged) > 1:
            raise errors.InvalidRequest(
                PROVIDER,
                "FindComputeCluster",
                f"the zone tag {props['zone']!r} is on {len(tagged)} compute clusters",
            )
        if not tagged:
            return None
        moref = tagged[0]
        return {
            "id": moref,
            "name": inventory.entities[moref].name,
            "path": _entity_path(inventory, moref),
        }

    # -- folder ------------------------------------------------------------------------------
    def _folder_path(self, props: Props) -> str:
        return f"/{props['datacenter']}/vm/{str(props['path']).strip('/')}"

    def _find_folder(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        found = self._find_by_path(self._folder_path(props))
        if found is None:
            return None
        if not isinstance(found, vim.Folder):
            raise errors.AlreadyExists(
                PROVIDER, "FindFolder", f"{self._folder_path(props)} is not a folder"
            )
        return {"id": str(found._moId), "path": self._folder_path(props)}

    def _create_folder(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        path = self._folder_path(props)
        parent_path, _, name = path.rpartition("/")
        parent = self._find_by_path(parent_path)
        if not isinstance(parent, vim.Folder):
            raise errors.InvalidRequest(
                PROVIDER, "CreateFolder", f"the parent folder {parent_path!r} does not exist"
            )
        try:
            made = self.session.call(
                "CreateFolder",
                lambda si: vim.Folder(parent._moId, si._stub).CreateFolder(name=name),
            )
        except errors.AlreadyExists:  # made meanwhile (a racing retry)
            made = self._find_by_path(path)
        log.info("vsphere: created folder %s", path)
        return {"id": str(made._moId), "path": path}

    def _delete_folder(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        moref = raw["id"]
        children = self.session.call(
            "ListChildren", lambda si: list(vim.Folder(moref, si._stub).childEntity or [])
        )
        if children:
            raise errors.FailedPrecondition(
                PROVIDER,
                "DestroyFolder",
                f"{raw['path']} still holds {len(children)} object(s); not destroyed",
            )
        self._destroy("DestroyFolder", vim.Folder, moref)

    def _destroy(self, operation: str, kind: Any, moref: str) -> None:
        try:
            task = self.session.call(operation, lambda si: kind(moref, si._stub).Destroy_Task())
            self.session.wait_task(operation, task._moId)
        except errors.NotFound:
            pass

    # -- resource pools ------------------------------------------------------------------------
    def _pool_path(self, props: Props) -> str:
        parts = [str(props["cluster_path"]).rstrip("/"), "Resources"]
        if props.get("parent"):
            parts.append(str(props["parent"]).strip("/"))
        return "/".join([*parts, str(props["pool_name"])])

    def _find_pool(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        path = self._pool_path(props)
        found = self._find_by_path(path)
        if found is None:
            return None
        if not isinstance(found, vim.ResourcePool):
            raise errors.AlreadyExists(PROVIDER, "FindResourcePool", f"{path} is not a pool")
        return {"id": str(found._moId), "path": path}

    def _create_pool(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        path = self._pool_path(props)
        parent_path = path.rpartition("/")[0]
        parent = self._find_by_path(parent_path)
        if not isinstance(parent, vim.ResourcePool):
            raise errors.InvalidRequest(
                PROVIDER, "CreateResourcePool", f"the parent pool {parent_path!r} does not exist"
            )

        def allocation() -> Any:
            return vim.ResourceAllocationInfo(
                reservation=0,
                expandableReservation=True,
                limit=-1,
                shares=vim.SharesInfo(level="normal", shares=0),
            )

        spec = vim.ResourceConfigSpec(cpuAllocation=allocation(), memoryAllocation=allocation())
        try:
            made = self.session.call(
                "CreateResourcePool",
                lambda si: vim.ResourcePool(parent._moId, si._stub).CreateResourcePool(
                    name=props["pool_name"], spec=spec
                ),
            )
        except errors.AlreadyExists:
            made = self._find_by_path(path)
        log.info("vsphere: created resource pool %s", path)
        return {"id": str(made._moId), "path": path}

    def _delete_pool(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        moref = raw["id"]

        def contents(si: Any) -> int:
            pool = vim.ResourcePool(moref, si._stub)
            return len(pool.vm or []) + len(pool.resourcePool or [])

        held = self.session.call("GetResourcePool", contents)
        if held:
            raise errors.FailedPrecondition(
                PROVIDER,
                "DestroyResourcePool",
                f"{raw['path']} still holds {held} VM(s) or pool(s); not destroyed",
            )
        self._destroy("DestroyResourcePool", vim.ResourcePool, moref)

    # -- the kubernetes-data disk ---------------------------------------------------------------
    def _disk_name(self, props: Props) -> str:
        return f"[{props['datastore']}] {props['path']}"

    def _dc_ref(self, name: str) -> Any:
        dc = self._find_by_path(f"/{name}")
        if not isinstance(dc, vim.Datacenter):
            raise errors.InvalidRequest(PROVIDER, "FindDatacenter", f"no datacenter {name!r}")
        return dc

    def _find_disk(self, resource: ResourceDef, props: Props) -> dict[str, Any] | None:
        dc = self._dc_ref(props["datacenter"])
        if not self._has_datastore(props["datacenter"], props["datastore"]):
            return None  # vCenter has no such datastore: no disk on it either
        name = self._disk_name(props)
        try:
            self.session.call(
                "QueryVirtualDiskUuid",
                lambda si: si.content.virtualDiskManager.QueryVirtualDiskUuid(
                    name=name, datacenter=vim.Datacenter(dc._moId, si._stub)
                ),
            )
        except errors.NotFound:
            return None
        except errors.CloudError as exc:
            # vcsim answers CannotAccessFile for a missing file (vCenter: FileNotFound); a
            # wrong guess is safe: the create refuses to replace an existing disk.
            if "CannotAccessFile" in exc.message and "not found" in exc.message:
                return None
            raise
        return {"id": name}

    def _create_disk(self, resource: ResourceDef, props: Props) -> dict[str, Any]:
        dc = self._dc_ref(props["datacenter"])
        self._check_datastore(props["datacenter"], props["datastore"])
        name = self._disk_name(props)
        directory = name.rpartition("/")[0]
        try:
            self.session.call(
                "MakeDirectory",
                lambda si: si.content.fileManager.MakeDirectory(
                    name=directory,
                    datacenter=vim.Datacenter(dc._moId, si._stub),
                    createParentDirectories=True,
                ),
            )
        except errors.CloudError as exc:
            if "FileAlreadyExists" not in exc.message:
                raise
        spec = vim.VirtualDiskManager.FileBackedVirtualDiskSpec(
            diskType=props.get("type", defs.DATA_DISK_TYPE),
            adapterType="lsiLogic",
            capacityKb=int(props["size_gb"]) * GIB // 1024,
        )
        task = self.session.call(
            "CreateVirtualDisk",
            lambda si: si.content.virtualDiskManager.CreateVirtualDisk_Task(
                name=name, datacenter=vim.Datacenter(dc._moId, si._stub), spec=spec
            ),
        )
        self.session.wait_task("CreateVirtualDisk", task._moId)
        log.info("vsphere: created disk %s", name)
        return {"id": name}

    def _has_datastore(self, dc_name: str, datastore: str) -> bool:
        found = self._find_by_path(f"/{dc_name}/datastore/{datastore}")
        return isinstance(found, vim.Datastore)

    def _check_datastore(self, dc_name: str, datastore: str) -> None:
        if not self._has_datastore(dc_name, datastore):
            raise errors.InvalidRequest(
                PROVIDER, "FindDatastore", f"datastore {datastore!r} not found in {dc_name}"
            )

    def _delete_disk(self, resource: ResourceDef, props: Props, raw: dict[str, Any]) -> None:
        dc = self._dc_ref(props["datacenter"])
        try:
            task = self.session.call(
                "DeleteVirtualDisk",
                lambda si: si.content.virtualDiskManager.DeleteVirtualDisk_Task(
                    name=raw["id"], datacenter=vim.Datacenter(dc._moId, si._stub)
                ),
            )
            self.session.wait_task("DeleteVirtualDisk", task._moId)
        except errors.NotFound:
            pass

    # -- VMs -------------------------------------------------------------------------------
    def _vm_path(self, props: Props, name: str) -> str:
        return f"/{props['datacenter']}/vm/{str(props['folder']).strip('/')}/{name}"

    def _read_vm(self, moref: str) -> VmRaw | None:
        def read(si: Any) -> dict[str, Any]:
            spec = PC.FilterSpec(
                objectSet=[PC.ObjectSpec(obj=vim.VirtualMachine(moref, si._stub))],
                propSet=[PC.PropertySpec(type=vim.VirtualMachine, pathSet=_VM_PATHS)],
            )
            found = si.content.propertyCollector.RetrieveContents([spec])
            return {p.name: p.val for p in found[0].propSet} if found else {}

        try:
            props = self.session.call("GetVm", read)
        except errors.NotFound:
            return None
        if not props.get("config.uuid"):
            return None
        return VmRaw(
            moref=moref,
            name=str(props.get("name", "")),
            uuid=str(props.get("config.uuid") or "").lower(),
            instance_uuid=str(props.get("config.instanceUuid") or "").lower(),
            num_cpus=int(props.get("config.hardware.numCPU") or 0),
            memory_mb=int(props.get("config.hardware.memoryMB") or 0),
            devices=list(props.get("config.hardware.device") or []),
            cpu_hot_add=bool(props.get("config.cpuHotAddEnabled")),
            memory_hot_add=bool(props.get("config.memoryHotAddEnabled")),
            power_state=str(props.get("runtime.powerState", "")),
            ip=str(props.get("guest.ipAddress") or ""),
            user_data_sha256=_userdata_digest(props.get("config.extraConfig") or []),
            booted=any(
                getattr(o, "key", None) == BOOTED_KEY and o.value
                for o in props.get("config.extraConfig") or []
            ),
        )

    def _find_vm(self, resource: ResourceDef, props: Props) -> VmRaw | None:
        found = self._find_by_path(self._vm_path(props, resource.name))
        if found is None or not isinstance(found, vim.VirtualMachine):
            return None
        return self._read_vm(str(found._moId))

    def _machine(
        self, resource: ResourceDef, props: Props
    ) -> tuple[models.MachineSpec, VsphereMachineSpec]:
        """The VM as the machine driver's clone takes it (CAPV's spec fields)."""
        runtime = props.get("runtime_options") or {}
        keys = dict(props.get("extra_config") or {})
        if runtime.get("nestedHardwareVirtualization", True):
            keys["vhv.enable"] = "TRUE"
        resources: dict[str, Any] = {"requests": {}, "limits": {}, "shares": {}}
        memory = int(props["memory_mb"])
        resources["requests"]["memory"] = (
            f"{memory * int(runtime.get('memoryReservation', 80)) // 100}Mi"
        )
        if runtime.get("cpuReservation"):
            resources["requests"]["cpu"] = f"{runtime['cpuReservation']}M"
        if runtime.get("cpuLimit"):
            resources["limits"]["cpu"] = f"{runtime['cpuLimit']}M"
        if runtime.get("memoryLimit"):
            resources["limits"]["memory"] = f"{runtime['memoryLimit']}Mi"
        if runtime.get("cpuShares") is not None:
            resources["shares"]["cpu"] = runtime["cpuShares"]
        if runtime.get("memoryShares") is not None:
            resources["shares"]["memory"] = runtime["memoryShares"]
        pool = "/".join(
            p for p in (str(props["cluster_path"]).rstrip("/"), "Resources", props.get("pool")) if p
        )
        provider_spec = {
            "template": props["template"],
            "datacenter": props["datacenter"],
            "folder": str(props["folder"]).strip("/"),
            "datastore": props["datastore"],
            "resourcePool": pool,
            "numCPUs": int(props["num_cpus"]),
            "memoryMiB": memory,
            "diskGiB": int(props["root_disk_gb"]),
            "network": {"devices": [{"networkName": n} for n in props["networks"]]},
            "customVMXKeys": keys,
            "resources": resources,
        }
        spec = models.MachineSpec(
            name=resource.name,
            namespace="layout",
            cluster=str(props["datacenter"]),
            machine_uid=str(props["instance_uuid"]),
            provider_spec=provider_spec,
            failure_domain=str(props.get("zone", "")),
        )
        return spec, parse_machine_spec(provider_spec)

    def _extra_config(
        self, machine: VsphereMachineSpec, spec: models.MachineSpec, user_data: bytes
    ) -> dict[str, str]:
        """Deckhouse's keys as the definition gives them (no CAPV cloud-init keys), and the
        bootstrap data as upstream writes it (``guestinfo.userdata``, base64)."""
        keys = dict(machine.custom_vmx_keys)
        if user_data:
            keys[USERDATA_KEY] = base64.b64encode(user_data).decode()
            keys[f"{USERDATA_KEY}.encoding"] = "base64"
        return keys

    def _data_disk(self, raw: VmRaw, props: Props) -> Any | None:
        want = props.get("data_disk")
        return next((d for d in raw.disks() if raw.disk_file(d) == want), None) if want else None

    def _drift_vm(self, props: Props, raw: VmRaw) -> list[Drift]:
        drift: list[Drift] = []
        if raw.power_state != "poweredOn":
            drift.append(Drift("power_state", raw.power_state, "poweredOn"))
        if raw.num_cpus != int(props["num_cpus"]):
            drift.append(Drift("num_cpus", raw.num_cpus, int(props["num_cpus"])))
        if raw.memory_mb != int(props["memory_mb"]):
            drift.append(Drift("memory_mb", raw.memory_mb, int(props["memory_mb"])))
        own = [d for d in raw.disks() if raw.disk_file(d) != props.get("data_disk")]
        if own:
            have_gb = int(own[0].capacityInKB or 0) / (GIB // 1024)
            want_gb = int(props["root_disk_gb"])
            if have_gb < want_gb:
                drift.append(Drift("root_disk_gb", have_gb, want_gb))
            elif have_gb > want_gb:
                drift.append(Drift("root_disk_gb", have_gb, want_gb, immutable=True))
        if props.get("data_disk") and self._data_disk(raw, props) is None:
            drift.append(Drift("data_disk", None, props["data_disk"]))
        drift += self._user_data_drift(props, raw)
        return drift

    @staticmethod
    def _user_data_drift(props: Props, raw: VmRaw) -> list[Drift]:
        """Other bootstrap data: kept by a VM that has booted, written before a first boot."""
        if raw.booted or raw.power_state == "poweredOn":
            return user_data_drift(raw.user_data_sha256, props)
        wanted = bootstrap.digest_of(props.get("user_data"))
        if not wanted or raw.user_data_sha256 == wanted:
            return []
        have = bootstrap.short(raw.user_data_sha256) if raw.user_data_sha256 else None
        note = "written before its first boot"
        return [Drift("user_data", have, bootstrap.short(wanted), note=note)]

    def _ensure_vm(self, resource: ResourceDef, props: Props) -> Ensured:
        raw = self._find_vm(resource, props)
        created = raw is None
        if raw is None:
            raw = self._clone_vm(resource, props)
        if raw.power_state != "poweredOn":
            raw = self._complete_vm(resource, props, raw)
            changes = [] if created else [Drift("power_state", "poweredOff", "poweredOn")]
            raw = self._with_ip(raw)
            outputs = self._outputs(resource, raw)
            if created:
                return Ensured("created", outputs)
            return Ensured("updated", outputs, changes)
        drift = self._drift_vm(props, raw)
        repairable = [d for d in drift if not d.immutable]
        if repairable:
            self._repair_vm(props, raw, repairable)
            raw = self._read_vm(raw.moref) or raw
        raw = self._with_ip(raw)
        return Ensured(
            "updated" if repairable else "unchanged", self._outputs(resource, raw), drift
        )

    def _clone_vm(self, resource: ResourceDef, props: Props) -> VmRaw:
        spec, machine = self._machine(resource, props)
        dc, dc_name = self._datacenter(props["datacenter"])
        place = self._placement(machine, spec, dc, dc_name)
        state = self._await_clone_in_flight(spec, place.folder_path)
        if state is None:
            state = self._clone(spec, machine, place, _user_data(props))
        raw = self._read_vm(state.moref)
        if raw is None:
            raise errors.CloudError(PROVIDER, "CloneVM", f"the clone of {resource.name} is gone")
        return raw

    def _complete_vm(self, resource: ResourceDef, props: Props, raw: VmRaw) -> VmRaw:
        """A VM powered off (fresh clone, a stopped create, or powered off out of band) brought
        to the definition and powered on."""
        if self.settle(raw.state):
            raw = self._read_vm(raw.moref) or raw
        if raw.power_state == "poweredOn":
            return raw
        # this reconfigure, the last before the power-on, marks the VM as booted
        marked = {
            **props,
            "extra_config": {**(props.get("extra_config") or {}), BOOTED_KEY: "TRUE"},
        }
        spec, machine = self._machine(resource, marked)
        dc, dc_name = self._datacenter(props["datacenter"])
        place = self._placement(machine, spec, dc, dc_name)
        # bootstrap data is kept by a VM that has booted (and holds some), written otherwise
        keep = raw.booted and raw.user_data_sha256
        user_data = b"" if keep else _user_data(props)
        self._reconfigure(raw.state, spec, machine, place, user_data)
        raw = self._read_vm(raw.moref) or raw
        if props.get("data_disk") and self._data_disk(raw, props) is None:
            self._reconfig(raw, vim.vm.ConfigSpec(deviceChange=[self._attach_spec(raw, props)]))
        self._power_on(raw.state)
        return self._read_vm(raw.moref) or raw

    def _with_ip(self, raw: VmRaw) -> VmRaw:
        """Wait (``wait_timeout_s``) for the guest's IP, as Terraform waits for guest networking;
        none by then is a retryable error (the retry finds the VM and waits again)."""
        deadline = time.monotonic() + self.session.settings.wait_timeout_s
        while not raw.ip and raw.power_state == "poweredOn":
            if time.monotonic() > deadline:
                raise errors.CloudError(
                    PROVIDER, "WaitGuestIP", f"VM {raw.name} reports no IP address yet"
                )
            time.sleep(self.session.settings.poll_interval_s)
            raw = self._read_vm(raw.moref) or raw
        return raw

    def _reconfig(self, raw: VmRaw, spec: Any) -> None:
        task = self.session.call(
            "ReconfigVM",
            lambda si: vim.VirtualMachine(raw.moref, si._stub).ReconfigVM_Task(spec=spec),
        )
        self.session.wait_task("ReconfigVM", task._moId)

    def _attach_spec(self, raw: VmRaw, props: Props) -> Any:
        """Attach the existing data disk (not created, not destroyed with the VM) on the root
        disk's controller, at the first free unit."""
        disks = raw.disks()
        controller = disks[0].controllerKey if disks else None
        if controller is None:
            controllers = [
                d for d in raw.devices if isinstance(d, vim.vm.device.VirtualSCSIController)
            ]
            if not controllers:
                raise errors.InvalidRequest(
                    PROVIDER, "ReconfigVM", f"VM {raw.name} has no SCSI controller for the disk"
                )
            controller = controllers[0].key
        used = {d.unitNumber for d in raw.devices if d.controllerKey == controller}
        unit = next(u for u in range(16) if u != 7 and u not in used)
        disk = vim.vm.device.VirtualDisk(
            key=-200,
            controllerKey=controller,
            unitNumber=unit,
            capacityInKB=defs.DATA_DISK_GB * GIB // 1024,
            backing=vim.vm.device.VirtualDisk.FlatVer2BackingInfo(
                fileName=props["data_disk"], diskMode="persistent"
            ),
        )
        return vim.vm.device.VirtualDeviceSpec(operation="add", device=disk)

    def _repair_vm(self, props: Props, raw: VmRaw, drift: list[Drift]) -> None:
        fields = {d.field for d in drift}
        if "power_state" in fields:
            return  # _ensure_vm completes powered-off VMs
        config = vim.vm.ConfigSpec()
        changes: list[Any] = []
        needs_off = False
        if "num_cpus" in fields:
            config.numCPUs = int(props["num_cpus"])
            needs_off = needs_off or not raw.cpu_hot_add
        if "memory_mb" in fields:
            config.memoryMB = int(props["memory_mb"])
            needs_off = needs_off or not raw.memory_hot_add
        if "root_disk_gb" in fields:
            own = [d for d in raw.disks() if raw.disk_file(d) != props.get("data_disk")]
            disk = own[0]
            disk.capacityInKB = int(props["root_disk_gb"]) * GIB // 1024
            disk.capacityInBytes = disk.capacityInKB * 1024
            changes.append(vim.vm.device.VirtualDeviceSpec(operation="edit", device=disk))
        if "data_disk" in fields:
            changes.append(self._attach_spec(raw, props))
        config.deviceChange = changes
        if needs_off:
            log.info("vsphere: powering %s off to change CPUs/memory (no hot add)", raw.name)
            self._power_off(raw.state)
        self._reconfig(raw, config)
        if needs_off:
            self._power_on(raw.state)

    def _delete_vm(self, resource: ResourceDef, props: Props, raw: VmRaw) -> None:
        if self.settle(raw.state):
            raw = self._read_vm(raw.moref) or raw
        if raw.power_state != "poweredOff":
            self._power_off(raw.state)
            raw = self._read_vm(raw.moref) or raw
        data = self._data_disk(raw, props)
        if data is not None:
            self._reconfig(
                raw,
                vim.vm.ConfigSpec(
                    deviceChange=[vim.vm.device.VirtualDeviceSpec(operation="remove", device=data)]
                ),
            )
        self._destroy("DestroyVM", vim.VirtualMachine, raw.moref)
        log.info("vsphere: destroyed VM %s", raw.name)


class VsphereLayouts:
    """The vSphere :class:`~cloudloop.cloud.layouts.LayoutPart` (and ``AdoptingPart``)."""

    layouts: tuple[str, ...] = defs.LAYOUTS
    state_types: Mapping[str, StateMapping] = STATE_TYPES

    def define(self, config: Any, cluster: Any, zones: list[str]) -> LayoutDef:
        return defs.define(config, cluster, zones)

    def connect(self, config: Any, section: Any) -> VsphereLayoutResources:
        """A session logged in with the document's ``provider``; the worker's vSphere section
        gives timeouts and polling (its vCenter, credentials and trust are not used)."""
        assert isinstance(config, VsphereClusterConfiguration)
        base = section if isinstance(section, VsphereSettings) else VsphereSettings()
        provider = config.provider
        ca_bundle = Path(ca_file(provider.caBundle)) if provider.caBundle else None
        settings = base.model_copy(
            update={
                "config_file": None,
                "credentials_dir": None,
                "server": provider.server,
                "username": provider.username,
                "password": SecretStr(provider.password.get_secret_value()),
                "password_file": None,
                "insecure": provider.insecure,
                "ca_bundle": ca_bundle,
                "thumbprint": "",
                "region_tag_category": config.regionTagCategory,
                "zone_tag_category": config.zoneTagCategory,
                "region": config.region,
                "zones": list(config.zones),
                "datacenter": "",
            }
        )
        return VsphereLayoutResources(settings, config)
