"""AWS discovery: zones and instance types of the region, and the EBS volumes of the cluster.

The cluster's volumes are its data disks: a node's root volume (tagged at launch with the node
role tag ``kubernetes.io/role/<cluster>``, as MCM and cloudloop's machines tag them) is not one,
so it never reads as an orphaned disk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudloop.cloud import models
from cloudloop.cloud.aws.base import NAME, AwsBase, calling
from cloudloop.cloud.aws.machine_spec import role_tag_key
from cloudloop.cloud.aws.tags import cluster_tag_filters, tag_dict, tagged_for_cluster
from cloudloop.cloud.driver import DiscoveryDefaults

#: Deckhouse's document type for the AWS discovery data.
DISCOVERY_KIND = "AWSCloudDiscoveryData"
#: Tags the EBS CSI driver and the in-tree provisioner put the PV name in, best first.
_DISK_NAME_TAGS = ("CSIVolumeName", "kubernetes.io/created-for/pv/name", "Name")


class AwsDiscovery(DiscoveryDefaults):
    provider = NAME

    def __init__(self, session: AwsBase) -> None:
        self.session = session

    # -- discovery -------------------------------------------------------------------------
    def zones(self) -> list[models.Zone]:
        with calling("DescribeAvailabilityZones"):
            answer = self.session.client("ec2").describe_availability_zones()
        return [
            models.Zone(
                name=z["ZoneName"],
                region=z.get("RegionName", self.session.settings.region),
                state=z.get("State", "available"),
            )
            for z in answer.get("AvailabilityZones", [])
        ]

    def instance_types(self) -> list[models.InstanceType]:
        found: list[models.InstanceType] = []
        paginator = self.session.client("ec2").get_paginator("describe_instance_types")
        with calling("DescribeInstanceTypes"):
            for page in paginator.paginate():
                for raw in page.get("InstanceTypes", []):
                    found.append(
                        models.InstanceType(
                            name=raw["InstanceType"],
                            cpu=int(raw.get("VCpuInfo", {}).get("DefaultVCpus", 0)),
                            memory_mib=int(raw.get("MemoryInfo", {}).get("SizeInMiB", 0)),
                        )
                    )
        return found

    def discovery_data(self) -> models.DiscoveryData:
        """Live zones for ``AWSCloudDiscoveryData`` (instance types are listed separately):
        those of the setting ``zones`` when set (Terraform's ``zones`` ∩ the region's)."""
        zones = [z for z in self.zones() if self.session.settings.allows_zone(z.name)]
        return models.DiscoveryData(
            region=self.session.settings.region, zones=zones, kind=DISCOVERY_KIND
        )

    def list_cluster_disks(self, cluster: str) -> list[models.Disk]:
        """EBS volumes with either cluster tag (one DescribeVolumes per tag style)."""
        disks: dict[str, models.Disk] = {}
        paginator = self.session.client("ec2").get_paginator("describe_volumes")
        for filters in cluster_tag_filters(cluster):
            with calling("DescribeVolumes"):
                for page in paginator.paginate(Filters=filters):
                    for raw in page.get("Volumes", []):
                        tags = tag_dict(raw.get("Tags"))
                        if role_tag_key(cluster) in tags:
                            continue  # a node's root volume, not a data disk
                        if tagged_for_cluster(tags, cluster):
                            disks[str(raw["VolumeId"])] = self._to_disk(raw, tags)
        return list(disks.values())

    @staticmethod
    def _to_disk(raw: Mapping[str, Any], tags: dict[str, str]) -> models.Disk:
        name = next((tags[key] for key in _DISK_NAME_TAGS if tags.get(key)), "")
        return models.Disk(
            id=str(raw["VolumeId"]),
            name=name,
            zone=str(raw.get("AvailabilityZone", "")),
            size_gib=int(raw.get("Size", 0) or 0),
            state=str(raw.get("State", "")),
            tags=tags,
        )
