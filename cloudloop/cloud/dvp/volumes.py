"""DVP volumes for the CSI controller: a VirtualDisk per volume in the parent namespace, attached
by a ``VirtualMachineBlockDeviceAttachment`` (hotplug), grown by resizing the disk.

As Deckhouse's DVP CSI driver makes them: the disk is named after the CSI volume name and
labelled ``virtualDiskName=<disk>``; the StorageClass parameter ``dvpStorageClass`` picks the
parent's StorageClass; the attachment is ``vmbda-<disk>-<hostname>`` labelled
``virtualMachineDiskName=<disk>`` and ``virtualMachineName=<hostname>``. The volume ID is the
disk's name. A CSI name that is not a valid object name (or is longer than 63) becomes
``csi-<hash>``; the full name is kept in the annotation ``cloudloop.io/csi-volume-name``.

Identity and crash safety: the disk's name is derived from the CSI name, so a retried create
finds the disk it made (and a disk of that name that is not this cluster's volume is
``AlreadyExists``, never adopted); an attachment's name is derived from disk and VM, so a retried
attach finds its attachment. No snapshots (Deckhouse's driver has none). Every call issues one
request (or a list) and returns; the activities wait. Zonal where more than one zone is
configured (beyond Deckhouse's driver, which has no topology): a disk is labelled with the zone
it was created for (``topology.kubernetes.io/zone``, the CSI topology), and an attach to a VM
placed in another zone is ``FailedPrecondition`` (the parent binds the disk at first attach).
"""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.driver import VolumeDefaults
from cloudloop.cloud.dvp import instances
from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.base import NAME, DvpBase

#: StorageClass parameter naming the parent cluster's StorageClass (Deckhouse's name).
STORAGE_CLASS_PARAMETER = "dvpStorageClass"
CSI_VOLUME_LABEL = "cloudloop.io/csi-volume"
CSI_CLUSTER_LABEL = "cloudloop.io/csi-cluster"
CSI_NAME_ANNOTATION = "cloudloop.io/csi-volume-name"
#: The volume's tags (PVC name and namespace...), as one JSON object.
TAGS_ANNOTATION = "cloudloop.io/csi-tags"
#: Hot-plugged disks a VM takes (Deckhouse's DVP CSI driver answers 10).
MAX_VOLUMES = 10

_OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^([0-9.]+)([KMGTPE]i?|[kmu]|)$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
GIB = 2**30


def disk_name(csi_name: str) -> str:
    """The VirtualDisk of a CSI volume name: the name itself when it can be one."""
    if len(csi_name) <= 63 and _OBJECT_NAME.match(csi_name):
        return csi_name
    return "csi-" + hashlib.sha256(csi_name.encode()).hexdigest()[:32]


def attachment_name(disk: str, hostname: str) -> str:
    name = f"vmbda-{disk}-{hostname}"
    if len(name) <= 253:
        return name
    return "vmbda-" + hashlib.sha256(name.encode()).hexdigest()[:32]


def quantity_bytes(value: object) -> int:
    """A Kubernetes quantity (``10Gi``, ``1073741824``, ``5G``) in bytes (0 when unreadable)."""
    text = str(value or "").strip()
    found = _QUANTITY.match(text)
    if not found:
        return 0
    number, suffix = Decimal(found.group(1)), found.group(2)
    factor = _BINARY.get(suffix) or _DECIMAL.get(suffix) or 1
    return int(number * factor)


