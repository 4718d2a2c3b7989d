"""zVirt machines for Cluster API: create (or adopt) a VM from a template, read it, delete it.

The steps follow capz (Deckhouse's zVirt CAPI provider): clone the template with the CPU topology
and memory, wait for ``down``, grow the boot disk, add the NIC on the vNIC profile, start with
cloud-init. Every step checks what is already there, so a call that stopped half-way (crash,
timeout, engine hiccup) is simply called again and resumes; the VM description carries the
InfraMachine's UID, which is how a retried create adopts its VM and never touches another's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.zvirt.base import (
    ZvirtBase,
    attachment_view,
    disk_view,
    is_conflict,
    nic_view,
    types,
    vm_view,
)
from cloudloop.cloud.zvirt.mapping import (
    NAME,
    AttachmentView,
    DiskView,
    VmView,
    ZvirtMachineSpec,
    check_vm_name,
    cloud_init_script,
    nic_name_of,
    owner_description,
    owner_uid,
    parse_machine_spec,
    searchable_name,
    to_machine,
)

log = logging.getLogger(__name__)

#: Linked collections a machine read inlines (``follow``), so one request reads the whole VM.
MACHINE_FOLLOW = "nics,reported_devices"
#: Statuses in which the VM runs (or is about to): a start would be refused.
_RUNNING = frozenset(
    {"up", "powering_up", "wait_for_launch", "reboot_in_progress", "migrating", "restoring_state"}
)


class ZvirtMachines:
    def __init__(self, session: ZvirtBase) -> None:
        self.session = session

    # -- reads -----------------------------------------------------------------------------
    def find_vm(self, name: str, *, follow: str = "") -> VmView | None:
        """The VM named exactly ``name`` (one search request), or ``None``."""
        query = f"name={check_vm_name(name)}"

        def search(api: Any) -> list[VmView]:
            found = api.vms_service().list(search=query, case_sensitive=True, follow=follow or None)
            return [vm_view(vm) for vm in found]

        return next((vm for vm in self.session.call("ListVms", search) if vm.name == name), None)

    def get_vm(self, vm_id: str, *, follow: str = "") -> VmView:
        return self.session.call(
            "GetVm",
            lambda api: vm_view(api.vms_service().vm_service(vm_id).get(follow=follow or None)),
        )

    def _attachments(self, vm_id: str) -> list[AttachmentView]:
        return self.session.call(
            "ListDiskAttachments",
            lambda api: [
                attachment_view(a)
                for a in api.vms_service().vm_service(vm_id).disk_attachments_service().list()
            ],
        )

    def _disk(self, disk_id: str) -> DiskView:
        return self.session.call(
            "GetDisk", lambda api: disk_view(api.disks_service().disk_service(disk_id).get())
        )

    # -- create ----------------------------------------------------------------------------
    def create_machine(self, spec: models.MachineSpec, user_data: bytes) -> models.Machine:
        machine = parse_machine_spec(spec.provider_spec)
        name = check_vm_name(spec.name)
        script = cloud_init_script(user_data)
        deadline = self.session.deadline()

        vm = self.find_vm(name)
        if vm is not None and owner_uid(vm.description) != spec.machine_uid:
            raise errors.AlreadyExists(
                NAME,
                "CreateMachine",
                f"VM {name} ({vm.id}) exists but belongs to "
                f"{owner_uid(vm.description) or 'something cloudloop did not create'}",
            )
        if vm is None:
            vm = self._add_vm(spec, machine)
        else:
            log.info("zvirt: adopting VM %s (%s), status %s", name, vm.id, vm.status)
        vm_id = vm.id
        if vm.status == "image_locked":
            vm = self.session.wait_until(
                "WaitForVmDown",
                lambda: self.get_vm(vm_id),
                lambda current: current.status != "image_locked",
                deadline=deadline,
            )
        if vm.status == "down":
            self._prepare_boot_disk(vm_id, machine, deadline)
            self._ensure_nic(vm_id, machine)
            self._start(vm_id, name, script)
        return to_machine(self.get_vm(vm_id, follow=MACHINE_FOLLOW), machine.nic_name)

    def _add_vm(self, spec: models.MachineSpec, machine: ZvirtMachineSpec) -> VmView:
        return self.clone_vm(
            spec.name,
            owner_description(spec),
            machine,
            self.session.settings.cluster_id,
            owned=lambda vm: owner_uid(vm.description) == spec.machine_uid,
        )

    def clone_vm(
        self,
        name: str,
        description: str,
        machine: ZvirtMachineSpec,
        cluster_id: str,
        *,
        owned: Callable[[VmView], bool],
    ) -> VmView:
        """``POST /vms?clone=true`` from the template's latest version; a 409 because a
        concurrent create of the same VM (``owned``) won returns that VM."""
        if not cluster_id:
            raise errors.InvalidRequest(NAME, "CreateMachine", "zvirt.cluster_id is not set")
        template_id = self._template_id(machine.template)
        self._check_vnic_profile(machine.vnic_profile_id)
        memory = machine.memory_bytes
        definition = types.Vm(
            name=name,
            description=description,
            cluster=types.Cluster(id=cluster_id),
            template=types.Template(id=template_id),
            cpu=types.Cpu(
                topology=types.CpuTopology(
                    sockets=machine.cpu.sockets,
                    cores=machine.cpu.cores,
                    threads=machine.cpu.threads,
                )
            ),
            memory=memory,
            memory_policy=types.MemoryPolicy(guaranteed=memory, max=memory, ballooning=False),
            type=types.VmType.HIGH_PERFORMANCE,
        )
        try:
            created = self.session.call(
                "AddVm", lambda api: vm_view(api.vms_service().add(definition, clone=True))
            )
        except errors.NotFound as exc:  # the cluster (or template) named in the request
            raise errors.InvalidRequest(NAME, "AddVm", exc.message) from exc
        except errors.CloudError as exc:
            if not is_conflict(exc):
                raise
            raced = self.find_vm(name)  # a concurrent create of the same machine won
            if raced is None or not owned(raced):
                raise
            return raced
        log.info("zvirt: created VM %s (%s) from template %s", name, created.id, template_id)
        return created

    def _template_id(self, name: str) -> str:
        quoted = name if searchable_name(name) else '"' + name.replace('"', "") + '"'

        def search(api: Any) -> list[tuple[str, int]]:
            found = api.templates_service().list(search=f"name={quoted}")
            return [
                (str(t.id), int(t.version.version_number or 1) if t.version else 1)
                for t in found
                if t.name == name
            ]

        matches = self.session.call("ListTemplates", search)
        if not matches:
            raise errors.InvalidRequest(NAME, "CreateMachine", f"no template named {name!r}")
        return max(matches, key=lambda match: match[1])[0]  # the latest template version

    def _check_vnic_profile(self, profile_id: str) -> None:
        try:
            self.session.call(
                "GetVnicProfile",
                lambda api: api.vnic_profiles_service().profile_service(profile_id).get(),
            )
        except errors.NotFound:
            raise errors.InvalidRequest(
                NAME, "CreateMachine", f"no vNIC profile {profile_id}"
            ) from None

    def _prepare_boot_disk(self, vm_id: str, machine: ZvirtMachineSpec, deadline: float) -> None:
        """Grow the active bootable disk to ``rootDiskSizeGb`` (never shrink) and wait for it."""
        boot = next((a for a in self._attachments(vm_id) if a.bootable and a.active), None)
        if boot is None:
            raise errors.InvalidRequest(
                NAME,
                "CreateMachine",
                f"template {machine.template!r} gave the VM no active bootable disk",
            )
        disk = self._disk(boot.disk_id)
        wanted = machine.root_disk_bytes
        if disk.provisioned_size < wanted:
            if disk.status != "ok":
                disk = self._wait_disk_ok(disk.id, deadline)
            self.session.call(
                "UpdateDisk",
                lambda api: (
                    api.disks_service()
                    .disk_service(disk.id)
                    .update(types.Disk(provisioned_size=wanted))
                ),
            )
        elif disk.provisioned_size > wanted:
            log.info(
                "zvirt: boot disk of VM %s is %d GiB, larger than rootDiskSizeGb; kept",
                vm_id,
                disk.provisioned_size // 2**30,
            )
        self._wait_disk_ok(disk.id, deadline)

    def _wait_disk_ok(self, disk_id: str, deadline: float) -> DiskView:
        return self.session.wait_until(
            "WaitForDiskOk",
            lambda: self._disk(disk_id),
            lambda disk: disk.status == "ok",
            deadline=deadline,
        )

    def _ensure_nic(self, vm_id: str, machine: ZvirtMachineSpec) -> None:
        nics = self.session.call(
            "ListNics",
            lambda api: [
                nic_view(n) for n in api.vms_service().vm_service(vm_id).nics_service().list()
            ],
        )
        existing = next((n for n in nics if n.name == machine.nic_name), None)
        if existing is not None:
            if existing.vnic_profile_id != machine.vnic_profile_id:
                log.warning(
                    "zvirt: NIC %s of VM %s is on vNIC profile %s, not %s; left as it is",
                    machine.nic_name,
                    vm_id,
                    existing.vnic_profile_id,
                    machine.vnic_profile_id,
                )
            return
        nic = types.Nic(
            name=machine.nic_name,
            vnic_profile=types.VnicProfile(id=machine.vnic_profile_id),
            interface=types.NicInterface.VIRTIO,
        )
        self.session.call(
            "AddNic", lambda api: api.vms_service().vm_service(vm_id).nics_service().add(nic)
        )

    def _start(self, vm_id: str, host_name: str, script: str, nic: Any | None = None) -> None:
        """Start once with cloud-init (``nic``: a ``types.NicConfiguration`` for a static IP)."""
        run_once = types.Vm(
            initialization=types.Initialization(
                host_name=host_name,
                custom_script=script,
                nic_configurations=[nic] if nic is not None else None,
            )
        )
        try:
            self.session.call(
                "StartVm",
                lambda api: (
                    api.vms_service().vm_service(vm_id).start(use_cloud_init=True, vm=run_once)
                ),
            )
        except errors.CloudError as exc:
            if is_conflict(exc) and self.get_vm(vm_id).status in _RUNNING:
                return  # started meanwhile (a concurrent call of the same create)
            raise
        log.info("zvirt: started VM %s (%s) with cloud-init", host_name, vm_id)

    # -- read ------------------------------------------------------------------------------
    def get_machine(self, spec: models.MachineSpec) -> models.Machine | None:
        vm = self.find_vm(spec.name, follow=MACHINE_FOLLOW)
        if vm is None or owner_uid(vm.description) != spec.machine_uid:
            return None  # no VM of this InfraMachine (a same-named VM of another is not it)
        return to_machine(vm, nic_name_of(spec.provider_spec))

    # -- delete ----------------------------------------------------------------------------
    def delete_machine(self, spec: models.MachineSpec) -> bool:
        """Shut down (power off when it will not), detach non-boot disks, remove with its disks.

        Non-boot disks (volumes attached later, e.g. by CSI) are detached and kept, as capz
        does; the boot disk cloned from the template goes with the VM.
        """
        return self.remove_vm(
            spec.name, owned=lambda vm: owner_uid(vm.description) == spec.machine_uid
        )

    def remove_vm(self, name: str, *, owned: Callable[[VmView], bool]) -> bool:
        """:meth:`delete_machine` of the VM ``name`` when ``owned``; ``False`` when it is not
        gone yet after the wait (the next call resumes)."""
        deadline = self.session.deadline()
        shutdown_sent: float | None = None
        while True:
            vm = self.find_vm(name)
            if vm is None or not owned(vm):
                return True
            overdue = (
                shutdown_sent is not None
                and time.monotonic() - shutdown_sent >= self.session.settings.shutdown_timeout_s
            )
            if vm.status == "down":
                self._detach_data_disks(vm.id)
                self._vm_request(vm.id, "RemoveVm", lambda service: service.remove())
            elif vm.status == "image_locked":
                pass  # cloning or being removed: wait
            elif vm.status == "up" and shutdown_sent is None:
                shutdown_sent = time.monotonic()
                if not self._vm_request(vm.id, "ShutdownVm", lambda s: s.shutdown(force=True)):
                    self._vm_request(vm.id, "StopVm", lambda service: service.stop())
            elif vm.status in ("up", "powering_down") and not overdue:
                pass  # the guest is shutting down
            else:  # booting, stuck (not_responding, paused...) or too slow to shut down
                self._vm_request(vm.id, "StopVm", lambda service: service.stop())
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.session.settings.poll_interval_s)

    def _vm_request(self, vm_id: str, operation: str, request: Callable[[Any], object]) -> bool:
        """One request on the VM's service; ``False`` when the engine refused it for now (409)
        or the VM is already gone."""
        try:
            self.session.call(operation, lambda api: request(api.vms_service().vm_service(vm_id)))
        except errors.NotFound:
            return False
        except errors.CloudError as exc:
            if is_conflict(exc):
                return False
            raise
        return True

    def _detach_data_disks(self, vm_id: str) -> None:
        for attachment in self._attachments(vm_id):
            if not attachment.bootable:
                self._vm_request(vm_id, "DetachDisk", _detach(attachment.disk_id))


def _detach(disk_id: str) -> Callable[[Any], object]:
    """Detach (never delete) one disk from the VM service it is called with."""

    def request(vm_service: Any) -> object:
        attachment = vm_service.disk_attachments_service().attachment_service(disk_id)
        return attachment.remove(detach_only=True)

    return request
