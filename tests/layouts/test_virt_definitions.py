"""zVirt and DVP ``Standard`` definitions: names, labels, order and outputs as the reference
says (no cloud: pure data from the examples)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudloop.cloud.dvp import layout as dvp
from cloudloop.cloud.zvirt import layout as zvirt
from cloudloop.cloud.zvirt.layout_state import STATE_TYPES as ZVIRT_STATE_TYPES
from cloudloop.layouts import tfstate
from cloudloop.layouts.config import load_documents, validate_document
from cloudloop.layouts.model import LayoutDef, LayoutError, ref
from cloudloop.rules import layout as rules

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
UUID = "3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60"


def docs(example: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((EXAMPLES / f"{example}.yaml").read_text()))


def build(example: str, edit: Any = None) -> LayoutDef:
    documents = docs(example)
    if edit is not None:
        edit(documents[1])
    loaded = load_documents(documents, uuid=UUID)
    config = validate_document(documents[1])
    if example.startswith("zvirt"):
        return zvirt.define(config, loaded.cluster, ["default"])  # type: ignore[arg-type]
    return dvp.define(config, loaded.cluster, ["default"])  # type: ignore[arg-type]


def test_zvirt_modules_resources_and_outputs() -> None:
    def two_masters_and_a_group(doc: dict[str, Any]) -> None:
        doc["masterNodeGroup"]["replicas"] = 2
        doc["nodeGroups"] = [
            {
                "name": "front",
                "replicas": 1,
                "instanceClass": {
                    "numCPUs": 2,
                    "memory": 4096,
                    "template": "ubuntu-22-04",
                    "vnicProfileID": "49bb4594-0cd4-4eb7-8288-8594eafd5a86",
                    "customNetworkConfig": {
                        "networkInterfaceName": "ens3",
                        "networkInterfaceAddress": ["10.1.0.5/24"],
                        "networkInterfaceGateway": "10.1.0.1",
                    },
                },
            }
        ]

    layout = build("zvirt-standard", two_masters_and_a_group)
    assert [m.id for m in layout.modules] == ["base", "master-0", "master-1", "static-front-0"]
    base, master, _, static = layout.modules
    assert base.resources == []
    assert [r.key for r in master.resources] == [
        "zvirt.vm/demo-zv-master-0",
        "zvirt.nic/demo-zv-master-0/nic1",
        "zvirt.disk/demo-zv-master-0-kubernetes-data",
        "zvirt.disk_attachment/demo-zv-master-0-kubernetes-data",
        "zvirt.vm_start/demo-zv-master-0",
    ]
    waves = [[r.kind for r in wave] for wave in rules.waves(master.resources)]
    assert waves == [
        ["zvirt.vm", "zvirt.disk"],
        ["zvirt.nic", "zvirt.disk_attachment"],
        ["zvirt.vm_start"],
    ]
    vm = master.resources[0].properties
    assert (vm["cores"], vm["memory_mib"], vm["root_disk_gb"], vm["type"]) == (
        4,
        8192,
        50,
        "high_performance",
    )
    disk = master.resources[2].properties
    assert (disk["size_gb"], disk["format"], disk["sparse"]) == (10, "raw", False)
    script = yaml.safe_load(master.resources[4].properties["custom_script"])
    assert script["hostname"] == "demo-zv-master-0" and script["ssh_deletekeys"] is True
    assert master.outputs["kubernetes_data_device_path"] == "/dev/sdb"
    assert set(master.outputs) == {
        "master_ip_address_for_ssh",
        "node_internal_ip_address",
        "kubernetes_data_device_path",
    }
    assert [r.kind for r in static.resources] == ["zvirt.vm", "zvirt.nic", "zvirt.vm_start"]
    assert static.node_name == "demo-zv-front-0"
    assert static.resources[2].properties["nic_configuration"] == {
        "name": "ens3",
        "address": "10.1.0.5",
        "netmask": "255.255.255.0",
        "gateway": "10.1.0.1",
        "dns_servers": [],
    }
    assert layout.discovery == {
        "apiVersion": "deckhouse.io/v1",
        "kind": "ZvirtCloudProviderDiscoveryData",
        "storageDomains": [],
    }


def test_dvp_names_labels_and_outputs() -> None:
    layout = build("dvp-standard")
    base, master = layout.modules
    assert [r.key for r in base.resources] == [
        "dvp.virtual_machine_class/generic",
        "dvp.cluster_virtual_image/ubuntu-22-04",
        "dvp.network_policy/isolated-demo-dvp",
    ]
    assert base.resources[2].depends_on == [r.key for r in base.resources[:2]]
    root, data, secret, vm = master.resources
    h6 = r"[0-9a-f]{6}"
    assert re.fullmatch(f"demo-dvp-master-0-{h6}", root.name)
    assert re.fullmatch(f"demo-dvp-master-kubernetes-data-0-{h6}", data.name)
    assert re.fullmatch(f"demo-dvp-master-0-cloudinit-{h6}", secret.name)
    assert re.fullmatch(f"demo-dvp-master-0-{h6}", vm.name) and vm.name != root.name
    assert vm.tags == {
        "deckhouse.io/managed-by": "deckhouse",
        "dvp.deckhouse.io/cluster-uuid": UUID,
        "dvp.deckhouse.io/hostname": "demo-dvp-master-0",
        "dvp.deckhouse.io/cluster-prefix": "demo-dvp",
        "dvp.deckhouse.io/node-group": "master",
    }
    assert root.properties["spec"]["dataSource"]["objectRef"] == {
        "kind": "ClusterVirtualImage",
        "name": "ubuntu-22-04",
    }
    spec = vm.properties["spec"]
    # the computed names; the disks and Secret found (by labels and role) replace them
    assert [b["name"] for b in spec["blockDeviceRefs"]] == [root.name, data.name]
    assert spec["provisioning"]["userDataRef"]["name"] == secret.name
    assert vm.properties["parts"] == {
        root.name: {"kind": dvp.DISK, "stems": ["demo-dvp-master-0"]},
        data.name: {"kind": dvp.DISK, "stems": ["demo-dvp-master-kubernetes-data-0"]},
        secret.name: {"kind": dvp.SECRET, "stems": ["demo-dvp-master-0-cloudinit"]},
    }
    assert spec["bootloader"] == "EFI" and spec["runPolicy"] == "AlwaysOnUnlessStoppedManually"
    assert master.outputs["kubernetes_data_device_path"] == ref(data.key, "device")
    assert [root.properties["stems"], data.properties["stems"], vm.properties["stems"]] == [
        ["demo-dvp-master-0"],
        ["demo-dvp-master-kubernetes-data-0"],
        ["demo-dvp-master-0"],
    ]
    assert layout.discovery == {
        "apiVersion": "deckhouse.io/v1",
        "kind": "DVPCloudDiscoveryData",
        "zones": ["default"],
    }


def test_dvp_destructive_change_renames_the_vm_and_its_secret_only() -> None:
    before = build("dvp-standard").modules[1].resources

    def more_cores(doc: dict[str, Any]) -> None:
        doc["masterNodeGroup"]["instanceClass"]["virtualMachine"]["cpu"]["cores"] = 8

    after = build("dvp-standard", more_cores).modules[1].resources
    assert [r.name for r in before[:2]] == [r.name for r in after[:2]]
    assert before[2].name != after[2].name and before[3].name != after[3].name
    vm = after[3]
    assert dvp.same_destructive(vm.properties["destructive"], None)  # nothing to judge by
    old = before[3].properties["created_annotations"][dvp.DESTRUCTIVE_ANNOTATION]
    assert not dvp.same_destructive(vm.properties["destructive"], old)


def test_dvp_hashes_are_upstreams() -> None:
    """Terraform's jsonencode (keys sorted, no spaces, HTML characters escaped); disks hash
    the JSON of their JSON, the VM its JSON once; the VM's hash names the Secret too. The
    constants are Terraform 1.11's (``terraform console``: ``substr(sha256(jsonencode(
    jsonencode({...}))), 0, 6)``, ``sha256(jsonencode("ssh-rsa AAA<x>&y"))``)."""
    image = {"type": "ClusterVirtualImage", "name": "ubuntu-22-04"}
    assert dvp.disk_destructive({"rootDisk": {"image": image}})[1] == "c53d42"
    assert dvp.disk_destructive({"kbernetesDataDisk": {}})[1] == "313fa0"
    assert dvp.sha256_hex(dvp.tf_json("ssh-rsa AAA<x>&y")) == (
        "2050fb82d73993ae85802c2b4c88ecc8b49f7105cdbb5c90bdcb1c77d1e1803c"
    )
    assert dvp.tf_json({"b": [1, None], "a": "<&>"}) == '{"a":"\\u003c\\u0026\\u003e","b":[1,null]}'
    text, digest = dvp.disk_destructive({"kbernetesDataDisk": {}})
    assert text == '{"kbernetesDataDisk":{}}'
    assert digest == hashlib.sha256(b'"{\\"kbernetesDataDisk\\":{}}"').hexdigest()[:6]
    root, data, secret, vm = build("dvp-standard").modules[1].resources
    assert data.name == f"demo-dvp-master-kubernetes-data-0-{digest}"
    params = vm.properties["destructive"]
    assert params["etcDiskHash"] == digest and root.name.endswith(params["rootDiskHash"])
    annotations = vm.properties["created_annotations"]
    assert json.loads(annotations[dvp.DESTRUCTIVE_ANNOTATION]) == params
    h6 = annotations[dvp.DESTRUCTIVE_HASH_ANNOTATION]
    assert h6 == hashlib.sha256(annotations[dvp.DESTRUCTIVE_ANNOTATION].encode()).hexdigest()[:6]
    assert (
        vm.name == f"demo-dvp-master-0-{h6}" and secret.name == f"demo-dvp-master-0-cloudinit-{h6}"
    )
    # an annotation in upstream's shape with an Auto address the cloud chose: the same
    upstream = {**params, "virtualMachine": {**params["virtualMachine"], "ipAddress": "10.0.0.7"}}
    assert dvp.same_destructive(params, dvp.tf_json(upstream))
    # another upstream version's keys and disk hashes, Terraform's string tolerations: the same
    toleration = {"key": "k", "operator": "Exists", "tolerationSeconds": 300}
    with_toleration = {**params["virtualMachine"], "tolerations": [toleration]}
    other = {
        **params,
        "rootDiskHash": "000000",
        "virtualMachine": {
            **with_toleration,
            "cloudConfigHash": "x",
            "tolerations": [{**toleration, "tolerationSeconds": "300"}],
        },
    }
    assert dvp.same_destructive({**params, "virtualMachine": with_toleration}, dvp.tf_json(other))
    more_memory = {
        **other,
        "virtualMachine": {**other["virtualMachine"], "memory": {"size": "9Gi"}},
    }
    assert not dvp.same_destructive(
        {**params, "virtualMachine": with_toleration}, dvp.tf_json(more_memory)
    )


def test_dvp_network_policy_none_and_static_addresses() -> None:
    def open_policy(doc: dict[str, Any]) -> None:
        doc["provider"]["networkPolicy"] = "None"

    base = build("dvp-standard", open_policy).modules[0]
    assert all(r.read_only for r in base.resources)

    def static_ip(doc: dict[str, Any]) -> None:
        doc["masterNodeGroup"]["instanceClass"]["virtualMachine"]["ipAddresses"] = ["10.0.0.5"]

    with pytest.raises(LayoutError, match="static ipAddresses"):
        build("dvp-standard", static_ip)


def test_zvirt_state_published_reads_back_onto_every_node_resource() -> None:
    """What ``publish`` writes for a node (its state types) places every record again, each
    module's state in its own scope (two masters: nothing is left to guess)."""
    layout = build("zvirt-standard", lambda doc: doc["masterNodeGroup"].update(replicas=2))
    for module in layout.modules[1:]:
        outputs = {r.key: {"id": f"{module.id}-{i}"} for i, r in enumerate(module.resources)}
        written = tfstate.render_state(
            [(r, outputs[r.key]) for r in module.resources], ZVIRT_STATE_TYPES
        )
        records = tfstate.parse_state(written, module.node_name, ZVIRT_STATE_TYPES)
        placed = tfstate.map_state(layout, records, ZVIRT_STATE_TYPES)
        assert placed.unmapped == []
        assert placed.ids == {k: v["id"] for k, v in outputs.items()}
