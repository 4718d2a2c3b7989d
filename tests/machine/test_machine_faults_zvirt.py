"""SIGKILL the worker process (``cloudloop worker`` with the zVirt driver) at each step of a
ZvirtMachine's provisioning and deletion, against the oVirt Engine emulator: a new worker picks the
workflow up and it converges, with exactly one VM (the same one) or none, and no orphaned disk.

The zVirt counterpart of ``test_machine_faults.py``. zVirt keeps no cloud-init Secret in the cloud
(the bootstrap data goes with the start request), so what could be orphaned is a VM or a disk. The
emulator's delays are long enough that each kill lands at the step the scenario names: every
scenario checks, after the kill, that the emulator is still at that step.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.client import Client

from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT_KINDS
from cloudloop.kube.api import Kube
from devstack import machine_fixtures
from devstack.local import LocalStack, StackOptions
from devstack.ovirt_emulator import (
    Delays,
    OvirtEmulatorAdmin,
    OvirtEmulatorEndpoint,
    OvirtEmulatorOptions,
)
from starters.machine import MachineStarter
from tests.helpers import eventually
from tests.machine.dvp_machines import TEST_TIMINGS
from tests.machine.test_machine_faults import WorkerProcess

pytestmark = [pytest.mark.stack, pytest.mark.fault]

CONVERGE_TIMEOUT = 120.0
CLOUD_INIT = b"#cloud-config\nruncmd: [echo zvirt-faults]\n"
#: Each step a kill aims at lasts this long in the emulator (a kill lands within milliseconds).
STEP_S = 1.2
DELAYS = Delays(
    clone_s=STEP_S,
    boot_s=STEP_S,
    guest_ip_s=0.2,
    shutdown_s=STEP_S,
    disk_resize_s=STEP_S,
    remove_s=STEP_S,
)


@pytest.fixture(scope="module")
def ovirt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OvirtEmulatorEndpoint]:
    """The oVirt Engine emulator alone, with delays long enough to kill the worker mid-step."""
    local = LocalStack(
        StackOptions(
            state_dir=tmp_path_factory.mktemp("zvirt-faults-ovirt"),
            temporal=False,
            moto=False,
            kube=(),
            ovirt_emulator=OvirtEmulatorOptions(password="faults-engine", delays=DELAYS),
        )
    )
    local.start()
    try:
        assert local.ovirt is not None
        yield local.ovirt
    finally:
        local.stop()


@dataclass
class FaultRig:
    """One worker process (zVirt driver) for every scenario of this module."""

    worker: WorkerProcess
    task_queue: str
    ovirt: OvirtEmulatorEndpoint
    admin: OvirtEmulatorAdmin


@pytest.fixture(scope="module")
def rig(
    ovirt: OvirtEmulatorEndpoint, stack: LocalStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FaultRig]:
    task_queue = f"zfaults-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "CLOUDLOOP_PROVIDER": "zvirt",
        "CLOUDLOOP_ZVIRT__API_URL": ovirt.api_url,
        "CLOUDLOOP_ZVIRT__USERNAME": ovirt.username,
        "CLOUDLOOP_ZVIRT__PASSWORD": ovirt.password,
        "CLOUDLOOP_ZVIRT__CA_BUNDLE": str(ovirt.ca_file),
        "CLOUDLOOP_ZVIRT__CLUSTER_ID": ovirt.cluster_id,
        "CLOUDLOOP_ZVIRT__TIMEOUT_S": "5",
        "CLOUDLOOP_ZVIRT__WAIT_TIMEOUT_S": "20",
        "CLOUDLOOP_ZVIRT__POLL_INTERVAL_S": "0.05",
        # A graceful shutdown is given all of its (simulated) time: the kill lands during it.
        "CLOUDLOOP_ZVIRT__SHUTDOWN_TIMEOUT_S": "30",
        "CLOUDLOOP_CLUSTER_NAME": "zfaults",
        "CLOUDLOOP_KUBECONFIG": str(stack.kubeconfig),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": task_queue,
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "1",
    }
    worker = WorkerProcess(env, tmp_path_factory.mktemp("zvirt-fault-workers"))
    worker.start()
    try:
        yield FaultRig(worker, task_queue, ovirt, OvirtEmulatorAdmin(ovirt.admin_url))
    finally:
        worker.stop()


@dataclass
class Scene:
    """One scenario's ZvirtMachine (named after the scenario) and the worker process to kill."""

    kube: Kube
    namespace: str
    rig: FaultRig
    name: str

    @property
    def worker(self) -> WorkerProcess:
        return self.rig.worker

    @property
    def admin(self) -> OvirtEmulatorAdmin:
        return self.rig.admin

    # -- the cloud -------------------------------------------------------------------------
    def vms(self) -> list[dict[str, Any]]:
        """Every VM of this name in the emulator."""
        return [vm for vm in self.admin.vms() if vm["name"] == self.name]

    def vm(self) -> dict[str, Any] | None:
        return self.admin.vm(self.name)

    def vm_status(self) -> str:
        return str((self.vm() or {}).get("status", ""))

    def vm_status_is(self, status: str) -> bool:
        return self.vm_status() == status

    def vm_id(self) -> str:
        return str((self.vm() or {}).get("id", ""))

    def disk_ids(self) -> set[str]:
        return {a["disk_id"] for a in (self.vm() or {}).get("disk_attachments", [])}

    def disks(self) -> dict[str, dict[str, Any]]:
        return {disk["id"]: disk for disk in self.admin.disks()}

    def orphaned_disks(self) -> list[dict[str, Any]]:
        """Disks attached to no VM (this spec has no data disk: none may be left over)."""
        return [disk for disk in self.admin.disks() if disk["attached_to"] is None]

    def boot_disk_resizing(self) -> bool:
        """Cloned and down, the boot disk being grown to rootDiskSizeGb: not started yet."""
        vm = self.vm() or {}
        disks = self.disks()
        return vm.get("status") == "down" and any(
            disks.get(a["disk_id"], {}).get("status") == "locked"
            for a in vm.get("disk_attachments", [])
        )

    # -- the ZvirtMachine ------------------------------------------------------------------
    def infra(self) -> dict[str, Any] | None:
        return self.kube.get(ZVIRT_KINDS.machine, self.name, self.namespace)

    def ready(self) -> dict[str, Any] | None:
        obj = self.infra() or {}
        status = obj.get("status") or {}
        provisioned = (status.get("initialization") or {}).get("provisioned")
        return obj if status.get("ready") and provisioned else None

    async def create(self, endpoint: OvirtEmulatorEndpoint) -> str:
        spec = {
            "template": endpoint.template,
            "vnicProfileID": endpoint.vnic_profile_id,
            "cpu": {"sockets": 1, "cores": 2, "threads": 1},
            "memory": 2048,
            "rootDiskSizeGb": 20,  # the template's disk is 10 GiB: it is grown before the start
            "nicName": "nic1",
        }

        def make() -> dict[str, Any]:
            secret = f"{self.name}-bootstrap"
            machine_fixtures.create_bootstrap_secret(self.kube, self.namespace, secret, CLOUD_INIT)
            return machine_fixtures.create_machine(
                self.kube,
                self.namespace,
                self.name,
                cluster="c1",
                kinds=ZVIRT_KINDS,
                spec=spec,
                bootstrap_secret=secret,
            )

        infra = await asyncio.to_thread(make)
        return str(infra["metadata"]["uid"])

    async def provisioned(self) -> dict[str, Any]:
        """Ready, with exactly one VM of this name, running, its boot disk its only disk."""
        infra = await eventually(self.ready, timeout=CONVERGE_TIMEOUT, what=f"{self.name} ready")
        vms = await asyncio.to_thread(self.vms)
        assert len(vms) == 1, vms
        [vm] = vms
        assert vm["status"] == "up"
        assert infra["spec"]["providerID"] == f"zvirt://{vm['id']}"
        assert infra["status"]["initialization"]["provisioned"] is True
        assert [a["bootable"] for a in vm["disk_attachments"]] == [True]
        assert vm["starts"] == 1  # started once, never again by the next worker
        assert await asyncio.to_thread(self.orphaned_disks) == []
        return vm

    async def delete(self) -> None:
        await asyncio.to_thread(self.kube.delete, ZVIRT_KINDS.machine, self.name, self.namespace)

    async def deleted(self, disk_ids: set[str]) -> None:
        """The finalizer goes last: when the ZvirtMachine is gone, so are the VM and its disks."""

        def gone() -> bool:
            infra = self.infra()
            if infra is not None:
                assert ZVIRT_KINDS.finalizer in infra["metadata"].get("finalizers", [])
            return infra is None

        await eventually(gone, timeout=CONVERGE_TIMEOUT, what=f"{self.name} deleted")
        assert await asyncio.to_thread(self.vms) == []
        remaining = await asyncio.to_thread(self.disks)
        assert disk_ids and not disk_ids & remaining.keys(), (disk_ids, remaining)
        assert await asyncio.to_thread(self.orphaned_disks) == []

    async def kill_at(self, step: Callable[[], bool], what: str) -> None:
        """SIGKILL the worker as soon as the emulator is at ``step``; it must still be there."""
        await eventually(step, interval=0.02, timeout=CONVERGE_TIMEOUT, what=what)
        await asyncio.to_thread(self.worker.kill)
        assert await asyncio.to_thread(step), f"the kill missed the step: {what}"

    async def restart_worker(self) -> None:
        await asyncio.to_thread(self.worker.start)


