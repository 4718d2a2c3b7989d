"""vSphere machines for Cluster API: clone (or adopt) a VM from a template, read it, delete it.

The steps follow CAPV: clone the template powered off with the VM's instance UUID set to the
InfraMachine's UID, bring it to the spec in one ``ReconfigVM_Task``, power it on.
Why, and the departures from CAPV: docs/decisions/0044-vsphere-machines-follow-capv.md.

Rules:
- Identity: ``FindByUuid(instanceUuid=True)`` with the InfraMachine UID, then the inventory path;
  a VM at that path with another instance UUID is ``AlreadyExists``, never touched nor deleted.
- Every step checks what is there, so a create that stopped half-way is simply called again
  (reconfigure is idempotent: NICs replaced only when they differ, the disk only grown).
- Tasks a crashed call left running on the VM are waited for before the next step; a clone in
  flight (its ``VmBeingClonedEvent``) is waited for, never cloned twice.
- Delete powers off hard and destroys; ``True`` once no VM carries the instance UUID and no clone
  of it is in flight. CSI's first-class disks are not deleted with the VM.
- providerID ``vsphere://<BIOS UUID>``; the Machine's ``id`` is that UUID.
- Errors: a template, folder, pool, datastore or network not found → ``InvalidRequest``;
  insufficient resources or space → ``InsufficientCapacity``; quota → ``QuotaExceeded`` (both
  retried with backoff); vCenter unreachable → ``CloudUnreachable``.
"""

from __future__ import annotations

import datetime
import fnmatch
import functools
import ipaddress
import logging
from dataclasses import dataclass
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.vsphere.base import VsphereBase
from cloudloop.cloud.vsphere.machinespec import (
    GIB,
    Allocation,
    VsphereMachineSpec,
    check_vm_name,
    extra_config,
    parse_machine_spec,
)
from cloudloop.cloud.vsphere.mapping import (
    PROVIDER,
    Entity,
    instance_state,
    is_uuid,
    provider_id,
)
from cloudloop.cloud.vsphere.tagging import ObjectId, TaggingClient
from cloudloop.cloud.vsphere.vmomi import PC, vim, vmodl

log = logging.getLogger(__name__)

#: The VM properties one machine read asks for (leaf paths; vcsim dislikes whole objects).
MACHINE_PATHS = [
    "name",
    "config.uuid",
    "config.instanceUuid",
    "runtime.powerState",
    "guest.ipAddress",
    "guest.net",
]
#: ``TaskInfo.descriptionId`` of a clone: vCenter's, and vcsim's (lower-cased).
_CLONE_TASKS = frozenset({"virtualmachine.clone", "virtualmachine.clonevm"})
_CAPACITY_FAULTS = (
    "InsufficientResourcesFault",
    "NoDiskSpace",
    "InsufficientStorageSpace",
    "OutOfSpace",
    "InsufficientDisks",
)


@dataclass(frozen=True)
class VmState:
    """One VM as a machine read sees it."""

    moref: str
    name: str
    uuid: str
    instance_uuid: str
    power_state: str
    ips: tuple[str, ...] = ()


@dataclass(frozen=True)
class Placement:
    """Where a clone goes, resolved to managed objects."""

    datacenter: Any
    folder: Any
    folder_path: str
    template: Any
    pool: Any
    datastore: Any | None
    networks: tuple[Any, ...]


#: What an inventory lookup of an unknown moref answers.
_NO_ENTITY = Entity(moref="", type="", name="")


def machine_error(operation: str, exc: errors.CloudError) -> errors.CloudError:
    """The machine contract's reading of a translated vSphere fault: capacity and quota faults
    become the retryable ``InsufficientCapacity``/``QuotaExceeded``."""
    fault = exc.__cause__
    if fault is None or not isinstance(fault, vmodl.MethodFault):
        return exc
    names = [cls.__name__.rsplit(".", 1)[-1] for cls in type(fault).__mro__]
    if any("Quota" in name for name in names):
        return errors.QuotaExceeded(PROVIDER, operation, exc.message)
    if any(name in _CAPACITY_FAULTS for name in names):
        return errors.InsufficientCapacity(PROVIDER, operation, exc.message)
    return exc


