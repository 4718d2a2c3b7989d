"""zVirt layout resources through ``ovirtsdk4``: find by name, create, repair drift, delete.

One handler per kind of :mod:`cloudloop.cloud.zvirt.layout`, a
:class:`~cloudloop.cloud.zvirt.machines.ZvirtMachines` on its own session signed with the
``ZvirtClusterConfiguration``'s engine, credentials and cluster; the worker's zVirt settings give
the timeouts and waits. Why: docs/decisions/0054-zvirt-layout-standard.md.

Rules:
- A VM is found by its exact name, a data disk by its alias, a NIC by its name on the VM, an
  attachment by its disk, a start by the VM's status. A VM or disk not marked as this cluster's,
  or two disks with one alias, is ``AlreadyExists``, never adopted. The VM is created with its
  name and description in one call, so a retry finds it.
- Drift repaired in place: disks grown, a NIC or attachment made again, a stopped VM started.
  CPU, memory, template, storage domain and vNIC profile differences are only reported.
- Bootstrap data goes in the first start only; a VM started before keeps its first data.
- A second ensure of an unchanged resource makes only GET requests.
- Cloud errors end the step with the engine's message (``InvalidRequest``, not retried).
- ``adopt`` gives what a Terraform state names by ID the layout's name and marker in one update;
  another cluster's, another oVirt cluster's, or a clash under the layout's name is refused.
- ``delete`` is idempotent and waits for what it removed; the data disk is detached first.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cloudloop.cloud import errors
from cloudloop.cloud.layouts import Drift, Ensured, Found
from cloudloop.cloud.zvirt import layout as defs
from cloudloop.cloud.zvirt.base import (
    ZvirtBase,
    attachment_view,
    disk_view,
    is_conflict,
    nic_view,
    types,
    vm_view,
)
from cloudloop.cloud.zvirt.layout_state import STATE_TYPES
from cloudloop.cloud.zvirt.machines import MACHINE_FOLLOW, ZvirtMachines, _detach
from cloudloop.cloud.zvirt.mapping import (
    GIB,
    NAME,
    ZONE,
    DiskView,
    NicView,
    VmView,
    ZvirtMachineSpec,
    node_addresses,
    searchable_name,
)
from cloudloop.cloud.zvirt.settings import ZvirtSettings
from cloudloop.layouts import bootstrap
from cloudloop.layouts.config import ZvirtClusterConfiguration
from cloudloop.layouts.model import LayoutDef, ResourceDef
from cloudloop.layouts.tfstate import StateMapping
from cloudloop.tls import ca_file

Props = dict[str, Any]
Raw = dict[str, Any]
#: VM statuses in which a start is done (or under way).
_STARTED = frozenset(
    {"up", "powering_up", "wait_for_launch", "reboot_in_progress", "migrating", "restoring_state"}
)


def _machine(props: Props) -> ZvirtMachineSpec:
    """The VM's properties as the machines capability's spec (1 socket x cores x 1 thread)."""
    return ZvirtMachineSpec.model_validate(
        {
            "template": props["template"],
            "vnicProfileID": props["vnic_profile_id"],
            "cpu": {"sockets": 1, "cores": int(props["cores"]), "threads": 1},
            "memory": int(props["memory_mib"]),
            "rootDiskSizeGb": int(props["root_disk_gb"]),
            "nicName": defs.NIC_NAME,
        }
    )


def first_ipv4(vm: VmView) -> str | None:
    """The first IPv4 of the VM's first NIC (upstream ``ovirt_wait_for_ip``)."""
    for address in node_addresses(vm, hostname=False):
        if ipaddress.ip_address(address.address).version == 4:
            return address.address
    return None