@pytest.fixture
async def scene_factory(
    rig: FaultRig, kube: Kube, namespace: str, capi_crds: None, client: Client
) -> AsyncIterator[Callable[[str], Scene]]:
    """The machine starter for this test's namespace, feeding the shared worker process."""
    if not rig.worker.running:  # an earlier scenario failed while it was down
        await asyncio.to_thread(rig.worker.start)
    await asyncio.to_thread(machine_fixtures.create_cluster, kube, namespace, "c1", ZVIRT_KINDS)
    starter = MachineStarter(
        kube,
        client,
        kinds=ZVIRT_KINDS,
        task_queue=rig.task_queue,
        cluster="zfaults",
        namespace=namespace,
        timings=TEST_TIMINGS,
    )
    task = asyncio.create_task(starter.run())
    try:
        yield lambda name: Scene(kube, namespace, rig, name)
    finally:
        starter.stop()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        # Leave nothing that blocks the namespace's deletion.
        items = await asyncio.to_thread(kube.list, ZVIRT_KINDS.machine, namespace)
        for obj in items.get("items", []):
            if obj["metadata"].get("finalizers"):
                await asyncio.to_thread(
                    kube.patch,
                    ZVIRT_KINDS.machine,
                    obj["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                    namespace,
                )


# -- provisioning ------------------------------------------------------------------------------
async def kill_while_cloning(scene: Scene) -> set[str]:
    """The VM exists, ``image_locked`` while the template is cloned: the next worker adopts it."""
    await scene.create(scene.rig.ovirt)
    await scene.kill_at(functools.partial(scene.vm_status_is, "image_locked"), "VM cloning")
    vm_id = scene.vm_id()
    await scene.restart_worker()
    vm = await scene.provisioned()
    assert vm["id"] == vm_id  # adopted, not made again
    return scene.disk_ids()


async def kill_while_resizing_boot_disk(scene: Scene) -> set[str]:
    """Cloned and ``down``, the boot disk being grown: not started yet."""
    await scene.create(scene.rig.ovirt)
    await scene.kill_at(scene.boot_disk_resizing, "VM down, boot disk resizing")
    vm_id = scene.vm_id()
    assert (scene.vm() or {}).get("starts") == 0
    await scene.restart_worker()
    vm = await scene.provisioned()
    assert vm["id"] == vm_id
    return scene.disk_ids()


async def kill_before_reporting(scene: Scene) -> set[str]:
    """Started (the create activity polls a VM not up yet); the VM comes up, with its IP, while
    no worker runs: the next one reports it and never starts it again."""
    await scene.create(scene.rig.ovirt)
    await scene.kill_at(functools.partial(scene.vm_status_is, "powering_up"), "VM powering up")
    vm_id = scene.vm_id()
    await eventually(lambda: (scene.vm() or {}).get("ips"), what="VM up with an IP")
    assert scene.ready() is None
    await scene.restart_worker()
    vm = await scene.provisioned()
    assert vm["id"] == vm_id
    return scene.disk_ids()


# -- deletion ----------------------------------------------------------------------------------
async def kill_while_shutting_down(scene: Scene) -> set[str]:
    await scene.create(scene.rig.ovirt)
    await scene.provisioned()
    disk_ids = scene.disk_ids()
    await scene.delete()
    await scene.kill_at(functools.partial(scene.vm_status_is, "powering_down"), "VM powering down")
    await scene.restart_worker()
    await scene.deleted(disk_ids)
    return disk_ids


async def kill_while_removing(scene: Scene) -> set[str]:
    """Down and being removed (``image_locked``, its boot disk locked, not yet gone)."""
    await scene.create(scene.rig.ovirt)
    await scene.provisioned()
    disk_ids = scene.disk_ids()
    await scene.delete()

    def removing() -> bool:
        vm = scene.vm() or {}
        return vm.get("status") == "image_locked" and bool(disk_ids & scene.disks().keys())

    await scene.kill_at(removing, "VM being removed, boot disk still there")
    await scene.restart_worker()
    await scene.deleted(disk_ids)
    return disk_ids


async def delete_while_worker_is_dead(scene: Scene) -> set[str]:
    """Killed mid-provisioning; the machine is deleted before a worker comes back."""
    await scene.create(scene.rig.ovirt)
    await scene.kill_at(functools.partial(scene.vm_status_is, "powering_up"), "VM powering up")
    disk_ids = scene.disk_ids()
    await scene.delete()
    await scene.restart_worker()
    await scene.deleted(disk_ids)
    return disk_ids


Scenario = Callable[[Scene], Awaitable[set[str]]]


@pytest.mark.parametrize(
    ("scenario", "ends_deleted"),
    [
        pytest.param(kill_while_cloning, False, id="cloning"),
        pytest.param(kill_while_resizing_boot_disk, False, id="down-before-start"),
        pytest.param(kill_before_reporting, False, id="up-not-reported"),
        pytest.param(kill_while_shutting_down, True, id="deleting-powering-down"),
        pytest.param(kill_while_removing, True, id="deleting-removing"),
        pytest.param(delete_while_worker_is_dead, True, id="deleted-while-dead"),
    ],
)
async def test_worker_sigkill_converges(
    scene_factory: Callable[[str], Scene], scenario: Scenario, ends_deleted: bool
) -> None:
    scene = scene_factory(scenario.__name__.replace("_", "-"))
    disk_ids = await scenario(scene)
    if ends_deleted:
        return
    await scene.delete()
    await scene.deleted(disk_ids)
