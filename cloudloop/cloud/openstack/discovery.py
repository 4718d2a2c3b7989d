"""OpenStack discovery: zones, flavors and the ``OpenStackCloudProviderDiscoveryData`` document.

As Deckhouse's ``cloud-data-discoverer`` (``go_lib/cloud-data/discovery/openstack``):
instance types from ``/flavors/detail`` (vcpus, RAM MiB, root disk or ephemeral GiB), zones
from Nova's ``os-availability-zone``, and the document its own kind (``deckhouse.io/v1alpha1``,
not the Terraform ``OpenStackCloudDiscoveryData``): flavor names, every network's name
(``additionalNetworks``), security group names (none where Neutron has no such API), images,
Cinder volume types (none is an error, as one StorageClass is made per type), and
``defaultImageName``/``mainNetwork`` from the Terraform document's ``instances`` (else from the
settings'). The cluster's disks are the Cinder volumes whose metadata names the cluster
(``cinder.csi.openstack.org/cluster``), for the orphaned-volume gauges.
"""

from __future__ import annotations

import json
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.driver import DiscoveryDefaults
from cloudloop.cloud.openstack.base import NAME, OpenStackBase

#: The discoverer's own document (the layout's is ``OpenStackCloudDiscoveryData``).
PROVIDER_DISCOVERY_KIND = "OpenStackCloudProviderDiscoveryData"
PROVIDER_DISCOVERY_API_VERSION = "deckhouse.io/v1alpha1"
CLUSTER_METADATA = "cinder.csi.openstack.org/cluster"


class OpenStackDiscovery(DiscoveryDefaults):
    provider = NAME

    def __init__(self, session: OpenStackBase) -> None:
        self.session = session

    def zones(self) -> list[models.Zone]:
        body = self.session.request(
            "ListAvailabilityZones", "compute", "GET", "/os-availability-zone"
        )
        region = self.session.settings.connection.region
        return [
            models.Zone(
                name=str(z["zoneName"]),
                region=region,
                state="available" if (z.get("zoneState") or {}).get("available") else "unavailable",
            )
            for z in (body or {}).get("availabilityZoneInfo") or []
        ]

    def instance_types(self) -> list[models.InstanceType]:
        flavors = self.session.list_all("ListFlavors", "compute", "/flavors/detail", "flavors")
        return [
            models.InstanceType(
                name=str(f["name"]),
                cpu=int(f.get("vcpus") or 0),
                memory_mib=int(f.get("ram") or 0),
                root_disk_gib=int(f.get("disk") or f.get("OS-FLV-EXT-DATA:ephemeral") or 0),
            )
            for f in flavors
            if not f.get("OS-FLV-DISABLED:disabled")
        ]

    def _volume_types(self) -> list[dict[str, Any]]:
        body = self.session.request("ListVolumeTypes", "block_storage", "GET", "/types")
        types = (body or {}).get("volume_types") or []
        if not types:
            raise errors.CloudError(NAME, "ListVolumeTypes", "Cinder lists no volume type")
        return [
            {
                "id": t.get("id"),
                "name": t.get("name"),
                "description": t.get("description") or "",
                "extraSpecs": t.get("extra_specs") or {},
                "isPublic": bool(
                    t.get("is_public", t.get("os-volume-type-access:is_public", True))
                ),
                "qosSpecID": t.get("qos_specs_id") or "",
            }
            for t in types
        ]

    def _security_groups(self) -> list[dict[str, Any]]:
        """Neutron's security groups; none where the cloud has no such API (upstream: a 404)."""
        try:
            return self.session.list_all(
                "ListSecurityGroups", "network", "/security-groups", "security_groups"
            )
        except errors.NotFound:
            return []

    def discovery_data(self) -> models.DiscoveryData:
        settings = self.session.settings
        flavors = self.session.list_all("ListFlavors", "compute", "/flavors/detail", "flavors")
        networks = self.session.list_all("ListNetworks", "network", "/networks", "networks")
        images = self.session.list_all("ListImages", "image", "/images", "images")
        instances = settings.instances
        extra: dict[str, Any] = {
            "flavors": _names(flavors),
            "additionalNetworks": _names(networks),
            "additionalSecurityGroups": _names(self._security_groups()),
            "defaultImageName": str(instances.get("imageName") or ""),
            "images": _names(images),
            "mainNetwork": str(instances.get("mainNetwork") or ""),
            "volumeTypes": self._volume_types(),
        }
        return models.DiscoveryData(
            region=settings.connection.region,
            zones=self.zones(),
            api_version=PROVIDER_DISCOVERY_API_VERSION,
            kind=PROVIDER_DISCOVERY_KIND,
            extra=extra,
            merge_base=False,
            from_base={
                "defaultImageName": "instances.imageName",
                "mainNetwork": "instances.mainNetwork",
            },
        )

    def list_cluster_disks(self, cluster: str) -> list[models.Disk]:
        volumes = self.session.list_all(
            "ListVolumes",
            "block_storage",
            "/volumes/detail",
            "volumes",
            params={"metadata": json.dumps({CLUSTER_METADATA: cluster})},
        )
        return [
            models.Disk(
                id=str(v["id"]),
                name=str(v.get("name") or ""),
                zone=str(v.get("availability_zone") or ""),
                size_gib=int(v.get("size") or 0),
                state=str(v.get("status") or ""),
                tags={str(k): str(val) for k, val in (v.get("metadata") or {}).items()},
            )
            for v in volumes
            if (v.get("metadata") or {}).get(CLUSTER_METADATA) == cluster
        ]


def _names(items: list[dict[str, Any]]) -> list[str]:
    """The items' names, sorted, without blanks or repeats (the schema's ``uniqueItems``)."""
    return sorted({str(i["name"]) for i in items if i.get("name")})
