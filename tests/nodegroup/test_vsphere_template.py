"""vSphere's machine-template contract: VsphereInstanceClass → VSphereMachineTemplate (CAPV fields,
Deckhouse's mapping), rendered as the node manager and ``cloudloop nodegroup render`` do."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudloop.cloud.vsphere.capi import INFRA_KINDS, NODE_TEMPLATES
from cloudloop.nodegroup.contract import Contract, ContractError, RenderContext
from cloudloop.nodegroup.gotemplate import Template, TemplateError
from cloudloop.nodegroup.render import Bootstrap, NodeGroup, render_node_group

CLASS: dict[str, Any] = {
    "numCPUs": 2,
    "memory": 4097,
    "template": "templates/ubuntu-24",
    "mainNetwork": "k8s",
    "additionalNetworks": ["storage"],
    "resourcePool": "pool-a",
    "runtimeOptions": {"cpuShares": 100, "memoryLimit": 8192, "memoryReservation": 50},
}
PROVIDER: dict[str, Any] = {
    "server": "vc.example.com",
    "datacenter": "DC0",
    "vmFolderPath": "k8s/nodes",
    "instances": {"mainNetwork": "VM Network"},
    "instanceClassDefaults": {
        "template": "templates/default",
        "datastore": "LocalDS_0",
        "resourcePoolPath": "k8s-pool",
        "disableTimesync": True,
    },
}


def render(instance_class: dict[str, Any], provider: dict[str, Any] | None = None) -> Any:
    contract = Contract.parse(NODE_TEMPLATES.contract_text())
    obj = contract.render(
        RenderContext(
            instance_class=instance_class, zone="z1", node_group="g", provider=provider or {}
        )
    )
    assert (obj["apiVersion"], obj["kind"]) == (
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "VSphereMachineTemplate",
    )
    return obj["spec"]["template"]["spec"]


def test_class_and_provider_values_map_as_deckhouse_does() -> None:
    spec = render(CLASS, PROVIDER)
    assert spec == {
        "template": "templates/ubuntu-24",
        "server": "vc.example.com",
        "datacenter": "DC0",
        "folder": "/DC0/vm/k8s/nodes",
        "datastore": "LocalDS_0",
        "resourcePool": "/DC0/host/*/Resources/pool-a",
        "numCPUs": 2,
        "memoryMiB": 4100,  # rounded up to a multiple of 4
        "diskGiB": 20,
        "cloneMode": "fullClone",
        "network": {
            "devices": [
                {"networkName": "k8s", "dhcp4": True},
                {"networkName": "storage", "dhcp4": True},
            ]
        },
        "customVMXKeys": {"tools.syncTime": "FALSE", "vhv.enable": "TRUE"},
        "resources": {
            "shares": {"cpu": 100},
            "limits": {"memory": "8192Mi"},
            "requests": {"memory": "2050Mi"},  # 50 % of 4100
        },
    }


def test_defaults_fill_what_the_class_leaves_out() -> None:
    spec = render({"numCPUs": 1, "memory": 2048.0, "rootDiskSize": 40}, PROVIDER)
    assert spec["template"] == "templates/default"
    assert spec["resourcePool"] == "/DC0/host/*/Resources/k8s-pool"
    assert spec["network"] == {"devices": [{"networkName": "VM Network", "dhcp4": True}]}
    assert spec["diskGiB"] == 40
    assert spec["resources"] == {"requests": {"memory": "1638Mi"}}  # the default 80 %


def test_absolute_paths_and_switched_off_options_stay_as_given() -> None:
    cls = {
        **CLASS,
        "resourcePool": "/DC0/host/C1/Resources/p",
        "disableTimesync": False,
        "runtimeOptions": {
            "nestedHardwareVirtualization": False,
            "cpuReservation": 500,
            "cpuLimit": 2000,
            "memoryShares": 50,
        },
    }
    spec = render(cls, {**PROVIDER, "vmFolderPath": "/DC0/vm/abs"})
    assert spec["resourcePool"] == "/DC0/host/C1/Resources/p"
    assert spec["folder"] == "/DC0/vm/abs"
    assert "customVMXKeys" not in spec
    assert spec["resources"] == {
        "shares": {"memory": 50},
        "limits": {"cpu": "2000M"},
        "requests": {"cpu": "500M", "memory": "3280Mi"},
    }


def test_without_registration_values_the_class_must_name_template_and_network() -> None:
    spec = render(CLASS)
    assert "server" not in spec and "folder" not in spec and "datacenter" not in spec
    assert spec["resourcePool"] == "pool-a"  # relative: resolved by the driver
    with pytest.raises(ContractError, match="template"):
        render({"numCPUs": 1, "memory": 1024, "mainNetwork": "n"})
    with pytest.raises(ContractError, match="mainNetwork"):
        render({"numCPUs": 1, "memory": 1024, "template": "t"})


@pytest.mark.parametrize(
    ("change", "rolls"),
    [
        (lambda c: c.update(numCPUs=4), True),
        (lambda c: c.update(numCPUs=2.0), False),
        (lambda c: c["runtimeOptions"].update(cpuShares=200), True),
        (lambda c: c.update(additionalNetworks=[]), True),
        (lambda c: c.update(disableTimesync=False), True),
    ],
    ids=["cpus", "same-number", "runtime", "networks", "timesync"],
)
def test_rollout_fields(change: Any, rolls: bool) -> None:
    contract = Contract.parse(NODE_TEMPLATES.contract_text())
    changed = copy.deepcopy(CLASS)
    change(changed)
    before = contract.rollout_digest(CLASS, "z", "uuid")
    assert (contract.rollout_digest(changed, "z", "uuid") != before) is rolls


def test_node_group_renders_a_machine_deployment_per_zone_with_its_failure_domain() -> None:
    group = NodeGroup(
        name="workers",
        instance_class={"kind": "VsphereInstanceClass", "metadata": {"name": "w"}, "spec": CLASS},
        cluster="c1",
        namespace="ns",
        bootstrap=Bootstrap(data_secret_name="boot"),
        zones=("a", "b"),
        replicas=3,
    )
    objects = render_node_group(group, INFRA_KINDS, NODE_TEMPLATES)
    assert [o["kind"] for o in objects] == ["VSphereMachineTemplate", "MachineDeployment"] * 2
    assert [o["spec"]["template"]["spec"].get("failureDomain") for o in objects[1::2]] == [
        "a",
        "b",
    ]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ add 1 2 3 }}", "6"),
        ("{{ sub 10 4 }}", "6"),
        ("{{ mul 2 3 4 }}", "24"),
        ("{{ div 7 2 }}", "3"),
        ("{{ div -7 2 }}", "-3"),
        ("{{ mod -7 2 }}", "-1"),
        ("{{ max 1 5 3 }} {{ min 4 2 }}", "5 2"),
        ("{{ mul (div (add 4097.0 3) 4) 4 }}", "4100"),
    ],
)
def test_sprig_integer_math(source: str, expected: str) -> None:
    assert Template.parse(source).render({}) == expected


def test_division_by_zero_fails_the_render() -> None:
    with pytest.raises(TemplateError, match="divide by zero"):
        Template.parse("{{ div 1 0 }}").render({})


def test_cli_renders_a_vsphere_instance_class(tmp_path: Path) -> None:
    path = tmp_path / "ic.yaml"
    ic = {"apiVersion": "deckhouse.io/v1", "kind": "VsphereInstanceClass", "spec": CLASS}
    path.write_text(yaml.safe_dump({**ic, "metadata": {"name": "w"}}))
    args = ["nodegroup", "render", f"--instance-class={path}", "--name=g", "--cluster=c"]
    done = subprocess.run(
        [sys.executable, "-m", "cloudloop.cli", *args, "--bootstrap-secret=b"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    kinds = [o["kind"] for o in yaml.safe_load_all(done.stdout) if o]
    assert kinds == ["VSphereMachineTemplate", "MachineDeployment"]
