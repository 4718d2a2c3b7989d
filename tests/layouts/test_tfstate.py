"""Terraform state records → layout resource keys (pure): identity attributes only are kept,
references between records place what names do not, what cannot be placed is reported, and
what ``publish`` writes reads back onto the same keys; per-zone ``for_each`` instances are
placed by their key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudloop.cloud.aws import layout as defs
from cloudloop.cloud.aws.layout_state import STATE_TYPES
from cloudloop.cloud.dvp import layout as dvp
from cloudloop.cloud.dvp.layout_state import STATE_TYPES as DVP_TYPES
from cloudloop.cloud.vsphere import layout as vs
from cloudloop.cloud.vsphere.layout_state import STATE_TYPES as VS_TYPES
from cloudloop.layouts import tfstate
from cloudloop.layouts.config import load_documents
from cloudloop.layouts.model import LayoutDef

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"


def layout(example: str) -> LayoutDef:
    docs = list(yaml.safe_load_all((EXAMPLES / f"{example}.yaml").read_text()))
    loaded = load_documents(docs, uuid="3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60")
    return defs.define(loaded.document, loaded.cluster, ["us-east-1a", "us-east-1b"])


def resource(tf_type: str, tf_name: str, **attributes: Any) -> dict[str, Any]:
    return {
        "mode": "managed",
        "type": tf_type,
        "name": tf_name,
        "instances": [{"attributes": attributes}],
    }


def state(*resources: dict[str, Any]) -> str:
    return json.dumps({"version": 4, "resources": list(resources)})


def test_only_identity_attributes_are_kept_and_data_sources_are_skipped() -> None:
    text = state(
        resource("aws_instance", "master", id="i-1", user_data="s3cr3t", tags={"Name": "x"}),
        {"mode": "data", "type": "aws_vpc", "name": "existing", "instances": [{"attributes": {}}]},
    )
    [record] = tfstate.parse_state(text, "demo-master-0", STATE_TYPES)
    assert record.id == "i-1" and record.address == "aws_instance.master"
    assert record.attributes == {"id": "i-1", "tags.Name": "x"}
    assert "s3cr3t" not in record.model_dump_json()
    with pytest.raises(tfstate.InvalidState):
        tfstate.parse_state("{", "base", STATE_TYPES)


def test_with_nat_base_is_placed_by_names_cidrs_and_references() -> None:
    nat = layout("aws-with-nat")
    p = nat.prefix
    text = state(
        resource("aws_vpc", "kube", id="vpc-1", cidr_block="10.242.0.0/16"),
        # subnets without the layout's names: placed by CIDR and zone
        *(
            resource(
                "aws_subnet",
                f"s{i}",
                id=f"subnet-{i}",
                cidr_block=cidr,
                availability_zone=zone,
                tags={"Name": f"other-{i}"},
            )
            for i, (cidr, zone) in enumerate(
                [
                    ("10.242.0.0/18", "us-east-1a"),
                    ("10.242.64.0/18", "us-east-1b"),
                    ("10.242.128.0/18", "us-east-1a"),
                    ("10.242.192.0/18", "us-east-1b"),
                ]
            )
        ),
        resource("aws_internet_gateway", "gw", id="igw-1", vpc_id="vpc-1"),
        # two EIPs without names: the NAT gateway's allocation and the bastion's instance say which
        resource("aws_eip", "a", id="eipalloc-bastion", instance="i-bastion"),
        resource("aws_eip", "b", id="eipalloc-nat"),
        resource("aws_nat_gateway", "nat", id="nat-1", allocation_id="eipalloc-nat"),
        resource("aws_instance", "bastion", id="i-bastion", tags={"Name": f"{p}-bastion"}),
        resource("aws_eip_association", "bastion", id="eipassoc-1"),
        resource(
            "aws_route_table",
            "internal",
            id="rtb-internal",
            route=[{"cidr_block": "0.0.0.0/0", "gateway_id": "", "nat_gateway_id": "nat-1"}],
        ),
        resource(
            "aws_route_table",
            "public",
            id="rtb-public",
            route=[{"cidr_block": "0.0.0.0/0", "gateway_id": "igw-1", "nat_gateway_id": ""}],
        ),
        resource("aws_security_group", "node", id="sg-node", name=f"{p}-node"),
        resource("aws_security_group", "ssh", id="sg-ssh", name=f"{p}-ssh-accessible"),
        resource("aws_security_group_rule", "r1", id="sgrule-1", security_group_id="sg-node"),
        resource("aws_security_group_rule", "r2", id="sgrule-2", security_group_id="sg-node"),
        resource("aws_vpc_peering_connection", "peer", id="pcx-1"),
    )
    placed = tfstate.map_state(nat, tfstate.parse_state(text, "base", STATE_TYPES), STATE_TYPES)
    assert placed.ids[f"{defs.SUBNET}/{p}-internal-1"] == "subnet-3"
    assert placed.ids[f"{defs.SUBNET}/{p}-public-0"] == "subnet-0"
    assert placed.ids[f"{defs.EIP}/{p}-natgw"] == "eipalloc-nat"
    assert placed.ids[f"{defs.EIP}/{p}-bastion"] == "eipalloc-bastion"
    assert placed.ids[f"{defs.ROUTE_TABLE}/{p}-internal"] == "rtb-internal"
    assert placed.ids[f"{defs.ROUTE_TABLE}/{p}-public"] == "rtb-public"
    assert placed.ids[f"{defs.SG_RULES}/{p}-node"] == "sg-node"
    assert placed.addresses[f"{defs.SG_RULES}/{p}-node"] == [
        "aws_security_group_rule.r1",
        "aws_security_group_rule.r2",
    ]
    assert placed.unmapped == [
        "aws_vpc_peering_connection.peer: type aws_vpc_peering_connection is not in the layout"
    ]


def test_what_cannot_be_told_apart_is_reported_not_guessed() -> None:
    without = layout("aws-without-nat")
    text = state(
        resource("aws_subnet", "a", id="subnet-a"),
        resource("aws_subnet", "b", id="subnet-b"),
    )
    placed = tfstate.map_state(without, tfstate.parse_state(text, "", STATE_TYPES), STATE_TYPES)
    assert placed.ids == {}
    assert placed.unmapped[0].startswith("aws_subnet.a: ambiguous among aws.subnet/")


def test_what_publish_writes_reads_back_onto_the_same_keys() -> None:
    without = layout("aws-without-nat")
    base = without.module("base")
    outputs = {r.key: {"id": f"id-{i}"} for i, r in enumerate(base.resources)}
    written = tfstate.render_state([(r, outputs[r.key]) for r in base.resources], STATE_TYPES)
    records = tfstate.parse_state(json.dumps(written), "base", STATE_TYPES)
    placed = tfstate.map_state(without, records, STATE_TYPES)
    assert placed.unmapped == []
    # rule sets are their groups' (not written); named kinds are adopted by their names
    named = (defs.ROLE, defs.PROFILE, defs.KEY_PAIR)
    assert placed.ids == {
        r.key: r.name if r.kind in named else outputs[r.key]["id"]
        for r in base.resources
        if r.kind != defs.SG_RULES
    }


def test_vsphere_pools_of_every_zone_named_alike_are_placed_by_their_for_each_key() -> None:
    """Upstream makes one ``<prefix>`` pool per zone (``for_each``): the instance key decides."""
    docs = list(yaml.safe_load_all((EXAMPLES / "vsphere-standard.yaml").read_text()))
    zones = ["DC0_C0", "DC0_C1"]
    for doc in docs:
        if doc["kind"] == "VsphereClusterConfiguration":
            doc["zones"] = zones
    loaded = load_documents(docs, uuid="3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60")
    vs_layout = vs.define(loaded.document, loaded.cluster, zones)
    p = vs_layout.prefix
    pools = {
        "mode": "managed",
        "type": "vsphere_resource_pool",
        "name": "pool",
        "instances": [
            {"index_key": zone, "attributes": {"id": f"resgroup-{i}", "name": p}}
            for i, zone in enumerate(reversed(zones))
        ],
    }
    records = tfstate.parse_state(state(pools), tfstate.BASE_SCOPE, VS_TYPES)
    placed = tfstate.map_state(vs_layout, records, VS_TYPES)
    assert placed.unmapped == []
    assert placed.ids == {
        f"{vs.POOL}/DC0_C1/{p}": "resgroup-0",
        f"{vs.POOL}/DC0_C0/{p}": "resgroup-1",
    }


def dvp_layout() -> LayoutDef:
    docs = list(yaml.safe_load_all((EXAMPLES / "dvp-standard.yaml").read_text()))
    loaded = load_documents(docs, uuid="3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60")
    return dvp.define(loaded.document, loaded.cluster, [])


def manifest(tf_name: str, kind: str, name: str, **more: Any) -> dict[str, Any]:
    obj = {"kind": kind, "metadata": {"name": name, "namespace": "ns"}, **more}
    return resource("kubernetes_manifest", tf_name, manifest=obj, object=obj)


def test_kubernetes_manifests_are_placed_by_their_kind_and_names_less_their_hash() -> None:
    """One Terraform type, several kinds: ``object.kind`` chooses the table's entry; the two
    disks of a master are told apart by their names with upstream's (other) hashes cut."""
    layout = dvp_layout()
    master = layout.module("master-0")
    node = master.node_name
    root, data, secret, vm = master.resources
    text = state(
        manifest("root-disk", "VirtualDisk", f"{node}-0a0a0a"),
        manifest("kubernetes-data-disk", "VirtualDisk", f"{data.name[:-6]}1b1b1b"),
        manifest("vm", "VirtualMachine", f"{node}-2c2c2c"),
        manifest("ipv4_address", "VirtualMachineIPAddress", f"{node}-auto"),
        manifest("odd", "ConfigMap", "whatever"),
        resource(
            "kubernetes_secret",
            "cloudinit-secret",
            id=f"ns/{node}-cloudinit-2c2c2c",
            metadata=[{"name": f"{node}-cloudinit-2c2c2c"}],
            data={"userData": "s3cr3t"},
        ),
        resource("kubernetes_owner_references_v1", "root-disk", id="x"),
    )
    records = tfstate.parse_state(text, node, DVP_TYPES)
    assert "s3cr3t" not in json.dumps([r.model_dump() for r in records])
    placed = tfstate.map_state(layout, records, DVP_TYPES)
    assert placed.ids == {
        root.key: f"{node}-0a0a0a",
        data.key: f"{data.name[:-6]}1b1b1b",
        vm.key: f"{node}-2c2c2c",
        secret.key: f"{node}-cloudinit-2c2c2c",
    }
    assert placed.unmapped == [
        "kubernetes_manifest.odd: type kubernetes_manifest is not in the layout"
    ]