class VsphereMachines:
    def __init__(self, session: VsphereBase) -> None:
        self.session = session

    def _extra_config(
        self, machine: VsphereMachineSpec, spec: models.MachineSpec, user_data: bytes
    ) -> dict[str, str]:
        """The clone's extraConfig (CAPV's keys; the layout's VMs write Deckhouse's)."""
        return extra_config(machine, spec.name, spec.machine_uid, user_data)

    # -- reads -----------------------------------------------------------------------------
    def _vm_state(self, vm: Any) -> VmState | None:
        """The machine properties of ``vm``; ``None`` when it is gone (or has no config yet)."""

        def read(si: Any) -> dict[str, Any]:
            spec = PC.FilterSpec(
                objectSet=[PC.ObjectSpec(obj=vim.VirtualMachine(vm._moId, si._stub))],
                propSet=[PC.PropertySpec(type=vim.VirtualMachine, pathSet=MACHINE_PATHS)],
            )
            found = si.content.propertyCollector.RetrieveContents([spec])
            return {p.name: p.val for p in found[0].propSet} if found else {}

        try:
            props = self.session.call("GetVm", read)
        except errors.NotFound:
            return None
        uuid = str(props.get("config.uuid") or "").lower()
        if not uuid:
            return None
        ips: list[str] = []
        for nic in props.get("guest.net") or []:
            ips.extend(str(ip) for ip in (nic.ipAddress or []))
        if props.get("guest.ipAddress"):
            ips.append(str(props["guest.ipAddress"]))
        return VmState(
            moref=str(vm._moId),
            name=str(props.get("name", "")),
            uuid=uuid,
            instance_uuid=str(props.get("config.instanceUuid") or "").lower(),
            power_state=str(props.get("runtime.powerState", "")),
            ips=tuple(dict.fromkeys(ips)),
        )

    def _find_by_instance_uuid(self, machine_uid: str) -> Any | None:
        return self.session.call(
            "FindByUuid",
            lambda si: si.content.searchIndex.FindByUuid(
                None, machine_uid, True, instanceUuid=True
            ),
        )

    def _find_by_path(self, path: str) -> Any | None:
        return self.session.call(
            "FindByInventoryPath", lambda si: si.content.searchIndex.FindByInventoryPath(path)
        )

    def find_vm(self, spec: models.MachineSpec, folder_path: str = "") -> VmState | None:
        """The InfraMachine's VM: by instance UUID, else at ``<folder>/<name>`` (which must then
        carry our instance UUID, else ``AlreadyExists``)."""
        found = self._find_by_instance_uuid(spec.machine_uid)
        if found is not None:
            state = self._vm_state(found)
            if state is not None:
                return state
        if not folder_path:
            return None
        at_path = self._find_by_path(f"{folder_path}/{spec.name}")
        if at_path is None or not isinstance(at_path, vim.VirtualMachine):
            return None
        state = self._vm_state(at_path)
        if state is None:
            return None
        if state.instance_uuid != spec.machine_uid.lower():
            raise errors.AlreadyExists(
                PROVIDER,
                "CreateMachine",
                f"VM {folder_path}/{spec.name} exists with instance UUID {state.instance_uuid}, "
                f"not this machine's {spec.machine_uid}; left untouched",
            )
        return state

    def settle(self, vm: VmState) -> bool:
        """Wait for the tasks queued or running on ``vm`` (a crashed call's reconfigure, power
        change or destroy: CAPV waits for its task too); ``True`` if there were any."""

        def in_flight(si: Any) -> list[str]:
            tasks = vim.VirtualMachine(vm.moref, si._stub).recentTask or []
            if not tasks:
                return []
            spec = PC.FilterSpec(
                objectSet=[PC.ObjectSpec(obj=t) for t in tasks],
                propSet=[PC.PropertySpec(type=vim.Task, pathSet=["info.state"])],
            )
            found = si.content.propertyCollector.RetrieveContents([spec])
            return [
                str(o.obj._moId)
                for o in found
                if str(o.propSet[0].val if o.propSet else "") in ("queued", "running")
            ]

        try:
            tasks = self.session.call("ListVmTasks", in_flight)
        except errors.NotFound:
            return False
        for task in tasks:
            log.info("vsphere: waiting for task %s on VM %s", task, vm.name)
            try:
                self.session.wait_task("WaitVmTask", task)
            except errors.CloudError as exc:
                if exc.retryable:
                    raise  # still running: the caller retries
        return bool(tasks)

    # -- placement -------------------------------------------------------------------------
    def _datacenter(self, name: str) -> tuple[Any, str]:
        """The datacenter (name or path; empty: the configured one, else the only one)."""
        wanted = (name or self.session.settings.datacenter).strip("/")
        if wanted:
            found = self._find_by_path(f"/{wanted}")
            if not isinstance(found, vim.Datacenter):
                raise errors.InvalidRequest(PROVIDER, "CreateMachine", f"no datacenter {wanted!r}")
            return found, wanted

        def list_dcs(si: Any) -> list[tuple[Any, str]]:
            view = si.content.viewManager.CreateContainerView(
                si.content.rootFolder, [vim.Datacenter], True
            )
            try:
                return [(dc, str(dc.name)) for dc in view.view]
            finally:
                view.Destroy()

        dcs = self.session.call("ListDatacenters", list_dcs)
        if len(dcs) != 1:
            raise errors.InvalidRequest(
                PROVIDER,
                "CreateMachine",
                f"datacenter: not set and vCenter has {len(dcs)} datacenters; name one",
            )
        return dcs[0]

    def _path(self, dc_name: str, section: str, path: str) -> str:
        """``path`` absolute: as given when it starts with ``/``, else under ``/<dc>/<section>``."""
        if path.startswith("/"):
            return path.rstrip("/")
        base = f"/{dc_name}/{section}"
        return f"{base}/{path.strip('/')}" if path.strip("/") else base

    def _resolve(self, path: str, kinds: tuple[Any, ...], what: str) -> Any:
        """The object at an inventory path (``*`` segments allowed under folders); one match."""
        if "*" not in path:
            found = self._find_by_path(path)
            matches = [found] if found is not None and isinstance(found, kinds) else []
        else:
            matches = [m for m in self._glob(path) if isinstance(m, kinds)]
        if not matches:
            raise errors.InvalidRequest(PROVIDER, "CreateMachine", f"{what} {path!r} not found")
        if len(matches) > 1:
            raise errors.InvalidRequest(
                PROVIDER, "CreateMachine", f"{what} {path!r} matches {len(matches)} objects"
            )
        return matches[0]

    def _glob(self, path: str) -> list[Any]:
        """Expand ``*``/``?`` segments by listing folder children; other segments by lookup."""
        segments = [s for s in path.split("/") if s]
        prefixes = [""]
        for segment in segments:
            following: list[str] = []
            for prefix in prefixes:
                if not any(c in segment for c in "*?["):
                    following.append(f"{prefix}/{segment}")
                    continue
                parent = self._find_by_path(prefix or "/")
                names = self._child_names(parent) if parent is not None else []
                following += [f"{prefix}/{n}" for n in names if fnmatch.fnmatchcase(n, segment)]
            prefixes = following
        found = [self._find_by_path(p) for p in prefixes]
        return [f for f in found if f is not None]

    def _child_names(self, parent: Any) -> list[str]:
        def read(si: Any) -> list[str]:
            obj = type(parent)(parent._moId, si._stub)
            if isinstance(obj, vim.Folder):
                return [str(child.name) for child in obj.childEntity]
            if isinstance(obj, vim.ResourcePool):
                return [str(child.name) for child in obj.resourcePool]
            return []

        return self.session.call("ListChildren", read)

    def _placement(
        self, machine: VsphereMachineSpec, spec: models.MachineSpec, dc: Any, dc_name: str
    ) -> Placement:
        folder_path = self._path(dc_name, "vm", machine.folder)
        folder = self._resolve(folder_path, (vim.Folder,), "folder")
        template = self._template(machine.template, dc_name)
        pool = self._pool(machine, spec, dc_name, template)
        datastore = None
        if machine.datastore:
            datastore = self._resolve(
                self._path(dc_name, "datastore", machine.datastore),
                (vim.Datastore, vim.StoragePod),
                "datastore",
            )
            if isinstance(datastore, vim.StoragePod):
                raise errors.InvalidRequest(
                    PROVIDER,
                    "CreateMachine",
                    f"datastore {machine.datastore!r} is a datastore cluster; name a datastore",
                )
        networks = self._networks(dc, machine.network_names)
        return Placement(dc, folder, folder_path, template, pool, datastore, networks)

    def _template(self, template: str, dc_name: str) -> Any:
        """The template VM: an absolute path, a path under ``/<dc>/vm``, or a unique VM name."""
        path = self._path(dc_name, "vm", template)
        found = self._find_by_path(path)
        if isinstance(found, vim.VirtualMachine):
            return found
        if "/" not in template:
            matches = self.session.call(
                "FindByName",
                lambda si: _vms_named(si, template),
            )
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                raise errors.InvalidRequest(
                    PROVIDER, "CreateMachine", f"template {template!r} names {len(matches)} VMs"
                )
        raise errors.InvalidRequest(PROVIDER, "CreateMachine", f"template {template!r} not found")

    def _pool(
        self, machine: VsphereMachineSpec, spec: models.MachineSpec, dc_name: str, template: Any
    ) -> Any:
        if machine.resource_pool:
            path = machine.resource_pool
            if not path.startswith("/"):
                path = f"/{dc_name}/host/{path.strip('/')}"
            return self._resolve(path, (vim.ResourcePool,), "resource pool")
        cluster = self.session.settings.zone_compute_cluster_paths.get(spec.failure_domain, "")
        if cluster:
            path = self._path(dc_name, "host", cluster)
            return self._resolve(f"{path}/Resources", (vim.ResourcePool,), "resource pool")
        zoned = self._zone_pool(spec.failure_domain, dc_name) if spec.failure_domain else None
        if zoned is not None:
            return zoned
        pool = self.session.call(
            "GetTemplatePool",
            lambda si: vim.VirtualMachine(template._moId, si._stub).resourcePool,
        )
        if pool is None:
            raise errors.InvalidRequest(
                PROVIDER,
                "CreateMachine",
                "resourcePool: not set, and the template has no pool to inherit",
            )
        return pool

    def _zone_pool(self, zone: str, dc_name: str) -> Any | None:
        """The root pool of the one compute cluster of ``dc_name`` that carries ``zone``'s tag
        (CAPV's deployment zones). ``InvalidRequest`` naming the zone when none or several do
        while the datacenter is zoned (some host or cluster carries a zone tag), so a machine is
        never placed outside its failure domain; ``None`` in an unzoned datacenter (the zone is
        a name only: the template's pool serves)."""
        refused = f"failure domain {zone!r}"
        category = self.session.connection().zone_category
        if not category:
            return None
        inventory = self.session.inventory()
        tags = self.session.tags_by_object([category])
        compute = ("ClusterComputeResource", "ComputeResource")
        placeable = ("HostSystem", *compute)
        zoned = any(
            e.type in placeable
            and inventory.datacenter_of(m) == dc_name
            and any(c == category for c, _ in tags.get(m, ()))
            for m, e in inventory.entities.items()
        )
        if not zoned:
            return None

        def in_zone(moref: str) -> bool:
            return (category, zone) in tags.get(moref, ())

        mine = [
            m
            for m, e in inventory.entities.items()
            if e.type in compute and inventory.datacenter_of(m) == dc_name and in_zone(m)
        ]
        if not mine:  # a standalone host's tag places it in its own compute resource
            hosts = [
                m
                for m, e in inventory.entities.items()
                if e.type == "HostSystem" and inventory.datacenter_of(m) == dc_name and in_zone(m)
            ]
            parents = {inventory.entities[h].parent for h in hosts if h in inventory.entities}
            mine = [p for p in parents if inventory.entities.get(p, _NO_ENTITY).type == compute[1]]
            if hosts and not mine:
                raise errors.InvalidRequest(
                    PROVIDER,
                    "CreateMachine",
                    f"{refused}: its tag {category}/{zone} is on hosts inside a cluster, not on a "
                    "compute cluster; tag the cluster or set zoneComputeClusterPaths",
                )
        if len(mine) != 1:
            names = sorted(inventory.entities[m].name for m in mine)
            raise errors.InvalidRequest(
                PROVIDER,
                "CreateMachine",
                f"{refused}: the tag {category}/{zone} is on {len(mine)} compute clusters of "
                f"{dc_name}{': ' + ', '.join(names) if names else ''}; it must be on exactly one "
                "(or set zoneComputeClusterPaths)",
            )
        moref, kind = mine[0], inventory.entities[mine[0]].type
        return self.session.call(
            "GetComputePool",
            lambda si: getattr(vim, kind)(moref, si._stub).resourcePool,
        )

    def _networks(self, dc: Any, names: list[str]) -> tuple[Any, ...]:
        def read(si: Any) -> list[tuple[Any, str]]:
            folder = vim.Datacenter(dc._moId, si._stub).networkFolder
            view = si.content.viewManager.CreateContainerView(folder, [vim.Network], True)
            try:
                return [(n, str(n.name)) for n in view.view]
            finally:
                view.Destroy()

        available = self.session.call("ListNetworks", read)
        resolved: list[Any] = []
        for name in names:
            matches = [n for n, n_name in available if n_name == name.rsplit("/", 1)[-1]]
            if not matches:
                raise errors.InvalidRequest(
                    PROVIDER, "CreateMachine", f"network {name!r} not found"
                )
            if len(matches) > 1:
                raise errors.InvalidRequest(
                    PROVIDER, "CreateMachine", f"network {name!r} names {len(matches)} networks"
                )
            resolved.append(matches[0])
        return tuple(resolved)

    # -- create ----------------------------------------------------------------------------
    def create_machine(self, spec: models.MachineSpec, user_data: bytes) -> models.Machine:
        machine = parse_machine_spec(spec.provider_spec)
        name = check_vm_name(spec.name)
        if not is_uuid(spec.machine_uid):
            raise errors.InvalidRequest(
                PROVIDER, "CreateMachine", f"machine UID {spec.machine_uid!r} is not a UUID"
            )
        self._check_server(machine)
        try:
            return self._create(spec, machine, name, user_data)
        except errors.CloudError as exc:
            raise machine_error(exc.operation, exc) from exc.__cause__

    def _check_server(self, machine: VsphereMachineSpec) -> None:
        if not machine.server:
            return
        conn = self.session.connection()
        accepted = {conn.host, f"{conn.host}:{conn.port}", self.session.settings.server}
        if machine.server.removeprefix("https://").rstrip("/") not in accepted:
            raise errors.InvalidRequest(
                PROVIDER,
                "CreateMachine",
                f"server {machine.server!r} is not the vCenter cloudloop serves ({conn.host})",
            )

    def _create(
        self, spec: models.MachineSpec, machine: VsphereMachineSpec, name: str, user_data: bytes
    ) -> models.Machine:
        dc, dc_name = self._datacenter(machine.datacenter)
        folder_path = self._path(dc_name, "vm", machine.folder)
        vm = self.find_vm(spec, folder_path)
        if vm is not None and vm.power_state != "poweredOn" and self.settle(vm):
            vm = self._vm_state(vim.VirtualMachine(vm.moref))  # a crashed call's task finished
        if vm is not None and vm.power_state == "poweredOn":
            return to_machine(vm)
        place = self._placement(machine, spec, dc, dc_name)
        if vm is None:
            vm = self._await_clone_in_flight(spec, place.folder_path)
        if vm is None:
            vm = self._clone(spec, machine, place, user_data)
        else:
            log.info("vsphere: adopting VM %s (%s), %s", vm.name, vm.uuid, vm.power_state)
        if vm.power_state != "poweredOn":
            self._reconfigure(vm, spec, machine, place, user_data)
            self._attach_tags(vm, machine.tag_ids)
            self._power_on(vm)
        current = self._vm_state(vim.VirtualMachine(vm.moref))
        return to_machine(current or vm)

    def _clone(
        self,
        spec: models.MachineSpec,
        machine: VsphereMachineSpec,
        place: Placement,
        user_data: bytes,
    ) -> VmState:
        relocate = vim.vm.RelocateSpec(pool=place.pool)
        if place.datastore is not None:
            relocate.datastore = place.datastore
        config = vim.vm.ConfigSpec(
            instanceUuid=spec.machine_uid.lower(),
            extraConfig=_options(self._extra_config(machine, spec, user_data)),
        )
        if machine.num_cpus:
            config.numCPUs = machine.num_cpus
        if machine.memory_mib:
            config.memoryMB = machine.memory_mib
        clone_spec = vim.vm.CloneSpec(
            location=relocate, powerOn=False, template=False, config=config
        )
        task = self.session.call(
            "CloneVM",
            lambda si: vim.VirtualMachine(place.template._moId, si._stub).CloneVM_Task(
                folder=vim.Folder(place.folder._moId, si._stub), name=spec.name, spec=clone_spec
            ),
        )
        log.info("vsphere: cloning VM %s from the template (task %s)", spec.name, task._moId)
        try:
            created = self.session.wait_task("CloneVM", task._moId)
        except errors.AlreadyExists:  # DuplicateName: a racing create of this machine won
            log.info("vsphere: VM %s was cloned meanwhile; adopting it", spec.name)
            created = None
        vm = self._vm_state(created) if created is not None else None
        if vm is None:
            vm = self.find_vm(spec, place.folder_path)
        if vm is None:
            raise errors.CloudError(PROVIDER, "CloneVM", f"the clone of {spec.name} is not found")
        return vm

    def _await_clone_in_flight(self, spec: models.MachineSpec, folder_path: str) -> VmState | None:
        """Wait for a clone of this VM still running (a create that crashed mid-clone)."""
        task = self._clone_in_flight(spec.name)
        if task is None:
            return None
        log.info("vsphere: a clone of %s is in flight (task %s); waiting for it", spec.name, task)
        try:
            self.session.wait_task("CloneVM", task)
        except errors.CloudError as exc:
            if not exc.retryable and not isinstance(exc, errors.AlreadyExists):
                log.info("vsphere: the earlier clone of %s failed: %s", spec.name, exc.message)
            elif exc.retryable:
                raise
        return self.find_vm(spec, folder_path)

    def _clone_in_flight(self, name: str) -> str | None:
        """The moref of a queued or running ``CloneVM_Task`` whose ``VmBeingClonedEvent`` names
        ``name`` (recent tasks first: the common case, none running, costs one read)."""

        def running(si: Any) -> dict[str, str]:
            tasks = si.content.taskManager.recentTask or []
            if not tasks:
                return {}
            spec = PC.FilterSpec(
                objectSet=[PC.ObjectSpec(obj=t) for t in tasks],
                propSet=[
                    PC.PropertySpec(
                        type=vim.Task,
                        pathSet=["info.state", "info.descriptionId", "info.entityName"],
                    )
                ],
            )
            out: dict[str, str] = {}
            for obj in si.content.propertyCollector.RetrieveContents([spec]):
                props = {p.name: p.val for p in obj.propSet}
                if (
                    str(props.get("info.state")) in ("queued", "running")
                    and str(props.get("info.descriptionId", "")).lower() in _CLONE_TASKS
                ):
                    out[str(obj.obj._moId)] = str(props.get("info.entityName", ""))
            return out

        clones = self.session.call("ListRecentTasks", running)
        if not clones:
            return None
        begin = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=6)

        def events(si: Any) -> list[Any]:
            spec = vim.event.EventFilterSpec(
                eventTypeId=["VmBeingClonedEvent"],
                time=vim.event.EventFilterSpec.ByTime(beginTime=begin),
            )
            return list(si.content.eventManager.QueryEvents(spec) or [])

        named = [e for e in self.session.call("QueryEvents", events) if str(e.destName) == name]
        if not named:
            return None
        sources = {str(e.vm.vm._moId) for e in named if e.vm is not None and e.vm.vm is not None}
        sources |= {str(e.vm.name) for e in named if e.vm is not None}
        for task, entity in clones.items():
            if entity in sources or not sources:
                return task
        return None

    def _reconfigure(
        self,
        vm: VmState,
        spec: models.MachineSpec,
        machine: VsphereMachineSpec,
        place: Placement,
        user_data: bytes,
    ) -> None:
        """One ``ReconfigVM_Task`` bringing a powered-off clone to the spec (idempotent)."""
        devices = self.session.call(
            "GetDevices",
            lambda si: list(vim.VirtualMachine(vm.moref, si._stub).config.hardware.device),
        )
        config = vim.vm.ConfigSpec(
            extraConfig=_options(self._extra_config(machine, spec, user_data)),
            deviceChange=_disk_change(devices, machine, vm.name)
            + _nic_changes(devices, place.networks),
        )
        if machine.num_cpus:
            config.numCPUs = machine.num_cpus
        if machine.num_cores_per_socket:
            config.numCoresPerSocket = machine.num_cores_per_socket
        if machine.memory_mib:
            config.memoryMB = machine.memory_mib
        cpu, memory = machine.cpu_allocation, machine.memory_allocation
        if cpu != Allocation():
            config.cpuAllocation = _allocation(cpu)
        if memory != Allocation():
            config.memoryAllocation = _allocation(memory)
        if machine.nested_hv is not None:
            config.nestedHVEnabled = machine.nested_hv
        if machine.sync_time_with_host is not None:
            config.tools = vim.vm.ToolsConfigInfo(syncTimeWithHost=machine.sync_time_with_host)
        task = self.session.call(
            "ReconfigVM",
            lambda si: vim.VirtualMachine(vm.moref, si._stub).ReconfigVM_Task(spec=config),
        )
        self.session.wait_task("ReconfigVM", task._moId)

    def _attach_tags(self, vm: VmState, tag_ids: list[str]) -> None:
        obj = ObjectId(id=vm.moref, type="VirtualMachine")
        for tag_id in tag_ids:
            self.session.tag_call("AttachTag", functools.partial(_attach, tag_id, obj))

    def _power_on(self, vm: VmState) -> None:
        try:
            task = self.session.call(
                "PowerOnVM",
                lambda si: vim.VirtualMachine(vm.moref, si._stub).PowerOnVM_Task(),
            )
            self.session.wait_task("PowerOnVM", task._moId)
        except errors.FailedPrecondition:
            current = self._vm_state(vim.VirtualMachine(vm.moref))
            if current is None or current.power_state != "poweredOn":
                raise
        log.info("vsphere: powered on VM %s (%s)", vm.name, vm.uuid)

    # -- read ------------------------------------------------------------------------------
    def get_machine(self, spec: models.MachineSpec) -> models.Machine | None:
        found = self._find_by_instance_uuid(spec.machine_uid)
        vm = self._vm_state(found) if found is not None else None
        return to_machine(vm) if vm is not None else None

    # -- delete ----------------------------------------------------------------------------
    def delete_machine(self, spec: models.MachineSpec) -> bool:
        """Power off and destroy the VM; ``True`` once it is gone and no clone of it runs."""
        found = self._find_by_instance_uuid(spec.machine_uid)
        vm = self._vm_state(found) if found is not None else None
        if vm is None:
            task = self._clone_in_flight(spec.name)
            if task is None:
                return True
            log.info(
                "vsphere: a clone of %s is in flight (task %s); deleting after it", spec.name, task
            )
            try:
                self.session.wait_task("CloneVM", task)
            except errors.CloudError as exc:
                if exc.retryable:
                    raise
            found = self._find_by_instance_uuid(spec.machine_uid)
            vm = self._vm_state(found) if found is not None else None
            if vm is None:
                return True
        if self.settle(vm):  # a crashed delete's power-off or destroy finished
            found = self._find_by_instance_uuid(spec.machine_uid)
            vm = self._vm_state(found) if found is not None else None
            if vm is None:
                return True
        if vm.power_state != "poweredOff":
            self._power_off(vm)
        try:
            task = self.session.call(
                "DestroyVM", lambda si: vim.VirtualMachine(vm.moref, si._stub).Destroy_Task()
            )
            self.session.wait_task("DestroyVM", task._moId)
        except errors.NotFound:
            pass  # gone meanwhile
        log.info("vsphere: destroyed VM %s (%s)", vm.name, vm.uuid)
        return self._find_by_instance_uuid(spec.machine_uid) is None

    def _power_off(self, vm: VmState) -> None:
        try:
            task = self.session.call(
                "PowerOffVM", lambda si: vim.VirtualMachine(vm.moref, si._stub).PowerOffVM_Task()
            )
            self.session.wait_task("PowerOffVM", task._moId)
        except errors.FailedPrecondition:  # InvalidPowerState: off meanwhile
            pass
        except errors.NotFound:
            pass


