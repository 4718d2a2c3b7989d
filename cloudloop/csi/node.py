"""The CSI Node service: stage (format and mount), publish (bind), expand, stats, node info.

``NodeGetInfo`` answers the node's cloud instance ID (the ID the controller attaches to), its
volume limit and, for zonal clouds, its zone under the cloud's topology key. Every
path-changing RPC holds the volume for its duration; a second call for the same volume
meanwhile is ``ABORTED`` (the kubelet retries), as aws-ebs-csi-driver's in-flight check does.
Required fields are checked first (``INVALID_ARGUMENT``); a path that does not exist is
``NOT_FOUND`` for stats and expansion. NodeUnpublish removes the target path it created;
NodeUnstage leaves the staging path (the kubelet's) in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Iterator

from grpc import aio

from cloudloop.csi.mounter import Mounter, MountError
from cloudloop.csi.spec import (
    READ_ONLY_MODES,
    ZONE_KEY,
    Refused,
    refuse,
    required,
    unsupported_capability,
)
from cloudloop.csi.v1 import csi_pb2, csi_pb2_grpc
from cloudloop.messages.volume import Code

log = logging.getLogger(__name__)

Context = aio.ServicerContext[object, object]


class InFlight:
    """The volumes an RPC is working on; a second RPC for one of them is refused."""

    def __init__(self) -> None:
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self, volume_id: str) -> Iterator[None]:
        with self._lock:
            if volume_id in self._busy:
                raise Refused(Code.ABORTED, f"an operation on volume {volume_id} is in progress")
            self._busy.add(volume_id)
        try:
            yield
        finally:
            with self._lock:
                self._busy.discard(volume_id)


def _mount_error(exc: MountError) -> Refused:
    return Refused(Code[exc.kind], str(exc))


class Node(csi_pb2_grpc.NodeServicer):
    def __init__(
        self,
        mounter: Mounter,
        *,
        node_id: str,
        zone: str = "",
        max_volumes: int = 0,
        default_fs_type: str = "ext4",
        topology_key: str = ZONE_KEY,
    ) -> None:
        self.mounter = mounter
        self.node_id = node_id
        self.zone = zone
        self.max_volumes = max_volumes
        self.default_fs_type = default_fs_type
        self.topology_key = topology_key
        self.in_flight = InFlight()

    async def _call(self, volume_id: str, step: str, work: object) -> None:
        """Run a blocking mounter step in a thread, holding the volume."""
        assert callable(work)
        with self.in_flight.hold(volume_id):
            try:
                await asyncio.to_thread(work)
            except MountError as exc:
                log.warning("%s of volume %s: %s", step, volume_id, exc)
                raise _mount_error(exc) from exc

    def _fs_type(self, capability: csi_pb2.VolumeCapability, volume_context: dict[str, str]) -> str:
        return (
            capability.mount.fs_type or volume_context.get("fsType") or self.default_fs_type
        ).lower()

    # -- stage -----------------------------------------------------------------------------
    async def NodeStageVolume(
        self, request: csi_pb2.NodeStageVolumeRequest, context: Context
    ) -> csi_pb2.NodeStageVolumeResponse:
        try:
            required(request.volume_id, "volume ID")
            required(request.staging_target_path, "staging target path")
            required(request.HasField("volume_capability"), "volume capability")
            capability = request.volume_capability
            reason = unsupported_capability(capability)
            if reason:
                raise Refused(Code.INVALID_ARGUMENT, reason)
            if capability.WhichOneof("access_type") == "mount":
                fs_type = self._fs_type(capability, dict(request.volume_context))
                flags = list(capability.mount.mount_flags)
                publish_context = dict(request.publish_context)

                def stage() -> None:
                    self.mounter.stage(
                        request.volume_id,
                        publish_context,
                        request.staging_target_path,
                        fs_type,
                        flags,
                    )

                await self._call(request.volume_id, "stage", stage)
        except Refused as error:
            await refuse(context, error)
            raise
        return csi_pb2.NodeStageVolumeResponse()

    async def NodeUnstageVolume(
        self, request: csi_pb2.NodeUnstageVolumeRequest, context: Context
    ) -> csi_pb2.NodeUnstageVolumeResponse:
        try:
            required(request.volume_id, "volume ID")
            required(request.staging_target_path, "staging target path")
            path = request.staging_target_path
            await self._call(request.volume_id, "unstage", lambda: self.mounter.unstage(path))
        except Refused as error:
            await refuse(context, error)
            raise
        return csi_pb2.NodeUnstageVolumeResponse()

    # -- publish ---------------------------------------------------------------------------
    async def NodePublishVolume(
        self, request: csi_pb2.NodePublishVolumeRequest, context: Context
    ) -> csi_pb2.NodePublishVolumeResponse:
        try:
            required(request.volume_id, "volume ID")
            required(request.target_path, "target path")
            required(request.HasField("volume_capability"), "volume capability")
            capability = request.volume_capability
            reason = unsupported_capability(capability)
            if reason:
                raise Refused(Code.INVALID_ARGUMENT, reason)
            readonly = request.readonly or capability.access_mode.mode in READ_ONLY_MODES
            target = request.target_path
            if capability.WhichOneof("access_type") == "block":
                publish_context = dict(request.publish_context)

                def publish() -> None:
                    self.mounter.publish_block(request.volume_id, publish_context, target, readonly)
            else:
                required(request.staging_target_path, "staging target path")
                staging = request.staging_target_path
                flags = list(capability.mount.mount_flags)

                def publish() -> None:
                    self.mounter.publish(staging, target, readonly, flags)

            await self._call(request.volume_id, "publish", publish)
        except Refused as error:
            await refuse(context, error)
            raise
        return csi_pb2.NodePublishVolumeResponse()

    async def NodeUnpublishVolume(
        self, request: csi_pb2.NodeUnpublishVolumeRequest, context: Context
    ) -> csi_pb2.NodeUnpublishVolumeResponse:
        try:
            required(request.volume_id, "volume ID")
            required(request.target_path, "target path")
            target = request.target_path
            await self._call(request.volume_id, "unpublish", lambda: self.mounter.unpublish(target))
        except Refused as error:
            await refuse(context, error)
            raise
        return csi_pb2.NodeUnpublishVolumeResponse()

    # -- stats and expansion ---------------------------------------------------------------
    async def NodeGetVolumeStats(
        self, request: csi_pb2.NodeGetVolumeStatsRequest, context: Context
    ) -> csi_pb2.NodeGetVolumeStatsResponse:
        try:
            required(request.volume_id, "volume ID")
            required(request.volume_path, "volume path")
            if not os.path.exists(request.volume_path):
                raise Refused(Code.NOT_FOUND, f"{request.volume_path} does not exist")
            usage = await asyncio.to_thread(self.mounter.usage, request.volume_path)
        except MountError as exc:
            await refuse(context, _mount_error(exc))
            raise
        except Refused as error:
            await refuse(context, error)
            raise
        Unit = csi_pb2.VolumeUsage.Unit
        entries = [
            csi_pb2.VolumeUsage(
                unit=Unit.BYTES,
                total=usage.total_bytes,
                available=usage.available_bytes,
                used=usage.used_bytes,
            )
        ]
        if usage.total_inodes:
            entries.append(
                csi_pb2.VolumeUsage(
                    unit=Unit.INODES,
                    total=usage.total_inodes,
                    available=usage.free_inodes,
                    used=usage.used_inodes,
                )
            )
        return csi_pb2.NodeGetVolumeStatsResponse(usage=entries)

    async def NodeExpandVolume(
        self, request: csi_pb2.NodeExpandVolumeRequest, context: Context
    ) -> csi_pb2.NodeExpandVolumeResponse:
        try:
            required(request.volume_id, "volume ID")
            required(request.volume_path, "volume path")
            path = request.volume_path
            if not os.path.exists(path):
                raise Refused(Code.NOT_FOUND, f"{path} does not exist")
            if request.volume_capability.WhichOneof("access_type") == "block":
                return csi_pb2.NodeExpandVolumeResponse()
            sizes: list[int] = []
            await self._call(
                request.volume_id, "expand", lambda: sizes.append(self.mounter.expand(path))
            )
        except Refused as error:
            await refuse(context, error)
            raise
        return csi_pb2.NodeExpandVolumeResponse(capacity_bytes=sizes[0] if sizes else 0)

    # -- info ------------------------------------------------------------------------------
    async def NodeGetCapabilities(
        self, request: csi_pb2.NodeGetCapabilitiesRequest, context: Context
    ) -> csi_pb2.NodeGetCapabilitiesResponse:
        RPC = csi_pb2.NodeServiceCapability.RPC
        rpcs = [RPC.STAGE_UNSTAGE_VOLUME, RPC.EXPAND_VOLUME, RPC.GET_VOLUME_STATS]
        return csi_pb2.NodeGetCapabilitiesResponse(
            capabilities=[
                csi_pb2.NodeServiceCapability(rpc=csi_pb2.NodeServiceCapability.RPC(type=t))
                for t in rpcs
            ]
        )

    async def NodeGetInfo(
        self, request: csi_pb2.NodeGetInfoRequest, context: Context
    ) -> csi_pb2.NodeGetInfoResponse:
        response = csi_pb2.NodeGetInfoResponse(
            node_id=self.node_id, max_volumes_per_node=self.max_volumes
        )
        if self.zone:
            response.accessible_topology.segments[self.topology_key] = self.zone
        return response

    # -- not offered -----------------------------------------------------------------------
    async def NodeGetVolumeHealth(
        self, request: csi_pb2.NodeGetVolumeHealthRequest, context: Context
    ) -> csi_pb2.NodeGetVolumeHealthResponse:
        await refuse(context, Refused(Code.UNIMPLEMENTED, "NodeGetVolumeHealth"))
        raise AssertionError("unreachable")

    async def NodeGetStorageHealth(
        self, request: csi_pb2.NodeGetStorageHealthRequest, context: Context
    ) -> csi_pb2.NodeGetStorageHealthResponse:
        await refuse(context, Refused(Code.UNIMPLEMENTED, "NodeGetStorageHealth"))
        raise AssertionError("unreachable")
