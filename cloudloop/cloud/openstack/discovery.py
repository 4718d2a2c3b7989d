"""OpenStack discovery: zones, flavors, and the ``OpenStackCloudDiscoveryData`` provider fields.

As Deckhouse's ``cloud-data-discoverer`` (``images/cloud-data-discoverer/discoverer.go``):
instance types from ``/flavors/detail`` (vcpus, RAM MiB, root disk or ephemeral GiB), zones
from Nova's ``os-availability-zone``, volume types from Cinder ``/types`` (none is an error, as
one StorageClass is made per type), images, and the network names: external networks are the
``router:external`` ones unless ``[Networking] public-network-name`` says, internal ones come
from ``internal-network-name``. The LB subnet and floating network come from ``[LoadBalancer]``.
The cluster's disks are the Cinder volumes whose metadata names the cluster
(``cinder.csi.openstack.org/cluster``), for the orphaned-volume gauges.
"""

from __future__ import annotations

import json
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.driver import DiscoveryDefaults
from cloudloop.cloud.openstack.base import NAME, OpenStackBase

DISCOVERY_KIND = "OpenStackCloudDiscoveryData"
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

    def discovery_data(self) -> models.DiscoveryData:
        settings = self.session.settings
        networks = self.session.list_all("ListNetworks", "network", "/networks", "networks")
        external = settings.networking.public_network_names or sorted(
            str(n["name"]) for n in networks if n.get("router:external")
        )
        images = self.session.list_all("ListImages", "image", "/images", "images")
        extra: dict[str, Any] = {
            "externalNetworkNames": external,
            "volumeTypes": self._volume_types(),
            "images": sorted({str(i["name"]) for i in images if i.get("name")}),
        }
        if settings.networking.internal_network_names:
            extra["internalNetworkNames"] = list(settings.networking.internal_network_names)
        load_balancer = {
            key: value
            for key, value in (
                ("subnetID", settings.load_balancer.subnet_id),
                ("floatingNetworkID", settings.load_balancer.floating_network_id),
            )
            if value
        }
        if load_balancer:
            extra["loadBalancer"] = load_balancer
        if settings.instances:
            extra["instances"] = dict(settings.instances)
        return models.DiscoveryData(
            region=settings.connection.region,
            zones=self.zones(),
            kind=DISCOVERY_KIND,
            extra=extra,
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
