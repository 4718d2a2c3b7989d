"""The node plugin on real block devices: loop devices stand in for attached disks.

Each test backs a loop device with a sparse file and names it in a ``by-id`` folder the way the
guest sees the cloud's disk (virtio serial, EBS NVMe serial, virtio-scsi), then drives the Node
service over its socket: stage formats and mounts (real mkfs and mount), publish bind-mounts,
the "cloud" grows the disk (file grown, ``losetup -c``) and NodeExpandVolume grows the
filesystem, unpublish removes the target, unstage unmounts, a second stage keeps the data.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.registry import Settings
from cloudloop.csi.v1 import csi_pb2, csi_pb2_grpc
from tests.csi.support import channel, csi_settings, node_service, socket_folder

MIB = 1 << 20


def _loop_unusable() -> str:
    if os.geteuid() != 0:
        return "loop devices and mounts need root"
    if not os.path.exists("/dev/loop-control"):
        return "no /dev/loop-control on this machine (loop devices unavailable)"
    if shutil.which("losetup") is None:
        return "losetup (util-linux) is not installed"
    probe = subprocess.run(["losetup", "-f"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"losetup cannot allocate a loop device here: {probe.stderr.strip()}"
    return ""


def _has_capability(bit: int) -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False


CAP_SYS_RESOURCE = 24


def expand_skip(fs_type: str) -> str:
    """Why online growth of ``fs_type`` cannot be checked here ("" when it can)."""
    if fs_type == "ext4" and not _has_capability(CAP_SYS_RESOURCE):
        return (
            "online ext4 resize (EXT4_IOC_RESIZE_FS) needs CAP_SYS_RESOURCE, which root lacks here"
        )
    return ""


UNUSABLE = _loop_unusable()
pytestmark = pytest.mark.skipif(bool(UNUSABLE), reason=UNUSABLE)


@dataclass
class LoopDisk:
    backing: Path
    device: str

    def grow(self, size: int) -> None:
        """What the cloud's resize looks like from the guest: a bigger disk."""
        os.truncate(self.backing, size)
        subprocess.run(["losetup", "-c", self.device], check=True)


@pytest.fixture
def loop_disk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LoopDisk]:
    size = getattr(request, "param", 64 * MIB)
    backing = tmp_path / "disk.img"
    with open(backing, "wb") as out:
        out.truncate(size)
    device = subprocess.run(
        ["losetup", "-f", "--show", str(backing)], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        yield LoopDisk(backing, device)
    finally:
        unmount_below(tmp_path)  # a failed test may leave its mounts behind
        subprocess.run(["losetup", "-d", device], check=False)


def unmount_below(folder: Path) -> None:
    done = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True)
    for target in sorted(done.stdout.split(), key=len, reverse=True):
        if target.startswith(f"{folder}/"):
            subprocess.run(["umount", "-l", target], check=False)


def _settings(tmp_path: Path, device_dir: Path) -> Settings:
    base = Settings(provider="aws", aws=AwsSettings())
    return csi_settings(base, device_dir=device_dir, device_wait_s=2, storage_classes=False)


def _mount_capability(fs_type: str = "ext4") -> csi_pb2.VolumeCapability:
    return csi_pb2.VolumeCapability(
        mount=csi_pb2.VolumeCapability.MountVolume(fs_type=fs_type),
        access_mode=csi_pb2.VolumeCapability.AccessMode(
            mode=csi_pb2.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
        ),
    )


def _block_capability() -> csi_pb2.VolumeCapability:
    return csi_pb2.VolumeCapability(
        block=csi_pb2.VolumeCapability.BlockVolume(),
        access_mode=csi_pb2.VolumeCapability.AccessMode(
            mode=csi_pb2.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
        ),
    )


def _mounted(path: Path) -> str:
    """The filesystem type mounted at ``path`` ("" when nothing is)."""
    done = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE", "--mountpoint", str(path)],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 else ""


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[tuple[csi_pb2_grpc.NodeAsyncStub, Path]]:
    device_dir = tmp_path / "by-id"
    device_dir.mkdir()
    settings = _settings(tmp_path, device_dir)
    driver = AwsDriver(AWS.section(settings))
    async with (
        socket_folder() as sockets,
        node_service(settings, driver, sockets.node, node_id="i-0123456789abcdef0", zone="z1"),
        channel(sockets.node) as opened,
    ):
        yield csi_pb2_grpc.NodeStub(opened), device_dir


