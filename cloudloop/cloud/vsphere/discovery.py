"""vSphere discovery: zones from tags, datastores, storage policies, ``VsphereCloudDiscoveryData``.

Zones are the zone-category tags on the compute clusters (and hosts) of the region's datacenter;
datastores are listed with the zones their tags give them; storage policies come from PBM.

Rules (Deckhouse ``go_lib/dependency/vsphere``):
- The region is the region-category tag on a Datacenter; when ``region`` is configured exactly
  one Datacenter must carry it (else :class:`InvalidRequest`: nothing is guessed).
- ``zones`` lists every zone tag found on clusters/hosts of that datacenter, limited to the
  configured ``zones`` when set; a zone is ``available``.
- Datastores are those carrying a zone tag (all datastores when none carries one).
- Any vCenter error raises: a partial document is never published.
- The document holds only the keys upstream's discoverer writes for this kind (no thumbprint,
  no network names): Deckhouse validates it against its closed schema.
"""

from __future__ import annotations

from typing import Protocol

from cloudloop.cloud import errors, models
from cloudloop.cloud.driver import DiscoveryDefaults
from cloudloop.cloud.vsphere.base import VsphereBase
from cloudloop.cloud.vsphere.datastores import VsphereDatastores
from cloudloop.cloud.vsphere.mapping import DISCOVERY_API_VERSION, DISCOVERY_KIND, PROVIDER


class ClusterDisks(Protocol):
    """All discovery needs of the volumes part: the disks tagged for a cluster."""

    def list_cluster_disks(self, cluster: str) -> list[models.Disk]: ...


class VsphereDiscovery(DiscoveryDefaults):
    """``stores``: the datastores part (shared with volumes); ``disks``: the volumes part's
    cluster disks (the orphan gauges)."""

    provider = PROVIDER

    def __init__(
        self, session: VsphereBase, stores: VsphereDatastores, disks: ClusterDisks
    ) -> None:
        self.session = session
        self.stores = stores
        self.disks = disks

    def list_cluster_disks(self, cluster: str) -> list[models.Disk]:
        return self.disks.list_cluster_disks(cluster)

    # -- zones -----------------------------------------------------------------------------------
    def _region_and_zones(self) -> tuple[str, str, list[str]]:
        """``(datacenter name, region, zones)``."""
        conn = self.session.connection()
        inventory = self.session.inventory()
        tags = self.session.tags_by_object([conn.region_category, conn.zone_category])
        datacenters = {m: e for m, e in inventory.entities.items() if e.type == "Datacenter"}
        regions = {
            m: tag
            for m in datacenters
            for category, tag in tags.get(m, ())
            if category == conn.region_category
        }
        wanted = self.session.settings.region
        candidates = [m for m, r in regions.items() if not wanted or r == wanted]
        if conn.datacenters:
            candidates = [m for m in candidates if datacenters[m].name in conn.datacenters]
        if len(candidates) != 1:
            raise errors.InvalidRequest(
                PROVIDER,
                "DiscoverRegion",
                f"the region tag {wanted or '(any)'} of category {conn.region_category} is on "
                f"{len(candidates)} datacenters; it must be on exactly one",
            )
        datacenter = candidates[0]
        zones: set[str] = set()
        for moref, entity in inventory.entities.items():
            if entity.type not in ("ClusterComputeResource", "ComputeResource", "HostSystem"):
                continue
            if datacenter not in inventory.ancestors(moref):
                continue
            zones.update(tag for c, tag in tags.get(moref, ()) if c == conn.zone_category)
        if self.session.settings.zones:
            zones &= set(self.session.settings.zones)
        return datacenters[datacenter].name, regions[datacenter], sorted(zones)

    def zones(self) -> list[models.Zone]:
        _, region, zones = self._region_and_zones()
        return [models.Zone(name=z, region=region) for z in zones]

    def instance_types(self) -> list[models.InstanceType]:
        """vSphere has no instance types (sizes come from the instance class)."""
        raise errors.NotSupported(PROVIDER, "instance_types")

    # -- the document ------------------------------------------------------------------------------
    def discovery_data(self) -> models.DiscoveryData:
        datacenter, region, zones = self._region_and_zones()
        zoned = self.stores.datastore_zones()
        stores = self.stores.datastores()
        tagged = [d for d in stores if zoned.get(d.moref)]
        datastores = [
            {
                "name": d.name,
                "zones": zoned.get(d.moref, []),
                "path": d.name,
                "datastoreType": d.type,
                "datastoreURL": d.url,
            }
            for d in (tagged or stores)
        ]
        extra: dict[str, object] = {
            "datacenter": datacenter,
            "zones": zones,
            "datastores": datastores,
            "storagePolicies": self.stores.storage_policies(),
        }
        if self.session.settings.vm_folder_path:
            extra["vmFolderPath"] = self.session.settings.vm_folder_path
        if self.session.settings.base_resource_pool:
            extra["resourcePoolPath"] = self.session.settings.base_resource_pool
        return models.DiscoveryData(
            region=region,
            zones=[models.Zone(name=z, region=region) for z in zones],
            api_version=DISCOVERY_API_VERSION,
            kind=DISCOVERY_KIND,
            extra=extra,
        )
