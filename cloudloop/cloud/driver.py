"""The cloud contract: a thin facade whose attributes are the cloud's capabilities.

Each capability (instances, machines, load balancers, volumes, snapshots, routes, discovery) is a
:class:`~typing.Protocol` below; a driver sets the attribute of every capability its cloud has
to an object built from the provider's session (``base.py``: clients, the call wrapper, error
translation) and its collaborators, given explicitly. ``supports(c)`` means the attribute is set.
Consumers take the capability they use (``driver.instances``), not the whole driver.

Rules:
- A capability object implements every *required* operation of its Protocol
  (:data:`CAPABILITY_OPERATIONS`); optional operations it lacks come from the ``*Defaults``
  classes here and raise ``NotSupported`` (upstream's ``ImplementedElsewhere``), so a missing
  capability or operation is explicit; controllers check :meth:`CloudDriver.supports` first.
- The facade has no operations of its own: a consumer takes the capability objects it uses,
  wired once in ``workers/main.py`` (a missing one as :class:`Unsupported`, whose every
  operation raises ``NotSupported``).
- Drivers are synchronous (the SDKs are blocking) and run in activity or starter threads; every
  SDK call goes through :func:`cloudloop.cloud.calls.cloud_call` (counted, errors translated).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any, Protocol, TypeVar

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
        (
            "get_volume_modification",
            "list_volumes",
            "storage_classes",
            "volume_capacity",
            "modify_volume",
        ),
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


F = TypeVar("F", bound=Callable[..., Any])


def default(operation: F) -> F:
    """Marks a contract default (an operation that raises ``NotSupported``, or a no-op check)."""
    operation.__cloudloop_default__ = True  # type: ignore[attr-defined]
    return operation


def is_default(operation: object) -> bool:
    return bool(getattr(operation, "__cloudloop_default__", False))


# -- the capabilities ----------------------------------------------------------------------
class Instances(Protocol):
    """Node sync: instances by ID and by node name."""

    def list_instances(self, ids: Sequence[str]) -> models.InstanceListing:
        """Batched lookup by instance ID; IDs missing from the answer positively do not exist."""

    def find_instances_by_name(self, names: Sequence[str]) -> models.InstanceListing:
        """Batched lookup by node name (e.g. AWS private DNS name); keyed by name."""

    def instance_id_from_provider_id(self, provider_id: str) -> str: ...


class Machines(Protocol):
    """Cluster API machines: create (or adopt), read, delete."""

    def create_machine(self, spec: models.MachineSpec, user_data: bytes) -> models.Machine:
        """Create (or adopt, found by name and ``machine_uid``) the VM with its disks and start it.

        Returns as soon as the cloud accepted the request; callers poll :meth:`get_machine`."""

    def get_machine(self, spec: models.MachineSpec) -> models.Machine | None:
        """The VM of ``spec``; ``None`` only when the cloud positively says it does not exist."""

    def delete_machine(self, spec: models.MachineSpec) -> bool:
        """Remove the VM and all it was created with (disks, attachments, cloud-init data).

        Idempotent; ``True`` once nothing is left, ``False`` while the cloud is still removing."""


class LoadBalancers(Protocol):
    #: The provider name (an LB target names the cloud it belongs to).
    provider: str

    def ensure_load_balancer(self, spec: models.LoadBalancerSpec) -> models.LoadBalancerStatus: ...
    def update_load_balancer_backends(self, spec: models.LoadBalancerSpec) -> None: ...
    def get_load_balancer(self, name: str) -> models.LoadBalancerStatus | None: ...
    def delete_load_balancer(self, name: str) -> None: ...
    def load_balancer_drift(self, spec: models.LoadBalancerSpec) -> list[str]:
        """What of the cloud LB differs from ``spec`` (each a short phrase; empty: in sync),
        read without changing anything; ``ensure_load_balancer`` puts it back."""

    def load_balancer_annotations(self, annotations: Mapping[str, str]) -> dict[str, str]:
        """The Service annotations this cloud's load balancers read (default: all of them)."""

    def load_balancer_node_labels(self, annotations: Mapping[str, str]) -> frozenset[str]:
        """The node label keys this cloud selects LB backends by, for a Service with
        ``annotations`` (e.g. those ``target-node-labels`` names; default: none)."""