@pytest.mark.parametrize(
    ("by_id_name", "context", "fs_type"),
    [
        pytest.param(
            "virtio-0b3c9a1f-2d4e-4f6a-8",
            {"serial": "0b3c9a1f-2d4e-4f6a-8b9c-0d1e2f3a4b5c"},
            "ext4",
            id="virtio-serial-ext4",
        ),
        pytest.param(
            "nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0",
            {"serial": "vol0123456789abcdef0", "devicePath": "/dev/xvdba"},
            "ext4",
            id="ebs-nvme-ext4",
        ),
        pytest.param(
            "scsi-0QEMU_QEMU_HARDDISK_6b1f0a2e-3c4d-4e5f-8a9b-0c1d2e3f4a5b",
            {"serial": "6b1f0a2e-3c4d-4e5f-8a9b-0c1d2e3f4a5b"},
            "ext4",
            id="virtio-scsi-ext4",
        ),
        pytest.param(
            "virtio-0b3c9a1f-2d4e-4f6a-8",
            {"serial": "0b3c9a1f-2d4e-4f6a-8b9c-0d1e2f3a4b5c"},
            "xfs",
            id="virtio-serial-xfs",
            marks=pytest.mark.skipif(
                shutil.which("mkfs.xfs") is None, reason="xfsprogs is not installed"
            ),
        ),
    ],
)
@pytest.mark.parametrize("loop_disk", [320 * MIB], indirect=True)
async def test_stage_publish_expand_unpublish_unstage(
    node: tuple[csi_pb2_grpc.NodeAsyncStub, Path],
    loop_disk: LoopDisk,
    tmp_path: Path,
    by_id_name: str,
    context: dict[str, str],
    fs_type: str,
) -> None:
    stub, device_dir = node
    (device_dir / by_id_name).symlink_to(loop_disk.device)
    staging, target = tmp_path / "staging", tmp_path / "pods" / "target"
    staging.mkdir()
    volume_id = "vol-under-test"
    capability = _mount_capability(fs_type)
    for _ in range(2):  # repeated calls are no-ops
        await stub.NodeStageVolume(
            csi_pb2.NodeStageVolumeRequest(
                volume_id=volume_id,
                staging_target_path=str(staging),
                volume_capability=capability,
                publish_context=context,
            )
        )
    assert _mounted(staging) == fs_type
    for _ in range(2):
        await stub.NodePublishVolume(
            csi_pb2.NodePublishVolumeRequest(
                volume_id=volume_id,
                staging_target_path=str(staging),
                target_path=str(target),
                volume_capability=capability,
            )
        )
    assert _mounted(target) == fs_type
    (target / "data").write_text("kept")

    stats = await stub.NodeGetVolumeStats(
        csi_pb2.NodeGetVolumeStatsRequest(volume_id=volume_id, volume_path=str(target))
    )
    total_before = stats.usage[0].total
    assert 0 < total_before <= 320 * MIB and stats.usage[0].used > 0

    for _ in range(2):
        await stub.NodeUnpublishVolume(
            csi_pb2.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=str(target))
        )
    assert not target.exists()
    for _ in range(2):
        await stub.NodeUnstageVolume(
            csi_pb2.NodeUnstageVolumeRequest(volume_id=volume_id, staging_target_path=str(staging))
        )
    assert _mounted(staging) == ""

    # Staged again: the filesystem is found, never formatted again.
    await stub.NodeStageVolume(
        csi_pb2.NodeStageVolumeRequest(
            volume_id=volume_id,
            staging_target_path=str(staging),
            volume_capability=capability,
            publish_context=context,
        )
    )
    try:
        assert (staging / "data").read_text() == "kept"
    finally:
        await stub.NodeUnstageVolume(
            csi_pb2.NodeUnstageVolumeRequest(volume_id=volume_id, staging_target_path=str(staging))
        )


