"""The vSphere attach survives a worker SIGKILLed mid-operation: exactly one attachment.

A real ``cloudloop worker`` for vSphere (``tests.volume.vsphere_fault_worker``) stops dead right
after ``AttachDisk_Task`` was issued to vcsim and is killed; a fresh worker on the same task
queue must finish the attach without a second ``attachDisk`` task on the VM. Two moments:
- *answered*: the task finished before the kill (the worker never heard): the retry finds the
  disk's consumer;
- *in flight*: vcsim holds the task for :data:`TASK_DELAY_S` (``-method-delay``), longer than it
  takes Temporal to give the activity to the new worker, which must wait for the running task
  instead of issuing another one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from cloudloop.cloud import models
from cloudloop.cloud.registry import Settings
from cloudloop.cloud.vsphere.driver import VsphereDriver
from cloudloop.cloud.vsphere.vmomi import PC, vim
from cloudloop.csi.operations import VolumeOperations
from cloudloop.messages.volume import AttachVolumeRequest, Code
from cloudloop.settings import Domain
from devstack.backends.vsphere import vcsim_server, vsphere_settings
from devstack.local import LocalStack
from devstack.vcsim import VcsimEndpoint, VcsimOptions
from devstack.vcsim_inventory import Inventory, VmRecord, ZoneLayout, connect, disconnect, seed
from tests.conftest import VCSIM_NODES
from tests.helpers import eventually
from tests.support.workers import WorkerProcess, Workers, aws_process_env
from tests.volume.support import ran_again_after_the_kill

pytestmark = [pytest.mark.stack, pytest.mark.fault]

#: How long the slow vcsim holds an attach task: well beyond the activity's heartbeat timeout
#: (10 s) plus a worker start on a busy machine, so the retry meets the task still running.
TASK_DELAY_S = 60
RECOVERY_S = 120

WorkerFactory = Callable[..., tuple[WorkerProcess, Path]]


@pytest.fixture(scope="module")
def slow_vcsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VcsimEndpoint]:
    """A vcsim whose attach tasks run for :data:`TASK_DELAY_S` (reads are not blocked)."""
    delays = (("AttachDisk", TASK_DELAY_S * 1000), ("LockHandoff", 0))
    state = tmp_path_factory.mktemp("slow-vcsim")
    with vcsim_server(state, VcsimOptions(method_delays=delays)) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def slow_seeded(slow_vcsim: VcsimEndpoint) -> Inventory:
    return seed(slow_vcsim, VCSIM_NODES, ZoneLayout())


@pytest.fixture
def start_worker(
    settings: Settings, stack: LocalStack, tmp_path: Path, workers: Workers
) -> WorkerFactory:
    """``cloudloop worker`` processes for vSphere on the test's task queue (not waited for);
    ``fault_after`` makes one stop dead after that driver call, writing the marker it returns."""

    def start(
        endpoint: VcsimEndpoint, fault_after: str | None = None
    ) -> tuple[WorkerProcess, Path]:
        password = tmp_path / "vcenter-password"
        password.write_text(endpoint.password)
        env = {
            **aws_process_env(settings, stack, tmp_path),
            "CLOUDLOOP_PROVIDER": "vsphere",
            "CLOUDLOOP_VSPHERE__SERVER": endpoint.server,
            "CLOUDLOOP_VSPHERE__USERNAME": endpoint.username,
            "CLOUDLOOP_VSPHERE__PASSWORD_FILE": str(password),
            "CLOUDLOOP_VSPHERE__CA_BUNDLE": str(endpoint.ca_file),
            "CLOUDLOOP_VSPHERE__POLL_INTERVAL_S": "0.1",
        }
        marker = tmp_path / f"fault-{len(workers.started)}"
        if not fault_after:
            return workers.start(env, wait=False), marker
        env.update(VSPHERE_FAULT_AFTER=fault_after, VSPHERE_FAULT_MARKER=str(marker))
        return workers.start(env, module="tests.volume.vsphere_fault_worker", wait=False), marker

    return start


def attach_tasks(endpoint: VcsimEndpoint, vm: VmRecord) -> list[str]:
    """The states of every ``attachDisk`` task vcsim ran on ``vm`` (its ``recentTask``)."""
    si = connect(endpoint)
    try:
        spec = PC.FilterSpec(
            objectSet=[
                PC.ObjectSpec(
                    obj=vim.VirtualMachine(vm.moref, si._stub),
                    skip=True,
                    selectSet=[
                        PC.TraversalSpec(
                            name="recent", type=vim.VirtualMachine, path="recentTask", skip=False
                        )
                    ],
                )
            ],
            propSet=[PC.PropertySpec(type=vim.Task, pathSet=["info.descriptionId", "info.state"])],
        )
        found = si.content.propertyCollector.RetrieveContents([spec]) or []
        tasks = [{p.name: p.val for p in obj.propSet} for obj in found]
        return [
            str(t["info.state"])
            for t in tasks
            if t.get("info.descriptionId") == "VirtualMachine.attachDisk"
        ]
    finally:
        disconnect(si)


@pytest.mark.parametrize("moment", ["answered", "in-flight"])
async def test_worker_killed_during_attach(
    request: pytest.FixtureRequest,
    start_worker: WorkerFactory,
    client: Client,
    settings: Settings,
    moment: str,
) -> None:
    in_flight = moment == "in-flight"
    endpoint: VcsimEndpoint = request.getfixturevalue("slow_vcsim" if in_flight else "vcsim")
    inventory: Inventory = request.getfixturevalue("slow_seeded" if in_flight else "seeded")
    node = inventory.vms["node-a"]
    driver = VsphereDriver(vsphere_settings(endpoint, poll_interval_s=0.1))
    ops = VolumeOperations(
        client,
        task_queue=settings.temporal.queue_for(Domain.VOLUME),
        cluster=settings.cluster_name,
        provider="vsphere",
    )
    try:
        volume = await asyncio.to_thread(
            driver.volumes.create_volume,
            models.VolumeSpec(
                name=f"pvc-kill-{moment}", size_gib=1, zone="zone-a", cluster=settings.cluster_name
            ),
        )
        first, marker = start_worker(endpoint, fault_after="AttachDisk")
        attach = asyncio.create_task(
            ops.attach(AttachVolumeRequest(volume_id=volume.id, node_id=node.provider_id))
        )
        await eventually(marker.exists, timeout=60, what="AttachDisk issued by the first worker")
        if not in_flight:

            def attached() -> bool:
                return driver.volumes.get_volume(volume.id).attached_to == [node.uuid]

            await eventually(attached, what="the attach task finished")
        else:
            assert await asyncio.to_thread(attach_tasks, endpoint, node) == ["running"]
        first.kill()  # SIGKILL: no graceful shutdown, no last heartbeat

        second, _ = start_worker(endpoint)
        result = await asyncio.wait_for(attach, RECOVERY_S)
        assert result.code is Code.OK, result.message
        final = await asyncio.to_thread(driver.volumes.get_volume, volume.id)
        assert final.attached_to == [node.uuid]
        assert [(a.instance_id, a.state) for a in final.attachments] == [(node.uuid, "attached")]
        assert await asyncio.to_thread(attach_tasks, endpoint, node) == ["success"]
        assert await ran_again_after_the_kill(client, result.workflow_id)
        if in_flight:  # the retry met the running task and waited for it
            assert "waiting for disk task" in second.log.read_text(), second.log.read_text()
        await asyncio.to_thread(driver.volumes.detach_volume, volume.id, node.uuid)
        await asyncio.to_thread(driver.volumes.delete_volume, volume.id)
    finally:
        driver.close()