class Volumes(Protocol):
    zonal_volumes: bool
    max_volumes_per_node: int

    @property
    def volume_topology_key(self) -> str:
        """The CSI topology segment key of a zonal volume's zone (the upstream driver's key;
        the well-known zone label unless the cloud's driver says another)."""

    def find_volume(self, name: str, cluster: str) -> models.Volume | None:
        """The live volume ``cluster`` created for ``name`` (tag lookup), if there is one."""

    def get_volume(self, volume_id: str) -> models.Volume:
        """The volume with its attachments; ``NotFound`` also for a malformed ID."""

    def create_volume(self, spec: models.VolumeSpec) -> models.Volume:
        """Create it tagged for ``spec.cluster`` and ``spec.name``; it may still be creating."""

    def delete_volume(self, volume_id: str) -> None:
        """``NotFound`` when it does not exist, ``FailedPrecondition`` while it is attached."""

    def attach_volume(self, volume: models.Volume, instance_id: str) -> models.Attachment:
        """Attach under a device name free on the instance (or return the existing attachment
        to that instance); ``NotFound`` for an unknown instance."""

    def detach_volume(self, volume_id: str, instance_id: str) -> None:
        """Start detaching; a volume not attached to the instance is not an error."""

    def expand_volume(self, volume_id: str, size_gib: int) -> models.VolumeModification:
        """Start growing the volume to ``size_gib``."""

    def get_volume_modification(self, volume_id: str) -> models.VolumeModification | None:
        """The volume's latest size change, if it ever had one."""

    def list_volumes(self, cluster: str) -> list[models.Volume]:
        """Every live volume ``cluster`` created (with its attachments), for CSI ListVolumes."""

    def storage_classes(self, discovery: dict[str, Any]) -> list[models.StorageClassSpec]:
        """The StorageClasses this cloud offers, from the discovery document (no cloud call)."""

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

    def check_volume_modification(self, parameters: Mapping[str, str]) -> None:
        """Refuse VolumeAttributesClass ``parameters`` the cloud can never apply, without
        calling it: ``InvalidRequest`` for a key it cannot change or a malformed value."""

    def volume_changes(
        self, volume: models.Volume, parameters: Mapping[str, str]
    ) -> dict[str, str]:
        """The mutable ``parameters`` ``volume`` does not have yet (empty: nothing to do), no
        cloud call; ``InvalidRequest``/``OutOfRange`` for a value this volume cannot take."""

    def modify_volume(self, volume: models.Volume, parameters: Mapping[str, str]) -> None:
        """Start changing ``volume`` to the mutable ``parameters`` (CSI ControllerModifyVolume);
        ``ModificationCooldown`` while the cloud refuses another change of it yet."""


class Snapshots(Protocol):
    def find_snapshot(self, name: str, cluster: str) -> models.Snapshot | None:
        """The live snapshot ``cluster`` took for ``name`` (tag lookup), if there is one."""

    def get_snapshot(self, snapshot_id: str) -> models.Snapshot:
        """``NotFound`` also for a malformed ID."""

    def create_snapshot(self, spec: models.SnapshotSpec) -> models.Snapshot:
        """Start a snapshot tagged for ``spec.cluster`` and ``spec.name``; it may be pending."""

    def delete_snapshot(self, snapshot_id: str) -> None:
        """``NotFound`` when it does not exist."""

    def list_snapshots(self, cluster: str) -> list[models.Snapshot]:
        """Every live snapshot ``cluster`` took."""


class Routes(Protocol):
    def list_routes(self, cluster: str) -> list[models.Route]:
        """The cluster's instance and blackhole routes, in one cloud call where possible."""

    def create_route(self, cluster: str, route: models.Route) -> None:
        """Route ``destination_cidr`` to ``target_instance_id`` (idempotent)."""

    def delete_route(self, cluster: str, route: models.Route) -> None:
        """Remove the route for ``destination_cidr``; an absent route is not an error."""


class Discovery(Protocol):
    def zones(self) -> list[models.Zone]: ...
    def instance_types(self) -> list[models.InstanceType]: ...
    def discovery_data(self) -> models.DiscoveryData:
        """Live provider data (zones, provider fields); the discoverer adds instance types."""

    def list_cluster_disks(self, cluster: str) -> list[models.Disk]:
        """Every disk tagged for ``cluster``, for the orphaned-disk check."""