# -- spec pieces -----------------------------------------------------------------------------
def _vms_named(si: Any, name: str) -> list[Any]:
    view = si.content.viewManager.CreateContainerView(
        si.content.rootFolder, [vim.VirtualMachine], True
    )
    try:
        spec = PC.FilterSpec(
            objectSet=[
                PC.ObjectSpec(
                    obj=view,
                    skip=True,
                    selectSet=[
                        PC.TraversalSpec(path="view", skip=False, type=vim.view.ContainerView)
                    ],
                )
            ],
            propSet=[PC.PropertySpec(type=vim.VirtualMachine, pathSet=["name"])],
        )
        found = si.content.propertyCollector.RetrieveContents([spec])
        return [o.obj for o in found if any(p.val == name for p in o.propSet)]
    finally:
        view.Destroy()


def _attach(tag_id: str, obj: ObjectId, client: TaggingClient) -> None:
    client.attach(tag_id, obj)


def _options(values: dict[str, str]) -> list[Any]:
    return [vim.option.OptionValue(key=k, value=v) for k, v in sorted(values.items())]


def _allocation(wanted: Allocation) -> Any:
    info = vim.ResourceAllocationInfo()
    if wanted.reservation is not None:
        info.reservation = wanted.reservation
    if wanted.limit is not None:
        info.limit = wanted.limit
    if wanted.shares is not None:
        info.shares = vim.SharesInfo(level="custom", shares=wanted.shares)
    return info


