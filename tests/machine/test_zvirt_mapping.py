"""VM status and address mapping, machine and instance views, search batches."""

from __future__ import annotations

import pytest

from cloudloop.cloud import models
from cloudloop.cloud.zvirt.mapping import (
    FAILED_STATUSES,
    SEARCH_BATCH,
    DeviceView,
    NicView,
    VmView,
    batches,
    instance_state,
    node_addresses,
    to_instance,
    to_machine,
)

S = models.InstanceState
VM_ID = "307c0a7e-afd1-4d86-b3da-0adeab9adb65"
NIC1 = NicView(id="n1", name="nic1", mac="56:6f:00:00:00:01", vnic_profile_id="p")
NIC2 = NicView(id="n2", name="nic2", mac="56:6f:00:00:00:02", vnic_profile_id="p")
LO = DeviceView(name="lo", mac="00:00:00:00:00:00", ips=("127.0.0.1", "::1"))
ETH0 = DeviceView(name="eth0", mac="56:6F:00:00:00:01", ips=("10.77.0.10", "fe80::1"))
ETH1 = DeviceView(name="eth1", mac="56:6f:00:00:00:02", ips=("192.168.5.5", "fd00::5"))
DOCKER = DeviceView(name="docker0", mac="02:42:ac:11:00:01", ips=("172.17.0.1",))


def vm(
    status: str = "up",
    *,
    nics: tuple[NicView, ...] = (NIC1,),
    devices: tuple[DeviceView, ...] = (LO, ETH0),
) -> VmView:
    return VmView(id=VM_ID, name="worker-1", status=status, nics=nics, devices=devices)


@pytest.mark.parametrize(
    ("status", "state"),
    [
        pytest.param("up", S.RUNNING, id="up"),
        pytest.param("migrating", S.RUNNING, id="migrating"),
        pytest.param("powering_up", S.PENDING, id="powering_up"),
        pytest.param("wait_for_launch", S.PENDING, id="wait_for_launch"),
        pytest.param("reboot_in_progress", S.PENDING, id="reboot"),
        pytest.param("image_locked", S.PENDING, id="image_locked"),
        pytest.param("powering_down", S.STOPPING, id="powering_down"),
        pytest.param("saving_state", S.STOPPING, id="saving_state"),
        pytest.param("down", S.STOPPED, id="down"),
        pytest.param("suspended", S.UNKNOWN, id="suspended"),
        pytest.param("paused", S.UNKNOWN, id="paused"),
        pytest.param("not_responding", S.UNKNOWN, id="not_responding"),
        pytest.param("unassigned", S.UNKNOWN, id="unassigned"),
        pytest.param(None, S.UNKNOWN, id="none"),
        pytest.param("something_new", S.UNKNOWN, id="unknown-word"),
    ],
)
def test_status_mapping(status: str | None, state: models.InstanceState) -> None:
    assert instance_state(status) is state


@pytest.mark.parametrize(
    ("status", "shut_down"),
    [
        pytest.param("down", True, id="down-is-shutdown"),
        pytest.param("powering_down", False, id="powering-down-is-not-yet"),
        pytest.param("suspended", False, id="suspended-is-not"),
        pytest.param("up", False, id="up"),
    ],
)
def test_only_down_counts_as_shutdown(status: str, shut_down: bool) -> None:
    instance = to_instance(vm(status))
    assert instance.shut_down is shut_down
    assert instance.gone is False  # a removed VM is absent, never "terminated"


def test_addresses_come_from_the_nics_devices_without_loopback_or_link_local() -> None:
    assert node_addresses(vm(devices=(LO, ETH0, DOCKER))) == [
        models.NodeAddress(type="InternalIP", address="10.77.0.10"),
        models.NodeAddress(type="Hostname", address="worker-1"),
    ]


def test_nic_name_narrows_the_devices() -> None:
    both = vm(nics=(NIC1, NIC2), devices=(ETH1, ETH0))
    assert [a.address for a in node_addresses(both, hostname=False)] == [
        "10.77.0.10",
        "192.168.5.5",
        "fd00::5",
    ]
    assert [a.address for a in node_addresses(both, nic_name="nic2", hostname=False)] == [
        "192.168.5.5",
        "fd00::5",
    ]


def test_without_matching_macs_every_device_counts() -> None:
    unmatched = vm(nics=(), devices=(LO, DOCKER))
    assert [a.address for a in node_addresses(unmatched, hostname=False)] == ["172.17.0.1"]


def test_public_addresses_are_external_and_internal_when_no_private_one() -> None:
    public = DeviceView(name="eth0", mac=NIC1.mac, ips=("93.184.216.34",))
    assert node_addresses(vm(devices=(public,)), hostname=False) == [
        models.NodeAddress(type="ExternalIP", address="93.184.216.34"),
        models.NodeAddress(type="InternalIP", address="93.184.216.34"),
    ]
    mixed = DeviceView(name="eth0", mac=NIC1.mac, ips=("93.184.216.34", "10.0.0.4"))
    assert node_addresses(vm(devices=(mixed,)), hostname=False) == [
        models.NodeAddress(type="ExternalIP", address="93.184.216.34"),
        models.NodeAddress(type="InternalIP", address="10.0.0.4"),
    ]


@pytest.mark.parametrize(
    ("status", "state", "failed", "provisioned"),
    [
        pytest.param("up", S.RUNNING, False, True, id="up"),
        pytest.param("powering_up", S.PENDING, False, False, id="booting"),
        pytest.param("down", S.STOPPED, False, False, id="down"),
        pytest.param("not_responding", S.UNKNOWN, True, False, id="not-responding"),
        pytest.param("paused", S.UNKNOWN, True, False, id="paused"),
    ],
)
def test_machine_view(
    status: str, state: models.InstanceState, failed: bool, provisioned: bool
) -> None:
    machine = to_machine(vm(status), "nic1")
    assert machine.provider_id == f"zvirt://{VM_ID}"
    assert (machine.phase, machine.state, machine.failed) == (status, state, failed)
    assert machine.provisioned is provisioned
    assert bool(machine.message) is (status in FAILED_STATUSES)


def test_an_up_vm_without_guest_ips_is_not_provisioned() -> None:
    machine = to_machine(vm("up", devices=()), "nic1")
    assert machine.state is S.RUNNING
    assert not machine.provisioned


def test_batches_are_unique_and_capped() -> None:
    values = [f"v{i}" for i in range(SEARCH_BATCH + 5)] + ["v0"]
    found = batches(values)
    assert [len(b.terms) for b in found] == [SEARCH_BATCH, 5]
    assert found[1].query("id") == " or ".join(f"id=v{i}" for i in range(100, 105))
    assert batches([]) == []
