"""zVirt discovery: the one mocked zone and the storage domains for the discovery data."""

from __future__ import annotations

from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.driver import DiscoveryDefaults
from cloudloop.cloud.zvirt.base import ZvirtBase, storage_domain_view
from cloudloop.cloud.zvirt.mapping import (
    DISCOVERY_API_VERSION,
    DISCOVERY_KIND,
    NAME,
    REGION,
    ZONE,
    StorageDomainView,
    storage_domains,
)


class ZvirtDiscovery(DiscoveryDefaults):
    provider = NAME

    def __init__(self, session: ZvirtBase) -> None:
        self.session = session

    # -- discovery -------------------------------------------------------------------------
    def zones(self) -> list[models.Zone]:
        """oVirt/zVirt has no zones; Deckhouse mocks ``default`` (no engine call)."""
        return [models.Zone(name=ZONE, region=REGION)]

    def instance_types(self) -> list[models.InstanceType]:
        """zVirt has no instance types (Deckhouse's discoverer returns none)."""
        raise errors.NotSupported(NAME, "instance_types")

    def list_cluster_disks(self, cluster: str) -> list[models.Disk]:
        """Deckhouse's zVirt discoverer does not report disks (no orphaned-disk check)."""
        raise errors.NotSupported(NAME, "list_cluster_disks")

    def list_storage_domains(self) -> list[StorageDomainView]:
        def listing(api: Any) -> list[StorageDomainView]:
            return [storage_domain_view(d) for d in api.storage_domains_service().list()]

        return self.session.call("ListStorageDomains", listing)

    def discovery_data(self) -> models.DiscoveryData:
        """``ZvirtCloudProviderDiscoveryData``: ``storageDomains`` (sorted, first is default)."""
        return models.DiscoveryData(
            region=REGION,
            zones=self.zones(),
            api_version=DISCOVERY_API_VERSION,
            kind=DISCOVERY_KIND,
            extra={"storageDomains": storage_domains(self.list_storage_domains())},
            publish_zones=False,
        )