# -- defaults of the optional operations, for capability classes to inherit ----------------
class VolumeDefaults:
    """The optional volume operations and settings, as the contract has them by default."""

    provider: str = "none"
    #: Volumes live in one zone and attach only there (CSI accessibility constraints).
    zonal_volumes: bool = False
    #: Volumes a node can take when nothing more precise is known (CSI ``max_volumes_per_node``).
    max_volumes_per_node: int = 0

    @property
    def volume_topology_key(self) -> str:
        """The CSI topology segment key of a zonal volume's zone (the upstream driver's key;
        the well-known zone label unless the cloud's driver says another)."""
        return ZONE_LABEL

    @default
    def get_volume_modification(self, volume_id: str) -> models.VolumeModification | None:
        """The volume's latest size change, if it ever had one."""
        raise NotSupported(self.provider, Capability.VOLUMES.value)

    @default
    def list_volumes(self, cluster: str) -> list[models.Volume]:
        """Every live volume ``cluster`` created (with its attachments), for CSI ListVolumes."""
        raise NotSupported(self.provider, Capability.VOLUMES.value)

    @default
    def storage_classes(self, discovery: dict[str, Any]) -> list[models.StorageClassSpec]:
        """The StorageClasses this cloud offers, from the discovery document (no cloud call)."""
        raise NotSupported(self.provider, Capability.VOLUMES.value)

    def check_volume_request(
        self, size_gib: int, parameters: Mapping[str, str], volume_type: str = ""
    ) -> None:
        """Refuse a new volume the cloud would refuse, without calling it (default: no checks;
        see :meth:`CloudDriver.check_volume_request`)."""

    def check_volume_size(self, size_gib: int, volume_type: str = "") -> None:
        """``OutOfRange`` for a size no volume of ``volume_type`` can have (default: none)."""

    @default
    def volume_capacity(self, parameters: dict[str, str]) -> int:
        """Bytes free for new volumes of these StorageClass parameters (CSI GetCapacity); only
        clouds that can say implement it."""
        raise NotSupported(self.provider, "volume_capacity")

    def check_volume_modification(self, parameters: Mapping[str, str]) -> None:
        """Refuse parameters the cloud can never apply (default: no checks)."""

    def volume_changes(
        self, volume: models.Volume, parameters: Mapping[str, str]
    ) -> dict[str, str]:
        """What is still to change (default: every parameter; only clouds that modify read)."""
        return dict(parameters)

    @default
    def modify_volume(self, volume: models.Volume, parameters: Mapping[str, str]) -> None:
        """Change a volume's attributes; only clouds that can implement it."""
        raise NotSupported(self.provider, "modify_volume")


class LoadBalancerDefaults:
    """The optional load-balancer operations, as the contract has them by default."""

    provider: str = "none"

    @default
    def load_balancer_drift(self, spec: models.LoadBalancerSpec) -> list[str]:
        raise NotSupported(self.provider, Capability.LOAD_BALANCERS.value)

    def load_balancer_annotations(self, annotations: Mapping[str, str]) -> dict[str, str]:
        """The Service annotations this cloud's load balancers read (default: all of them)."""
        return dict(annotations)

    def load_balancer_node_labels(self, annotations: Mapping[str, str]) -> frozenset[str]:
        """The node label keys this cloud selects LB backends by (default: none)."""
        return frozenset()


class DiscoveryDefaults:
    """The optional discovery operations, as the contract has them by default."""

    provider: str = "none"

    @default
    def instance_types(self) -> list[models.InstanceType]:
        raise NotSupported(self.provider, Capability.DISCOVERY.value)

    @default
    def list_cluster_disks(self, cluster: str) -> list[models.Disk]:
        """Every disk tagged for ``cluster``, for the orphaned-disk check."""
        raise NotSupported(self.provider, Capability.DISCOVERY.value)


#: operation → the capability it belongs to.
OPERATION_CAPABILITY: dict[str, Capability] = {
    op: capability
    for capability, (required, optional) in CAPABILITY_OPERATIONS.items()
    for op in (*required, *optional)
}


class CloudDriver:
    """The facade: one attribute per capability (``None``: the cloud has none)."""

    provider: str = "none"
    #: The cluster this driver serves (set by :meth:`Provider.make_driver`); a driver may use it
    #: to narrow listings to the cluster's own resources. Empty: unknown.
    cluster: str = ""
    #: The capabilities whose attribute is set (by :meth:`assembled`).
    capabilities: frozenset[Capability] = frozenset()

    instances: Instances | None = None
    machines: Machines | None = None
    load_balancers: LoadBalancers | None = None
    volumes: Volumes | None = None
    snapshots: Snapshots | None = None
    routes: Routes | None = None
    discovery: Discovery | None = None

    def assembled(self) -> None:
        """Called by a facade driver once its capability attributes are set."""
        self.capabilities = frozenset(c for c in Capability if getattr(self, c.value) is not None)

    def supports(self, capability: Capability) -> bool:
        return getattr(self, capability.value) is not None

    def implements(self, operation: str) -> bool:
        """Whether ``operation`` (required or optional) is the cloud's own, not a default."""
        part = getattr(self, OPERATION_CAPABILITY[operation].value)
        if part is None:
            return False
        return hasattr(part, operation) and not is_default(getattr(type(part), operation, None))


class Unsupported:
    """The stand-in for a capability a cloud lacks: every operation raises ``NotSupported``.

    A consumer that must be wired even where its cloud has no such capability (the
    load-balancer activities on a cloud without load balancers) takes this, so the workflow
    meets ``NotSupported`` (and, e.g., leaves the Service alone) instead of an ``AttributeError``.
    """

    def __init__(self, provider: str, capability: Capability) -> None:
        self.provider = provider
        self.capability = capability

    def __getattr__(self, name: str) -> Any:
        raise NotSupported(self.provider, self.capability.value)


def part_or_unsupported(part: Any, provider: str, capability: Capability) -> Any:
    """``part`` when the cloud has it, else an :class:`Unsupported` stand-in for it."""
    return part if part is not None else Unsupported(provider, capability)
