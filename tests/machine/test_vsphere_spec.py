"""``VSphereMachine.spec`` parsing and what it turns into (no vCenter)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from cloudloop.cloud import errors
from cloudloop.cloud.vsphere.machinespec import (
    Allocation,
    check_vm_name,
    extra_config,
    parse_machine_spec,
    quantity,
)
from devstack.backends.vsphere import machine_spec


def test_a_rendered_template_spec_parses() -> None:
    spec = parse_machine_spec(
        machine_spec(
            customVMXKeys={"tools.syncTime": "FALSE", "vhv.enable": "TRUE"},
            resources={
                "requests": {"cpu": "500M", "memory": "1638Mi"},
                "limits": {"cpu": "2000M", "memory": "4096Mi"},
                "shares": {"cpu": 100, "memory": 50},
            },
            providerID="vsphere://x",
            failureDomain="z1",
            os="Linux",
        )
    )
    assert spec.network_names == ["VM Network"]
    assert spec.nested_hv is True and spec.sync_time_with_host is False
    assert spec.cpu_allocation == Allocation(reservation=500, limit=2000, shares=100)
    assert spec.memory_allocation == Allocation(reservation=1638, limit=4096, shares=50)


def test_options_left_out_leave_the_vm_as_cloned() -> None:
    spec = parse_machine_spec({"template": "t", "network": {"devices": [{"networkName": "n"}]}})
    assert spec.nested_hv is None and spec.sync_time_with_host is None
    assert spec.cpu_allocation == Allocation() == spec.memory_allocation
    assert spec.num_cpus is None and spec.memory_mib is None and spec.disk_gib is None


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"template": ""}, ["template"]),
        ({"numCPUs": 0, "memoryMiB": 1, "diskGiB": 0}, ["numCPUs", "memoryMiB", "diskGiB"]),
        ({"network": {"devices": []}}, ["network.devices"]),
        ({"resources": {"requests": {"memory": "lots"}}}, ["resources.requests.memory"]),
        ({"cloneMode": "linkedClone"}, ["linkedClone"]),
        ({"storagePolicyName": "gold"}, ["storagePolicyName"]),
        (
            {"network": {"devices": [{"networkName": "n", "macAddr": "00:50:56:00:00:01"}]}},
            ["macAddr"],
        ),
    ],
)
def test_bad_specs_name_every_bad_field(fields: dict[str, Any], named: list[str]) -> None:
    with pytest.raises(errors.InvalidRequest) as caught:
        parse_machine_spec(machine_spec(**fields))
    for name in named:
        assert name in caught.value.message


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 1), ("1500M", 1_500_000_000), ("2Gi", 2**31), ("0.5k", 500), ("250m", 0.25)],
)
def test_quantities(value: Any, expected: float) -> None:
    assert quantity(value) == pytest.approx(expected)


def test_extra_config_carries_cloud_init_as_capv_writes_it() -> None:
    spec = parse_machine_spec(machine_spec(customVMXKeys={"a.b": "1"}))
    keys = extra_config(spec, "node-1", "uid-1", b"#cloud-config\n")
    assert keys["a.b"] == "1" and keys["disk.EnableUUID"] == "TRUE"
    assert base64.b64decode(keys["guestinfo.userdata"]) == b"#cloud-config\n"
    assert json.loads(base64.b64decode(keys["guestinfo.metadata"])) == {
        "instance-id": "uid-1",
        "local-hostname": "node-1",
    }
    assert keys["guestinfo.metadata.encoding"] == keys["guestinfo.userdata.encoding"] == "base64"


@pytest.mark.parametrize("name", ["a/b", "", "-x", "x" * 81, "a b"])
def test_unusable_vm_names_are_refused(name: str) -> None:
    with pytest.raises(errors.InvalidRequest):
        check_vm_name(name)
