"""vSphere ``Standard`` end to end: the layout workflows on the Temporal dev server, their
activities in a worker, vcsim with Deckhouse's region/zone tags (one stack for the module).

Apply makes the folder, a resource pool per zone, the master's data disk and VMs cloned from the
template with the reference's names and outputs; a second apply runs no vCenter task and makes
no mutating call; drift made out of band (a VM's CPUs, the data disk detached and deleted, a root
disk grown) shows in the plan, the next apply repairs what it can and reports the rest; a missing
template or datastore refuses the apply before anything is made; destroy leaves nothing of the
cluster.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.cloud import models
from cloudloop.cloud.registry import Settings
from cloudloop.cloud.vsphere.driver import VsphereDriver
from cloudloop.cloud.vsphere.layout_resources import BOOTED_KEY
from cloudloop.cloud.vsphere.settings import VsphereSettings
from cloudloop.cloud.vsphere.vmomi import vim
from cloudloop.messages.layout import LayoutResult
from cloudloop.settings import TemporalSettings
from devstack.backends.vsphere import vsphere_settings
from devstack.backends.vsphere_layouts import TaskLog, cluster_resources
from devstack.local import LocalStack
from devstack.vcsim_inventory import connect, disconnect, find, wait_task
from starters.layout import LayoutFailed
from tests.layouts import support
from tests.layouts.support import layout_worker
from tests.layouts.vsphere_support import (
    calls_since,
    config_file,
    mutating,
    vsphere_calls,
    vsphere_stack,
)

pytestmark = pytest.mark.stack
GIB_KB = 1024 * 1024


@pytest.fixture(scope="module")
def vs_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with vsphere_stack(tmp_path_factory.mktemp("vsphere-layouts")) as local:
        yield local


@pytest.fixture(scope="module")
def vs_settings(vs_stack: LocalStack) -> Settings:
    return Settings(
        provider="vsphere",
        temporal=TemporalSettings(
            address=vs_stack.temporal_address,
            task_queue=f"vs-layouts-{uuid.uuid4().hex[:8]}",
            codec=vs_stack.codec,
        ),
        vsphere=VsphereSettings(poll_interval_s=0.05, wait_timeout_s=30.0, timeout_s=10.0),
    )


@pytest.fixture(scope="module")
async def vs_client(vs_stack: LocalStack, vs_settings: Settings) -> Client:
    return await temporal.connect(vs_settings.temporal)


@pytest.fixture(scope="module")
async def vs_worker(vs_client: Client, vs_settings: Settings) -> AsyncIterator[None]:
    async with layout_worker(vs_client, vs_settings):
        yield


#: The action as ``cloudloop layout`` runs it (:func:`tests.layouts.support.run`).
run = functools.partial(support.run, provider="vsphere")


def plan_actions(result: LayoutResult) -> dict[str, str]:
    return {r.key: r.action for m in result.plan for r in m.resources}


def vm_disks(vm: Any) -> list[Any]:
    return [d for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualDisk)]


async def test_apply_reapply_drift_destroy(
    vs_stack: LocalStack, vs_client: Client, vs_settings: Settings, vs_worker: None, tmp_path: Path
) -> None:
    assert vs_stack.vcsim is not None
    endpoint = vs_stack.vcsim
    prefix, cluster_uuid = f"v{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = config_file(tmp_path, endpoint, prefix)
    master, worker = f"{prefix}-master-0", f"{prefix}-worker-0"
    data = f"[LocalDS_0] deckhouse/{cluster_uuid}-kubernetes-data-0.vmdk"

    async def act(action: str) -> LayoutResult:
        return await run(vs_client, vs_settings, action, path, prefix, cluster_uuid)

    plan = await act("plan")
    actions = plan_actions(plan)
    assert actions["vsphere.datacenter/region-a"] == "no-op"  # looked up, found
    assert actions[f"vsphere.virtual_machine/{master}"] == "create"
    assert set(actions.values()) == {"create", "no-op"}

    applied = await act("apply")
    si = connect(endpoint)
    try:
        folder = find(si, f"DC0/vm/{prefix}")
        assert sorted(vm.name for vm in folder.childEntity) == [master, worker]
        for cluster in ("DC0_C0", "DC0_C1"):
            assert isinstance(find(si, f"DC0/host/{cluster}/Resources/{prefix}"), vim.ResourcePool)
        vm = find(si, f"DC0/vm/{prefix}/{master}")
        assert vm.config.hardware.numCPU == 2 and vm.config.hardware.memoryMB == 2048
        assert vm.resourcePool.name == prefix
        assert vm.runtime.powerState == "poweredOn"
        files = [d.backing.fileName for d in vm_disks(vm)]
        assert data in files and len(files) == 2
        assert vm_disks(vm)[0].capacityInKB == 50 * GIB_KB  # rootDiskSize default
        extra = {o.key: o.value for o in vm.config.extraConfig}
        assert extra["disk.EnableUUID"] == "TRUE"
        assert extra["time.synchronize.tools.enable"] == "0"
        assert extra["guestinfo.metadata.encoding"] == "base64"
        assert "guestinfo.userdata" not in extra
        ip = vm.guest.ipAddress
    finally:
        disconnect(si)
    assert applied.cloud_discovery_data == {
        "apiVersion": "deckhouse.io/v1",
        "kind": "VsphereCloudDiscoveryData",
        "vmFolderPath": prefix,
        "resourcePoolPath": prefix,
        "zones": ["zone-a", "zone-b"],
    }
    [master_result] = [m for m in applied.modules if m.module == "master-0"]
    assert master_result.node_name == master
    assert master_result.outputs == {
        "master_ip_address_for_ssh": ip,
        "node_internal_ip_address": ip,
        "kubernetes_data_device_path": "/dev/sdb",
    }
    assert ip

    # a second apply changes nothing: no vCenter task, no mutating call
    tasks = TaskLog(endpoint)
    tasks.mark()
    before = vsphere_calls()
    again = await act("apply")
    assert [str(t) for t in tasks.since()] == []
    assert mutating(calls_since(before)) == {}
    assert {s.action for m in again.modules for s in m.steps} == {"unchanged"}

    # drift out of band: the master loses a CPU and its data disk, the worker's root disk grows
    si = connect(endpoint)
    try:
        vm = find(si, f"DC0/vm/{prefix}/{master}")
        [disk] = [d for d in vm_disks(vm) if d.backing.fileName == data]
        remove = vim.vm.device.VirtualDeviceSpec(operation="remove", device=disk)
        wait_task(si, vm.ReconfigVM_Task(vim.vm.ConfigSpec(numCPUs=1, deviceChange=[remove])))
        dc = find(si, "DC0")
        wait_task(si, si.content.virtualDiskManager.DeleteVirtualDisk_Task(data, dc))
        other = find(si, f"DC0/vm/{prefix}/{worker}")
        root = vm_disks(other)[0]
        root.capacityInKB = 60 * GIB_KB
        grow = vim.vm.device.VirtualDeviceSpec(operation="edit", device=root)
        wait_task(si, other.ReconfigVM_Task(vim.vm.ConfigSpec(deviceChange=[grow])))
    finally:
        disconnect(si)
    plan = await act("plan")
    drifted = {k: a for k, a in plan_actions(plan).items() if a not in ("no-op",)}
    disk_key = f"vsphere.virtual_disk/deckhouse/{cluster_uuid}-kubernetes-data-0.vmdk"
    assert drifted == {
        disk_key: "create",
        f"vsphere.virtual_machine/{master}": "update",
        f"vsphere.virtual_machine/{worker}": "update",
    }
    changes = {r.key: {c.field for c in r.changes} for m in plan.plan for r in m.resources}
    assert changes[f"vsphere.virtual_machine/{master}"] == {"num_cpus", "data_disk"}
    assert changes[f"vsphere.virtual_machine/{worker}"] == {
        "root_disk_gb (needs replacement; not repaired)"
    }
    tasks.mark()
    repaired = await act("apply")
    made = [t.description.lower() for t in tasks.since()]
    assert "virtualmachine.reconfigvm" in made, made  # the task log sees what runs
    steps = {s.key: s.action for m in repaired.modules for s in m.steps}
    assert steps[disk_key] == "created"
    assert steps[f"vsphere.virtual_machine/{master}"] == "updated"
    assert steps[f"vsphere.virtual_machine/{worker}"] == "unchanged"  # reported, not repaired
    si = connect(endpoint)
    try:
        vm = find(si, f"DC0/vm/{prefix}/{master}")
        assert vm.config.hardware.numCPU == 2
        assert data in [d.backing.fileName for d in vm_disks(vm)]
        assert vm.runtime.powerState == "poweredOn"
    finally:
        disconnect(si)
    plan = await act("plan")
    left = {k: a for k, a in plan_actions(plan).items() if a != "no-op"}
    assert left == {f"vsphere.virtual_machine/{worker}": "update"}  # the immutable drift

    # destroy is refused while a VM the layout did not make (an ephemeral node) is in its folder
    si = connect(endpoint)
    try:
        template = find(si, "DC0/vm/DC0_C0_RP0_VM0")
        spec = vim.vm.CloneSpec(
            location=vim.vm.RelocateSpec(pool=find(si, f"DC0/host/DC0_C0/Resources/{prefix}"))
        )
        stray = wait_task(si, template.CloneVM_Task(find(si, f"DC0/vm/{prefix}"), "node-x", spec))
    finally:
        disconnect(si)
    # ... and while our CSI driver's disks for the cluster exist (another cluster's do not count)
    csi = VsphereDriver(vsphere_settings(endpoint, region="region-a", poll_interval_s=0.05))
    ours, theirs = (
        csi.volumes.create_volume(
            models.VolumeSpec(name=f"pvc-{owner[:8]}", size_gib=1, zone="zone-a", cluster=owner)
        )
        for owner in (cluster_uuid, str(uuid.uuid4()))
    )
    with pytest.raises(LayoutFailed, match="VM node-x") as refused:
        await act("destroy")
    assert refused.value.kind == "DestroyBlocked"
    assert f"disk {ours.id.split(':')[1]}" in str(refused.value)
    assert theirs.id.split(":")[1] not in str(refused.value)
    assert "--kubeconfig" in str(refused.value)
    si = connect(endpoint)
    try:
        wait_task(si, vim.VirtualMachine(stray._moId, si._stub).Destroy_Task())
    finally:
        disconnect(si)
    csi.volumes.delete_volume(ours.id)

    # destroy: nothing of the cluster is left
    assert len(cluster_resources(endpoint, prefix, cluster_uuid)) == 6
    await act("destroy")
    assert cluster_resources(endpoint, prefix, cluster_uuid) == []
    plan = await act("plan")
    assert set(plan_actions(plan).values()) == {"create", "no-op"}
    csi.volumes.delete_volume(theirs.id)
    csi.close()


@pytest.mark.parametrize(
    ("master_class", "message"),
    [
        ({"template": "no-such-template"}, "template 'no-such-template' not found"),
        ({"datastore": "NoSuchDS"}, "datastore 'NoSuchDS' not found"),
    ],
    ids=["template", "datastore"],
)
async def test_a_missing_template_or_datastore_refuses_the_apply_before_anything_is_made(
    master_class: dict[str, str],
    message: str,
    vs_stack: LocalStack,
    vs_client: Client,
    vs_settings: Settings,
    vs_worker: None,
    tmp_path: Path,
) -> None:
    assert vs_stack.vcsim is not None
    endpoint = vs_stack.vcsim
    prefix, cluster_uuid = f"e{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = config_file(tmp_path, endpoint, prefix, **master_class)

    async def act(action: str) -> LayoutResult:
        return await run(vs_client, vs_settings, action, path, prefix, cluster_uuid)

    before = vsphere_calls()
    with pytest.raises(LayoutFailed, match=message) as failed:
        await act("apply")
    assert failed.value.kind == "NotFound"
    assert f"vsphere.virtual_machine/{prefix}-master-0: " in str(failed.value)
    # looked up before the first create: no folder, resource pool or data disk was left
    assert mutating(calls_since(before)) == {}
    assert cluster_resources(endpoint, prefix, cluster_uuid) == []
    plan = await act("plan")
    assert {a for k, a in plan_actions(plan).items() if a != "no-op"} == {"create"}
    assert plan_actions(plan)[f"vsphere.folder/{prefix}"] == "create"


async def test_vms_boot_with_the_bootstrap_data_given(
    vs_stack: LocalStack, vs_client: Client, vs_settings: Settings, vs_worker: None, tmp_path: Path
) -> None:
    """``--cloud-config master=F``: the master is cloned with F's bytes as upstream's
    ``guestinfo.userdata`` (base64), the static node (no selector) with none; a re-apply runs no
    vCenter task; other data later is a kept change in the plan, and apply leaves the VM."""
    assert vs_stack.vcsim is not None
    endpoint = vs_stack.vcsim
    prefix, cluster_uuid = f"u{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = config_file(tmp_path, endpoint, prefix)
    master, worker = f"{prefix}-master-0", f"{prefix}-worker-0"
    data = f"#cloud-config\nbootstrap_token: {uuid.uuid4().hex}\n".encode()
    (tmp_path / "master.cfg").write_bytes(data)
    selection = {"master": str(tmp_path / "master.cfg")}

    async def act(action: str) -> LayoutResult:
        return await run(vs_client, vs_settings, action, path, prefix, cluster_uuid, selection)

    def extra_config(name: str) -> dict[str, str]:
        si = connect(endpoint)
        try:
            vm = find(si, f"DC0/vm/{prefix}/{name}")
            return {o.key: o.value for o in vm.config.extraConfig}
        finally:
            disconnect(si)

    await act("apply")
    extra = extra_config(master)
    assert base64.b64decode(extra["guestinfo.userdata"]) == data
    assert extra["guestinfo.userdata.encoding"] == "base64"
    assert extra["guestinfo.metadata.encoding"] == "base64"
    assert "guestinfo.userdata" not in extra_config(worker)

    tasks = TaskLog(endpoint)
    tasks.mark()
    await act("apply")
    assert [str(t) for t in tasks.since()] == []

    (tmp_path / "master.cfg").write_bytes(b"#cloud-config\nother: data\n")
    plan = await act("plan")
    changes = {r.key: r.changes for m in plan.plan for r in m.resources if r.changes}
    [kept] = changes[f"vsphere.virtual_machine/{master}"]
    assert kept.field == "user_data (kept: a running machine is not replaced for it)"
    assert kept.have == f"sha256:{hashlib.sha256(data).hexdigest()[:12]}"
    tasks.mark()
    await act("apply")
    assert [str(t) for t in tasks.since()] == []
    assert base64.b64decode(extra_config(master)["guestinfo.userdata"]) == data

    def power_off(name: str, *, forget_boot: bool) -> None:
        """Off out of band; ``forget_boot``: as a clone that was never powered on."""
        si = connect(endpoint)
        try:
            vm = find(si, f"DC0/vm/{prefix}/{name}")
            wait_task(si, vm.PowerOffVM_Task())
            if forget_boot:
                unmark = vim.option.OptionValue(key=BOOTED_KEY, value="")
                wait_task(si, vm.ReconfigVM_Task(vim.vm.ConfigSpec(extraConfig=[unmark])))
        finally:
            disconnect(si)

    # Powered off after it booted: powered on again, its data kept.
    assert extra_config(master)[BOOTED_KEY] == "TRUE"
    power_off(master, forget_boot=False)
    await act("apply")
    assert base64.b64decode(extra_config(master)["guestinfo.userdata"]) == data
    # A clone that never booted: written with the data given now before it first powers on.
    power_off(master, forget_boot=True)
    plan = await act("plan")
    changes = {r.key: r.changes for m in plan.plan for r in m.resources if r.changes}
    fields = [c.field for c in changes[f"vsphere.virtual_machine/{master}"]]
    assert "user_data (written before its first boot)" in fields, fields
    await act("apply")
    extra = extra_config(master)
    assert base64.b64decode(extra["guestinfo.userdata"]) == b"#cloud-config\nother: data\n"
    assert extra[BOOTED_KEY] == "TRUE"

    await act("destroy")
    assert cluster_resources(endpoint, prefix, cluster_uuid) == []