def _gib(value: object) -> int:
    return -(-quantity_bytes(value) // GIB)


_STATES = {
    "Ready": "available",
    "Provisioning": "creating",
    "Pending": "creating",
    "WaitForFirstConsumer": "available",
    "WaitForUserUpload": "creating",
    "Failed": "error",
    "Terminating": "deleting",
    "Lost": "error",
}


class DvpVolumes(VolumeDefaults):
    provider = NAME
    zonal_volumes = False
    max_volumes_per_node = MAX_VOLUMES

    def __init__(self, session: DvpBase) -> None:
        self.session = session
        #: The configured zones; volumes are zonal (CSI topology) only where there are several.
        self.zones = list(session.settings.zones)
        self.zonal_volumes = len(self.zones) > 1

    # -- reads -----------------------------------------------------------------------------
    def _attachments(self, disk: str | None = None) -> list[dict[str, Any]]:
        selector = f"{r.ATTACHMENT_DISK_LABEL}={disk}" if disk else None
        return self.session.list_objects(
            r.VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS, label_selector=selector
        )

    def _to_volume(self, disk: dict[str, Any], attachments: list[dict[str, Any]]) -> models.Volume:
        meta, spec = disk["metadata"], disk.get("spec") or {}
        status = disk.get("status") or {}
        claim = spec.get("persistentVolumeClaim") or {}
        phase = str(status.get("phase") or "Pending")
        state = "deleting" if meta.get("deletionTimestamp") else _STATES.get(phase, "creating")
        mine = []
        for attachment in attachments:
            ref = (attachment.get("spec") or {}).get("blockDeviceRef") or {}
            if ref.get("kind") != "VirtualDisk" or ref.get("name") != meta["name"]:
                continue
            att_phase = (attachment.get("status") or {}).get("phase")
            if (attachment.get("metadata") or {}).get("deletionTimestamp"):
                att_state = "detaching"
            elif att_phase == "Attached":
                att_state = "attached"
            elif att_phase == "Failed":
                att_state = "failed"
            else:
                att_state = "attaching"
            mine.append(
                models.Attachment(
                    volume_id=meta["name"],
                    instance_id=str(attachment["spec"]["virtualMachineName"]),
                    state=att_state,
                )
            )
        if mine and state == "available":
            state = "in-use"
        annotations = meta.get("annotations") or {}
        return models.Volume(
            id=meta["name"],
            size_gib=_gib(status.get("capacity") or claim.get("size")),
            zone=str((meta.get("labels") or {}).get(r.ZONE_LABEL) or ""),
            state=state,
            attached_to=[a.instance_id for a in mine if a.state != "detaching"],
            name=annotations.get(CSI_NAME_ANNOTATION, ""),
            volume_type=str(claim.get("storageClassName") or status.get("storageClassName") or ""),
            attachments=mine,
            tags=_tags(annotations.get(TAGS_ANNOTATION)),
        )

    def _disk(self, volume_id: str) -> dict[str, Any]:
        if not _OBJECT_NAME.match(volume_id) or len(volume_id) > 253:
            raise errors.NotFound(NAME, "GetVirtualDisk", f"no volume {volume_id!r}")
        disk = self.session.get(r.VIRTUAL_DISKS, volume_id)
        if disk is None:
            raise errors.NotFound(NAME, "GetVirtualDisk", f"no volume {volume_id!r}")
        return disk

    def get_volume(self, volume_id: str) -> models.Volume:
        return self._to_volume(self._disk(volume_id), self._attachments(volume_id))

    def find_volume(self, name: str, cluster: str) -> models.Volume | None:
        disk = self.session.get(r.VIRTUAL_DISKS, disk_name(name))
        if disk is None or not self._is_volume_of(disk, name, cluster):
            return None
        return self._to_volume(disk, self._attachments(disk["metadata"]["name"]))

    def _is_volume_of(self, disk: dict[str, Any], name: str, cluster: str) -> bool:
        meta = disk["metadata"]
        labels = meta.get("labels") or {}
        return (meta.get("annotations") or {}).get(CSI_NAME_ANNOTATION) == name and labels.get(
            CSI_CLUSTER_LABEL
        ) == cluster

    def list_volumes(self, cluster: str) -> list[models.Volume]:
        disks = self.session.list_objects(
            r.VIRTUAL_DISKS,
            label_selector=f"{CSI_VOLUME_LABEL}=true,{CSI_CLUSTER_LABEL}={cluster}",
        )
        attachments = self._attachments()
        return sorted(
            (self._to_volume(d, attachments) for d in disks if not _going(d)),
            key=lambda v: v.id,
        )

    # -- changes ---------------------------------------------------------------------------
    def create_volume(self, spec: models.VolumeSpec) -> models.Volume:
        unknown = sorted(set(spec.parameters) - {STORAGE_CLASS_PARAMETER})
        if unknown:
            raise errors.InvalidRequest(NAME, "CreateVirtualDisk", f"unknown parameters {unknown}")
        if spec.snapshot_id:
            raise errors.NotSupported(NAME, "snapshots")
        name = disk_name(spec.name)
        zone_label: dict[str, str] = {}
        if self.zonal_volumes and spec.zone:
            if spec.zone not in self.zones:
                raise errors.InvalidRequest(
                    NAME,
                    "CreateVirtualDisk",
                    f"zone {spec.zone!r} is not one of the cluster's zones "
                    f"({', '.join(self.zones)})",
                )
            zone_label = {r.ZONE_LABEL: spec.zone}
        claim: dict[str, Any] = {"size": f"{spec.size_gib}Gi"}
        storage_class = spec.parameters.get(STORAGE_CLASS_PARAMETER) or spec.volume_type
        if storage_class:
            claim["storageClassName"] = storage_class
        body = {
            "metadata": {
                "name": name,
                "namespace": self.session.namespace,
                "labels": {
                    **self.session.cluster_labels(),
                    r.DISK_NAME_LABEL: name,
                    CSI_VOLUME_LABEL: "true",
                    CSI_CLUSTER_LABEL: spec.cluster,
                    **zone_label,
                },
                "annotations": {
                    CSI_NAME_ANNOTATION: spec.name,
                    TAGS_ANNOTATION: json.dumps(spec.tags, sort_keys=True),
                },
            },
            "spec": {"persistentVolumeClaim": claim},
        }
        created = self.session.create(r.VIRTUAL_DISKS, body)
        if created is None:
            existing = self.session.get(r.VIRTUAL_DISKS, name)
            if existing is None or not self._is_volume_of(existing, spec.name, spec.cluster):
                raise errors.AlreadyExists(
                    NAME, "CreateVirtualDisk", f"VirtualDisk {name!r} exists and is not {spec.name}"
                )
            created = existing
        return self._to_volume(created, [])

    def delete_volume(self, volume_id: str) -> None:
        disk = self._disk(volume_id)
        live = [a for a in self._attachments(volume_id) if not _going(a)]
        if live:
            raise errors.FailedPrecondition(
                NAME,
                "DeleteVirtualDisk",
                f"volume {volume_id} is attached to {live[0]['spec']['virtualMachineName']}",
            )
        if not _going(disk):
            self.session.delete(r.VIRTUAL_DISKS, volume_id)

    def _vm(self, instance_id: str) -> dict[str, Any]:
        vm = self.session.get(r.VIRTUAL_MACHINES, instance_id)
        if vm is None or _going(vm):
            raise errors.NotFound(NAME, "GetVirtualMachine", f"no VM {instance_id!r}")
        return vm

    @staticmethod
    def _hostname(vm: dict[str, Any]) -> str:
        labels = vm["metadata"].get("labels") or {}
        return str(labels.get(r.HOSTNAME_LABEL) or vm["metadata"]["name"])

    def attach_volume(self, volume: models.Volume, instance_id: str) -> models.Attachment:
        vm = self._vm(instance_id)
        vm_zone = instances.vm_zone(vm, self.zones) if self.zonal_volumes else ""
        if volume.zone and vm_zone and vm_zone != volume.zone:
            raise errors.FailedPrecondition(
                NAME,
                "AttachVolume",
                f"volume {volume.id} is in zone {volume.zone}, VM {instance_id} in {vm_zone}",
            )
        hostname = self._hostname(vm)
        name = attachment_name(volume.id, hostname)
        body = {
            "metadata": {
                "name": name,
                "namespace": self.session.namespace,
                "labels": {
                    **self.session.cluster_labels(),
                    r.ATTACHMENT_DISK_LABEL: volume.id,
                    r.ATTACHMENT_MACHINE_LABEL: hostname,
                },
            },
            "spec": {
                "virtualMachineName": vm["metadata"]["name"],
                "blockDeviceRef": {"kind": "VirtualDisk", "name": volume.id},
            },
        }
        if self.session.create(r.VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS, body) is None:
            existing = self.session.get(r.VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS, name)
            if existing is not None and _going(existing):
                raise errors.OperationPending(
                    NAME, "AttachVolume", f"{name} is still being removed; try again"
                )
        return models.Attachment(volume_id=volume.id, instance_id=instance_id, state="attaching")

    def detach_volume(self, volume_id: str, instance_id: str) -> None:
        for attachment in self._attachments(volume_id):
            if attachment["spec"].get("virtualMachineName") == instance_id and not _going(
                attachment
            ):
                self.session.delete(
                    r.VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS, attachment["metadata"]["name"]
                )

    def expand_volume(self, volume_id: str, size_gib: int) -> models.VolumeModification:
        self._disk(volume_id)
        self.session.patch(
            r.VIRTUAL_DISKS,
            volume_id,
            {"spec": {"persistentVolumeClaim": {"size": f"{size_gib}Gi"}}},
        )
        return models.VolumeModification(
            volume_id=volume_id, state="modifying", target_size_gib=size_gib
        )

    def get_volume_modification(self, volume_id: str) -> models.VolumeModification | None:
        """The disk's resize: ``completed`` once its capacity reached the size asked."""
        disk = self._disk(volume_id)
        asked = _gib(((disk.get("spec") or {}).get("persistentVolumeClaim") or {}).get("size"))
        capacity = _gib((disk.get("status") or {}).get("capacity"))
        if not capacity:
            return None
        return models.VolumeModification(
            volume_id=volume_id,
            state="completed" if capacity >= asked else "modifying",
            target_size_gib=asked,
        )

    def storage_classes(self, discovery: dict[str, Any]) -> list[models.StorageClassSpec]:
        """One per enabled parent StorageClass of the discovery data's ``storageClasses``
        (a document an older cloudloop wrote has them as ``volumeTypes``, ``IsDefault``)."""
        entries = discovery.get("storageClasses")
        if entries is None:
            entries = discovery.get("volumeTypes")
        return [
            models.StorageClassSpec(
                name=str(entry["name"]),
                parameters={STORAGE_CLASS_PARAMETER: str(entry["name"])},
                default=bool(entry.get("isDefault") or entry.get("IsDefault")),
            )
            for entry in entries or []
            if entry.get("name") and entry.get("isEnabled", True)
        ]


def _tags(raw: str | None) -> dict[str, str]:
    try:
        tags = json.loads(raw or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {}


def _going(obj: dict[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))
