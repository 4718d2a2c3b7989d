"""AWS layout definitions: names, tags, CIDR split, order and outputs as the reference says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudloop.cloud.aws.layout import cidr_split, define
from cloudloop.layouts.config import AWSClusterConfiguration, ClusterIdentity, load_documents
from cloudloop.layouts.model import LayoutDef, LayoutError
from cloudloop.rules import layout as rules

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
UUID = "3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]


def build(example: str, **changes: Any) -> LayoutDef:
    loaded = load_documents(
        yaml.safe_load_all((EXAMPLES / f"{example}.yaml").read_text()), uuid=UUID
    )
    config = loaded.document.model_copy(update=changes)
    assert isinstance(config, AWSClusterConfiguration)
    return define(config, loaded.cluster, ZONES)


@pytest.mark.parametrize(
    ("cidr", "newbits", "index", "expected"),
    [
        ("10.241.32.0/20", 1, 1, "10.241.40.0/21"),
        ("10.0.0.0/16", 2, 3, "10.0.192.0/18"),
        ("10.0.0.0/16", 0, 0, "10.0.0.0/16"),
    ],
)
def test_cidr_split_is_terraforms_cidrsubnet(
    cidr: str, newbits: int, index: int, expected: str
) -> None:
    assert cidr_split(cidr, newbits, index) == expected


def test_without_nat_resources_names_and_tags() -> None:
    layout = build("aws-without-nat")
    assert [m.id for m in layout.modules] == ["base", "master-0", "static-front-0"]
    base = {r.key: r for r in layout.module("base").resources}
    subnets = [r for r in base.values() if r.kind == "aws.subnet"]
    assert [
        (s.name, s.properties["cidr_block"], s.properties["availability_zone"]) for s in subnets
    ] == [
        ("demo-public-0", "10.241.32.0/21", "us-east-1a"),
        ("demo-public-1", "10.241.40.0/21", "us-east-1b"),
    ]
    assert subnets[0].tags == {
        "team": "demo",
        "Name": "demo-public-0",
        f"kubernetes.io/cluster/{UUID}": "shared",
        "kubernetes.io/cluster/demo": "shared",
    }
    assert {"aws.internet_gateway/demo", "aws.route_table/demo-public", "aws.key_pair/demo"} <= set(
        base
    )
    assert not any(k.startswith(("aws.nat_gateway", "aws.instance")) for k in base)
    assert base["aws.key_pair/demo"].tags["Cluster"] == "demo"
    for name in ("demo-node", "demo-loadbalancer", "demo-ssh-accessible"):
        assert f"aws.security_group/{name}" in base and f"aws.security_group_rules/{name}" in base
    master = {r.key: r for r in layout.module("master-0").resources}
    assert set(master) == {
        "aws.ebs_volume/demo-kubernetes-data-0",
        "aws.instance/demo-master-0",
        "aws.volume_attachment/demo-kubernetes-data-0",
        "aws.eip/demo-master-0",
    }
    assert (
        master["aws.volume_attachment/demo-kubernetes-data-0"].properties["device"] == "/dev/xvdf"
    )
    assert master["aws.ebs_volume/demo-kubernetes-data-0"].properties["size_gb"] == 20
    static = layout.module("static-front-0").resources
    assert [r.key for r in static] == ["aws.instance/demo-front-0", "aws.eip/demo-front-0"]
    assert static[0].tags["role"] == "front"
    assert static[0].properties["associate_public_ip"] is True
    for module in layout.modules:
        rules.waves(module.resources)  # no cycle, every reference in order


def test_with_nat_splits_for_public_and_internal_and_has_a_bastion() -> None:
    layout = build("aws-with-nat")
    base = {r.key: r for r in layout.module("base").resources}
    cidrs = {r.name: r.properties["cidr_block"] for r in base.values() if r.kind == "aws.subnet"}
    assert cidrs == {
        "demo-nat-public-0": "10.242.0.0/18",
        "demo-nat-public-1": "10.242.64.0/18",
        "demo-nat-internal-0": "10.242.128.0/18",
        "demo-nat-internal-1": "10.242.192.0/18",
    }
    assert base["aws.subnet/demo-nat-internal-0"].tags["kubernetes.io/role/internal-elb"] == "1"
    assert base["aws.subnet/demo-nat-public-0"].tags["kubernetes.io/role/elb"] == "1"
    assert {
        "aws.nat_gateway/demo-nat",
        "aws.eip/demo-nat-natgw",
        "aws.route_table/demo-nat-internal",
    } <= set(base)
    assert {"aws.instance/demo-nat-bastion", "aws.eip/demo-nat-bastion"} <= set(base)
    master = {r.kind: r for r in layout.module("master-0").resources}
    assert "aws.eip" not in master  # the bastion is the way in
    groups = master["aws.instance"].properties["security_group_ids"]
    assert {"$ref": "aws.security_group/demo-nat-ssh-accessible", "output": "id"} not in groups
    assert layout.discovery["instances"]["associatePublicIPAddress"] is False
    assert (
        layout.discovery["zoneToSubnetIdMap"]["us-east-1a"]["$ref"]
        == "aws.subnet/demo-nat-internal-0"
    )
    policy = base["aws.iam_role_policy/demo-nat-node"].properties["policy"]
    assert "ecr:ListImages" in policy and "ec2:DescribeInstances" in policy


def test_zones_outside_the_region_and_peering_are_refused() -> None:
    with pytest.raises(LayoutError, match="none of zones"):
        build("aws-with-nat", zones=["eu-west-1a"])
    with pytest.raises(LayoutError, match="peeredVPCs"):
        build("aws-with-nat", peeredVPCs=["vpc-1"])
    layout = build("aws-without-nat", zones=None)
    assert layout.discovery["zones"] == ZONES


def test_masters_spread_over_their_zones_in_order() -> None:
    plain = build("aws-without-nat")
    group = plain.model_copy()  # the example's master group, three replicas
    loaded = load_documents(
        yaml.safe_load_all((EXAMPLES / "aws-without-nat.yaml").read_text()), uuid=UUID
    )
    config = loaded.document
    config.masterNodeGroup.replicas = 3
    layout = define(config, ClusterIdentity(prefix="demo", uuid=UUID), ZONES)
    zones = [
        m.resources[0].properties["availability_zone"]
        for m in layout.modules
        if m.module == "master-node"
    ]
    assert zones == ["us-east-1a", "us-east-1b", "us-east-1a"]
    assert group.discovery["keyName"] == "demo"
