"""The CSI rules for volumes, provider-neutral and pure: request checks, capacity rounding, zone
choice, what makes an existing volume compatible with a create (request fingerprints:
:mod:`cloudloop.rules.requests`).

The client API (:mod:`cloudloop.csi.operations`) checks requests with these before it starts a
workflow; the activities (:mod:`activities.volume`) use them against what the cloud reports.
"""

from __future__ import annotations

from collections.abc import Iterable

from cloudloop.cloud.models import Volume
from cloudloop.messages.volume import (
    AttachVolumeRequest,
    CapacityRange,
    Code,
    CreateSnapshotRequest,
    CreateVolumeInput,
    CreateVolumeRequest,
    DeleteSnapshotRequest,
    DeleteVolumeRequest,
    DetachVolumeRequest,
    ExpandVolumeRequest,
    ModifyVolumeRequest,
    Topology,
)

GIB = 1 << 30
#: Size of a volume whose request gives no capacity (the smallest EBS gp3 volume).
DEFAULT_SIZE_GIB = 1


class RequestRejected(Exception):
    """The request cannot be served as asked; ``code`` says how (CSI status)."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def size_gib(capacity: CapacityRange) -> int:
    """The required capacity rounded up to whole GiB, within ``limit_bytes`` if one is set."""
    required, limit = capacity.required_bytes, capacity.limit_bytes
    if required < 0 or limit < 0:
        raise RequestRejected(Code.OUT_OF_RANGE, f"negative capacity: {capacity}")
    if limit and required > limit:
        raise RequestRejected(
            Code.OUT_OF_RANGE, f"required {required} bytes exceeds the limit of {limit} bytes"
        )
    gib = -(-required // GIB) if required else DEFAULT_SIZE_GIB
    if limit and gib * GIB > limit:
        raise RequestRejected(
            Code.OUT_OF_RANGE,
            f"{required} bytes rounded up to whole GiB ({gib} GiB) exceeds the limit of "
            f"{limit} bytes",
        )
    return gib


def choose_zone(topology: Topology, available: Iterable[str]) -> str | None:
    """The first preferred zone that is allowed, else the first allowed; ``None`` if none fits.

    Allowed means available in the cloud and, when ``requisite`` is given, listed there. Without
    any topology the alphabetically first available zone is chosen (deterministic).
    """
    live = list(dict.fromkeys(available))
    requisite = [z for z in topology.requisite if z in live]
    allowed = requisite if topology.requisite else sorted(live)
    for zone in topology.preferred:
        if zone in allowed:
            return zone
    return allowed[0] if allowed else None


def incompatibility(existing: Volume, input: CreateVolumeInput) -> str | None:
    """Why ``existing`` cannot answer a create of ``input`` (CSI ``ALREADY_EXISTS``), or None."""
    if existing.size_gib != input.size_gib:
        return (
            f"volume {input.name!r} already exists as {existing.id} with {existing.size_gib} GiB, "
            f"not {input.size_gib} GiB"
        )
    if input.volume_type and existing.volume_type and existing.volume_type != input.volume_type:
        return (
            f"volume {input.name!r} already exists as {existing.id} of type "
            f"{existing.volume_type}, not {input.volume_type}"
        )
    if input.topology.requisite and existing.zone not in input.topology.requisite:
        return (
            f"volume {input.name!r} already exists as {existing.id} in zone {existing.zone}, "
            f"outside {input.topology.requisite}"
        )
    return None


def check_request(
    request: CreateVolumeRequest
    | DeleteVolumeRequest
    | AttachVolumeRequest
    | DetachVolumeRequest
    | ExpandVolumeRequest
    | ModifyVolumeRequest
    | CreateSnapshotRequest
    | DeleteSnapshotRequest,
) -> None:
    """CSI ``INVALID_ARGUMENT`` checks, made before any workflow starts or cloud call is made."""
    if isinstance(request, CreateVolumeRequest):
        if not request.name:
            raise RequestRejected(Code.INVALID_ARGUMENT, "volume name missing")
        return
    if isinstance(request, CreateSnapshotRequest):
        if not request.name:
            raise RequestRejected(Code.INVALID_ARGUMENT, "snapshot name missing")
        if not request.source_volume_id:
            raise RequestRejected(Code.INVALID_ARGUMENT, "source volume ID missing")
        return
    if isinstance(request, DeleteSnapshotRequest):
        if not request.snapshot_id:
            raise RequestRejected(Code.INVALID_ARGUMENT, "snapshot ID missing")
        return
    if not request.volume_id:
        raise RequestRejected(Code.INVALID_ARGUMENT, "volume ID missing")
    if isinstance(request, AttachVolumeRequest) and not request.node_id:
        raise RequestRejected(Code.INVALID_ARGUMENT, "node ID missing")
    if isinstance(request, ExpandVolumeRequest) and not request.capacity.required_bytes:
        raise RequestRejected(Code.INVALID_ARGUMENT, "required capacity missing")
    if isinstance(request, ModifyVolumeRequest) and not request.parameters:
        raise RequestRejected(Code.INVALID_ARGUMENT, "mutable parameters missing")
