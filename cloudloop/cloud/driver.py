"""The cloud contract: one driver class per provider, every capability behind one interface.

:class:`CloudDriver` defines every operation controllers may ask of a cloud. Its default bodies
raise :class:`~cloudloop.cloud.errors.NotSupported`, so a provider that lacks a capability says so
explicitly, and :meth:`CloudDriver.supports` lets controllers check before they start work.
Drivers are synchronous (the SDKs are blocking) and run in activity threads or starter threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from cloudloop.cloud import models
from cloudloop.cloud.errors import NotSupported


class Capability(StrEnum):
    INSTANCES = "instances"
    MACHINES = "machines"
    LOAD_BALANCERS = "load_balancers"
    VOLUMES = "volumes"
    ROUTES = "routes"
    DISCOVERY = "discovery"


class CloudDriver:
    """Base of every driver: override what the cloud supports and list it in ``capabilities``."""

    provider: str = "none"
    capabilities: frozenset[Capability] = frozenset()

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
    def create_machine(self, spec: models.MachineSpec) -> models.Machine:
        raise self._unsupported(Capability.MACHINES)

    def get_machine(self, machine_id: str) -> models.Machine:
        raise self._unsupported(Capability.MACHINES)

    def delete_machine(self, machine_id: str) -> None:
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

    # -- volumes (CSI) ---------------------------------------------------------------------
    def create_volume(self, spec: models.VolumeSpec) -> models.Volume:
        raise self._unsupported(Capability.VOLUMES)

    def delete_volume(self, volume_id: str) -> None:
        raise self._unsupported(Capability.VOLUMES)

    def attach_volume(self, volume_id: str, instance_id: str) -> models.Attachment:
        raise self._unsupported(Capability.VOLUMES)

    def detach_volume(self, volume_id: str, instance_id: str) -> None:
        raise self._unsupported(Capability.VOLUMES)

    def expand_volume(self, volume_id: str, size_gib: int) -> models.Volume:
        raise self._unsupported(Capability.VOLUMES)

    # -- routes ----------------------------------------------------------------------------
    def list_routes(self, cluster: str) -> list[models.Route]:
        raise self._unsupported(Capability.ROUTES)

    def create_route(self, cluster: str, route: models.Route) -> None:
        raise self._unsupported(Capability.ROUTES)

    def delete_route(self, cluster: str, route: models.Route) -> None:
        raise self._unsupported(Capability.ROUTES)

    # -- discovery -------------------------------------------------------------------------
    def zones(self) -> list[models.Zone]:
        raise self._unsupported(Capability.DISCOVERY)

    def instance_types(self) -> list[models.InstanceType]:
        raise self._unsupported(Capability.DISCOVERY)

    def discovery_data(self) -> models.DiscoveryData:
        raise self._unsupported(Capability.DISCOVERY)
