"""Models and names of the volume workflows (CSI controller operations on cloud disks).

The requests are what a CSI controller passes (capacity range, topology, node ID); the inputs are
what the workflows and activities take (sizes already rounded to GiB); every result carries a
CSI-style :class:`Code`, so a refusal ("already exists", "operation pending", ...) is a result the
gRPC layer turns into a status, never a workflow failure. The workflow IDs and operation names
are here too (the CSI layer builds them without importing the workflows).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from cloudloop.cloud.models import Snapshot, Volume
from cloudloop.messages.errors import ErrorKind


class VolumeActivity:
    CREATE = "volume.create"
    DELETE = "volume.delete"
    ATTACH = "volume.attach"
    DETACH = "volume.detach"
    EXPAND = "volume.expand"
    MODIFY = "volume.modify"
    READ = "volume.read"
    CREATE_SNAPSHOT = "snapshot.create"
    DELETE_SNAPSHOT = "snapshot.delete"


class VolumeWorkflow:
    """Workflow type names."""

    CREATE = "CreateVolume"
    DELETE = "DeleteVolume"
    ATTACH = "AttachVolume"
    DETACH = "DetachVolume"
    EXPAND = "ExpandVolume"
    MODIFY = "ModifyVolume"
    READ = "ReadVolumes"
    CREATE_SNAPSHOT = "CreateSnapshot"
    DELETE_SNAPSHOT = "DeleteSnapshot"


class Code(StrEnum):
    """The gRPC status codes a CSI controller answers with (names as in ``grpc.StatusCode``)."""

    OK = "OK"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"
    UNAVAILABLE = "UNAVAILABLE"


#: Cloud error kinds (``ApplicationError.type``) → the code a CSI controller returns.
CODE_BY_ERROR_KIND: dict[str, Code] = {
    ErrorKind.NOT_FOUND: Code.NOT_FOUND,
    ErrorKind.ALREADY_EXISTS: Code.ALREADY_EXISTS,
    ErrorKind.INVALID_REQUEST: Code.INVALID_ARGUMENT,
    ErrorKind.FAILED_PRECONDITION: Code.FAILED_PRECONDITION,
    ErrorKind.OUT_OF_RANGE: Code.OUT_OF_RANGE,
    ErrorKind.RESOURCE_EXHAUSTED: Code.RESOURCE_EXHAUSTED,
    ErrorKind.QUOTA_EXCEEDED: Code.RESOURCE_EXHAUSTED,
    ErrorKind.INSUFFICIENT_CAPACITY: Code.RESOURCE_EXHAUSTED,
    ErrorKind.OPERATION_PENDING: Code.ABORTED,
    ErrorKind.NOT_SUPPORTED: Code.UNIMPLEMENTED,
    ErrorKind.CLOUD_AUTH_FAILED: Code.PERMISSION_DENIED,
    ErrorKind.CLOUD_UNREACHABLE: Code.UNAVAILABLE,
    ErrorKind.CLOUD_THROTTLED: Code.UNAVAILABLE,
    ErrorKind.CLOUD_ERROR: Code.UNAVAILABLE,
}


#: The error type of a local attempt that stopped waiting: its details are the progress, and
#: the workflow goes on with a heartbeating activity (``VolumeInput.resume``).
HAND_OVER = "HandOver"


def code_for(error_kind: str | None) -> Code:
    """Unknown kinds are internal errors (a bug, not a cloud answer)."""
    return CODE_BY_ERROR_KIND.get(error_kind or "", Code.INTERNAL)


# -- requests (what the CSI controller passes) ----------------------------------------------
class CapacityRange(BaseModel):
    """CSI ``CapacityRange``: 0 means unset."""

    required_bytes: int = 0
    limit_bytes: int = 0


class Topology(BaseModel):
    """CSI ``TopologyRequirement`` reduced to zones: requisite (allowed) and preferred (order)."""

    requisite: list[str] = Field(default_factory=list)
    preferred: list[str] = Field(default_factory=list)


class CreateVolumeRequest(BaseModel):
    name: str
    capacity: CapacityRange = CapacityRange()
    #: The cloud's disk type (EBS: ``gp3``, ``io2``, ...); the driver's default when empty.
    volume_type: str = ""
    topology: Topology = Topology()
    #: Extra tags (e.g. the PVC's namespace and name from ``--extra-create-metadata``).
    tags: dict[str, str] = Field(default_factory=dict)
    #: The StorageClass parameters the cloud reads (see ``VolumeSpec.parameters``).
    parameters: dict[str, str] = Field(default_factory=dict)
    #: Fill the volume from this snapshot.
    snapshot_id: str = ""


class DeleteVolumeRequest(BaseModel):
    volume_id: str


class AttachVolumeRequest(BaseModel):
    volume_id: str
    #: CSI node ID (the instance ID, or a provider ID).
    node_id: str
    #: A MULTI_NODE access mode: do not refuse when the volume is attached to another node.
    multi_node: bool = False


class DetachVolumeRequest(BaseModel):
    volume_id: str
    #: Empty: detach from every node (CSI ``ControllerUnpublishVolume`` without ``node_id``).
    node_id: str = ""


class ExpandVolumeRequest(BaseModel):
    volume_id: str
    capacity: CapacityRange


class ModifyVolumeRequest(BaseModel):
    """CSI ``ControllerModifyVolume``: the VolumeAttributesClass's parameters."""

    volume_id: str
    parameters: dict[str, str] = Field(default_factory=dict)


