"""The vSphere driver's machines against vcsim (govmomi v0.46.3 with the clone-config fix of
v0.55 backported, see ``devstack/gotools/govmomi/patches.json``), reached only through pyvmomi.

Create clones vcsim's first VM, reconfigures the clone to the VSphereMachine spec and powers it
on; a second create adopts it (instance UUID = the InfraMachine UID); delete leaves nothing.
Errors come back classified. The test reads vcsim through pyvmomi as an operator would.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudloop.cloud import errors, models
from cloudloop.cloud.vsphere.base import translate
from cloudloop.cloud.vsphere.driver import VsphereDriver
from cloudloop.cloud.vsphere.machines import machine_error
from cloudloop.cloud.vsphere.vmomi import vim
from devstack.backends.vsphere import (
    NETWORK,
    QUICK_TIMINGS,
    TEMPLATE,
    machine_spec,
    vcsim_server,
    vsphere_settings,
)
from devstack.vcsim import VcsimEndpoint, VcsimOptions
from devstack.vcsim_inventory import Inventory, connect, disconnect, wait_task

pytestmark = pytest.mark.stack

USER_DATA = b"#cloud-config\nruncmd: [echo vsphere]\n"
CLONE_DELAY_S = 1.5


@pytest.fixture(scope="module")
def si(vcsim: VcsimEndpoint) -> Iterator[Any]:
    handle = connect(vcsim)
    yield handle
    disconnect(handle)


@pytest.fixture
def driver(vcsim: VcsimEndpoint) -> Iterator[VsphereDriver]:
    made = VsphereDriver(vsphere_settings(vcsim, **QUICK_TIMINGS))
    yield made
    made.close()


def spec_of(name: str | None = None, **fields: Any) -> models.MachineSpec:
    return models.MachineSpec(
        name=name or f"w-{uuid.uuid4().hex[:8]}",
        namespace="ns",
        cluster="c1",
        machine_uid=str(uuid.uuid4()),
        provider_spec=machine_spec(**fields),
    )


def vms_named(si: Any, name: str) -> list[Any]:
    view = si.content.viewManager.CreateContainerView(
        si.content.rootFolder, [vim.VirtualMachine], True
    )
    try:
        return [vm for vm in view.view if vm.name == name]
    finally:
        view.Destroy()


def is_clone(task: Any) -> bool:
    """vCenter's ``VirtualMachine.clone``, vcsim's ``VirtualMachine.cloneVm``."""
    return str(task.info.descriptionId).lower().startswith("virtualmachine.clone")


def only_vm(si: Any, name: str) -> Any:
    (vm,) = vms_named(si, name)
    return vm


def test_create_adopt_get_delete(driver: VsphereDriver, si: Any) -> None:
    spec = spec_of(
        numCPUs=2,
        memoryMiB=2048,
        diskGiB=30,
        network={"devices": [{"networkName": NETWORK}, {"networkName": NETWORK}]},
        customVMXKeys={"tools.syncTime": "FALSE", "vhv.enable": "TRUE"},
        resources={
            "requests": {"cpu": "500M", "memory": "1638Mi"},
            "limits": {"memory": "4096Mi"},
            "shares": {"cpu": 100},
        },
    )
    made = driver.machines.create_machine(spec, USER_DATA)
    vm = only_vm(si, spec.name)
    assert made.provider_id == f"vsphere://{vm.config.uuid.lower()}"
    assert made.state is models.InstanceState.RUNNING
    config = vm.config
    assert config.instanceUuid == spec.machine_uid
    assert (config.hardware.numCPU, config.hardware.memoryMB) == (2, 2048)
    disk = next(d for d in config.hardware.device if isinstance(d, vim.vm.device.VirtualDisk))
    assert disk.capacityInKB == 30 * 2**20
    nics = [d for d in config.hardware.device if isinstance(d, vim.vm.device.VirtualEthernetCard)]
    assert [type(n).__name__ for n in nics] == ["vim.vm.device.VirtualVmxnet3"] * 2
    assert [n.backing.deviceName for n in nics] == [NETWORK, NETWORK]
    assert config.nestedHVEnabled is True
    assert config.tools.syncTimeWithHost is False
    assert (config.cpuAllocation.reservation, config.cpuAllocation.shares.shares) == (500, 100)
    assert (config.memoryAllocation.reservation, config.memoryAllocation.limit) == (1638, 4096)
    extra = {o.key: o.value for o in config.extraConfig}
    assert extra["disk.EnableUUID"] == "TRUE"
    assert base64.b64decode(extra["guestinfo.userdata"]) == USER_DATA
    assert extra["guestinfo.userdata.encoding"] == "base64"
    metadata = json.loads(base64.b64decode(extra["guestinfo.metadata"]))
    assert metadata == {"instance-id": spec.machine_uid, "local-hostname": spec.name}
    assert extra["vhv.enable"] == "TRUE"

    again = driver.machines.create_machine(spec, USER_DATA)  # a retried create adopts
    assert again.id == made.id
    assert len(vms_named(si, spec.name)) == 1
    got = driver.machines.get_machine(spec)
    assert got is not None and got.provider_id == made.provider_id

    assert driver.machines.delete_machine(spec) is True
    assert vms_named(si, spec.name) == []
    assert driver.machines.get_machine(spec) is None
    assert driver.machines.delete_machine(spec) is True  # idempotent


def test_a_clone_left_powered_off_is_finished_by_the_next_create(
    driver: VsphereDriver, si: Any
) -> None:
    spec = spec_of(diskGiB=25)
    driver.machines.create_machine(spec, USER_DATA)
    vm = only_vm(si, spec.name)
    # As a crash after the clone leaves it: powered off, the template's NIC, the disk as cloned.
    wait_task(si, vm.PowerOffVM_Task())
    nic = next(d for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualVmxnet3))
    wait_task(
        si,
        vm.ReconfigVM_Task(
            spec=vim.vm.ConfigSpec(
                deviceChange=[vim.vm.device.VirtualDeviceSpec(operation="remove", device=nic)]
            )
        ),
    )
    again = driver.machines.create_machine(spec, USER_DATA)
    assert again.state is models.InstanceState.RUNNING
    assert len(vms_named(si, spec.name)) == 1
    nics = [
        d for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualEthernetCard)
    ]
    assert [n.backing.deviceName for n in nics] == [NETWORK]
    assert driver.machines.delete_machine(spec) is True


def test_the_disk_is_never_shrunk(driver: VsphereDriver, si: Any) -> None:
    spec = spec_of(diskGiB=1)
    template_disk = next(
        d.capacityInKB
        for d in only_vm(si, TEMPLATE).config.hardware.device
        if isinstance(d, vim.vm.device.VirtualDisk)
    )
    driver.machines.create_machine(spec, USER_DATA)
    disk = next(
        d
        for d in only_vm(si, spec.name).config.hardware.device
        if isinstance(d, vim.vm.device.VirtualDisk)
    )
    assert disk.capacityInKB == template_disk
    assert driver.machines.delete_machine(spec) is True


def test_a_vm_of_another_machine_at_the_path_is_never_touched(
    driver: VsphereDriver, si: Any
) -> None:
    mine = spec_of()
    driver.machines.create_machine(mine, USER_DATA)
    other = mine.model_copy(update={"machine_uid": str(uuid.uuid4())})
    with pytest.raises(errors.AlreadyExists, match="left untouched"):
        driver.machines.create_machine(other, USER_DATA)
    assert driver.machines.get_machine(other) is None
    assert driver.machines.delete_machine(other) is True  # nothing of ``other``'s: mine stays
    assert only_vm(si, mine.name).runtime.powerState == "poweredOn"
    assert driver.machines.delete_machine(mine) is True


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"template": "no-such-template"}, "template 'no-such-template' not found"),
        ({"folder": "no-folder"}, "folder '/DC0/vm/no-folder' not found"),
        ({"resourcePool": "/DC0/host/*/Resources/none"}, "resource pool"),
        ({"datastore": "no-ds"}, "datastore '/DC0/datastore/no-ds' not found"),
        ({"network": {"devices": [{"networkName": "no-net"}]}}, "network 'no-net' not found"),
        ({"datacenter": "DC9"}, "no datacenter 'DC9'"),
        ({"server": "other-vcenter.example.com"}, "is not the vCenter"),
    ],
    ids=["template", "folder", "pool", "datastore", "network", "datacenter", "server"],
)
def test_unknown_placement_is_an_invalid_request(
    driver: VsphereDriver, si: Any, fields: dict[str, Any], message: str
) -> None:
    spec = spec_of(**fields)
    with pytest.raises(errors.InvalidRequest, match=message) as caught:
        driver.machines.create_machine(spec, USER_DATA)
    assert not caught.value.retryable
    assert vms_named(si, spec.name) == []


@pytest.mark.parametrize(("zone", "cluster"), [("zone-a", "DC0_C0"), ("zone-b", "DC0_C1")])
def test_a_machine_lands_in_the_compute_cluster_that_carries_its_zone_tag(
    seeded: Inventory, driver: VsphereDriver, si: Any, zone: str, cluster: str
) -> None:
    """No ``zoneComputeClusterPaths`` entry and no pool in the spec: the zone's tag on a compute
    cluster places the VM (CAPV's deployment zones), never the template's pool (zone-a's)."""
    spec = spec_of().model_copy(update={"failure_domain": zone})
    driver.machines.create_machine(spec, USER_DATA)
    vm = only_vm(si, spec.name)
    assert vm.resourcePool.owner.name == cluster
    assert driver.machines.delete_machine(spec) is True


def test_a_zone_no_compute_cluster_carries_is_refused_before_any_clone(
    seeded: Inventory, driver: VsphereDriver, si: Any
) -> None:
    spec = spec_of().model_copy(update={"failure_domain": "zone-c"})
    with pytest.raises(errors.InvalidRequest, match="failure domain 'zone-c'") as caught:
        driver.machines.create_machine(spec, USER_DATA)
    assert "on 0 compute clusters of DC0" in caught.value.message
    assert not caught.value.retryable
    assert vms_named(si, spec.name) == []


def test_a_bad_spec_names_every_bad_field(driver: VsphereDriver) -> None:
    spec = spec_of(numCPUs=0, cloneMode="copy", network={"devices": []})
    with pytest.raises(errors.InvalidRequest) as caught:
        driver.machines.create_machine(spec, USER_DATA)
    for field in ("numCPUs", "cloneMode", "network.devices"):
        assert field in caught.value.message
    with pytest.raises(errors.InvalidRequest, match="linkedClone"):
        driver.machines.create_machine(spec_of(cloneMode="linkedClone"), USER_DATA)


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        (vim.fault.InsufficientResourcesFault(), errors.InsufficientCapacity),
        (vim.fault.InsufficientMemoryResourcesFault(), errors.InsufficientCapacity),
        (vim.fault.InsufficientHostCapacityFault(), errors.InsufficientCapacity),
        (vim.fault.NoDiskSpace(), errors.InsufficientCapacity),
        (vim.fault.InvalidState(), errors.FailedPrecondition),
    ],
    ids=["resources", "memory", "host", "disk", "other"],
)
def test_capacity_faults_are_retryable_capacity_errors(fault: Any, kind: type) -> None:
    fault.msg = "not enough"
    translated = translate("CloneVM", fault)
    translated.__cause__ = fault  # as cloud_call and wait_task raise it
    classified = machine_error("CloneVM", translated)
    assert type(classified) is kind
    assert "not enough" in classified.message


