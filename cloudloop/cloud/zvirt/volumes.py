"""zVirt volumes for the CSI controller: a disk on the chosen storage domain, attached to the
node's VM through a disk attachment (hotplug, virtio-scsi), grown by resizing the disk.

As ovirt-csi-driver makes them: the disk's alias is the CSI volume name, the StorageClass
parameters ``storageDomainName`` and ``thinProvisioning`` choose the domain and the format
(thin: sparse ``cow``, else preallocated ``raw``); the volume ID is the disk's UUID and the
node ID the VM's. The disk's description records the CSI name and the cluster
(``{"csi": <name>, "cluster": <cluster>}``), so a retried create finds its disk and never adopts
another one. The guest sees the disk as ``/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_<disk-id>``
(the attachment's serial is the disk ID). Free space of a domain answers CSI GetCapacity.
Which VM a disk is attached to is read from the VMs' attachments (one listing): the API has no
link from a disk to its VMs. No snapshots.
"""

from __future__ import annotations

import json
import re
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.driver import VolumeDefaults
from cloudloop.cloud.zvirt.base import ZvirtBase, is_conflict, types
from cloudloop.cloud.zvirt.mapping import DEFAULT_KEY, NAME

DOMAIN_PARAMETER = "storageDomainName"
THIN_PARAMETER = "thinProvisioning"
#: Disks a VM takes through its virtio-scsi controller here (ovirt-csi-driver does not say).
MAX_VOLUMES = 25
GIB = 2**30

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_STATES = {"ok": "available", "locked": "creating", "illegal": "error"}


def volume_description(name: str, cluster: str) -> str:
    return json.dumps({"csi": name, "cluster": cluster}, sort_keys=True)


def described(description: str | None) -> dict[str, str]:
    try:
        value = json.loads(description or "")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