async def test_raw_block_publish(
    node: tuple[csi_pb2_grpc.NodeAsyncStub, Path], loop_disk: LoopDisk, tmp_path: Path
) -> None:
    stub, device_dir = node
    (device_dir / "virtio-blockvolume0001").symlink_to(loop_disk.device)
    target = tmp_path / "pods" / "block"
    context = {"serial": "blockvolume0001"}
    await stub.NodeStageVolume(
        csi_pb2.NodeStageVolumeRequest(
            volume_id="v1",
            staging_target_path=str(tmp_path / "staging"),
            volume_capability=_block_capability(),
            publish_context=context,
        )
    )
    await stub.NodePublishVolume(
        csi_pb2.NodePublishVolumeRequest(
            volume_id="v1",
            target_path=str(target),
            volume_capability=_block_capability(),
            publish_context=context,
        )
    )
    try:
        assert os.major(target.stat().st_rdev) == os.major(os.stat(loop_disk.device).st_rdev)
        stats = await stub.NodeGetVolumeStats(
            csi_pb2.NodeGetVolumeStatsRequest(volume_id="v1", volume_path=str(target))
        )
        assert stats.usage[0].total == 64 * MIB
    finally:
        await stub.NodeUnpublishVolume(
            csi_pb2.NodeUnpublishVolumeRequest(volume_id="v1", target_path=str(target))
        )
    assert not target.exists()


async def test_a_disk_with_another_filesystem_is_never_formatted(
    node: tuple[csi_pb2_grpc.NodeAsyncStub, Path], loop_disk: LoopDisk, tmp_path: Path
) -> None:
    stub, device_dir = node
    subprocess.run(["mkfs.ext2", "-q", "-F", loop_disk.device], check=True)
    (device_dir / "virtio-otherfs").symlink_to(loop_disk.device)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.NodeStageVolume(
            csi_pb2.NodeStageVolumeRequest(
                volume_id="v2",
                staging_target_path=str(tmp_path / "staging"),
                volume_capability=_mount_capability("ext4"),
                publish_context={"serial": "otherfs"},
            )
        )
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "ext2" in (refused.value.details() or "")
    probe = subprocess.run(
        ["blkid", "-p", "-s", "TYPE", "-o", "value", loop_disk.device],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "ext2"


async def test_a_disk_that_never_appears_is_not_found(
    node: tuple[csi_pb2_grpc.NodeAsyncStub, Path], tmp_path: Path
) -> None:
    stub, _ = node
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.NodeStageVolume(
            csi_pb2.NodeStageVolumeRequest(
                volume_id="v3",
                staging_target_path=str(tmp_path / "staging"),
                volume_capability=_mount_capability(),
                publish_context={"serial": "nowhere"},
            )
        )
    assert refused.value.code() is grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    "fs_type",
    [
        pytest.param(
            "ext4",
            id="ext4",
            marks=pytest.mark.skipif(bool(expand_skip("ext4")), reason=expand_skip("ext4")),
        ),
        pytest.param(
            "xfs",
            id="xfs",
            marks=pytest.mark.skipif(
                shutil.which("mkfs.xfs") is None, reason="xfsprogs is not installed"
            ),
        ),
    ],
)
@pytest.mark.parametrize("loop_disk", [320 * MIB], indirect=True)
async def test_online_expansion_grows_the_filesystem(
    node: tuple[csi_pb2_grpc.NodeAsyncStub, Path],
    loop_disk: LoopDisk,
    tmp_path: Path,
    fs_type: str,
) -> None:
    stub, device_dir = node
    (device_dir / "virtio-growing").symlink_to(loop_disk.device)
    staging, target = tmp_path / "staging", tmp_path / "pods" / "target"
    staging.mkdir()
    capability = _mount_capability(fs_type)
    context = {"serial": "growing"}
    await stub.NodeStageVolume(
        csi_pb2.NodeStageVolumeRequest(
            volume_id="v9",
            staging_target_path=str(staging),
            volume_capability=capability,
            publish_context=context,
        )
    )
    await stub.NodePublishVolume(
        csi_pb2.NodePublishVolumeRequest(
            volume_id="v9",
            staging_target_path=str(staging),
            target_path=str(target),
            volume_capability=capability,
        )
    )
    try:
        before = os.statvfs(target)
        loop_disk.grow(448 * MIB)
        grown = await stub.NodeExpandVolume(
            csi_pb2.NodeExpandVolumeRequest(volume_id="v9", volume_path=str(target))
        )
        assert grown.capacity_bytes == 448 * MIB
        after = os.statvfs(target)
        assert (after.f_blocks - before.f_blocks) * after.f_frsize > 64 * MIB
    finally:
        await stub.NodeUnpublishVolume(
            csi_pb2.NodeUnpublishVolumeRequest(volume_id="v9", target_path=str(target))
        )
        await stub.NodeUnstageVolume(
            csi_pb2.NodeUnstageVolumeRequest(volume_id="v9", staging_target_path=str(staging))
        )
