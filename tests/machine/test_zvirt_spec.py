"""The ZvirtMachine spec, VM names, bootstrap data and identities, checked without an engine."""

from __future__ import annotations

from typing import Any

import pytest

from cloudloop.cloud import errors, models
from cloudloop.cloud.zvirt.mapping import (
    ZvirtMachineSpec,
    check_vm_name,
    cloud_init_script,
    nic_name_of,
    owner_description,
    owner_uid,
    parse_machine_spec,
    provider_id,
    vm_id_from_provider_id,
)

PROFILE = "d83e35c3-99b8-5719-9d10-f21ae107ab25"
VM_ID = "307c0a7e-afd1-4d86-b3da-0adeab9adb65"


def minimal(**extra: Any) -> dict[str, Any]:
    return {"template": "ubuntu-22", "vnicProfileID": PROFILE, **extra}


def test_defaults_follow_the_crd() -> None:
    spec = parse_machine_spec(minimal(id="ignored", providerID="zvirt://ignored"))
    assert spec == ZvirtMachineSpec(template="ubuntu-22", vnic_profile_id=PROFILE)
    assert (spec.cpu.sockets, spec.cpu.cores, spec.cpu.threads) == (1, 1, 1)
    assert (spec.memory, spec.root_disk_size_gb, spec.nic_name) == (8192, 20, "nic1")
    assert spec.memory_bytes == 8192 * 2**20
    assert spec.root_disk_bytes == 20 * 2**30


def test_every_field_is_read() -> None:
    spec = parse_machine_spec(
        minimal(
            cpu={"sockets": 2, "cores": 4, "threads": 2},
            memory=16384,
            rootDiskSizeGb=50,
            nicName="eth-main",
        )
    )
    assert spec.cpu.vcpus == 16
    assert (spec.memory, spec.root_disk_size_gb, spec.nic_name) == (16384, 50, "eth-main")


@pytest.mark.parametrize(
    ("provider_spec", "problem"),
    [
        pytest.param({"vnicProfileID": PROFILE}, "template", id="template-missing"),
        pytest.param(minimal(template=""), "template", id="template-empty"),
        pytest.param({"template": "ubuntu-22"}, "vnicProfileID", id="profile-missing"),
        pytest.param(minimal(vnicProfileID="ovirtmgmt"), "vnicProfileID", id="profile-not-uuid"),
        pytest.param(minimal(memory="8Gi"), "memory", id="memory-quantity"),
        pytest.param(minimal(memory=0), "memory", id="memory-zero"),
        pytest.param(minimal(memory=8192.5), "memory", id="memory-float"),
        pytest.param(minimal(rootDiskSizeGb=0), "rootDiskSizeGb", id="disk-zero"),
        pytest.param(minimal(rootDiskSizeGb="20"), "rootDiskSizeGb", id="disk-string"),
        pytest.param(minimal(cpu={"sockets": 0}), "cpu.sockets", id="sockets-zero"),
        pytest.param(minimal(cpu={"cores": -1}), "cpu.cores", id="cores-negative"),
        pytest.param(minimal(cpu={"cpus": 4}), "cpu.cpus", id="cpu-unknown-field"),
        pytest.param(minimal(cpu=4), "cpu", id="cpu-not-an-object"),
        pytest.param(minimal(nicName=""), "nicName", id="nic-name-empty"),
    ],
)
def test_invalid_specs_are_invalid_requests(provider_spec: dict[str, Any], problem: str) -> None:
    with pytest.raises(errors.InvalidRequest, match=problem) as raised:
        parse_machine_spec(provider_spec)
    assert raised.value.provider == "zvirt"
    assert not raised.value.retryable


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("worker-abc12", id="capi-name"),
        pytest.param("node.example", id="dotted"),
        pytest.param("A_1", id="underscore"),
    ],
)
def test_usable_vm_names(name: str) -> None:
    assert check_vm_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty"),
        pytest.param("a or name=*", id="search-injection"),
        pytest.param("web*", id="wildcard"),
        pytest.param("-leading-dash", id="leading-dash"),
        pytest.param("x" * 256, id="too-long"),
    ],
)
def test_unusable_vm_names(name: str) -> None:
    with pytest.raises(errors.InvalidRequest):
        check_vm_name(name)


@pytest.mark.parametrize(
    ("user_data", "valid"),
    [
        pytest.param(b"#cloud-config\nhostname: a\n", True, id="cloud-config"),
        pytest.param("#!/bin/sh\necho привет\n".encode(), True, id="utf8-script"),
        pytest.param(b"\x1f\x8b\x08\x00gzip", False, id="gzip"),
        pytest.param(b"#cloud-config\x00", False, id="nul"),
    ],
)
def test_bootstrap_data_must_be_text(user_data: bytes, valid: bool) -> None:
    if valid:
        assert cloud_init_script(user_data) == user_data.decode()
    else:
        with pytest.raises(errors.InvalidRequest):
            cloud_init_script(user_data)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(f"zvirt://{VM_ID}", VM_ID, id="provider-id"),
        pytest.param(f"zvirt://{VM_ID.upper()}", VM_ID, id="upper-case"),
        pytest.param(VM_ID, VM_ID, id="bare-uuid"),
    ],
)
def test_provider_ids(value: str, expected: str) -> None:
    assert vm_id_from_provider_id(value) == expected
    assert provider_id(expected) == f"zvirt://{expected}"


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("aws:///us-east-1a/i-0123", id="aws"),
        pytest.param("zvirt://", id="empty"),
        pytest.param("zvirt://worker-1", id="name-not-uuid"),
    ],
)
def test_foreign_provider_ids_are_invalid(value: str) -> None:
    with pytest.raises(errors.InvalidRequest):
        vm_id_from_provider_id(value)


def test_the_description_names_the_owner() -> None:
    spec = models.MachineSpec(
        name="w-1", namespace="ns", cluster="c", machine_uid="0b9a1c8e-1111-4d2e-9c3f-222233334444"
    )
    description = owner_description(spec)
    assert owner_uid(description) == spec.machine_uid
    assert "ns/w-1" in description
    assert owner_uid("made by hand") is None
    assert owner_uid(None) is None


def test_nic_name_of_an_unvalidated_spec() -> None:
    assert nic_name_of({"nicName": "eth9"}) == "eth9"
    assert nic_name_of({"nicName": 7}) == "nic1"
    assert nic_name_of({}) == "nic1"