class ZvirtVolumes(VolumeDefaults):
    provider = NAME
    zonal_volumes = False
    max_volumes_per_node = MAX_VOLUMES

    def __init__(self, session: ZvirtBase) -> None:
        self.session = session

    # -- reads -----------------------------------------------------------------------------
    def _attached_to(self) -> dict[str, str]:
        """disk ID → the VM it is attached to (one VM listing with their attachments)."""

        def listing(api: Any) -> dict[str, str]:
            found: dict[str, str] = {}
            for vm in api.vms_service().list(follow="disk_attachments"):
                for attachment in vm.disk_attachments or []:
                    disk_id = attachment.disk.id if attachment.disk is not None else attachment.id
                    found[str(disk_id)] = str(vm.id)
            return found

        return self.session.call("ListVms", listing)

    def _to_volume(self, disk: Any, attached: dict[str, str]) -> models.Volume:
        disk_id = str(disk.id)
        status = str(getattr(disk.status, "value", disk.status) or "")
        vm = attached.get(disk_id)
        attachments = (
            [models.Attachment(volume_id=disk_id, instance_id=vm, state="attached", serial=disk_id)]
            if vm
            else []
        )
        state = _STATES.get(status, "creating")
        if vm and state == "available":
            state = "in-use"
        domains = disk.storage_domains or []
        return models.Volume(
            id=disk_id,
            size_gib=-(-int(disk.provisioned_size or 0) // GIB),
            state=state,
            attached_to=[vm] if vm else [],
            name=described(disk.description).get("csi", ""),
            volume_type=str(domains[0].name or domains[0].id) if domains else "",
            attachments=attachments,
        )

    def _get_disk(self, volume_id: str) -> Any:
        if not _UUID.match(volume_id):
            raise errors.NotFound(NAME, "GetDisk", f"no volume {volume_id!r}")
        return self.session.call(
            "GetDisk", lambda api: api.disks_service().disk_service(volume_id).get()
        )

    def get_volume(self, volume_id: str) -> models.Volume:
        return self._to_volume(self._get_disk(volume_id), self._attached_to())

    def find_volume(self, name: str, cluster: str) -> models.Volume | None:
        disks = self.session.call(
            "ListDisks", lambda api: list(api.disks_service().list(search=f"name={name}"))
        )
        mine = [
            d
            for d in disks
            if d.alias == name and described(d.description) == {"csi": name, "cluster": cluster}
        ]
        if not mine:
            return None
        oldest = min(mine, key=lambda d: str(d.id))
        return self._to_volume(oldest, self._attached_to())

    def list_volumes(self, cluster: str) -> list[models.Volume]:
        disks = self.session.call("ListDisks", lambda api: list(api.disks_service().list()))
        mine = [d for d in disks if described(d.description).get("cluster") == cluster]
        if not mine:
            return []
        attached = self._attached_to()
        return sorted((self._to_volume(d, attached) for d in mine), key=lambda v: v.id)

    # -- storage domains -------------------------------------------------------------------
    def _domains(self) -> list[Any]:
        return self.session.call(
            "ListStorageDomains", lambda api: list(api.storage_domains_service().list())
        )

    def _domain(self, parameters: dict[str, str]) -> Any:
        """The domain the parameters name, else the first data domain by name (the default)."""
        wanted = parameters.get(DOMAIN_PARAMETER, "")
        data = sorted(
            (d for d in self._domains() if str(getattr(d.type, "value", d.type)) == "data"),
            key=lambda d: str(d.name),
        )
        for domain in data:
            if not wanted or domain.name == wanted:
                return domain
        raise errors.InvalidRequest(NAME, "AddDisk", f"no data storage domain {wanted!r}")

    def volume_capacity(self, parameters: dict[str, str]) -> int:
        return int(self._domain(parameters).available or 0)

    def storage_classes(self, discovery: dict[str, Any]) -> list[models.StorageClassSpec]:
        """One per enabled storage domain of the discovery data's ``storageDomains`` (default:
        ``isDefaul``, or ``IsDefault`` in a document an older cloudloop wrote)."""
        return [
            models.StorageClassSpec(
                name=str(entry["name"]),
                parameters={DOMAIN_PARAMETER: str(entry["name"]), THIN_PARAMETER: "true"},
                default=bool(entry.get(DEFAULT_KEY) or entry.get("IsDefault")),
            )
            for entry in discovery.get("storageDomains") or []
            if entry.get("name") and entry.get("isEnabled", True)
        ]

    # -- changes ---------------------------------------------------------------------------
    def create_volume(self, spec: models.VolumeSpec) -> models.Volume:
        unknown = sorted(set(spec.parameters) - {DOMAIN_PARAMETER, THIN_PARAMETER})
        if unknown:
            raise errors.InvalidRequest(NAME, "AddDisk", f"unknown parameters {unknown}")
        if spec.snapshot_id:
            raise errors.NotSupported(NAME, "snapshots")
        thin = spec.parameters.get(THIN_PARAMETER, "true").lower() != "false"
        domain = self._domain(spec.parameters)
        disk = types.Disk(
            name=spec.name,
            alias=spec.name,
            description=volume_description(spec.name, spec.cluster),
            provisioned_size=spec.size_gib * GIB,
            format=types.DiskFormat.COW if thin else types.DiskFormat.RAW,
            sparse=thin,
            storage_domains=[types.StorageDomain(id=domain.id)],
        )
        created = self.session.call("AddDisk", lambda api: api.disks_service().add(disk))
        return self._to_volume(created, {})

    def delete_volume(self, volume_id: str) -> None:
        self._get_disk(volume_id)
        self.session.call(
            "RemoveDisk", lambda api: api.disks_service().disk_service(volume_id).remove()
        )

    def attach_volume(self, volume: models.Volume, instance_id: str) -> models.Attachment:
        attachment = types.DiskAttachment(
            disk=types.Disk(id=volume.id),
            interface=types.DiskInterface.VIRTIO_SCSI,
            bootable=False,
            active=True,
        )

        def attach(api: Any) -> object:
            service = api.vms_service().vm_service(instance_id).disk_attachments_service()
            return service.add(attachment)

        try:
            self.session.call("AddDiskAttachment", attach)
        except errors.CloudError as exc:
            if not is_conflict(exc):
                raise
            current = self._attached_to().get(volume.id)  # already attached: where?
            if current != instance_id:
                raise errors.FailedPrecondition(
                    NAME, "AddDiskAttachment", f"disk {volume.id} is attached to {current}"
                ) from exc
        return models.Attachment(
            volume_id=volume.id, instance_id=instance_id, state="attached", serial=volume.id
        )

    def detach_volume(self, volume_id: str, instance_id: str) -> None:
        def detach(api: Any) -> object:
            vm = api.vms_service().vm_service(instance_id)
            return vm.disk_attachments_service().attachment_service(volume_id).remove()

        try:
            self.session.call("RemoveDiskAttachment", detach)
        except errors.NotFound:
            return  # not attached there, or the VM is gone

    def expand_volume(self, volume_id: str, size_gib: int) -> models.VolumeModification:
        self._get_disk(volume_id)
        grown = types.Disk(provisioned_size=size_gib * GIB)
        self.session.call(
            "UpdateDisk", lambda api: api.disks_service().disk_service(volume_id).update(grown)
        )
        return models.VolumeModification(
            volume_id=volume_id, state="modifying", target_size_gib=size_gib
        )

    def get_volume_modification(self, volume_id: str) -> models.VolumeModification | None:
        """A locked disk is still being extended; an ``ok`` one has its size."""
        disk = self._get_disk(volume_id)
        status = str(getattr(disk.status, "value", disk.status) or "")
        return models.VolumeModification(
            volume_id=volume_id,
            state="completed" if status == "ok" else "modifying",
            target_size_gib=-(-int(disk.provisioned_size or 0) // GIB),
        )
