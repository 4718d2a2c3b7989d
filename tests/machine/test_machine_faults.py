"""SIGKILL the worker process (``cloudloop worker`` with the DVP driver) at each step of a DVP
machine's provisioning and deletion: a new worker picks the workflow up and it converges, with
exactly one VM (the same one) or none, and no orphaned disk or cloud-init Secret in the parent."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.client import Client

from cloudloop.cloud.dvp import resources as r
from cloudloop.kube.api import Kube
from cloudloop.net import free_port
from devstack import dvp_simulator as sim
from devstack import machine_fixtures
from devstack.dvp_simulator import DvpParent
from devstack.local import LocalStack
from tests.helpers import eventually
from tests.machine.dvp_machines import DvpMachines, dvp_machines

pytestmark = [pytest.mark.stack, pytest.mark.fault]

CONVERGE_TIMEOUT = 120.0


class WorkerProcess:
    """``python -m cloudloop.cli worker`` with the DVP driver; killed with SIGKILL, restarted."""

    def __init__(self, env: dict[str, str], log_dir: Path, *, ready_timeout_s: float = 60) -> None:
        self.env = env
        self.log_dir = log_dir
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        port = free_port()
        self.starts += 1
        log = self.log_dir / f"worker-{self.starts}.log"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cloudloop.cli", "worker"],
                env={**self.env, "CLOUDLOOP_METRICS_PORT": str(port)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + self.ready_timeout_s
        while not _worker_ready(port):
            assert self.proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, "the worker died by itself"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _worker_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
            return int(response.status) == 200
    except OSError:
        return False


@dataclass
class FaultRig:
    """One worker process and one parent namespace for every scenario of this module."""

    worker: WorkerProcess
    task_queue: str
    parent_namespace: str
    cluster_uuid: str


@pytest.fixture(scope="module")
def rig(
    dvp_parent: DvpParent, stack: LocalStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FaultRig]:
    parent_namespace = dvp_parent.new_namespace()
    cluster_uuid = str(uuid.uuid4())
    task_queue = f"faults-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "CLOUDLOOP_PROVIDER": "dvp",
        "CLOUDLOOP_DVP__KUBECONFIG": str(dvp_parent.kubeconfig),
        "CLOUDLOOP_DVP__NAMESPACE": parent_namespace,
        "CLOUDLOOP_DVP__CLUSTER_UUID": cluster_uuid,
        "CLOUDLOOP_CLUSTER_NAME": "faults",
        "CLOUDLOOP_KUBECONFIG": str(stack.kubeconfig),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": task_queue,
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "1",
    }
    worker = WorkerProcess(env, tmp_path_factory.mktemp("fault-workers"))
    worker.start()
    try:
        yield FaultRig(worker, task_queue, parent_namespace, cluster_uuid)
    finally:
        worker.stop()


@pytest.fixture
async def faulty(
    rig: FaultRig,
    kube: Kube,
    dvp_parent: DvpParent,
    namespace: str,
    capi_crds: None,
    client: Client,
) -> AsyncIterator[tuple[DvpMachines, WorkerProcess]]:
    """The machine starter for this test's namespace, feeding the shared worker process."""
    if not rig.worker.running:  # an earlier scenario failed while it was down
        await asyncio.to_thread(rig.worker.start)
    async with dvp_machines(
        kube,
        dvp_parent,
        namespace,
        parent_namespace=rig.parent_namespace,
        cluster_uuid=rig.cluster_uuid,
    ) as machines:
        machines.start_starter(client, rig.task_queue, "faults")
        yield machines, rig.worker


NOTHING: dict[str, set[str]] = {"vms": set(), "disks": set(), "secrets": set()}


@dataclass
class Scene:
    """One scenario's machine (named after the scenario) and the worker process to kill."""

    dvp: DvpMachines
    worker: WorkerProcess
    name: str

    @property
    def boot_disk(self) -> str:
        return f"{self.name}-boot"

    def provisioned_objects(self) -> dict[str, set[str]]:
        return {
            "vms": {self.name},
            "disks": {self.boot_disk, f"{self.name}-additional-disk-0"},
            "secrets": {f"cloud-init-{self.name}"},
        }

    def objects_of_this_machine(self) -> dict[str, set[str]]:
        """Everything in the parent made for a machine of this name, under any UID."""
        return self.dvp.parent_objects(hostname=self.name)

    def vm_uid(self) -> str:
        vm = self.dvp.parent_get(r.VIRTUAL_MACHINES, self.name) or {}
        return str(vm.get("metadata", {}).get("uid", ""))

    def vm_phase_is(self, phase: str) -> bool:
        return self.dvp.vm_phase(self.name) == phase

    def hold(self, step: str, name: str | None = None) -> None:
        self.dvp.parent.simulator.hold(step, name or self.name)

    def release(self, step: str, name: str | None = None) -> None:
        self.dvp.parent.simulator.release(step, name or self.name)

    async def create(self) -> str:
        await asyncio.to_thread(self.dvp.cluster)
        spec = machine_fixtures.dvp_machine_spec(
            additionalDisks=[{"size": "5Gi", "storageClass": "ceph-rbd"}]
        )
        infra = await asyncio.to_thread(self.dvp.machine, self.name, spec=spec)
        return str(infra["metadata"]["uid"])

    async def ready(self) -> None:
        await eventually(
            functools.partial(self.dvp.ready, self.name),
            timeout=CONVERGE_TIMEOUT,
            what="machine ready",
        )

    async def delete(self) -> None:
        await asyncio.to_thread(self.dvp.delete, self.name)

    async def deleted(self, uid: str) -> None:
        await eventually(
            lambda: self.dvp.infra(self.name) is None,
            timeout=CONVERGE_TIMEOUT,
            what="machine deleted",
        )
        assert self.dvp.parent_objects(uid) == NOTHING
        assert self.objects_of_this_machine() == NOTHING  # none left under another UID either

    async def restart_worker(self) -> None:
        await asyncio.to_thread(self.worker.kill)
        await asyncio.to_thread(self.worker.start)


