"""vSphere ``Standard`` definitions: names, order, paths and outputs as the reference says."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudloop.cloud.vsphere.layout import define, instance_uuid
from cloudloop.layouts.config import (
    InvalidConfig,
    VsphereClusterConfiguration,
    load_documents,
    validate_document,
)
from cloudloop.layouts.model import LayoutDef, LayoutError
from cloudloop.rules import layout as rules

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
UUID = "3c1d62a1-0b9c-4d3e-8f4e-1d2c3b4a5f60"


def build(zones: list[str] | None = None, **changes: Any) -> LayoutDef:
    loaded = load_documents(
        yaml.safe_load_all((EXAMPLES / "vsphere-standard.yaml").read_text()), uuid=UUID
    )
    config = loaded.document.model_copy(update=changes)
    assert isinstance(config, VsphereClusterConfiguration)
    return define(config, loaded.cluster, zones or ["DC0_C0", "DC0_C1"])


def test_standard_resources_names_order_and_outputs() -> None:
    layout = build()
    assert [m.id for m in layout.modules] == ["base", "master-0"]
    assert [r.key for r in layout.module("base").resources] == [
        "vsphere.datacenter/DC0",
        "vsphere.folder/dev/demo",
        "vsphere.compute_cluster/DC0_C0",
        "vsphere.resource_pool/DC0_C0/demo-vs",
    ]
    disk, vm = layout.module("master-0").resources
    assert disk.name == f"deckhouse/{UUID}-kubernetes-data-0.vmdk"
    assert disk.properties["size_gb"] == 10 and disk.properties["type"] == "eagerZeroedThick"
    assert vm.name == "demo-vs-master-0"
    assert vm.properties["data_disk"] == f"[LocalDS_0] deckhouse/{UUID}-kubernetes-data-0.vmdk"
    assert vm.properties["pool"] == "demo-vs" and vm.properties["root_disk_gb"] == 50
    assert vm.properties["instance_uuid"] == instance_uuid(UUID, vm.name)
    assert set(vm.depends_on) == {
        disk.key,
        "vsphere.folder/dev/demo",
        "vsphere.resource_pool/DC0_C0/demo-vs",
    }
    waves = [[r.key for r in w] for w in rules.waves(layout.module("master-0").resources)]
    assert waves == [[disk.key], [vm.key]]
    metadata = json.loads(base64.b64decode(vm.properties["extra_config"]["guestinfo.metadata"]))
    assert metadata["local-hostname"] == "demo-vs-master-0"
    assert metadata["public-keys-data"].startswith("ssh-ed25519 ")
    assert metadata["network"] == {"version": 2, "ethernets": {"ens192": {"dhcp4": True}}}
    outputs = layout.module("master-0").outputs
    assert outputs["kubernetes_data_device_path"] == "/dev/sdb"
    assert layout.discovery == {
        "apiVersion": "deckhouse.io/v1",
        "kind": "VsphereCloudDiscoveryData",
        "vmFolderPath": "dev/demo",
        "resourcePoolPath": "demo-vs",
        "zones": ["DC0_C0"],
    }


def test_existing_folder_base_pool_and_no_nested_pool() -> None:
    layout = build(vmFolderExists=True, baseResourcePool="base", useNestedResourcePool=False)
    kinds = [r.kind for r in layout.module("base").resources]
    assert "vsphere.folder" not in kinds and "vsphere.resource_pool" not in kinds
    assert layout.module("master-0").resources[1].properties["pool"] == "base"
    assert layout.discovery["resourcePoolPath"] == "base"
    nested = build(baseResourcePool="base")
    assert nested.discovery["resourcePoolPath"] == "base/demo-vs"


def test_zone_without_a_tagged_cluster_and_storage_policy_are_refused() -> None:
    with pytest.raises(LayoutError, match="no compute cluster"):
        build(zones=["other"])
    with pytest.raises(LayoutError, match="storagePolicyID"):
        build(storagePolicyID="p-1")


def test_ca_bundle_and_insecure_exclude_each_other() -> None:
    doc = list(yaml.safe_load_all((EXAMPLES / "vsphere-standard.yaml").read_text()))[1]
    doc["provider"]["caBundle"] = "-----BEGIN CERTIFICATE-----"
    with pytest.raises(InvalidConfig, match="caBundle and insecure"):
        validate_document(doc)
    doc["provider"]["insecure"] = False
    assert validate_document(doc).provider.caBundle  # type: ignore[union-attr]
