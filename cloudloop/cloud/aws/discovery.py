"""AWS discovery: zones and instance types of the region."""

from __future__ import annotations

from cloudloop.cloud import models
from cloudloop.cloud.aws.base import AwsBase, calling


class AwsDiscovery(AwsBase):
    # -- discovery -------------------------------------------------------------------------
    def zones(self) -> list[models.Zone]:
        with calling("DescribeAvailabilityZones"):
            answer = self.client("ec2").describe_availability_zones()
        return [
            models.Zone(
                name=z["ZoneName"],
                region=z.get("RegionName", self.settings.region),
                state=z.get("State", "available"),
            )
            for z in answer.get("AvailabilityZones", [])
        ]

    def instance_types(self) -> list[models.InstanceType]:
        found: list[models.InstanceType] = []
        paginator = self.client("ec2").get_paginator("describe_instance_types")
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
        return models.DiscoveryData(
            region=self.settings.region, zones=self.zones(), instance_types=self.instance_types()
        )
