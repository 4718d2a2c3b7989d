"""OpenStack layout definitions: names, zones, ports, order and outputs as the reference says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudloop.cloud.openstack.layout import define, host
from cloudloop.layouts.config import (
    ClusterIdentity,
    InvalidConfig,
    OpenStackClusterConfiguration,
    load_documents,
    validate_document,
)
from cloudloop.layouts.model import REF, LayoutDef, LayoutError
from cloudloop.rules import layout as rules

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
UUID = "3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60"
ZONES = ["nova-b", "nova"]
LAYOUTS = {
    "openstack-standard": "Standard",
    "openstack-standard-with-no-router": "StandardWithNoRouter",
    "openstack-simple": "Simple",
    "openstack-simple-with-internal-network": "SimpleWithInternalNetwork",
}


def build(example: str, zones: list[str] = ZONES, **changes: Any) -> LayoutDef:
    loaded = load_documents(
        yaml.safe_load_all((EXAMPLES / f"{example}.yaml").read_text()), uuid=UUID
    )
    doc = loaded.document.model_dump(mode="json")
    doc["provider"]["password"] = "x"
    doc.update(changes)
    config = OpenStackClusterConfiguration.model_validate(doc)
    return define(config, ClusterIdentity(prefix="demo-os", uuid=UUID), zones)


def _refs(value: Any) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        if REF in value:
            return [(value[REF], value.get("output", "id"))]
        return [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


@pytest.mark.parametrize("example", list(LAYOUTS))
def test_every_reference_names_a_declared_output(example: str) -> None:
    layout = build(example)
    assert layout.layout == LAYOUTS[example]
    outputs = {r.key: r.outputs for m in layout.modules for r in m.resources}
    keys = [r.key for m in layout.modules for r in m.resources]
    assert len(keys) == len(set(keys))
    base = {r.key for r in layout.module("base").resources}
    for ref_key, output in _refs(layout.discovery):
        assert ref_key in base and output in outputs[ref_key]
    for module in layout.modules:
        rules.waves(module.resources)  # no cycle
        for resource in module.resources:
            for ref_key, output in _refs(resource.properties):
                assert output in outputs[ref_key], (resource.key, ref_key, output)
        for ref_key, output in _refs(module.outputs):
            assert output in outputs[ref_key]


def test_standard_names_order_and_outputs() -> None:
    layout = build("openstack-standard")
    assert [m.id for m in layout.modules] == ["base", "master-0", "static-front-0"]
    base = layout.module("base")
    waves = rules.waves(base.resources)
    assert {r.key for r in waves[0]} == {r.key for r in base.resources if r.read_only}
    by_key = {r.key: r for r in base.resources}
    subnet = by_key["openstack.subnet/demo-os"].properties
    assert subnet["gateway_ip"] == "192.168.198.1"
    assert subnet["allocation_pools"] == [{"start": "192.168.198.2", "end": "192.168.198.254"}]
    assert subnet["dns_nameservers"] == ["8.8.8.8"]
    rules_ = by_key["openstack.security_group_rules/demo-os"].properties["ingress"]
    assert [(r["protocol"], r["port_range_min"]) for r in rules_] == [
        ("tcp", 22),
        ("icmp", None),
        ("tcp", 30000),
        (None, None),
    ]
    master = {r.key: r for r in layout.module("master-0").resources}
    port = master["openstack.port/demo-os-master-0@demo-os"].properties
    assert port["port_name"] == "demo-os-master-0"
    assert port["allowed_address_pairs"] == ["10.111.0.0/16"]
    server = master["openstack.server/demo-os-master-0"].properties
    assert server["availability_zone"] == "nova"  # the only volumeTypeMap zone
    assert server["config_drive"] is False and server["key_name"] == "demo-os"
    assert "openstack.volume/demo-os-master-root-volume-0" in master
    assert master["openstack.volume/demo-os-kubernetes-data-0"].properties["size"] == 10
    outputs = layout.module("master-0").outputs
    assert outputs["master_ip_address_for_ssh"] == {
        REF: "openstack.floating_ip/demo-os-master-0@public",
        "output": "address",
    }


def test_bastion_takes_the_masters_floating_ip() -> None:
    layout = build(
        "openstack-standard",
        standard={
            "internalNetworkCIDR": "192.168.198.0/24",
            "internalNetworkDNSServers": ["8.8.8.8"],
            "externalNetworkName": "public",
            "bastion": {"instanceClass": {"flavorName": "m1.small", "imageName": "cirros"}},
        },
    )
    base = {r.key for r in layout.module("base").resources}
    assert {
        "openstack.server/demo-os-bastion",
        "openstack.volume/demo-os-bastion-root-volume",
        "openstack.floating_ip/demo-os-bastion@public",
    } <= base
    assert "bastion_ip_address_for_ssh" in layout.module("base").outputs
    master = {r.kind for r in layout.module("master-0").resources}
    assert "openstack.floating_ip" not in master


def test_masters_spread_over_the_volume_type_zones() -> None:
    group = {
        "replicas": 3,
        "instanceClass": {"flavorName": "m1.large", "imageName": "ubuntu-22.04"},
        "volumeTypeMap": {"nova": "ssd", "nova-b": "lvmdriver-1"},
        "serverGroup": {"policy": "AntiAffinity"},
    }
    layout = build("openstack-simple", masterNodeGroup=group)
    zones = [
        next(r for r in m.resources if r.kind == "openstack.server").properties
        for m in layout.modules
        if m.module == "master-node"
    ]
    assert [z["availability_zone"] for z in zones] == ["nova", "nova-b", "nova"]
    assert all(
        z["server_group_id"] == {REF: "openstack.server_group/demo-os", "output": "id"}
        for z in zones
    )
    with pytest.raises(LayoutError, match="no zone"):
        build("openstack-simple", zones=["other"])


def test_cidrhost() -> None:
    assert host("10.0.0.0/24", 1) == "10.0.0.1"
    assert host("10.0.0.0/16", 254) == "10.0.0.254"


def test_an_internal_cidr_with_host_bits_is_refused() -> None:
    """Upstream's ``variables.tf`` validation: ``cidrsubnet(cidr, 0, 0) == cidr``."""
    loaded = load_documents(
        yaml.safe_load_all((EXAMPLES / "openstack-standard.yaml").read_text()), uuid=UUID
    )
    doc = loaded.document.model_dump(mode="json")
    doc["provider"]["password"] = "x"
    doc["standard"]["internalNetworkCIDR"] = "192.168.198.5/24"
    with pytest.raises(InvalidConfig) as refused:
        validate_document(doc)
    assert {e.path: e.message for e in refused.value.errors} == {
        # the value is not echoed (errors go into history and Events: issue 39, item 5)
        "standard.internalNetworkCIDR": (
            "not a network address (host bits set; use the network's own address)"
        )
    }


