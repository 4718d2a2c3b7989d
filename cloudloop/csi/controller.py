"""The CSI Controller service: every RPC goes through the volume workflows.

Create, delete, publish, unpublish, expand, modify and the snapshot RPCs start or join their
workflow (:class:`~cloudloop.csi.operations.VolumeOperations`: one workflow ID per volume, so a
retried RPC joins its running operation and a conflicting one is ``ABORTED``); reads
(ValidateVolumeCapabilities, ListVolumes, GetCapacity, ListSnapshots) run a short read
workflow, so this process holds no cloud credentials. Requests are checked
(``INVALID_ARGUMENT``) before anything starts; a result's CSI code becomes the gRPC status.

An RPC waits for its workflow until shortly before the caller's deadline and then answers
``DEADLINE_EXCEEDED``; the sidecars retry with the same arguments and join the same workflow, so
a slow cloud or a killed controller never duplicates a volume or an attachment.
StorageClass parameters are the cloud's (``VolumeSpec.parameters``); the provisioner's
``csi.storage.k8s.io/pvc|pv/*`` become the ``kubernetes.io/created-for/*`` tags, as
aws-ebs-csi-driver tags them, and ``csi.storage.k8s.io/fstype`` goes to the volume context.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import TypeVar

from grpc import aio

from cloudloop.cloud.models import Snapshot, Volume
from cloudloop.csi.operations import VolumeOperations
from cloudloop.csi.spec import (
    GIB,
    Features,
    Refused,
    check_capabilities,
    refuse,
    required,
    unsupported_capability,
    zones_of,
)
from cloudloop.csi.v1 import csi_pb2, csi_pb2_grpc
from cloudloop.messages.volume import (
    AttachVolumeRequest,
    CapacityRange,
    Code,
    CreateSnapshotRequest,
    CreateVolumeRequest,
    DeleteSnapshotRequest,
    DeleteVolumeRequest,
    DetachVolumeRequest,
    ExpandVolumeRequest,
    ModifyVolumeRequest,
    Topology,
    VolumeResult,
)

log = logging.getLogger(__name__)

Context = aio.ServicerContext[object, object]
R = TypeVar("R", bound=VolumeResult)
T = TypeVar("T")

#: The provisioner's and the snapshotter's ``--extra-create-metadata`` keys → the tags the
#: volume or snapshot gets.
METADATA_TAGS = {
    "csi.storage.k8s.io/pvc/name": "kubernetes.io/created-for/pvc/name",
    "csi.storage.k8s.io/pvc/namespace": "kubernetes.io/created-for/pvc/namespace",
    "csi.storage.k8s.io/pv/name": "kubernetes.io/created-for/pv/name",
    # csi-snapshotter's --extra-create-metadata (CreateSnapshot), tagged as aws-ebs-csi-driver does
    "csi.storage.k8s.io/volumesnapshot/name": "kubernetes.io/created-for/volumesnapshot/name",
    "csi.storage.k8s.io/volumesnapshot/namespace": (
        "kubernetes.io/created-for/volumesnapshot/namespace"
    ),
    "csi.storage.k8s.io/volumesnapshotcontent/name": (
        "kubernetes.io/created-for/volumesnapshotcontent/name"
    ),
}
FS_TYPE_KEYS = ("csi.storage.k8s.io/fstype", "fsType")
RESERVED_PREFIX = "csi.storage.k8s.io/"
#: Answer this long before the caller's deadline, so it gets our status, not its own timeout.
DEADLINE_MARGIN_S = 1.0
#: Entries a ListVolumes/ListSnapshots page holds when the caller sets no limit.
DEFAULT_PAGE = 1000


def split_parameters(
    parameters: dict[str, str],
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """StorageClass parameters → (the cloud's, tags, volume context)."""
    cloud: dict[str, str] = {}
    tags: dict[str, str] = {}
    context: dict[str, str] = {}
    for key, value in parameters.items():
        if key in METADATA_TAGS:
            tags[METADATA_TAGS[key]] = value
        elif key in FS_TYPE_KEYS:
            context["fsType"] = value.lower()
        elif not key.startswith(RESERVED_PREFIX):
            cloud[key] = value
    return cloud, tags, context


#: VolumeSnapshotClass parameters: ``tagSpecification_<n>: "key=value"``, as aws-ebs-csi-driver's.
TAG_SPECIFICATION = re.compile(r"tagSpecification_[0-9]+")
SNAPSHOT_PARAMETERS = "tagSpecification_<n> (a 'key=value' tag)"


def snapshot_tags(parameters: dict[str, str]) -> dict[str, str]:
    """CreateSnapshot parameters → the snapshot's tags: the snapshotter's metadata and the class's
    ``tagSpecification_<n>``; anything else is ``INVALID_ARGUMENT`` naming what is valid."""
    cloud, tags, _ = split_parameters(parameters)
    for key, value in sorted(cloud.items()):
        if not TAG_SPECIFICATION.fullmatch(key):
            raise Refused(
                Code.INVALID_ARGUMENT,
                f"unknown snapshot parameter {key!r}; valid: {SNAPSHOT_PARAMETERS}",
            )
        tag, sep, tag_value = value.partition("=")
        if not sep or not tag.strip():
            raise Refused(
                Code.INVALID_ARGUMENT, f"snapshot parameter {key}={value!r} is not 'key=value'"
            )
        tags[tag.strip()] = tag_value.strip()
    return tags


def page(items: Sequence[T], starting_token: str, max_entries: int) -> tuple[list[T], str]:
    """One page of ``items`` (stable order) and the next token ("" at the end).

    The token is the index of the next entry; anything else is ``ABORTED``, as the spec says.
    """
    start = 0
    if starting_token:
        decimal = starting_token.isascii() and starting_token.isdigit()
        if not decimal or int(starting_token) > len(items):
            raise Refused(Code.ABORTED, f"invalid starting token {starting_token!r}")
        start = int(starting_token)
    if max_entries < 0:
        raise Refused(Code.INVALID_ARGUMENT, "max_entries must not be negative")
    end = len(items) if max_entries == 0 else min(len(items), start + max_entries)
    return list(items[start:end]), (str(end) if end < len(items) else "")


def snapshot_message(snapshot: Snapshot) -> csi_pb2.Snapshot:
    message = csi_pb2.Snapshot(
        snapshot_id=snapshot.id,
        source_volume_id=snapshot.source_volume_id,
        size_bytes=snapshot.size_gib * GIB,
        ready_to_use=snapshot.ready,
    )
    if snapshot.created_at:
        message.creation_time.FromNanoseconds(int(snapshot.created_at * 1e9))
    return message


class Controller(csi_pb2_grpc.ControllerServicer):
    def __init__(self, operations: VolumeOperations, features: Features) -> None:
        self.operations = operations
        self.features = features

    # -- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _timeout(context: Context) -> float | None:
        remaining = context.time_remaining()
        if remaining is None:
            return None
        return max(0.1, remaining - DEADLINE_MARGIN_S)

    @staticmethod
    def _ok(result: R) -> R:
        if not result.ok:
            raise Refused(result.code, result.message)
        return result

    def _topology(self, volume: Volume) -> list[csi_pb2.Topology]:
        if not self.features.zonal or not volume.zone:
            return []
        return [csi_pb2.Topology(segments={self.features.topology_key: volume.zone})]

    def _volume(self, volume: Volume, context: dict[str, str]) -> csi_pb2.Volume:
        return csi_pb2.Volume(
            volume_id=volume.id,
            capacity_bytes=volume.size_gib * GIB,
            volume_context=context,
            accessible_topology=self._topology(volume),
        )

    # -- volumes ---------------------------------------------------------------------------
    async def CreateVolume(
        self, request: csi_pb2.CreateVolumeRequest, context: Context
    ) -> csi_pb2.CreateVolumeResponse:
        try:
            required(request.name, "volume name")
            check_capabilities(list(request.volume_capabilities))
            if request.mutable_parameters and not self.features.modify:
                raise Refused(Code.INVALID_ARGUMENT, "mutable parameters are not supported")
            # A VolumeAttributesClass's parameters win over the StorageClass's (as in
            # aws-ebs-csi-driver): the volume is made as a later ModifyVolume would leave it.
            parameters = {**request.parameters, **request.mutable_parameters}
            cloud, tags, volume_context = split_parameters(parameters)
            snapshot_id = ""
            source = request.volume_content_source
            if request.HasField("volume_content_source"):
                if source.WhichOneof("type") != "snapshot" or not self.features.snapshots:
                    raise Refused(Code.INVALID_ARGUMENT, "unsupported volume content source")
                snapshot_id = source.snapshot.snapshot_id
                required(snapshot_id, "source snapshot ID")
            requirements = request.accessibility_requirements
            topology = Topology(
                requisite=zones_of(list(requirements.requisite), self.features.topology_key),
                preferred=zones_of(list(requirements.preferred), self.features.topology_key),
            )
            if not self.features.zonal:
                topology = Topology()
            capacity = request.capacity_range
            result = self._ok(
                await self.operations.create(
                    CreateVolumeRequest(
                        name=request.name,
                        capacity=CapacityRange(
                            required_bytes=capacity.required_bytes,
                            limit_bytes=capacity.limit_bytes,
                        ),
                        topology=topology,
                        tags=tags,
                        parameters=cloud,
                        snapshot_id=snapshot_id,
                    ),
                    timeout=self._timeout(context),
                )
            )
        except Refused as error:
            await refuse(context, error)
            raise
        assert result.volume is not None
        volume = self._volume(result.volume, volume_context)
        if snapshot_id:
            volume.content_source.snapshot.snapshot_id = snapshot_id
        log.info("CreateVolume %s: %s (%s)", request.name, volume.volume_id, result.workflow_id)
        return csi_pb2.CreateVolumeResponse(volume=volume)

    async def DeleteVolume(
        self, request: csi_pb2.DeleteVolumeRequest, context: Context
    ) -> csi_pb2.DeleteVolumeResponse:
        try:
            required(request.volume_id, "volume ID")
            self._ok(
                await self.operations.delete(
                    DeleteVolumeRequest(volume_id=request.volume_id),
                    timeout=self._timeout(context),
                )
            )
        except Refused as error:
            await refuse(context, error)
            raise
        return csi_pb2.DeleteVolumeResponse()

    async def ControllerPublishVolume(
        self, request: csi_pb2.ControllerPublishVolumeRequest, context: Context
    ) -> csi_pb2.ControllerPublishVolumeResponse:
        try:
            required(request.volume_id, "volume ID")
            required(request.node_id, "node ID")
            required(request.HasField("volume_capability"), "volume capability")
            reason = unsupported_capability(request.volume_capability)
            if reason:
                raise Refused(Code.INVALID_ARGUMENT, reason)
            result = self._ok(
                await self.operations.attach(
                    AttachVolumeRequest(volume_id=request.volume_id, node_id=request.node_id),
                    timeout=self._timeout(context),
                )
            )
        except Refused as error:
            await refuse(context, error)
            raise
        return csi_pb2.ControllerPublishVolumeResponse(publish_context=result.publish_context)

    async def ControllerUnpublishVolume(
        self, request: csi_pb2.ControllerUnpublishVolumeRequest, context: Context
    ) -> csi_pb2.ControllerUnpublishVolumeResponse:
        try:
            required(request.volume_id, "volume ID")
            self._ok(
                await self.operations.detach(
                    DetachVolumeRequest(volume_id=request.volume_id, node_id=request.node_id),
                    timeout=self._timeout(context),
                )
            )
        except Refused as error:
            await refuse(context, error)
            raise
        return csi_pb2.ControllerUnpublishVolumeResponse()

    async def ControllerExpandVolume(
        self, request: csi_pb2.ControllerExpandVolumeRequest, context: Context
    ) -> csi_pb2.ControllerExpandVolumeResponse:
        try:
            required(request.volume_id, "volume ID")
            required(request.HasField("capacity_range"), "capacity range")
            if request.HasField("volume_capability"):
                reason = unsupported_capability(request.volume_capability)
                if reason:
                    raise Refused(Code.INVALID_ARGUMENT, reason)
            capacity = request.capacity_range
            result = self._ok(
                await self.operations.expand(
                    ExpandVolumeRequest(
                        volume_id=request.volume_id,
                        capacity=CapacityRange(
                            required_bytes=capacity.required_bytes,
                            limit_bytes=capacity.limit_bytes,
                        ),
                    ),
                    timeout=self._timeout(context),
                )
            )
        except Refused as error:
            await refuse(context, error)
            raise
        block = request.volume_capability.WhichOneof("access_type") == "block"
        return csi_pb2.ControllerExpandVolumeResponse(
            capacity_bytes=result.size_gib * GIB, node_expansion_required=not block
        )

    async def ControllerModifyVolume(
        self, request: csi_pb2.ControllerModifyVolumeRequest, context: Context
    ) -> csi_pb2.ControllerModifyVolumeResponse:
        try:
            required(request.volume_id, "volume ID")
            if not self.features.modify:
                raise Refused(Code.UNIMPLEMENTED, "this cloud's volumes cannot be modified")
            # The resizer's --extra-modify-metadata keys (csi.storage.k8s.io/pv*) are no
            # attributes of the volume: only the cloud's own keys are applied.
            parameters, _, _ = split_parameters(dict(request.mutable_parameters))
            required(parameters, "mutable parameters")
            self._ok(
                await self.operations.modify(
                    ModifyVolumeRequest(volume_id=request.volume_id, parameters=parameters),
                    timeout=self._timeout(context),
                )
            )
        except Refused as error:
            await refuse(context, error)
            raise
        return csi_pb2.ControllerModifyVolumeResponse()

    async def ValidateVolumeCapabilities(
        self, request: csi_pb2.ValidateVolumeCapabilitiesRequest, context: Context
    ) -> csi_pb2.ValidateVolumeCapabilitiesResponse:
        try:
            required(request.volume_id, "volume ID")
            required(list(request.volume_capabilities), "volume capabilities")
            self._ok(
                await self.operations.read(
                    "volume", volume_id=request.volume_id, timeout=self._timeout(context)
                )
            )
        except Refused as error:
            await refuse(context, error)
            raise
        reasons = [unsupported_capability(c) for c in request.volume_capabilities]
        if any(reasons):
            return csi_pb2.ValidateVolumeCapabilitiesResponse(
                message="; ".join(r for r in reasons if r)
            )
        confirmed = csi_pb2.ValidateVolumeCapabilitiesResponse.Confirmed(
            volume_context=request.volume_context,
            volume_capabilities=request.volume_capabilities,
            parameters=request.parameters,
        )
        return csi_pb2.ValidateVolumeCapabilitiesResponse(confirmed=confirmed)

    async def ListVolumes(
        self, request: csi_pb2.ListVolumesRequest, context: Context
    ) -> csi_pb2.ListVolumesResponse:
        try:
            if not self.features.list_volumes:
                raise Refused(Code.UNIMPLEMENTED, "this cloud cannot list its volumes")
            result = self._ok(await self.operations.read("volumes", timeout=self._timeout(context)))
            volumes, next_token = page(result.volumes, request.starting_token, request.max_entries)
        except Refused as error:
            await refuse(context, error)
            raise
        entries = []
        for volume in volumes:
            published = [a.instance_id for a in volume.attachments if a.state != "detached"]
            entries.append(
                csi_pb2.ListVolumesResponse.Entry(
                    volume=self._volume(volume, {}),
                    status=csi_pb2.ListVolumesResponse.VolumeStatus(published_node_ids=published),
                )
            )
        return csi_pb2.ListVolumesResponse(entries=entries, next_token=next_token)

    async def GetCapacity(
        self, request: csi_pb2.GetCapacityRequest, context: Context
    ) -> csi_pb2.GetCapacityResponse:
        try:
            if not self.features.capacity:
                raise Refused(Code.UNIMPLEMENTED, "this cloud cannot say its free capacity")
            cloud, _, _ = split_parameters(dict(request.parameters))
            result = self._ok(
                await self.operations.read(
                    "capacity", parameters=cloud, timeout=self._timeout(context)
                )
            )
        except Refused as error:
            await refuse(context, error)
            raise
        return csi_pb2.GetCapacityResponse(available_capacity=result.capacity_bytes)

    async def ControllerGetCapabilities(
        self, request: csi_pb2.ControllerGetCapabilitiesRequest, context: Context
    ) -> csi_pb2.ControllerGetCapabilitiesResponse:
        return csi_pb2.ControllerGetCapabilitiesResponse(
            capabilities=self.features.controller_capabilities()
        )

    # -- snapshots -------------------------------------------------------------------------
    def _snapshots_supported(self) -> None:
        if not self.features.snapshots:
            raise Refused(Code.UNIMPLEMENTED, "this cloud has no snapshots")

    async def CreateSnapshot(
        self, request: csi_pb2.CreateSnapshotRequest, context: Context
    ) -> csi_pb2.CreateSnapshotResponse:
        try:
            self._snapshots_supported()
            required(request.name, "snapshot name")
            required(request.source_volume_id, "source volume ID")
            tags = snapshot_tags(dict(request.parameters))
            result = self._ok(
                await self.operations.create_snapshot(
                    CreateSnapshotRequest(
                        name=request.name, source_volume_id=request.source_volume_id, tags=tags
                    ),
                    timeout=self._timeout(context),
                )
            )
        except Refused as error:
            await refuse(context, error)
            raise
        assert result.snapshot is not None
        return csi_pb2.CreateSnapshotResponse(snapshot=snapshot_message(result.snapshot))

    async def DeleteSnapshot(
        self, request: csi_pb2.DeleteSnapshotRequest, context: Context
    ) -> csi_pb2.DeleteSnapshotResponse:
        try:
            self._snapshots_supported()
            required(request.snapshot_id, "snapshot ID")
            self._ok(
                await self.operations.delete_snapshot(
                    DeleteSnapshotRequest(snapshot_id=request.snapshot_id),
                    timeout=self._timeout(context),
                )
            )
        except Refused as error:
            await refuse(context, error)
            raise
        return csi_pb2.DeleteSnapshotResponse()

    async def _listed_snapshots(
        self, request: csi_pb2.ListSnapshotsRequest, context: Context
    ) -> list[Snapshot]:
        """The cluster's snapshots, or the one ``snapshot_id`` names, the cluster's or not (the
        snapshotter asks for a pre-provisioned VolumeSnapshotContent's); unknown: none."""
        if not request.snapshot_id:
            result = await self.operations.read("snapshots", timeout=self._timeout(context))
            return list(self._ok(result).snapshots)
        result = await self.operations.read(
            "snapshot", snapshot_id=request.snapshot_id, timeout=self._timeout(context)
        )
        if result.code == Code.NOT_FOUND:
            return []
        return list(self._ok(result).snapshots)

    async def ListSnapshots(
        self, request: csi_pb2.ListSnapshotsRequest, context: Context
    ) -> csi_pb2.ListSnapshotsResponse:
        try:
            self._snapshots_supported()
            if request.max_entries < 0:
                raise Refused(Code.INVALID_ARGUMENT, "max_entries must not be negative")
            found = [
                s
                for s in await self._listed_snapshots(request, context)
                if request.source_volume_id in ("", s.source_volume_id)
            ]
            snapshots, next_token = page(found, request.starting_token, request.max_entries)
        except Refused as error:
            await refuse(context, error)
            raise
        entries = [
            csi_pb2.ListSnapshotsResponse.Entry(snapshot=snapshot_message(s)) for s in snapshots
        ]
        return csi_pb2.ListSnapshotsResponse(entries=entries, next_token=next_token)

    # -- not offered -----------------------------------------------------------------------
    async def _unimplemented(self, context: Context, rpc: str) -> None:
        await refuse(context, Refused(Code.UNIMPLEMENTED, f"{rpc} is not implemented"))

    async def ControllerGetVolume(
        self, request: csi_pb2.ControllerGetVolumeRequest, context: Context
    ) -> csi_pb2.ControllerGetVolumeResponse:
        await self._unimplemented(context, "ControllerGetVolume")
        raise AssertionError("unreachable")

    async def GetSnapshot(
        self, request: csi_pb2.GetSnapshotRequest, context: Context
    ) -> csi_pb2.GetSnapshotResponse:
        await self._unimplemented(context, "GetSnapshot")
        raise AssertionError("unreachable")

    async def ControllerListVolumeHealth(
        self, request: csi_pb2.ControllerListVolumeHealthRequest, context: Context
    ) -> csi_pb2.ControllerListVolumeHealthResponse:
        await self._unimplemented(context, "ControllerListVolumeHealth")
        raise AssertionError("unreachable")

    async def ControllerGetVolumeHealth(
        self, request: csi_pb2.ControllerGetVolumeHealthRequest, context: Context
    ) -> csi_pb2.ControllerGetVolumeHealthResponse:
        await self._unimplemented(context, "ControllerGetVolumeHealth")
        raise AssertionError("unreachable")
