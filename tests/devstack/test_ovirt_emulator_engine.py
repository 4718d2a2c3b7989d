"""The oVirt emulator's simulated engine on a fake clock: search, VM life cycle, refusals."""

from __future__ import annotations

import pytest

from devstack.ovirt_emulator.engine import (
    GIB,
    SEED_CLUSTER_ID,
    SEED_TEMPLATE,
    SEED_VNIC_PROFILE_ID,
    ApiFault,
    Delays,
    Engine,
    Vm,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


DELAYS = Delays(clone_s=1, boot_s=1, guest_ip_s=1, shutdown_s=1, disk_resize_s=1, remove_s=1)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def engine(clock: Clock) -> Engine:
    return Engine(username="admin@internal", password="pw", delays=DELAYS, clock=clock)


def add(engine: Engine, name: str = "vm-1") -> Vm:
    return engine.add_vm(
        name=name,
        cluster=(SEED_CLUSTER_ID, None),
        template=(None, SEED_TEMPLATE),
        clone=True,
        memory=4 * GIB,
        topology=(1, 2, 1),
    )


def refused(status: int) -> pytest.RaisesExc[ApiFault]:
    return pytest.raises(ApiFault, match=f"^{status} ")


def test_the_vm_life_cycle(engine: Engine, clock: Clock) -> None:
    vm = add(engine)
    assert engine.get_vm(vm.id).status == "image_locked"
    [attachment] = engine.list_attachments(vm.id)
    assert attachment.bootable and engine.get_disk(attachment.disk_id).status == "locked"
    with refused(409):
        engine.start_vm(vm.id, use_cloud_init=True, script="#cloud-config", host="vm-1")

    clock.advance(1)
    assert engine.get_vm(vm.id).status == "down"
    assert engine.get_disk(attachment.disk_id).status == "ok"
    engine.resize_disk(attachment.disk_id, 30 * GIB)
    with refused(409):  # the disk is locked while it grows
        engine.start_vm(vm.id, use_cloud_init=True, script="#cloud-config", host="vm-1")
    clock.advance(1)
    engine.add_nic(vm.id, name="nic1", vnic_profile_id=SEED_VNIC_PROFILE_ID, interface=None)
    engine.start_vm(vm.id, use_cloud_init=True, script="#cloud-config", host="vm-1")
    assert engine.get_vm(vm.id).status == "powering_up"

    clock.advance(1)
    assert engine.get_vm(vm.id).status == "up"
    assert engine.reported_devices(vm.id) == []  # the guest agent has not reported yet
    clock.advance(1)
    names = [d.name for d in engine.reported_devices(vm.id)]
    assert names == ["lo", "eth0"]

    with refused(409):
        engine.remove_vm(vm.id, detach_only=False)
    engine.shutdown_vm(vm.id)
    assert engine.get_vm(vm.id).status == "powering_down"
    clock.advance(1)
    assert engine.get_vm(vm.id).status == "down"

    engine.remove_vm(vm.id, detach_only=False)
    assert engine.get_vm(vm.id).status == "image_locked"
    clock.advance(1)
    assert engine.list_vms(None) == []
    assert engine.list_disks(None) == []


def test_remove_with_detach_only_keeps_the_disks(engine: Engine, clock: Clock) -> None:
    vm = add(engine)
    clock.advance(1)
    engine.remove_vm(vm.id, detach_only=True)
    clock.advance(1)
    assert engine.list_vms(None) == []
    assert len(engine.list_disks(None)) == 1


def test_refusals(engine: Engine, clock: Clock) -> None:
    vm = add(engine)
    with refused(409):
        add(engine)  # the name is taken
    with refused(404):
        engine.add_vm(name="x", cluster=(None, "nope"), template=(None, SEED_TEMPLATE), clone=True)
    with refused(400):
        engine.add_vm(
            name=None, cluster=(SEED_CLUSTER_ID, None), template=(None, "Blank"), clone=False
        )
    clock.advance(1)
    disk_id = engine.list_attachments(vm.id)[0].disk_id
    with refused(409):
        engine.resize_disk(disk_id, 1 * GIB)  # never shrinks
    with refused(404):
        engine.add_nic(
            vm.id,
            name="nic1",
            vnic_profile_id="00000000-0000-0000-0000-00000000beef",
            interface=None,
        )
    engine.add_nic(vm.id, name="nic1", vnic_profile_id=SEED_VNIC_PROFILE_ID, interface=None)
    with refused(409):
        engine.add_nic(vm.id, name="nic1", vnic_profile_id=SEED_VNIC_PROFILE_ID, interface=None)
    with refused(409):
        engine.shutdown_vm(vm.id)  # it is down


@pytest.mark.parametrize(
    ("search", "names"),
    [
        pytest.param(None, ["alpha", "beta", "gamma"], id="everything"),
        pytest.param("name=beta", ["beta"], id="exact"),
        pytest.param("name=BETA", ["beta"], id="case-insensitive"),
        pytest.param("name=alpha or name=gamma", ["alpha", "gamma"], id="or"),
        pytest.param("name=a* and status=imagelocked", ["alpha"], id="and-wildcard"),
        pytest.param("name!=beta", ["alpha", "gamma"], id="not-equal"),
        pytest.param("name=nothing", [], id="no-match"),
    ],
)
def test_search(engine: Engine, search: str | None, names: list[str]) -> None:
    for name in ("gamma", "alpha", "beta"):
        add(engine, name)
    assert [vm.name for vm in engine.list_vms(search)] == names


def test_a_malformed_search_is_a_bad_request(engine: Engine) -> None:
    with refused(400):
        engine.list_vms("name")


def test_a_forced_status_sticks_until_an_action(engine: Engine, clock: Clock) -> None:
    vm = add(engine)
    engine.force_vm_status("vm-1", "not_responding")
    clock.advance(5)
    assert engine.get_vm(vm.id).status == "not_responding"
    with refused(409):
        engine.shutdown_vm(vm.id)
    engine.stop_vm(vm.id)
    assert engine.get_vm(vm.id).status == "down"


def test_tokens(engine: Engine) -> None:
    assert engine.issue_token("admin@internal", "wrong") is None
    token = engine.issue_token("admin@internal", "pw")
    assert token is not None and engine.token_valid(token)
    engine.revoke_all_tokens()
    assert not engine.token_valid(token)


def test_a_vm_and_a_disk_are_renamed_and_described(engine: Engine, clock: Clock) -> None:
    vm, other = add(engine), add(engine, "vm-2")
    with refused(409):  # still image_locked
        engine.update_vm(vm.id, name="vm-3")
    clock.advance(1)
    with refused(409):
        engine.update_vm(vm.id, name="vm-2")
    with refused(400):
        engine.update_vm(vm.id, name="no spaces")
    engine.update_vm(vm.id, name="vm-3", description="ours")
    assert (engine.get_vm(vm.id).name, engine.get_vm(vm.id).description) == ("vm-3", "ours")
    engine.update_vm(vm.id, description="again")  # the name is kept
    assert engine.get_vm(vm.id).name == "vm-3" and engine.get_vm(other.id).name == "vm-2"
    disk = engine.add_disk("data", GIB, None)
    engine.update_disk(disk.id, alias="vm-3-data", description="ours")
    assert [(d.name, d.description) for d in engine.list_disks("alias=vm-3-data")] == [
        ("vm-3-data", "ours")
    ]
    engine.resize_disk(disk.id, 2 * GIB)
    with refused(409):  # locked while it grows
        engine.update_disk(disk.id, description="later")
