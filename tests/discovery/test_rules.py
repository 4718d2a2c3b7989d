"""The discoverer's documents: discovery data merge, catalog, conditions, orphaned disks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cloudloop.cloud import errors
from cloudloop.cloud.models import DiscoveryData, Disk, InstanceType, Zone
from cloudloop.rules import discovery as cloud_data

ZONES = [
    Zone(name="us-east-1b", region="us-east-1"),
    Zone(name="us-east-1a", region="us-east-1"),
    Zone(name="us-east-1x", region="us-east-1", state="impaired"),
]
TYPES = [
    InstanceType(name="t3.micro", cpu=2, memory_mib=1024),
    InstanceType(name="m5.large", cpu=2, memory_mib=8192, root_disk_gib=20),
]
TERRAFORM = {
    "apiVersion": "deckhouse.io/v1",
    "kind": "AWSCloudDiscoveryData",
    "keyName": "cluster-key",
    "instances": {"ami": "ami-1", "iamProfileName": "node"},
    "loadBalancerSecurityGroup": "sg-1",
    "zones": ["old-zone"],
    "zoneToSubnetIdMap": {"us-east-1a": "subnet-1"},
}


def test_catalog_items_are_quantities_sorted_by_name() -> None:
    assert cloud_data.catalog_items(TYPES) == [
        {"name": "m5.large", "cpu": "2", "memory": "8192Mi", "rootDisk": "20Gi"},
        {"name": "t3.micro", "cpu": "2", "memory": "1024Mi", "rootDisk": "0"},
    ]


@pytest.mark.parametrize(
    ("base", "expected_head"),
    [
        pytest.param(
            TERRAFORM,
            {
                "apiVersion": "deckhouse.io/v1",
                "kind": "AWSCloudDiscoveryData",
                "keyName": "cluster-key",
                "loadBalancerSecurityGroup": "sg-1",
                "zoneToSubnetIdMap": {"us-east-1a": "subnet-1"},
            },
            id="terraform-fields-kept",
        ),
        pytest.param(
            {"apiVersion": "deckhouse.io/v1alpha1", "kind": "Custom"},
            {"apiVersion": "deckhouse.io/v1alpha1", "kind": "Custom"},
            id="apiversion-and-kind-from-input",
        ),
        pytest.param(
            None,
            {"apiVersion": "deckhouse.io/v1", "kind": "AWSCloudDiscoveryData"},
            id="no-input-secret",
        ),
    ],
)
def test_discovery_document(base: dict[str, Any] | None, expected_head: dict[str, Any]) -> None:
    data = DiscoveryData(region="us-east-1", zones=ZONES, kind="AWSCloudDiscoveryData")
    document = cloud_data.discovery_document(base, data)
    for key, value in expected_head.items():
        assert document[key] == value, key
    assert document["zones"] == ["us-east-1a", "us-east-1b"]  # live, available, sorted
    assert "instanceTypes" not in document  # the catalog's, as upstream's discoverer
    if base is not None:
        assert base.get("zones") in (None, ["old-zone"])  # the input is not modified


def test_no_available_zone_is_incomplete() -> None:
    data = DiscoveryData(region="r", zones=[Zone(name="z", region="r", state="impaired")])
    with pytest.raises(cloud_data.IncompleteDiscovery):
        cloud_data.discovery_document(TERRAFORM, data)


def test_a_kind_without_zones_gets_none() -> None:
    data = DiscoveryData(
        region="default",
        zones=[Zone(name="default", region="default")],
        kind="ZvirtCloudProviderDiscoveryData",
        extra={"storageDomains": []},
        publish_zones=False,
    )
    base = {"apiVersion": "deckhouse.io/v1", "kind": "ZvirtCloudProviderDiscoveryData"}
    assert cloud_data.discovery_document(base, data) == {**base, "storageDomains": []}


def test_the_discoverers_own_kind_takes_only_the_keys_it_names_from_terraform() -> None:
    data = DiscoveryData(
        region="RegionOne",
        zones=[Zone(name="nova", region="RegionOne")],
        api_version="deckhouse.io/v1alpha1",
        kind="OpenStackCloudProviderDiscoveryData",
        extra={"mainNetwork": "from-settings", "defaultImageName": "", "flavors": ["m1"]},
        merge_base=False,
        from_base={"mainNetwork": "instances.mainNetwork", "defaultImageName": "instances.x"},
    )
    base = {
        "apiVersion": "deckhouse.io/v1",
        "kind": "OpenStackCloudDiscoveryData",
        "layout": "Standard",
        "instances": {"mainNetwork": "kube"},
    }
    assert cloud_data.discovery_document(base, data) == {
        "apiVersion": "deckhouse.io/v1alpha1",
        "kind": "OpenStackCloudProviderDiscoveryData",
        "mainNetwork": "kube",  # Terraform's, over the settings'
        "defaultImageName": "",  # Terraform has none: the driver's stays
        "flavors": ["m1"],
        "zones": ["nova"],
    }
    assert cloud_data.discovery_document(None, data)["mainNetwork"] == "from-settings"


def test_encoded_document_is_stable() -> None:
    one = cloud_data.encode_document({"b": 1, "a": [1, 2]})
    assert one == cloud_data.encode_document({"a": [1, 2], "b": 1})
    assert json.loads(one) == {"a": [1, 2], "b": 1}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(None, None, id="absent"),
        pytest.param("  ", None, id="blank"),
        pytest.param(
            '{"kind": "AWSCloudDiscoveryData"}', {"kind": "AWSCloudDiscoveryData"}, id="ok"
        ),
    ],
)
def test_parse_provider_document(raw: str | None, expected: dict[str, Any] | None) -> None:
    assert cloud_data.parse_provider_document(raw) == expected


@pytest.mark.parametrize(
    "raw", [pytest.param("[1]", id="not-an-object"), pytest.param("{", id="broken")]
)
def test_bad_provider_document_is_an_error(raw: str) -> None:
    with pytest.raises(ValueError):
        cloud_data.parse_provider_document(raw)


UNREACHABLE = errors.CloudUnreachable("aws", "DescribeInstanceTypes", "EndpointConnectionError")
AUTH = errors.CloudAuthFailed("aws", "DescribeInstanceTypes", "AuthFailure: bad key")


@pytest.mark.parametrize(
    ("failures", "zones", "expected"),
    [
        pytest.param(
            {"instance_types": None, "discovery_data": None},
            ZONES,
            {"cloud-credentials-valid": True, "cloud-api-reachable": True, "zones-available": True},
            id="all-good",
        ),
        pytest.param(
            {"instance_types": UNREACHABLE, "discovery_data": UNREACHABLE},
            None,
            {
                "cloud-credentials-valid": True,
                "cloud-api-reachable": False,
                "zones-available": False,
            },
            id="unreachable",
        ),
        pytest.param(
            {"instance_types": AUTH, "discovery_data": AUTH},
            None,
            {
                "cloud-credentials-valid": False,
                "cloud-api-reachable": False,
                "zones-available": False,
            },
            id="bad-credentials",
        ),
        pytest.param(
            {"instance_types": None, "disks_meta": errors.NotSupported("x", "discovery")},
            ZONES,
            {"cloud-credentials-valid": True, "cloud-api-reachable": True, "zones-available": True},
            id="not-supported-is-no-failure",
        ),
        pytest.param(
            {"discovery_data": None},
            [Zone(name="z", region="r", state="impaired")],
            {
                "cloud-credentials-valid": True,
                "cloud-api-reachable": True,
                "zones-available": False,
            },
            id="no-available-zone",
        ),
    ],
)
def test_cloud_conditions(
    failures: dict[str, errors.CloudError | None],
    zones: list[Zone] | None,
    expected: dict[str, bool],
) -> None:
    conditions = cloud_data.cloud_conditions(failures, zones)
    assert {c.name: c.ok for c in conditions} == expected
    encoded = json.loads(cloud_data.encode_conditions(conditions))
    assert all(set(item) == {"name", "message", "ok"} for item in encoded)


def pv(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    ("pvs", "orphans"),
    [
        pytest.param([], {"vol-1", "vol-2"}, id="no-pvs"),
        pytest.param(
            [pv("pv-a", {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}})],
            {"vol-2"},
            id="csi-volume-handle",
        ),
        pytest.param(
            [pv("pv-b", {"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-2"}})],
            {"vol-1"},
            id="in-tree-volume-id",
        ),
        pytest.param([pv("pvc-named", {})], {"vol-1"}, id="pv-named-like-the-disk"),
    ],
)
def test_orphaned_disks(pvs: list[dict[str, Any]], orphans: set[str]) -> None:
    disks = [Disk(id="vol-1", name="other"), Disk(id="vol-2", name="pvc-named")]
    assert {d.id for d in cloud_data.orphaned_disks(disks, pvs)} == orphans