class ZvirtLayoutResources(ZvirtMachines):
    """The zVirt :class:`~cloudloop.cloud.layouts.LayoutResources`."""

    def _handlers(self, resource: ResourceDef) -> tuple[Callable[..., Any], ...]:
        """(find, create, drift, fix, delete, outputs) of the resource's kind."""
        suffix = {
            defs.VM: "vm",
            defs.NIC: "nic",
            defs.DISK: "disk",
            defs.ATTACHMENT: "attachment",
            defs.START: "start",
        }.get(resource.kind)
        if suffix is None:
            raise errors.NotSupported(NAME, f"layout resource {resource.kind}")
        return tuple(
            getattr(self, f"_{verb}_{suffix}")
            for verb in ("find", "create", "drift", "fix", "delete", "outputs")
        )

    # -- the contract ----------------------------------------------------------------------
    def layout_zones(self) -> list[str]:
        return [ZONE]

    def inspect(self, resource: ResourceDef, properties: Props) -> Found | None:
        find, _, drift, _, _, outputs = self._handlers(resource)
        raw = find(resource, properties)
        if raw is None:
            return None
        return Found(outputs=outputs(resource, raw), drift=drift(resource, properties, raw))

    def ensure(self, resource: ResourceDef, properties: Props) -> Ensured:
        find, create, drift, fix, _, outputs = self._handlers(resource)
        raw = find(resource, properties)
        if raw is None:
            raw = create(resource, properties)
            return Ensured("created", outputs(resource, raw))
        changed = drift(resource, properties, raw)
        repairable = [d for d in changed if not d.immutable]
        if not repairable:
            return Ensured("unchanged", outputs(resource, self._settled(resource, raw)), changed)
        fix(resource, properties, raw, repairable)
        raw = find(resource, properties) or raw
        return Ensured("updated", outputs(resource, raw), changed)

    def refusals(self, resource: ResourceDef, properties: Props) -> list[str]:
        """What the create of a VM or a data disk would not find: the template, the vNIC
        profile, the storage domain."""
        checks: list[Callable[[], Any]] = []
        if resource.kind == defs.VM:
            checks.append(lambda: self._template_id(str(properties["template"])))
            checks.append(lambda: self._check_vnic_profile(str(properties["vnic_profile_id"])))
        elif resource.kind == defs.DISK:
            checks.append(lambda: self._check_storage_domain(str(properties["storage_domain_id"])))
        refusals: list[str] = []
        for check in checks:
            try:
                check()
            except errors.InvalidRequest as exc:  # "not found", named
                refusals.append(f"{resource.key}: {exc.message}")
        return refusals

    def _check_storage_domain(self, domain_id: str) -> None:
        try:
            self.session.call(
                "GetStorageDomain",
                lambda api: api.storage_domains_service().storage_domain_service(domain_id).get(),
            )
        except errors.NotFound:
            raise errors.InvalidRequest(NAME, "AddDisk", f"no storage domain {domain_id}") from None

    def adopt(self, resource: ResourceDef, properties: Props, cloud_id: str) -> Found | None:
        """The resource a Terraform state names, made findable, then ``inspect``'s answer;
        ``None`` when the engine has no such resource.

        A VM (``ovirt_vm``, by ID) in the layout's cluster is given the layout's name and
        description marker; a data disk (``ovirt_disk``) the layout's alias and marker. One
        already marked for another cluster, a VM in another oVirt cluster, or another VM/disk
        already under the layout's name is refused. A NIC's name is its identity (upstream's
        is ``nic1`` too): a differently named one is refused. An attachment's ID is its disk's,
        a start's its VM's: a state naming others than the layout's is refused."""
        if resource.kind == defs.VM:
            if not self._adopt_vm(resource, properties, cloud_id):
                return None
        elif resource.kind == defs.DISK:
            if not self._adopt_disk(resource, properties, cloud_id):
                return None
        elif resource.kind == defs.NIC:
            nic = next((n for n in self._nics(str(properties["vm_id"])) if n.id == cloud_id), None)
            if nic is None:
                return None
            if nic.name != properties["name"]:
                raise errors.InvalidRequest(
                    NAME,
                    "adopt",
                    f"{resource.key}: the state's NIC {cloud_id} is named {nic.name!r}, "
                    f"not {properties['name']!r} (the name is its identity)",
                )
        else:
            want = {defs.ATTACHMENT: "disk_id", defs.START: "vm_id"}[resource.kind]
            if cloud_id != str(properties[want]):
                raise errors.InvalidRequest(
                    NAME,
                    "adopt",
                    f"{resource.key}: the state's is {cloud_id}, the layout's "
                    f"{want} {properties[want]}",
                )
        found = self.inspect(resource, properties)
        if found is not None and found.outputs.get("id") != cloud_id:
            raise errors.AlreadyExists(
                NAME, "adopt", f"{resource.key} is {found.outputs.get('id')}, not {cloud_id}"
            )
        return found

    def _adopt_vm(self, resource: ResourceDef, props: Props, vm_id: str) -> bool:
        def get(api: Any) -> tuple[str, str, str]:
            vm = api.vms_service().vm_service(vm_id).get()
            cluster = str(vm.cluster.id) if vm.cluster is not None else ""
            return str(vm.name or ""), str(vm.description or ""), cluster

        try:
            name, description, cluster = self.session.call("GetVm", get)
        except errors.NotFound:
            return False
        if cluster != str(props["cluster_id"]):
            raise errors.InvalidRequest(
                NAME,
                "adopt",
                f"{resource.key}: VM {name} ({vm_id}) is in cluster {cluster}, "
                f"the layout's is {props['cluster_id']} (moved, never)",
            )
        self._refuse_foreign(resource, description, props, f"VM {name} ({vm_id})")
        if name == resource.name and description == props["description"]:
            return True
        other = self.find_vm(resource.name)
        if other is not None and other.id != vm_id:
            raise errors.AlreadyExists(
                NAME, "adopt", f"{resource.key}: VM {resource.name} ({other.id}) exists already"
            )
        update = types.Vm(name=resource.name, description=str(props["description"]))
        self.session.call(
            "UpdateVm", lambda api: api.vms_service().vm_service(vm_id).update(update)
        )
        return True

    def _adopt_disk(self, resource: ResourceDef, props: Props, disk_id: str) -> bool:
        raw = self._disk_raw(disk_id)
        if raw is None:
            return False
        self._refuse_foreign(resource, raw["description"], props, f"disk {raw['name']} ({disk_id})")
        if raw["name"] == resource.name and raw["description"] == props["description"]:
            return True
        quoted = '"' + resource.name.replace('"', "") + '"'
        others = self.session.call(
            "ListDisks",
            lambda api: [_disk_raw(d) for d in api.disks_service().list(search=f"alias={quoted}")],
        )
        if any(d["name"] == resource.name and d["id"] != disk_id for d in others):
            raise errors.AlreadyExists(
                NAME, "adopt", f"{resource.key}: a disk {resource.name} exists already"
            )
        self._wait_disk_ok(disk_id, self.session.deadline())
        update = types.Disk(alias=resource.name, description=str(props["description"]))
        self.session.call(
            "UpdateDisk", lambda api: api.disks_service().disk_service(disk_id).update(update)
        )
        return True

    @staticmethod
    def _refuse_foreign(resource: ResourceDef, description: str, props: Props, what: str) -> None:
        """A VM or disk marked for another cluster (its marker, another UUID) is not adopted."""
        if description.startswith(defs.MARKER) and description != props["description"]:
            raise errors.AlreadyExists(
                NAME,
                "adopt",
                f"{resource.key}: {what} belongs to another cluster ({description!r})",
            )

    def _settled(self, resource: ResourceDef, raw: Raw) -> Raw:
        """A found resource once it is usable (a started VM has its address)."""
        if resource.kind == defs.START and raw.get("ip") is None:
            return self._wait_for_ip(str(raw["id"]))
        return raw

    def delete(self, resource: ResourceDef, properties: Props) -> bool:
        find, _, _, _, delete, _ = self._handlers(resource)
        raw = find(resource, properties)
        if raw is None:
            return False
        delete(resource, properties, raw)
        return True

    def blockers(self, layout: LayoutDef, found: dict[str, dict[str, Any]]) -> list[str]:
        """VMs named ``<prefix>-…`` the layout did not make (ephemeral nodes), and disks on the
        layout's VMs that are neither their boot disk nor their data disk (CSI volumes)."""
        ours = {r.name for m in layout.modules for r in m.resources if r.kind == defs.VM}
        data = {r.name for m in layout.modules for r in m.resources if r.kind == defs.DISK}
        query = f"name={layout.prefix}-*"

        def search(api: Any) -> list[VmView]:
            return [vm_view(vm) for vm in api.vms_service().list(search=query)]

        blockers: list[str] = []
        for vm in self.session.call("ListVms", search):
            if not vm.name.startswith(f"{layout.prefix}-"):
                continue
            if vm.name not in ours:
                blockers.append(f"VM {vm.name}")
                continue
            for attachment in self._attachments(vm.id):
                if attachment.bootable:
                    continue
                disk = self._disk_raw(attachment.disk_id)
                if disk is not None and disk["name"] not in data:
                    blockers.append(f"disk {disk['name']} on VM {vm.name}")
        return sorted(set(blockers))

    # -- VM --------------------------------------------------------------------------------
    def _owned_vm(self, name: str, props: Props) -> VmView | None:
        vm = self.find_vm(name)
        if vm is not None and vm.description != props["description"]:
            raise errors.AlreadyExists(
                NAME,
                "FindVm",
                f"VM {name} ({vm.id}) exists but is not this cluster's "
                f"(description {vm.description!r})",
            )
        return vm

    def _find_vm(self, resource: ResourceDef, props: Props) -> Raw | None:
        vm = self._owned_vm(resource.name, props)
        if vm is None:
            return None
        boot = self._boot_disk(vm.id) if vm.status != "image_locked" else None
        return {"vm": vm, "id": vm.id, "boot": boot}

    def _boot_disk(self, vm_id: str) -> DiskView | None:
        boot = next((a for a in self._attachments(vm_id) if a.bootable and a.active), None)
        return self._disk(boot.disk_id) if boot is not None else None

    def _create_vm(self, resource: ResourceDef, props: Props) -> Raw:
        machine = _machine(props)
        vm = self.clone_vm(
            resource.name,
            str(props["description"]),
            machine,
            str(props["cluster_id"]),
            owned=lambda found: found.description == props["description"],
        )
        self._prepare(vm.id, machine)
        return self._find_vm(resource, props) or {"vm": vm, "id": vm.id, "boot": None}

    def _prepare(self, vm_id: str, machine: ZvirtMachineSpec) -> None:
        """Wait for the clone (``image_locked`` → ``down``), then grow the boot disk."""
        deadline = self.session.deadline()
        vm = self.session.wait_until(
            "WaitForVmDown",
            lambda: self.get_vm(vm_id),
            lambda current: current.status != "image_locked",
            deadline=deadline,
        )
        if vm.status != "image_locked":
            self._prepare_boot_disk(vm_id, machine, deadline)

    def _drift_vm(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        vm: VmView = raw["vm"]
        drift: list[Drift] = []
        if vm.status == "image_locked":  # a clone under way: ensure waits for it
            return [Drift("status", vm.status, "down")]
        if vm.cpus and vm.cpus != int(props["cores"]):
            drift.append(Drift("cores", vm.cpus, props["cores"], immutable=True))
        want_memory = int(props["memory_mib"]) * 2**20
        if vm.memory_bytes and vm.memory_bytes != want_memory:
            drift.append(
                Drift("memory_mib", vm.memory_bytes // 2**20, props["memory_mib"], immutable=True)
            )
        boot: DiskView | None = raw["boot"]
        want_root = int(props["root_disk_gb"])
        if boot is not None and boot.provisioned_size < want_root * GIB:
            drift.append(Drift("root_disk_gb", boot.provisioned_size // GIB, want_root))
        return drift

    def _fix_vm(self, resource: ResourceDef, props: Props, raw: Raw, drift: list[Drift]) -> None:
        self._prepare(str(raw["id"]), _machine(props))

    def _delete_vm(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        gone = self.remove_vm(
            resource.name, owned=lambda vm: vm.description == props["description"]
        )
        if not gone:
            raise errors.CloudError(NAME, "RemoveVm", "still waiting; the next call resumes")

    def _outputs_vm(self, resource: ResourceDef, raw: Raw) -> dict[str, Any]:
        return {"id": raw["id"], "name": resource.name}

    # -- NIC -------------------------------------------------------------------------------
    def _nics(self, vm_id: str) -> list[NicView]:
        return self.session.call(
            "ListNics",
            lambda api: [
                nic_view(n) for n in api.vms_service().vm_service(vm_id).nics_service().list()
            ],
        )

    def _find_nic(self, resource: ResourceDef, props: Props) -> Raw | None:
        nic = next((n for n in self._nics(props["vm_id"]) if n.name == props["name"]), None)
        return None if nic is None else {"id": nic.id, "nic": nic}

    def _create_nic(self, resource: ResourceDef, props: Props) -> Raw:
        self._check_vnic_profile(str(props["vnic_profile_id"]))
        nic = types.Nic(
            name=props["name"],
            vnic_profile=types.VnicProfile(id=props["vnic_profile_id"]),
            interface=types.NicInterface.VIRTIO,
        )
        vm_id = str(props["vm_id"])
        created = self.session.call(
            "AddNic",
            lambda api: nic_view(api.vms_service().vm_service(vm_id).nics_service().add(nic)),
        )
        return {"id": created.id, "nic": created}

    def _drift_nic(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        nic: NicView = raw["nic"]
        if nic.vnic_profile_id != props["vnic_profile_id"]:
            return [Drift("vnic_profile_id", nic.vnic_profile_id, props["vnic_profile_id"], True)]
        return []

    def _fix_nic(self, *_: Any) -> None:
        return None

    def _delete_nic(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        vm_id, nic_id = str(props["vm_id"]), str(raw["id"])
        self._vm_request(
            vm_id, "RemoveNic", lambda s: s.nics_service().nic_service(nic_id).remove()
        )

    def _outputs_nic(self, resource: ResourceDef, raw: Raw) -> dict[str, Any]:
        return {"id": raw["id"]}

    # -- data disk -------------------------------------------------------------------------
    def _disk_raw(self, disk_id: str) -> Raw | None:
        def get(api: Any) -> Raw:
            return _disk_raw(api.disks_service().disk_service(disk_id).get())

        try:
            return self.session.call("GetDisk", get)
        except errors.NotFound:
            return None

    def _find_disk(self, resource: ResourceDef, props: Props) -> Raw | None:
        name = resource.name
        quoted = name if searchable_name(name) else '"' + name.replace('"', "") + '"'

        def search(api: Any) -> list[Raw]:
            found = api.disks_service().list(search=f"alias={quoted}")
            return [_disk_raw(d) for d in found]

        found = [d for d in self.session.call("ListDisks", search) if d["name"] == name]
        if len(found) > 1:
            raise errors.AlreadyExists(NAME, "ListDisks", f"{len(found)} disks named {name!r}")
        if found and found[0]["description"] != props["description"]:
            raise errors.AlreadyExists(
                NAME, "ListDisks", f"disk {name} ({found[0]['id']}) is not this cluster's"
            )
        return found[0] if found else None

    def _create_disk(self, resource: ResourceDef, props: Props) -> Raw:
        disk = types.Disk(
            name=resource.name,
            alias=resource.name,
            description=props["description"],
            provisioned_size=int(props["size_gb"]) * GIB,
            format=types.DiskFormat.RAW if props["format"] == "raw" else types.DiskFormat.COW,
            sparse=bool(props["sparse"]),
            storage_domains=[types.StorageDomain(id=props["storage_domain_id"])],
        )
        try:
            created = self.session.call(
                "AddDisk", lambda api: _disk_raw(api.disks_service().add(disk))
            )
        except errors.NotFound as exc:  # the storage domain named in the request
            raise errors.InvalidRequest(NAME, "AddDisk", exc.message) from exc
        self._wait_disk_ok(str(created["id"]), self.session.deadline())
        return created

    def _drift_disk(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        drift: list[Drift] = []
        if raw["storage_domain_id"] != props["storage_domain_id"]:
            drift.append(
                Drift(
                    "storage_domain_id", raw["storage_domain_id"], props["storage_domain_id"], True
                )
            )
        want = int(props["size_gb"])
        if raw["provisioned_size"] < want * GIB:
            drift.append(Drift("size_gb", raw["provisioned_size"] // GIB, want))
        return drift

    def _fix_disk(self, resource: ResourceDef, props: Props, raw: Raw, drift: list[Drift]) -> None:
        disk_id, size = str(raw["id"]), int(props["size_gb"]) * GIB
        deadline = self.session.deadline()
        self._wait_disk_ok(disk_id, deadline)
        self.session.call(
            "UpdateDisk",
            lambda api: (
                api.disks_service().disk_service(disk_id).update(types.Disk(provisioned_size=size))
            ),
        )
        self._wait_disk_ok(disk_id, deadline)

    def _delete_disk(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        disk_id = str(raw["id"])
        with contextlib.suppress(errors.NotFound):  # gone meanwhile
            self.session.call(
                "RemoveDisk", lambda api: api.disks_service().disk_service(disk_id).remove()
            )

    def _outputs_disk(self, resource: ResourceDef, raw: Raw) -> dict[str, Any]:
        return {"id": raw["id"]}

    # -- attachment ------------------------------------------------------------------------
    def _find_attachment(self, resource: ResourceDef, props: Props) -> Raw | None:
        found = next(
            (a for a in self._attachments(props["vm_id"]) if a.disk_id == props["disk_id"]), None
        )
        return None if found is None else {"id": found.disk_id, "active": found.active}

    def _create_attachment(self, resource: ResourceDef, props: Props) -> Raw:
        vm_id = str(props["vm_id"])
        attachment = types.DiskAttachment(
            disk=types.Disk(id=props["disk_id"]),
            interface=types.DiskInterface(props["interface"]),
            bootable=False,
            active=bool(props["active"]),
        )
        created = self.session.call(
            "AddDiskAttachment",
            lambda api: attachment_view(
                api.vms_service().vm_service(vm_id).disk_attachments_service().add(attachment)
            ),
        )
        return {"id": created.disk_id, "active": created.active}

    def _drift_attachment(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        if bool(raw["active"]) != bool(props["active"]):
            return [Drift("active", raw["active"], props["active"], immutable=True)]
        return []

    def _fix_attachment(self, *_: Any) -> None:
        return None

    def _delete_attachment(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        self._vm_request(str(props["vm_id"]), "DetachDisk", _detach(str(raw["id"])))

    def _outputs_attachment(self, resource: ResourceDef, raw: Raw) -> dict[str, Any]:
        return {"id": raw["id"]}

    # -- start -----------------------------------------------------------------------------
    def _find_start(self, resource: ResourceDef, props: Props) -> Raw | None:
        try:
            vm = self.get_vm(str(props["vm_id"]), follow=MACHINE_FOLLOW)
        except errors.NotFound:
            return None
        if vm.status not in _STARTED:
            return None
        return {"id": vm.id, "ip": first_ipv4(vm) if vm.status == "up" else None}

    def _create_start(self, resource: ResourceDef, props: Props) -> Raw:
        vm_id = str(props["vm_id"])
        deadline = self.session.deadline()
        vm = self.session.wait_until(
            "WaitForVmDown",
            lambda: self.get_vm(vm_id),
            lambda vm: vm.status not in ("image_locked", "powering_down", "saving_state"),
            deadline=deadline,
        )
        if vm.started_once:  # it booted before (stopped out of band): its first data stays
            self._start_again(vm_id)
            return self._wait_for_ip(vm_id)
        script = bootstrap.merged(
            str(props["custom_script"]), bootstrap.data_of(props.get("user_data"))
        )
        self._start(vm_id, str(props["host_name"]), script, _nic(props))
        return self._wait_for_ip(vm_id)

    def _start_again(self, vm_id: str) -> None:
        """A plain start, no cloud-init run-once: the VM keeps the data it first booted with."""
        try:
            self._vm_request(vm_id, "StartVm", lambda service: service.start())
        except errors.CloudError as exc:
            if is_conflict(exc) and self.get_vm(vm_id).status in _STARTED:
                return  # started meanwhile
            raise

    def _wait_for_ip(self, vm_id: str) -> Raw:
        vm = self.session.wait_until(
            "WaitForIp",
            lambda: self.get_vm(vm_id, follow=MACHINE_FOLLOW),
            lambda vm: vm.status == "up" and first_ipv4(vm) is not None,
            deadline=self.session.deadline(),
        )
        return {"id": vm.id, "ip": first_ipv4(vm)}

    def _drift_start(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        return []  # the cloud-init data of a started VM is not read back (upstream ignores it)

    def _fix_start(self, *_: Any) -> None:
        return None

    def _delete_start(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        """Power off (upstream ``force_stop``) and wait for ``down``."""
        vm_id = str(raw["id"])
        self._vm_request(vm_id, "StopVm", lambda service: service.stop(force=True))
        self.session.wait_until(
            "WaitForVmDown",
            lambda: self.get_vm(vm_id),
            lambda vm: vm.status == "down",
            deadline=self.session.deadline(),
        )

    def _outputs_start(self, resource: ResourceDef, raw: Raw) -> dict[str, Any]:
        return {"id": raw["id"], "ip": raw.get("ip")}


def _disk_raw(disk: Any) -> Raw:
    domains = list(disk.storage_domains or [])
    view = disk_view(disk)
    return {
        "id": view.id,
        "name": str(disk.alias or disk.name or ""),
        "description": str(disk.description or ""),
        "provisioned_size": view.provisioned_size,
        "status": view.status,
        "storage_domain_id": str(domains[0].id) if domains else None,
    }


def _nic(props: Props) -> Any | None:
    """``nic_configuration`` as the SDK's static IPv4 boot protocol (upstream
    ``initialization_nic``)."""
    network = props.get("nic_configuration")
    if not network:
        return None
    return types.NicConfiguration(
        name=network["name"],
        boot_protocol=types.BootProtocol.STATIC,
        on_boot=True,
        ip=types.Ip(
            address=network["address"],
            netmask=network["netmask"],
            gateway=network.get("gateway"),
            version=types.IpVersion.V4,
        ),
    )


class ZvirtLayouts:
    """The zVirt :class:`~cloudloop.cloud.layouts.LayoutPart` (and ``AdoptingPart``)."""

    layouts: tuple[str, ...] = defs.LAYOUTS
    state_types: Mapping[str, StateMapping] = STATE_TYPES
    #: Bootstrap data goes into the VM's cloud-init document (a cloud-config mapping).
    merges_user_data = True

    def define(self, config: Any, cluster: Any, zones: list[str]) -> LayoutDef:
        return defs.define(config, cluster, zones)

    def connect(self, config: Any, section: Any) -> ZvirtLayoutResources:
        """A session on the document's engine with its credentials and cluster; the worker's
        zVirt section gives the timeouts and waits (and a CA file when ``caBundle`` is empty)."""
        assert isinstance(config, ZvirtClusterConfiguration)
        base = section if isinstance(section, ZvirtSettings) else ZvirtSettings()
        provider = config.provider
        ca_bundle = base.ca_bundle
        if provider.caBundle.strip():
            ca_bundle = Path(ca_file(provider.caBundle))
        settings = base.model_copy(
            update={
                "api_url": provider.server,
                "username": provider.username,
                "password": provider.password,
                "password_file": None,
                "insecure": provider.insecure,
                "ca_bundle": ca_bundle,
                "cluster_id": config.clusterID,
                "ssh_public_key": config.sshPublicKey,
            }
        )
        return ZvirtLayoutResources(ZvirtBase(settings))