def test_dvp_what_publish_writes_reads_back_onto_the_same_keys() -> None:
    layout = dvp_layout()
    master = layout.module("master-0")
    found = {
        r.key: {"id": r.name[:-6] + "abcdef", "name": r.name[:-6] + "abcdef"}
        for r in master.resources
    }
    written = tfstate.render_state([(r, found[r.key]) for r in master.resources], DVP_TYPES)
    assert {e["type"] for e in written["resources"]} == {"kubernetes_manifest", "kubernetes_secret"}
    records = tfstate.parse_state(json.dumps(written), master.node_name, DVP_TYPES)
    placed = tfstate.map_state(layout, records, DVP_TYPES)
    assert placed.unmapped == []
    assert placed.ids == {k: v["id"] for k, v in found.items()}


def test_upstream_types_that_are_part_of_another_resource_are_placed_or_skipped() -> None:
    """``aws_route`` (upstream's ``internet_access_public``) is a route of its table, not a
    resource nobody placed; ``openstack_compute_floatingip_v2`` (Deckhouse's OpenStack master
    module, Nova's proxy of a Neutron floating IP) is the master's floating IP."""
    without = layout("aws-without-nat")
    text = state(
        resource("aws_route", "internet_access_public", id="r-rtb-1080289494"),
        resource("aws_route_table", "kube", id="rtb-1", tags={"Name": f"{without.prefix}-public"}),
    )
    placed = tfstate.map_state(without, tfstate.parse_state(text, "base", STATE_TYPES), STATE_TYPES)
    assert placed.unmapped == []
    assert placed.ids == {f"{defs.ROUTE_TABLE}/{without.prefix}-public": "rtb-1"}

    from cloudloop.cloud.openstack.layout_state import STATE_TYPES as OS_TYPES
    from tests.layouts.test_openstack_definitions import build

    simple = build("openstack-simple-with-internal-network")
    master = simple.module("master-0")
    [fip] = [r for r in master.resources if r.kind == "openstack.floating_ip"]
    text = state(
        resource("openstack_compute_floatingip_v2", "master", id="fip-1", pool="public"),
        resource(
            "openstack_compute_floatingip_associate_v2",
            "master",
            id="203.0.113.7/srv-1/",
            floating_ip="203.0.113.7",
            instance_id="srv-1",
        ),
    )
    records = tfstate.parse_state(text, master.node_name, OS_TYPES)
    placed = tfstate.map_state(simple, records, OS_TYPES)
    assert placed.unmapped == []
    assert placed.ids == {fip.key: "fip-1"}