class CreateSnapshotRequest(BaseModel):
    name: str
    source_volume_id: str
    tags: dict[str, str] = Field(default_factory=dict)


class DeleteSnapshotRequest(BaseModel):
    snapshot_id: str


ReadKind = Literal["volume", "volumes", "capacity", "snapshots", "snapshot"]


# -- workflow and activity inputs (one model per workflow; the activity takes the same) ------
class VolumeInput(BaseModel):
    cluster: str
    provider: str
    #: What a local attempt had done when it handed the wait over (``HAND_OVER``), for the
    #: heartbeating activity that goes on from there: empty otherwise.
    resume: dict[str, Any] = Field(default_factory=dict)


class CreateVolumeInput(VolumeInput):
    name: str
    size_gib: int
    volume_type: str = ""
    topology: Topology = Topology()
    tags: dict[str, str] = Field(default_factory=dict)
    parameters: dict[str, str] = Field(default_factory=dict)
    snapshot_id: str = ""


class DeleteVolumeInput(VolumeInput):
    volume_id: str


class AttachVolumeInput(VolumeInput):
    volume_id: str
    node_id: str
    multi_node: bool = False


class DetachVolumeInput(VolumeInput):
    volume_id: str
    node_id: str = ""


class ExpandVolumeInput(VolumeInput):
    volume_id: str
    size_gib: int


class ModifyVolumeInput(VolumeInput):
    volume_id: str
    parameters: dict[str, str] = Field(default_factory=dict)


class ReadVolumesInput(VolumeInput):
    """A read for the CSI controller: one volume, all volumes, free capacity, the cluster's
    snapshots, one snapshot (any, the cluster's or not: a pre-provisioned one)."""

    kind: ReadKind
    volume_id: str = ""
    snapshot_id: str = ""
    parameters: dict[str, str] = Field(default_factory=dict)


class CreateSnapshotInput(VolumeInput):
    name: str
    source_volume_id: str
    tags: dict[str, str] = Field(default_factory=dict)


class DeleteSnapshotInput(VolumeInput):
    snapshot_id: str


# -- results ----------------------------------------------------------------------------------
class VolumeResult(BaseModel):
    code: Code = Code.OK
    message: str = ""
    #: The workflow that produced the result (or, for ABORTED, the one still running).
    workflow_id: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.OK


class CreateVolumeResult(VolumeResult):
    volume: Volume | None = None


class DeleteVolumeResult(VolumeResult):
    pass


class AttachResult(VolumeResult):
    device: str = ""
    #: CSI ``publish_context`` for the node plugin (``devicePath``).
    publish_context: dict[str, str] = Field(default_factory=dict)


class DetachResult(VolumeResult):
    pass


class ExpandResult(VolumeResult):
    size_gib: int = 0
    #: The node must still grow the filesystem (also when the disk already had the size).
    node_expansion_required: bool = True


class ModifyResult(VolumeResult):
    """``cooldown_s`` > 0: the cloud takes no change of this volume yet; the workflow waits on
    a timer and asks again (nothing was changed)."""

    cooldown_s: float = 0.0


class ReadVolumesResult(VolumeResult):
    volumes: list[Volume] = Field(default_factory=list)
    snapshots: list[Snapshot] = Field(default_factory=list)
    capacity_bytes: int = 0


class SnapshotResult(VolumeResult):
    snapshot: Snapshot | None = None


def create_workflow_id(name: str) -> str:
    return f"volume-create/{name}"


def volume_workflow_id(volume_id: str) -> str:
    """The one ID every operation on an existing volume runs under (the per-volume lock)."""
    return f"volume/{volume_id}"


def modify_workflow_id(volume_id: str) -> str:
    """A change of attributes may wait hours for the cloud's cooldown: it runs under its own ID,
    so attaches and detaches of the volume go on meanwhile."""
    return f"volume-modify/{volume_id}"


def snapshot_create_workflow_id(name: str) -> str:
    return f"snapshot-create/{name}"


def snapshot_workflow_id(snapshot_id: str) -> str:
    return f"snapshot/{snapshot_id}"


def read_workflow_id(kind: str, token: str) -> str:
    """Reads take no lock and have no identity of their own: ``volume-read/<kind>/<token>``."""
    return f"volume-read/{kind}/{token}"


def operation_name(kind: str, volume: str, node: str | None = None) -> str:
    """The operation's own name: ``attach/<volume>/<node>``, ``expand/<volume>``, ..."""
    return f"{kind}/{volume}/{node}" if node is not None else f"{kind}/{volume}"
