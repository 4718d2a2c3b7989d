"""The cloud contract: one driver class per provider, every capability behind one interface.

:class:`CloudDriver` defines every operation controllers may ask of a cloud; a driver overrides
what its cloud supports, and its capabilities are derived from what it overrides.

Rules:
- A capability is implemented when the driver overrides every *required* operation of it
  (:data:`CAPABILITY_OPERATIONS`); optional operations may raise ``NotSupported`` on their own.
  ``capabilities`` is computed at class creation, never hand-kept, so it cannot drift.
- The default bodies raise :class:`~cloudloop.cloud.errors.NotSupported` (upstream's
  ``ImplementedElsewhere``), so a missing capability is explicit; controllers check
  :meth:`CloudDriver.supports` before they start work.
- Drivers are synchronous (the SDKs are blocking) and run in activity or starter threads; every
  SDK call goes through :func:`cloudloop.cloud.calls.cloud_call` (counted, errors translated).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, ClassVar

from cloudloop.cloud import models
from cloudloop.cloud.errors import NotSupported

#: The well-known zone label of Nodes (``topology.kubernetes.io/zone``).
ZONE_LABEL = "topology.kubernetes.io/zone"


class Capability(StrEnum):
    INSTANCES = "instances"
    MACHINES = "machines"
    LOAD_BALANCERS = "load_balancers"
    VOLUMES = "volumes"
    SNAPSHOTS = "snapshots"
    ROUTES = "routes"
    DISCOVERY = "discovery"


#: capability → (required operations, optional operations).
CAPABILITY_OPERATIONS: dict[Capability, tuple[tuple[str, ...], tuple[str, ...]]] = {
    Capability.INSTANCES: (
        ("list_instances", "find_instances_by_name", "instance_id_from_provider_id"),
        (),
    ),
    Capability.MACHINES: (("create_machine", "get_machine", "delete_machine"), ()),
    Capability.LOAD_BALANCERS: (
        (
            "ensure_load_balancer",
            "update_load_balancer_backends",
            "get_load_balancer",
            "delete_load_balancer",
        ),
        ("load_balancer_drift",),
    ),
    Capability.VOLUMES: (
        (
            "find_volume",
            "get_volume",
            "create_volume",
            "delete_volume",
            "attach_volume",
            "detach_volume",
            "expand_volume",
        ),
        ("get_volume_modification", "list_volumes", "storage_classes", "volume_capacity"),
    ),
    Capability.SNAPSHOTS: (
        (
            "find_snapshot",
            "get_snapshot",
            "create_snapshot",
            "delete_snapshot",
            "list_snapshots",
        ),
        (),
    ),
    Capability.ROUTES: (("list_routes", "create_route", "delete_route"), ()),
    Capability.DISCOVERY: (("zones", "discovery_data"), ("instance_types", "list_cluster_disks")),
}


def overridden(cls: type[CloudDriver], operation: str) -> bool:
    """``cls`` implements ``operation`` itself (not the contract's ``NotSupported`` default)."""
    return getattr(cls, operation) is not getattr(CloudDriver, operation)


def implemented_capabilities(cls: type[CloudDriver]) -> frozenset[Capability]:
    """The capabilities whose required operations ``cls`` all overrides."""
    return frozenset(
        capability
        for capability, (required, _) in CAPABILITY_OPERATIONS.items()
        if all(overridden(cls, op) for op in required)
    )


class CloudDriver:
    """Base of every driver: override every operation of each capability the cloud supports."""

    provider: str = "none"
    #: The cluster this driver serves (set by :meth:`Provider.make_driver`); a driver may use it
    #: to narrow listings to the cluster's own resources. Empty: unknown.
    cluster: str = ""
    #: Derived from the overridden operations when the class is created.
    capabilities: ClassVar[frozenset[Capability]] = frozenset()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.capabilities = implemented_capabilities(cls)

    def supports(self, capability: Capability) -> bool:
        return capability in self.capabilities

    def _unsupported(self, capability: Capability) -> NotSupported:
        return NotSupported(self.provider, capability.value)

    # -- instances (node sync) -------------------------------------------------------------
    def list_instances(self, ids: Sequence[str]) -> models.InstanceListing:
        """Batched lookup by instance ID; IDs missing from the answer positively do not exist."""
        raise self._unsupported(Capability.INSTANCES)

    def find_instances_by_name(self, names: Sequence[str]) -> models.InstanceListing:
        """Batched lookup by node name (e.g. AWS private DNS name); keyed by name."""
        raise self._unsupported(Capability.INSTANCES)

    def instance_id_from_provider_id(self, provider_id: str) -> str:
        raise self._unsupported(Capability.INSTANCES)

    # -- machines (Cluster API) ------------------------------------------------------------
    def create_machine(self, spec: models.MachineSpec, user_data: bytes) -> models.Machine:
        """Create (or adopt, found by name and ``machine_uid``) the VM with its disks and start it.

        Returns as soon as the cloud accepted the request; callers poll :meth:`get_machine`.
        """
        raise self._unsupported(Capability.MACHINES)

    def get_machine(self, spec: models.MachineSpec) -> models.Machine | None:
        """The VM of ``spec``; ``None`` only when the cloud positively says it does not exist."""
        raise self._unsupported(Capability.MACHINES)

    def delete_machine(self, spec: models.MachineSpec) -> bool:
        """Remove the VM and all it was created with (disks, attachments, cloud-init data).

        Idempotent; ``True`` once nothing is left, ``False`` while the cloud is still removing.
        """
        raise self._unsupported(Capability.MACHINES)

    # -- load balancers --------------------------------------------------------------------
    def ensure_load_balancer(self, spec: models.LoadBalancerSpec) -> models.LoadBalancerStatus:
        raise self._unsupported(Capability.LOAD_BALANCERS)

    def update_load_balancer_backends(self, spec: models.LoadBalancerSpec) -> None:
        raise self._unsupported(Capability.LOAD_BALANCERS)

    def get_load_balancer(self, name: str) -> models.LoadBalancerStatus | None:
        raise self._unsupported(Capability.LOAD_BALANCERS)

    def delete_load_balancer(self, name: str) -> None:
        raise self._unsupported(Capability.LOAD_BALANCERS)

    def load_balancer_drift(self, spec: models.LoadBalancerSpec) -> list[str]:
        """What of the cloud LB differs from ``spec`` (each a short phrase; empty: in sync),
        read without changing anything; ``ensure_load_balancer`` puts it back."""
        raise self._unsupported(Capability.LOAD_BALANCERS)

    # What a load balancer is made from: the load-balancer controller sends the workflow only
    # these parts of a Service and its nodes, so an unrelated change sends nothing and the
    # desired state stays small at thousands of nodes. Pure functions, no cloud call; a value
    # they cannot parse is kept as it is (the ensure refuses it with ``InvalidRequest``).
    def load_balancer_annotations(self, annotations: Mapping[str, str]) -> dict[str, str]:
        """The Service annotations this cloud's load balancers read (default: all of them)."""
        return dict(annotations)

    def load_balancer_node_labels(self, annotations: Mapping[str, str]) -> frozenset[str]:
        """The node label keys this cloud selects LB backends by, for a Service with
        ``annotations`` (e.g. those ``target-node-labels`` names; default: none)."""
        return frozenset()

    # -- volumes (CSI) ---------------------------------------------------------------------
    # Each call issues one cloud change and returns without waiting; the activities wait (with
    # heartbeats) and apply the CSI rules (idempotency, topology, single-node access).
    def find_volume(self, name: str, cluster: str) -> models.Volume | None:
        """The live volume ``cluster`` created for ``name`` (tag lookup), if there is one."""
        raise self._unsupported(Capability.VOLUMES)

    def get_volume(self, volume_id: str) -> models.Volume:
        """The volume with its attachments; ``NotFound`` also for a malformed ID."""
        raise self._unsupported(Capability.VOLUMES)

    def create_volume(self, spec: models.VolumeSpec) -> models.Volume:
        """Create it tagged for ``spec.cluster`` and ``spec.name``; it may still be creating."""
        raise self._unsupported(Capability.VOLUMES)

    def delete_volume(self, volume_id: str) -> None:
        """``NotFound`` when it does not exist, ``FailedPrecondition`` while it is attached."""
        raise self._unsupported(Capability.VOLUMES)

    def attach_volume(self, volume: models.Volume, instance_id: str) -> models.Attachment:
        """Attach under a device name free on the instance (or return the existing attachment
        to that instance); ``NotFound`` for an unknown instance."""
        raise self._unsupported(Capability.VOLUMES)

    def detach_volume(self, volume_id: str, instance_id: str) -> None:
        """Start detaching; a volume not attached to the instance is not an error."""
        raise self._unsupported(Capability.VOLUMES)

    def expand_volume(self, volume_id: str, size_gib: int) -> models.VolumeModification:
        """Start growing the volume to ``size_gib``."""
        raise self._unsupported(Capability.VOLUMES)

    def get_volume_modification(self, volume_id: str) -> models.VolumeModification | None:
        """The volume's latest size change, if it ever had one."""
        raise self._unsupported(Capability.VOLUMES)

    def list_volumes(self, cluster: str) -> list[models.Volume]:
        """Every live volume ``cluster`` created (with its attachments), for CSI ListVolumes."""
        raise self._unsupported(Capability.VOLUMES)

    def storage_classes(self, discovery: dict[str, Any]) -> list[models.StorageClassSpec]:
        """The StorageClasses this cloud offers, from the discovery document (no cloud call)."""
        raise self._unsupported(Capability.VOLUMES)

    #: Volumes live in one zone and attach only there (CSI accessibility constraints).
    zonal_volumes: bool = False
    #: Volumes a node can take when nothing more precise is known (CSI ``max_volumes_per_node``).
    max_volumes_per_node: int = 0

    @property
    def volume_topology_key(self) -> str:
        """The CSI topology segment key of a zonal volume's zone (the upstream driver's key;
        the well-known zone label unless the cloud's driver says another)."""
        return ZONE_LABEL

    def check_volume_request(
        self, size_gib: int, parameters: Mapping[str, str], volume_type: str = ""
    ) -> None:
        """Refuse a new volume the cloud would refuse, without calling it: ``InvalidRequest``
        for an unknown StorageClass parameter or a malformed value (the message lists the valid
        ones), ``OutOfRange`` for a size or rate outside the cloud's limits. The CSI controller
        calls it before any workflow starts. Default: no checks (the cloud answers)."""

    def check_volume_size(self, size_gib: int, volume_type: str = "") -> None:
        """``OutOfRange`` for a size no volume of ``volume_type`` ("": of any type) can have,
        without calling the cloud (an expand checks it before and after reading the volume)."""

    def volume_capacity(self, parameters: dict[str, str]) -> int:
        """Bytes free for new volumes of these StorageClass parameters (CSI GetCapacity); only
        clouds that can say implement it."""
        raise NotSupported(self.provider, "volume_capacity")

    # -- snapshots (CSI) -------------------------------------------------------------------
    def find_snapshot(self, name: str, cluster: str) -> models.Snapshot | None:
        """The live snapshot ``cluster`` took for ``name`` (tag lookup), if there is one."""
        raise self._unsupported(Capability.SNAPSHOTS)

    def get_snapshot(self, snapshot_id: str) -> models.Snapshot:
        """``NotFound`` also for a malformed ID."""
        raise self._unsupported(Capability.SNAPSHOTS)

    def create_snapshot(self, spec: models.SnapshotSpec) -> models.Snapshot:
        """Start a snapshot tagged for ``spec.cluster`` and ``spec.name``; it may be pending."""
        raise self._unsupported(Capability.SNAPSHOTS)

    def delete_snapshot(self, snapshot_id: str) -> None:
        """``NotFound`` when it does not exist."""
        raise self._unsupported(Capability.SNAPSHOTS)

    def list_snapshots(self, cluster: str) -> list[models.Snapshot]:
        """Every live snapshot ``cluster`` took."""
        raise self._unsupported(Capability.SNAPSHOTS)

    # -- routes ----------------------------------------------------------------------------
    def list_routes(self, cluster: str) -> list[models.Route]:
        """The cluster's instance and blackhole routes, in one cloud call where possible."""
        raise self._unsupported(Capability.ROUTES)

    def create_route(self, cluster: str, route: models.Route) -> None:
        """Route ``destination_cidr`` to ``target_instance_id`` (idempotent)."""
        raise self._unsupported(Capability.ROUTES)

    def delete_route(self, cluster: str, route: models.Route) -> None:
        """Remove the route for ``destination_cidr``; an absent route is not an error."""
        raise self._unsupported(Capability.ROUTES)

    # -- discovery -------------------------------------------------------------------------
    def zones(self) -> list[models.Zone]:
        raise self._unsupported(Capability.DISCOVERY)

    def instance_types(self) -> list[models.InstanceType]:
        raise self._unsupported(Capability.DISCOVERY)

    def discovery_data(self) -> models.DiscoveryData:
        """Live provider data (zones, provider fields); the discoverer adds instance types."""
        raise self._unsupported(Capability.DISCOVERY)

    def list_cluster_disks(self, cluster: str) -> list[models.Disk]:
        """Every disk tagged for ``cluster``, for the orphaned-disk check."""
        raise self._unsupported(Capability.DISCOVERY)
