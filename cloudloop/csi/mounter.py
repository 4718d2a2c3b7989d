"""What the node plugin does to disks, with the real tools: mkfs, mount, umount, resize2fs,
xfs_growfs, blkid, blockdev; mounts are read from ``/proc/self/mountinfo``.

- **Stage**: find the attached disk (:mod:`cloudloop.csi.devices`), format it when it has no
  filesystem (``mkfs.ext4 -F -m0`` / ``mkfs.xfs -f``, as Kubernetes' mount-utils), mount it on the
  staging path. A disk that already has another filesystem is never formatted.
- **Publish**: bind-mount the staging path onto the target (``ro`` by a bind remount), or, for
  raw block access, bind-mount the device onto a file at the target.
- **Expand**: grow the filesystem to the disk (``resize2fs`` / ``xfs_growfs``).

Every step first looks at what is there, so a repeated call (the kubelet retries) is a no-op.
:class:`DirectoryMounter` stands a folder per volume in for the disk (bind mounts, no mkfs) for
csi-sanity on machines where the cloud's disks are not attached, e.g. moto's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cloudloop.csi.devices import find_device

log = logging.getLogger(__name__)

MOUNTINFO = Path("/proc/self/mountinfo")
#: The directory mounter's mark of which volume a folder (and so a mount) is.
VOLUME_MARK = ".cloudloop-volume"


class MountError(Exception):
    """A tool failed or the node's state forbids the step; ``kind`` is the CSI code to answer."""

    def __init__(self, message: str, kind: str = "INTERNAL") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Mount:
    target: str
    device: str  # major:minor
    root: str
    fstype: str
    source: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class Usage:
    total_bytes: int
    available_bytes: int
    used_bytes: int
    total_inodes: int = 0
    free_inodes: int = 0
    used_inodes: int = 0


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    return (
        field.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
    )


def parse_mountinfo(text: str) -> dict[str, Mount]:
    """Mounts by target (the last mount on a target wins, as the kernel shows it)."""
    mounts: dict[str, Mount] = {}
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        mount = Mount(
            target=_unescape(fields[4]),
            device=fields[2],
            root=_unescape(fields[3]),
            fstype=fields[sep + 1],
            source=_unescape(fields[sep + 2]) if len(fields) > sep + 2 else "",
            options=tuple(fields[5].split(",")),
        )
        mounts[mount.target] = mount
    return mounts


def device_of(major_minor: str) -> Path:
    """The ``/dev`` node of a ``major:minor`` (from sysfs, no udev needed)."""
    uevent = Path(f"/sys/dev/block/{major_minor}/uevent")
    try:
        for line in uevent.read_text().splitlines():
            if line.startswith("DEVNAME="):
                return Path("/dev") / line.removeprefix("DEVNAME=")
    except FileNotFoundError:
        pass
    raise MountError(f"no block device {major_minor}", "NOT_FOUND")