def _disk_change(devices: list[Any], machine: VsphereMachineSpec, name: str) -> list[Any]:
    """Grow the first disk to ``diskGiB`` (never shrink); no change when it is big enough."""
    if not machine.disk_gib:
        return []
    disks = [d for d in devices if isinstance(d, vim.vm.device.VirtualDisk)]
    if not disks:
        raise errors.InvalidRequest(
            PROVIDER, "CreateMachine", f"the template of {name} has no disk to grow"
        )
    disk = disks[0]
    wanted_kb = machine.disk_gib * GIB // 1024
    if int(disk.capacityInKB or 0) >= wanted_kb:
        if int(disk.capacityInKB or 0) > wanted_kb:
            log.info("vsphere: the disk of %s is larger than diskGiB; kept", name)
        return []
    disk.capacityInKB = wanted_kb
    disk.capacityInBytes = wanted_kb * 1024
    return [vim.vm.device.VirtualDeviceSpec(operation="edit", device=disk)]


def _nic_network(nic: Any) -> str:
    backing = nic.backing
    if isinstance(backing, vim.vm.device.VirtualEthernetCard.DistributedVirtualPortBackingInfo):
        return str(backing.port.portgroupKey or "")
    network = getattr(backing, "network", None)
    return str(network._moId) if network is not None else str(getattr(backing, "deviceName", ""))


