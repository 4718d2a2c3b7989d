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
"""

from __future__ import annotations

import hashlib
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.driver import DiscoveryDefaults
from cloudloop.cloud.vsphere.base import VsphereBase
from cloudloop.cloud.vsphere.mapping import DISCOVERY_API_VERSION, DISCOVERY_KIND, PROVIDER
from cloudloop.cloud.vsphere.vmomi import PC, SoapStubAdapter, pbm, vim

if TYPE_CHECKING:
    from cloudloop.cloud.vsphere.volumes import VsphereVolumes


@dataclass(frozen=True)
class DatastoreView:
    moref: str
    name: str
    url: str
    type: str
    parent: str
    #: ``summary.freeSpace`` (bytes).
    free_bytes: int = 0


class VsphereDiscovery(DiscoveryDefaults):
    provider = PROVIDER
    #: The volumes part, whose disks are the cluster's disks (set by the driver once both are
    #: made: volumes take discovery for their datastores, discovery takes volumes for this).
    volumes: VsphereVolumes | None = None

    def __init__(self, session: VsphereBase) -> None:
        self.session = session

    def list_cluster_disks(self, cluster: str) -> list[models.Disk]:
        if self.volumes is None:
            raise errors.NotSupported(PROVIDER, "list_cluster_disks")
        return self.volumes.list_cluster_disks(cluster)

    # -- datastores ------------------------------------------------------------------------------
    def datastores(self) -> list[DatastoreView]:
        """Every datastore with its URL and type, in one retrieval over a container view."""

        def read(si: Any) -> list[DatastoreView]:
            view = si.content.viewManager.CreateContainerView(
                si.content.rootFolder, [vim.Datastore], True
            )
            try:
                spec = PC.FilterSpec(
                    objectSet=[
                        PC.ObjectSpec(
                            obj=view,
                            skip=True,
                            selectSet=[
                                PC.TraversalSpec(
                                    name="v", path="view", skip=False, type=vim.view.ContainerView
                                )
                            ],
                        )
                    ],
                    propSet=[
                        PC.PropertySpec(
                            type=vim.Datastore,
                            pathSet=[
                                "name",
                                "summary.url",
                                "summary.type",
                                "summary.freeSpace",
                                "parent",
                            ],
                        )
                    ],
                )
                found = si.content.propertyCollector.RetrieveContents([spec]) or []
            finally:
                view.DestroyView()
            result = []
            for obj in found:
                props = {p.name: p.val for p in obj.propSet}
                parent = props.get("parent")
                result.append(
                    DatastoreView(
                        moref=obj.obj._moId,
                        name=str(props.get("name", "")),
                        url=str(props.get("summary.url", "")),
                        type=str(props.get("summary.type", "")),
                        parent=parent._moId if parent is not None else "",
                        free_bytes=int(props.get("summary.freeSpace") or 0),
                    )
                )
            return sorted(result, key=lambda d: d.name)

        return self.session.call("ListDatastores", read)

    def datastore_zones(self) -> dict[str, list[str]]:
        """Datastore moref → its zone tags."""
        conn = self.session.connection()
        tags = self.session.tags_by_object([conn.zone_category])
        return {
            moref: sorted(tag for category, tag in pairs if category == conn.zone_category)
            for moref, pairs in tags.items()
        }

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

    # -- storage policies, thumbprint -------------------------------------------------------------
    def storage_policies(self) -> list[dict[str, str]]:
        """PBM requirement profiles ``[{name, id}]`` (one PBM session on the vCenter cookie)."""

        def read(si: Any) -> list[dict[str, str]]:
            conn = self.session.connection()
            stub = SoapStubAdapter(
                host=conn.host,
                port=conn.port,
                path="/pbm",
                version="pbm.version.version11",
                sslContext=self.session._ssl_context(conn),
                thumbprint=conn.thumbprint.replace(":", "").lower() or None,
            )
            stub.cookie = si._stub.cookie
            content = pbm.ServiceInstance("ServiceInstance", stub).RetrieveContent()
            manager = content.profileManager
            ids = manager.PbmQueryProfile(
                resourceType=pbm.profile.ResourceType(resourceType="STORAGE"),
                profileCategory="REQUIREMENT",
            )
            profiles = manager.PbmRetrieveContent(profileIds=ids) if ids else []
            return sorted(
                ({"name": str(p.name), "id": str(p.profileId.uniqueId)} for p in profiles),
                key=lambda p: p["name"],
            )

        return self.session.call("PbmQueryProfile", read)

    def thumbprint(self) -> str:
        """vCenter's certificate SHA-1 thumbprint (``AB:CD:...``), as Deckhouse publishes it."""
        conn = self.session.connection()

        def read() -> str:
            pem = ssl.get_server_certificate(
                (conn.host, conn.port), timeout=self.session.settings.timeout_s
            )
            digest = hashlib.sha1(ssl.PEM_cert_to_DER_cert(pem)).hexdigest().upper()
            return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))

        return self.session._counted("GetThumbprint", read)

    # -- the document ------------------------------------------------------------------------------
    def discovery_data(self) -> models.DiscoveryData:
        datacenter, region, zones = self._region_and_zones()
        zoned = self.datastore_zones()
        stores = self.datastores()
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
            "vmFolderPath": self.session.settings.vm_folder_path,
            "datacenter": datacenter,
            "zones": zones,
            "datastores": datastores,
            "storagePolicies": self.storage_policies(),
            "thumbprint": self.thumbprint(),
        }
        if self.session.settings.base_resource_pool:
            extra["resourcePoolPath"] = self.session.settings.base_resource_pool
        if self.session.settings.internal_network_names:
            extra["internalNetworkNames"] = list(self.session.settings.internal_network_names)
        return models.DiscoveryData(
            region=region,
            zones=[models.Zone(name=z, region=region) for z in zones],
            api_version=DISCOVERY_API_VERSION,
            kind=DISCOVERY_KIND,
            extra=extra,
        )
