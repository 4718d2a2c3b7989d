"""A cluster's network in moto: the VPC, cluster-tagged subnets and node security group that the
dev demo and the benchmarks start from (what Terraform's base-infrastructure makes on AWS)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ZONES = ("us-east-1a", "us-east-1b")


@dataclass
class ClusterNetwork:
    vpc_id: str
    owned_tags: list[dict[str, str]]
    subnet_ids: list[str] = field(default_factory=list)
    node_group_id: str = ""


def create_cluster_network(ec2: Any, cluster: str, *, route_table: bool = False) -> ClusterNetwork:
    """One VPC, a subnet per zone and the ``<cluster>-nodes`` group, all tagged ``owned``;
    with ``route_table``, a cluster-tagged route table for pod routes too."""
    owned = [{"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"}]
    network = ClusterNetwork(
        vpc_id=ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"], owned_tags=owned
    )
    for index, zone in enumerate(ZONES):
        network.subnet_ids.append(
            ec2.create_subnet(
                VpcId=network.vpc_id,
                CidrBlock=f"10.0.{index + 1}.0/24",
                AvailabilityZone=zone,
                TagSpecifications=[{"ResourceType": "subnet", "Tags": owned}],
            )["Subnet"]["SubnetId"]
        )
    if route_table:
        ec2.create_route_table(
            VpcId=network.vpc_id,
            TagSpecifications=[{"ResourceType": "route-table", "Tags": owned}],
        )
    network.node_group_id = ec2.create_security_group(
        GroupName=f"{cluster}-nodes",
        Description="nodes",
        VpcId=network.vpc_id,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": owned}],
    )["GroupId"]
    return network