def test_vcenter_down_is_unreachable(tmp_path: Path) -> None:
    with vcsim_server(tmp_path) as endpoint:
        made = VsphereDriver(vsphere_settings(endpoint, timeout_s=5, **QUICK_TIMINGS))
    # vcsim has stopped: login (with its timeout) fails to connect.
    with pytest.raises(errors.CloudUnreachable):
        made.machines.create_machine(spec_of(), USER_DATA)
    with pytest.raises(errors.CloudUnreachable):
        made.machines.get_machine(spec_of())


@pytest.fixture(scope="module")
def slow_vcsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VcsimEndpoint]:
    """A vcsim whose clone tasks run for :data:`CLONE_DELAY_S` (reads are not held)."""
    delays = (("CloneVm", int(CLONE_DELAY_S * 1000)), ("LockHandoff", 0))  # the task's name
    with vcsim_server(tmp_path_factory.mktemp("slow"), VcsimOptions(method_delays=delays)) as e:
        yield e


def test_a_clone_in_flight_is_waited_for_not_repeated(
    slow_vcsim: VcsimEndpoint, caplog: pytest.LogCaptureFixture
) -> None:
    spec = spec_of()
    first = VsphereDriver(vsphere_settings(slow_vcsim, **QUICK_TIMINGS))
    second = VsphereDriver(vsphere_settings(slow_vcsim, **QUICK_TIMINGS))
    si = connect(slow_vcsim)
    try:
        made: list[models.Machine] = []
        crashed = threading.Thread(
            target=lambda: made.append(first.machines.create_machine(spec, USER_DATA)), daemon=True
        )
        crashed.start()
        deadline = time.monotonic() + 30
        while not any(
            t.info.state == "running" and is_clone(t) for t in si.content.taskManager.recentTask
        ):
            assert time.monotonic() < deadline, "no clone task running"
            time.sleep(0.05)
        with caplog.at_level(logging.INFO, logger="cloudloop.cloud.vsphere.machines"):
            adopted = second.machines.create_machine(
                spec, USER_DATA
            )  # waits, finds it by instance UUID
        assert "is in flight" in caplog.text
        crashed.join(30)
        assert made and made[0].id == adopted.id
        assert len(vms_named(si, spec.name)) == 1
        clones = [t for t in si.content.taskManager.recentTask if is_clone(t)]
        assert len(clones) == 1  # cloned once
        assert second.machines.delete_machine(spec) is True
        assert vms_named(si, spec.name) == []
    finally:
        disconnect(si)
        first.close()
        second.close()