def test_the_discoverer_takes_image_and_main_network_from_what_apply_publishes() -> None:
    """The published ``cloud_discovery_data`` gives the OpenStack discoverer's own document
    (``OpenStackCloudProviderDiscoveryData``) its ``defaultImageName`` and ``mainNetwork``."""
    from cloudloop.cloud.models import DiscoveryData, Zone
    from cloudloop.cloud.openstack.layout import DISCOVERY_KIND as LAYOUT_KIND
    from cloudloop.rules import discovery as cloud_data

    written = rules.resolve(
        build("openstack-standard").discovery,
        {
            "openstack.network/demo-os": {"id": "net-1", "name": "demo-os"},
            "openstack.network/public": {"id": "ext-1", "name": "public"},
            "openstack.subnet/demo-os": {"id": "subnet-1"},
        },
    )
    assert written["kind"] == LAYOUT_KIND == "OpenStackCloudDiscoveryData"
    assert written["instances"] == {
        "sshKeyPairName": "demo-os",
        "imageName": "ubuntu-22.04",
        "mainNetwork": "demo-os",
        "securityGroups": ["demo-os"],
    }
    assert written["loadBalancer"] == {"subnetID": "subnet-1", "floatingNetworkID": "ext-1"}
    live = DiscoveryData(
        region="RegionOne",
        zones=[Zone(name="nova", region="RegionOne"), Zone(name="nova-b", region="RegionOne")],
        api_version="deckhouse.io/v1alpha1",
        kind="OpenStackCloudProviderDiscoveryData",
        extra={"images": ["ubuntu-22.04"], "defaultImageName": "", "mainNetwork": ""},
        merge_base=False,
        from_base={
            "defaultImageName": "instances.imageName",
            "mainNetwork": "instances.mainNetwork",
        },
    )
    merged = cloud_data.discovery_document(written, live)
    assert merged == {
        "apiVersion": "deckhouse.io/v1alpha1",
        "kind": "OpenStackCloudProviderDiscoveryData",
        "images": ["ubuntu-22.04"],
        "defaultImageName": "ubuntu-22.04",
        "mainNetwork": "demo-os",
        "zones": ["nova", "nova-b"],
    }
