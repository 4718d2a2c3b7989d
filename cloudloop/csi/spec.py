"""What the CSI gRPC surface shares: status codes, access modes, topology and plugin capabilities.

Results of :class:`~cloudloop.csi.operations.VolumeOperations` carry a CSI code whose name is a
``grpc.StatusCode`` name, so the mapping is one lookup and never invents a code; gRPC status
details stay empty (the spec's rule), the message says what happened.

Features are derived from the configured cloud's driver, never listed by hand: zonal volumes
(``VOLUME_ACCESSIBILITY_CONSTRAINTS``, one segment under the cloud's topology key: the upstream
driver's, e.g. Cinder CSI's ``topology.cinder.csi.openstack.org/zone``, else the well-known
``topology.kubernetes.io/zone``), snapshots (``CREATE_DELETE_SNAPSHOT``, ``LIST_SNAPSHOTS``),
capacity (``GET_CAPACITY``), attribute changes (``MODIFY_VOLUME``). Departs from
aws-ebs-csi-driver: one topology key (the well-known zone label) instead of two.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from grpc import aio

from cloudloop.cloud.driver import ZONE_LABEL, Capability, CloudDriver, VolumeDefaults, Volumes
from cloudloop.csi.v1 import csi_pb2
from cloudloop.messages.volume import Code

#: The Node label of its zone, and the topology key of clouds whose driver names no other.
ZONE_KEY = ZONE_LABEL
GIB = 1 << 30

Mode = csi_pb2.VolumeCapability.AccessMode
#: Access modes of a disk attached to one node at a time (CSI single-node modes).
SINGLE_NODE_MODES = frozenset(
    {
        Mode.SINGLE_NODE_WRITER,
        Mode.SINGLE_NODE_READER_ONLY,
        Mode.SINGLE_NODE_SINGLE_WRITER,
        Mode.SINGLE_NODE_MULTI_WRITER,
    }
)
READ_ONLY_MODES = frozenset({Mode.SINGLE_NODE_READER_ONLY, Mode.MULTI_NODE_READER_ONLY})


class Refused(Exception):
    """An RPC answered with a non-OK status (``code`` is a CSI/gRPC code name)."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status_code(code: Code) -> grpc.StatusCode:
    return grpc.StatusCode[code.value]


async def refuse(context: aio.ServicerContext[object, object], error: Refused) -> None:
    """Abort the RPC with the refusal's code and message (no details)."""
    await context.abort(status_code(error.code), error.message)


def required(value: object, what: str) -> None:
    if not value:
        raise Refused(Code.INVALID_ARGUMENT, f"{what} missing")


def unsupported_capability(capability: csi_pb2.VolumeCapability) -> str:
    """Why a capability cannot be served ("" when it can): single-node modes, block or mount."""
    mode = capability.access_mode.mode
    if mode not in SINGLE_NODE_MODES:
        return f"access mode {Mode.Mode.Name(mode)} is not supported (disks attach to one node)"
    kind = capability.WhichOneof("access_type")
    if kind not in ("block", "mount"):
        return "access type must be block or mount"
    return ""


def check_capabilities(capabilities: list[csi_pb2.VolumeCapability]) -> None:
    required(capabilities, "volume capabilities")
    for capability in capabilities:
        reason = unsupported_capability(capability)
        if reason:
            raise Refused(Code.INVALID_ARGUMENT, reason)


@dataclass(frozen=True)
class Features:
    """The CSI features the configured cloud's driver implements."""

    zonal: bool
    snapshots: bool
    capacity: bool
    max_volumes_per_node: int
    list_volumes: bool = True
    #: ControllerModifyVolume (VolumeAttributesClass parameters): the driver's ``modify_volume``.
    modify: bool = False
    #: The key of a zonal volume's topology segment (NodeGetInfo, CreateVolume, StorageClasses).
    topology_key: str = ZONE_KEY

    @classmethod
    def of(cls, driver: CloudDriver) -> Features:
        volumes: Volumes | VolumeDefaults = driver.volumes or VolumeDefaults()
        return cls(
            zonal=volumes.zonal_volumes,
            snapshots=driver.supports(Capability.SNAPSHOTS),
            capacity=driver.implements("volume_capacity"),
            max_volumes_per_node=volumes.max_volumes_per_node,
            list_volumes=driver.implements("list_volumes"),
            modify=driver.implements("modify_volume"),
            topology_key=volumes.volume_topology_key,
        )

    def plugin_capabilities(self) -> list[csi_pb2.PluginCapability]:
        Service = csi_pb2.PluginCapability.Service
        services = [Service.CONTROLLER_SERVICE]
        if self.zonal:
            services.append(Service.VOLUME_ACCESSIBILITY_CONSTRAINTS)
        capabilities = [
            csi_pb2.PluginCapability(service=csi_pb2.PluginCapability.Service(type=s))
            for s in services
        ]
        expansion = csi_pb2.PluginCapability.VolumeExpansion(
            type=csi_pb2.PluginCapability.VolumeExpansion.ONLINE
        )
        capabilities.append(csi_pb2.PluginCapability(volume_expansion=expansion))
        return capabilities

    def controller_capabilities(self) -> list[csi_pb2.ControllerServiceCapability]:
        RPC = csi_pb2.ControllerServiceCapability.RPC
        rpcs = [RPC.CREATE_DELETE_VOLUME, RPC.PUBLISH_UNPUBLISH_VOLUME, RPC.EXPAND_VOLUME]
        if self.list_volumes:
            rpcs += [RPC.LIST_VOLUMES, RPC.LIST_VOLUMES_PUBLISHED_NODES]
        if self.snapshots:
            rpcs += [RPC.CREATE_DELETE_SNAPSHOT, RPC.LIST_SNAPSHOTS]
        if self.capacity:
            rpcs.append(RPC.GET_CAPACITY)
        if self.modify:
            rpcs.append(RPC.MODIFY_VOLUME)
        return [
            csi_pb2.ControllerServiceCapability(rpc=csi_pb2.ControllerServiceCapability.RPC(type=t))
            for t in rpcs
        ]


def zones_of(topologies: list[csi_pb2.Topology], key: str = ZONE_KEY) -> list[str]:
    return [t.segments[key] for t in topologies if t.segments.get(key)]
