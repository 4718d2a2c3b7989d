"""Finding an attached disk on the node: by the serial the controller published, then by path.

The controller's publish context carries ``serial`` (the disk's serial as the guest sees it) and,
on AWS, ``devicePath`` (the name the attach asked for). A disk is found, in this order:

- in ``/dev/disk/by-id`` under a name ending in ``_<serial>`` (EBS on Nitro:
  ``nvme-Amazon_Elastic_Block_Store_vol0123...``; virtio-scsi: ``scsi-0QEMU_QEMU_HARDDISK_<id>``,
  also cut to 20 characters), ``virtio-<serial>`` (virtio-blk keeps 20 characters of it: a
  Cinder volume is ``virtio-<first 20 characters of its ID>``) or ``wwn-0x<serial>`` (a SCSI
  disk's UUID, lower case without dashes: a vSphere disk with ``disk.EnableUUID``), partitions
  skipped; the forms cinder-csi and vsphere-csi look for;
- at ``devicePath`` or its ``/dev/sd*`` twin (Xen instances: ``/dev/xvdba`` ↔ ``/dev/sdba``);
- in ``/dev/disk/by-id`` under a name ending in the volume ID (Deckhouse's DVP driver).

Pure lookups over the file system; waiting is the caller's (the disk appears a little after the
attach reports success).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: virtio-blk serials are cut to this many characters.
VIRTIO_SERIAL_LENGTH = 20


def wwn(serial: str) -> str:
    """A SCSI UUID as udev names it under ``wwn-0x``: lower case, no dashes or spaces."""
    return serial.replace("-", "").replace(" ", "").lower()


def _by_id_entries(device_dir: Path) -> list[str]:
    try:
        return sorted(e for e in os.listdir(device_dir) if "-part" not in e)
    except FileNotFoundError:
        return []


def by_serial(device_dir: Path, serial: str) -> Path | None:
    if not serial:
        return None
    short = serial[:VIRTIO_SERIAL_LENGTH]
    names = {f"virtio-{short}", f"virtio-{serial}", f"wwn-0x{wwn(serial)}"}
    for entry in _by_id_entries(device_dir):
        if entry in names or entry.endswith((f"_{serial}", f"_{short}")):
            return (device_dir / entry).resolve()
    return None


def by_path(device_path: str) -> Path | None:
    if not device_path:
        return None
    candidates = [device_path]
    if device_path.startswith("/dev/xvd"):
        candidates.append("/dev/sd" + device_path.removeprefix("/dev/xvd"))
    for candidate in candidates:
        if os.path.exists(candidate):
            return Path(candidate).resolve()
    return None


def by_volume_id(device_dir: Path, volume_id: str) -> Path | None:
    if not volume_id:
        return None
    for entry in _by_id_entries(device_dir):
        if entry.endswith(volume_id):
            return (device_dir / entry).resolve()
    return None


def find_device(
    device_dir: Path, volume_id: str, publish_context: Mapping[str, str]
) -> Path | None:
    """The block device of the volume, or ``None`` while it is not (yet) there."""
    return (
        by_serial(device_dir, publish_context.get("serial", ""))
        or by_path(publish_context.get("devicePath", ""))
        or by_volume_id(device_dir, volume_id)
    )
