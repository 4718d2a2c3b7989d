"""vSphere's registration Secret: Deckhouse's keys for the Cluster API engine (CAPV kinds) and
the ``vsphere`` subtree the machine template reads."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from pydantic import SecretStr

from cloudloop.cloud.vsphere.registration import registration_secrets, registration_values
from cloudloop.cloud.vsphere.settings import InstanceClassDefaults, VsphereSettings


def decoded(values: dict[str, str]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in values.items()}


def test_values_as_deckhouse_renders_them(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    settings = VsphereSettings(
        server="vc.example.com",
        username="k8s",
        password=SecretStr("s3cret"),
        ca_bundle=ca,
        region="r1",
        zones=["z1", "z2"],
        datacenter="DC0",
        vm_folder_path="k8s",
        main_network="VM Network",
        instance_class_defaults=InstanceClassDefaults(
            template="templates/ubuntu", datastore="ds1", resource_pool_path="pool"
        ),
        zone_compute_cluster_paths={"z1": "C0"},
        ssh_public_key="ssh-ed25519 AAA",
    )
    data = decoded(registration_values(settings))
    assert {k: v for k, v in data.items() if k != "vsphere"} == {
        "type": "vsphere",
        "region": "r1",
        "zones": '["z1","z2"]',
        "instanceClassAPIVersion": "v1",
        "instanceClassKind": "VsphereInstanceClass",
        "machineClassKind": "",
        "capiClusterKind": "VSphereCluster",
        "capiClusterAPIVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "capiClusterName": "vsphere",
        "capiMachineTemplateKind": "VSphereMachineTemplate",
        "capiMachineTemplateAPIVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "sshPublicKey": "ssh-ed25519 AAA",
    }
    vsphere = json.loads(data["vsphere"])
    assert vsphere["server"] == "vc.example.com"  # port 443 is implied
    assert vsphere["password"] == "s3cret"
    assert vsphere["caBundle"].startswith("-----BEGIN")
    assert vsphere["datacenter"] == "DC0"
    assert vsphere["vmFolderPath"] == "k8s"
    assert vsphere["instances"] == {"mainNetwork": "VM Network"}
    assert vsphere["instanceClassDefaults"] == {
        "template": "templates/ubuntu",
        "datastore": "ds1",
        "resourcePoolPath": "pool",
        "disableTimesync": True,
    }
    assert vsphere["zoneComputeClusterPaths"] == {"z1": "C0"}


def test_both_secrets_carry_the_same_data_and_labels() -> None:
    bodies = registration_secrets(VsphereSettings(server="vc", username="u"))
    assert [b["metadata"]["name"] for b in bodies] == [
        "d8-node-manager-cloud-provider",
        "d8-node-manager-cloud-provider-vsphere",
    ]
    assert bodies[0]["data"] == bodies[1]["data"]
    assert bodies[0]["metadata"]["labels"]["cloud-provider.deckhouse.io/registration"] == ""