class Mounter:
    """Real disks: ``device_dir`` is where they appear by serial (``/dev/disk/by-id``)."""

    def __init__(self, device_dir: Path, *, device_wait_s: float = 30.0) -> None:
        self.device_dir = device_dir
        self.device_wait_s = device_wait_s

    # -- tools -----------------------------------------------------------------------------
    @staticmethod
    def run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        log.debug("running %s", " ".join(argv))
        try:
            done = subprocess.run(list(argv), capture_output=True, text=True, timeout=300)
        except FileNotFoundError as exc:
            raise MountError(f"{argv[0]} is not installed on this node") from exc
        if check and done.returncode != 0:
            output = (done.stderr or done.stdout).strip()
            raise MountError(f"{' '.join(argv)} failed ({done.returncode}): {output}")
        return done

    def mounts(self) -> dict[str, Mount]:
        return parse_mountinfo(MOUNTINFO.read_text())

    def mount_at(self, path: str) -> Mount | None:
        return self.mounts().get(os.path.realpath(path))

    # -- devices ---------------------------------------------------------------------------
    def device(self, volume_id: str, publish_context: Mapping[str, str]) -> Path:
        """The volume's disk, waiting up to ``device_wait_s`` for it to appear."""
        deadline = time.monotonic() + self.device_wait_s
        delay = 0.1
        while True:
            found = find_device(self.device_dir, volume_id, publish_context)
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                raise MountError(
                    f"the disk of volume {volume_id} did not appear on this node "
                    f"(publish context {dict(publish_context)})",
                    "NOT_FOUND",
                )
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def filesystem(self, device: Path) -> str:
        """The filesystem on ``device`` ("" when there is none)."""
        done = self.run(["blkid", "-p", "-s", "TYPE", "-o", "value", str(device)], check=False)
        if done.returncode == 2:  # nothing found: an empty disk
            return ""
        if done.returncode != 0:
            raise MountError(f"blkid {device} failed: {done.stderr.strip()}")
        return done.stdout.strip()

    def format(self, device: Path, fs_type: str) -> None:
        if fs_type == "ext4":
            self.run(["mkfs.ext4", "-F", "-m0", str(device)])
        elif fs_type == "xfs":
            self.run(["mkfs.xfs", "-f", str(device)])
        else:
            raise MountError(f"unsupported filesystem {fs_type!r} (ext4, xfs)", "INVALID_ARGUMENT")

    def device_size(self, device: Path) -> int:
        return int(self.run(["blockdev", "--getsize64", str(device)]).stdout.strip())

    def _same_device(self, mount: Mount, device: Path) -> bool:
        rdev = os.stat(device).st_rdev
        return mount.device == f"{os.major(rdev)}:{os.minor(rdev)}"

    # -- stage -----------------------------------------------------------------------------
    def stage(
        self,
        volume_id: str,
        publish_context: Mapping[str, str],
        staging: str,
        fs_type: str,
        flags: Sequence[str],
    ) -> None:
        device = self.device(volume_id, publish_context)
        existing = self.mount_at(staging)
        if existing is not None:
            if self._same_device(existing, device):
                return
            raise MountError(f"{staging} holds another disk ({existing.source})", "ALREADY_EXISTS")
        found = self.filesystem(device)
        if not found:
            log.info("formatting %s (volume %s) as %s", device, volume_id, fs_type)
            self.format(device, fs_type)
        elif found != fs_type:
            raise MountError(
                f"volume {volume_id} ({device}) holds a {found} filesystem, not {fs_type}; "
                "it is never reformatted",
                "FAILED_PRECONDITION",
            )
        os.makedirs(staging, exist_ok=True)
        options = ["defaults", *flags]
        self.run(["mount", "-t", fs_type, "-o", ",".join(options), str(device), staging])

    def unstage(self, staging: str) -> None:
        self.unmount(staging)

    # -- publish ---------------------------------------------------------------------------
    def publish(self, staging: str, target: str, readonly: bool, flags: Sequence[str]) -> None:
        if self.mount_at(staging) is None:
            raise MountError(f"{staging} is not staged", "FAILED_PRECONDITION")
        if self.mount_at(target) is not None:
            return
        os.makedirs(target, exist_ok=True)
        self._bind(staging, target, readonly, flags)

    def publish_block(
        self, volume_id: str, publish_context: Mapping[str, str], target: str, readonly: bool
    ) -> None:
        device = self.block_device(volume_id, publish_context)
        if self.mount_at(target) is not None:
            return
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            Path(target).touch()
        self._bind(str(device), target, readonly, [])

    def block_device(self, volume_id: str, publish_context: Mapping[str, str]) -> Path:
        return self.device(volume_id, publish_context)

    def _bind(self, source: str, target: str, readonly: bool, flags: Sequence[str]) -> None:
        self.run(["mount", "--bind", source, target])
        extra = [f for f in flags if f not in ("bind", "rw")]
        if readonly or extra:
            options = ["remount", "bind", *(["ro"] if readonly else []), *extra]
            try:
                self.run(["mount", "-o", ",".join(options), target])
            except MountError:
                self.run(["umount", target], check=False)
                raise

    def unpublish(self, target: str) -> None:
        self.unmount(target)
        with contextlib.suppress(FileNotFoundError):
            if os.path.isdir(target) and not os.path.islink(target):
                os.rmdir(target)
            else:
                os.unlink(target)

    def unmount(self, path: str) -> None:
        """Unmount everything stacked on ``path``; nothing mounted is fine."""
        while self.mount_at(path) is not None:
            self.run(["umount", path])

    # -- expand and stats ------------------------------------------------------------------
    def expand(self, path: str) -> int:
        """Grow the filesystem mounted at ``path`` (or the block device bound there) to its
        disk; the disk's size in bytes."""
        mount = self.mount_at(path)
        if mount is None:
            raise MountError(f"nothing is mounted at {path}", "NOT_FOUND")
        device = device_of(mount.device)
        if stat.S_ISBLK(os.stat(path).st_mode):  # raw block access: nothing to grow
            return self.device_size(device)
        if mount.fstype.startswith("ext"):
            self.run(["resize2fs", str(device)])
        elif mount.fstype == "xfs":
            self.run(["xfs_growfs", path])
        else:
            raise MountError(f"cannot grow a {mount.fstype} filesystem", "FAILED_PRECONDITION")
        return self.device_size(device)

    def usage(self, path: str) -> Usage:
        mode = os.stat(path).st_mode
        if stat.S_ISBLK(mode):
            size = self.device_size(Path(path))
            return Usage(total_bytes=size, available_bytes=0, used_bytes=0)
        vfs = os.statvfs(path)
        total = vfs.f_blocks * vfs.f_frsize
        available = vfs.f_bavail * vfs.f_frsize
        used = (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize
        return Usage(
            total_bytes=total,
            available_bytes=available,
            used_bytes=used,
            total_inodes=vfs.f_files,
            free_inodes=vfs.f_ffree,
            used_inodes=vfs.f_files - vfs.f_ffree,
        )


class DirectoryMounter(Mounter):
    """A folder per volume under ``root`` stands in for its disk; mounts are bind mounts.

    For csi-sanity against clouds whose disks never reach this machine (moto, the DVP simulator,
    the oVirt emulator): stage, publish, unpublish and unstage run the real ``mount`` and
    ``umount``; formatting and growing a filesystem have nothing to do.
    """

    def __init__(self, root: Path) -> None:
        super().__init__(root, device_wait_s=0)
        self.root = root

    def _folder(self, volume_id: str) -> Path:
        folder = self.root / volume_id.replace("/", "_")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / VOLUME_MARK).write_text(volume_id)
        return folder

    def stage(
        self,
        volume_id: str,
        publish_context: Mapping[str, str],
        staging: str,
        fs_type: str,
        flags: Sequence[str],
    ) -> None:
        folder = self._folder(volume_id)
        if self.mount_at(staging) is not None:
            mark = Path(staging) / VOLUME_MARK
            if mark.exists() and mark.read_text() == volume_id:
                return
            raise MountError(f"{staging} holds another volume", "ALREADY_EXISTS")
        os.makedirs(staging, exist_ok=True)
        self.run(["mount", "--bind", str(folder), staging])

    def block_device(self, volume_id: str, publish_context: Mapping[str, str]) -> Path:
        image = self._folder(volume_id) / "block"
        image.touch()
        return image

    def expand(self, path: str) -> int:
        if self.mount_at(path) is None:
            raise MountError(f"nothing is mounted at {path}", "NOT_FOUND")
        return 0

    def usage(self, path: str) -> Usage:
        if os.path.isfile(path):
            return Usage(total_bytes=os.path.getsize(path), available_bytes=0, used_bytes=0)
        return super().usage(path)