def _nic_changes(devices: list[Any], networks: tuple[Any, ...]) -> list[Any]:
    """Replace the template's NICs with vmxnet3 NICs on ``networks`` (in order), unless the VM
    already has exactly those."""
    nics = [d for d in devices if isinstance(d, vim.vm.device.VirtualEthernetCard)]
    wanted = [str(n._moId) for n in networks]
    if [_nic_network(n) for n in nics] == wanted and all(
        isinstance(n, vim.vm.device.VirtualVmxnet3) for n in nics
    ):
        return []
    changes = [vim.vm.device.VirtualDeviceSpec(operation="remove", device=n) for n in nics]
    for index, network in enumerate(networks):
        nic = vim.vm.device.VirtualVmxnet3(key=-100 - index, addressType="generated")
        if isinstance(network, vim.dvs.DistributedVirtualPortgroup):
            nic.backing = vim.vm.device.VirtualEthernetCard.DistributedVirtualPortBackingInfo(
                port=vim.dvs.PortConnection(
                    portgroupKey=network.key,
                    switchUuid=network.config.distributedVirtualSwitch.uuid,
                )
            )
        else:
            nic.backing = vim.vm.device.VirtualEthernetCard.NetworkBackingInfo(
                network=network, deviceName=network.name
            )
        nic.connectable = vim.vm.device.VirtualDevice.ConnectInfo(
            startConnected=True, allowGuestControl=True, connected=False
        )
        changes.append(vim.vm.device.VirtualDeviceSpec(operation="add", device=nic))
    return changes


def _addresses(vm: VmState) -> list[models.NodeAddress]:
    out: list[models.NodeAddress] = []
    for ip in vm.ips:
        try:
            parsed = ipaddress.ip_address(ip)
        except ValueError:
            continue
        if parsed.is_link_local or parsed.is_loopback or parsed.is_unspecified:
            continue
        out.append(models.NodeAddress(type="InternalIP", address=str(parsed)))
    return out


def to_machine(vm: VmState) -> models.Machine:
    running = vm.power_state == "poweredOn"
    return models.Machine(
        id=vm.uuid,
        provider_id=provider_id(vm.uuid),
        state=instance_state(vm.power_state),
        phase=vm.power_state,
        addresses=_addresses(vm) if running else [],
        message="" if running else f"the VM is {vm.power_state or 'not reported yet'}",
    )