# -- provisioning ------------------------------------------------------------------------------
async def kill_while_creating(scene: Scene) -> str:
    """As soon as the VM exists: its Secret and disks may or may not be there yet."""
    uid = await scene.create()
    await eventually(lambda: bool(scene.vm_uid()), interval=0.01, what="VM created")
    vm_uid = scene.vm_uid()
    await scene.restart_worker()
    await scene.ready()
    assert scene.vm_uid() == vm_uid  # adopted, not made again
    return uid


async def kill_while_starting(scene: Scene) -> str:
    """Created; the observe activity is polling a VM that is not running yet."""
    scene.hold(sim.VM_RUNNING)
    uid = await scene.create()
    await eventually(functools.partial(scene.vm_phase_is, "Starting"), what="VM starting")
    vm_uid = scene.vm_uid()
    await scene.restart_worker()
    scene.release(sim.VM_RUNNING)
    await scene.ready()
    assert scene.vm_uid() == vm_uid
    return uid


async def kill_before_reporting(scene: Scene) -> str:
    """The VM comes up while no worker runs: the next one reports it."""
    scene.hold(sim.VM_RUNNING)
    uid = await scene.create()
    await eventually(functools.partial(scene.vm_phase_is, "Starting"), what="VM starting")
    await asyncio.to_thread(scene.worker.kill)
    scene.release(sim.VM_RUNNING)
    await eventually(functools.partial(scene.vm_phase_is, "Running"), what="VM running")
    assert scene.dvp.ready(scene.name) is None
    await asyncio.to_thread(scene.worker.start)
    await scene.ready()
    return uid


# -- deletion ----------------------------------------------------------------------------------
async def kill_while_deleting_vm(scene: Scene) -> str:
    uid = await scene.create()
    await scene.ready()
    scene.hold(sim.VM_DELETE)
    await scene.delete()

    def vm_terminating() -> bool:
        vm = scene.dvp.parent_get(r.VIRTUAL_MACHINES, scene.name) or {}
        return bool(vm.get("metadata", {}).get("deletionTimestamp"))

    await eventually(vm_terminating, what="VM terminating")
    await scene.restart_worker()
    scene.release(sim.VM_DELETE)
    await scene.deleted(uid)
    return uid


async def kill_while_deleting_disks(scene: Scene) -> str:
    uid = await scene.create()
    await scene.ready()
    scene.hold(sim.DISK_DELETE, scene.boot_disk)
    await scene.delete()

    def disks_going() -> bool:
        disk = scene.dvp.parent_get(r.VIRTUAL_DISKS, scene.boot_disk) or {}
        vm_gone = scene.dvp.parent_get(r.VIRTUAL_MACHINES, scene.name) is None
        return vm_gone and bool(disk.get("metadata", {}).get("deletionTimestamp"))

    await eventually(disks_going, what="VM gone, disks terminating")
    await scene.restart_worker()
    scene.release(sim.DISK_DELETE, scene.boot_disk)
    await scene.deleted(uid)
    return uid


async def delete_while_worker_is_dead(scene: Scene) -> str:
    """Killed mid-provisioning; the machine is deleted before a worker comes back."""
    scene.hold(sim.VM_RUNNING)
    uid = await scene.create()
    await eventually(functools.partial(scene.vm_phase_is, "Starting"), what="VM starting")
    await asyncio.to_thread(scene.worker.kill)
    await scene.delete()
    await asyncio.to_thread(scene.worker.start)
    await scene.deleted(uid)
    return uid


Scenario = Callable[[Scene], Awaitable[str]]


@pytest.mark.parametrize(
    ("scenario", "ends_deleted"),
    [
        pytest.param(kill_while_creating, False, id="creating"),
        pytest.param(kill_while_starting, False, id="waiting-for-running"),
        pytest.param(kill_before_reporting, False, id="running-not-reported"),
        pytest.param(kill_while_deleting_vm, True, id="deleting-vm"),
        pytest.param(kill_while_deleting_disks, True, id="deleting-disks"),
        pytest.param(delete_while_worker_is_dead, True, id="deleted-while-dead"),
    ],
)
async def test_worker_sigkill_converges(
    faulty: tuple[DvpMachines, WorkerProcess], scenario: Scenario, ends_deleted: bool
) -> None:
    dvp, worker = faulty
    scene = Scene(dvp, worker, scenario.__name__.replace("_", "-"))
    uid = await scenario(scene)
    if ends_deleted:
        return
    assert dvp.parent_objects(uid) == scene.provisioned_objects()
    assert scene.objects_of_this_machine() == scene.provisioned_objects()  # exactly one VM
    await scene.delete()
    await scene.deleted(uid)
