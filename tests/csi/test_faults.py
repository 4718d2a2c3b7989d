"""The CSI driver under SIGKILL, on every cloud: the worker and the controller process die in
the middle of CreateVolume and ControllerPublish, and an attach meets a node whose VM is gone.

- **Worker killed**: the cloud made the change (disk created, attachment made) but the worker
  never heard: AWS through a proxy holding moto's answer, DVP by the simulator holding the disk
  (not Ready) or the hotplug (not Attached), zVirt by an engine whose new disks stay locked and
  whose hotplug answers late, OpenStack by the emulator holding the volume ``creating`` or
  ``reserved`` (Nova lists the attachment, Cinder not yet), vSphere by a vcsim whose
  ``createDisk``/``attachDisk`` tasks run for :data:`SLOW_VCENTER_S` (the worker dies with its
  task running). A fresh worker process takes over: one volume, one attachment.
- **Controller killed**: ``cloudloop csi-controller`` dies while its RPC waits for the workflow
  (no worker runs yet); the sidecar's retry reaches a new controller process and joins the
  workflow: one volume, one attachment.
- **Node gone**: ControllerPublish to an instance that no longer exists is ``NOT_FOUND`` and
  leaves no attachment behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.registry import Settings
from cloudloop.csi.v1 import csi_pb2, csi_pb2_grpc
from cloudloop.kube.api import Kube
from cloudloop.messages.scope import scoped_id
from devstack.backends.zvirt import ovirt_engine
from devstack.csi_deployment import CsiDeployment, controller_env
from devstack.local import LocalStack, StackOptions
from devstack.ovirt_emulator import Delays, OvirtEmulatorEndpoint
from tests.csi.clouds import (
    CsiCloud,
    aws_cloud,
    dvp_cloud,
    openstack_cloud,
    vsphere_cloud,
    zvirt_cloud,
)
from tests.csi.scenario import cloud_volume, live_attachments
from tests.csi.support import (
    channel,
    controller_service,
    csi_settings,
    socket_folder,
    volume_worker,
)
from tests.helpers import eventually, eventually_async
from tests.holding_proxy import HoldingProxy
from tests.support.parts import has
from tests.support.workers import Workers

pytestmark = [pytest.mark.stack, pytest.mark.fault]

GIB = 1 << 30
CONVERGE_S = 120.0
#: zVirt's slow steps: long enough for a kill to land inside them.
SLOW_STEP_S = 3.0
#: vcsim's ``createDisk``/``attachDisk`` tasks run this long: beyond the activities' heartbeat
#: timeout (10 s), so the next attempt usually meets the killed worker's task still running.
SLOW_VCENTER_S = 15


@pytest.fixture(scope="module")
def slow_ovirt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OvirtEmulatorEndpoint]:
    """An oVirt emulator whose new disks stay locked and whose hotplug answers late."""
    delays = Delays(
        clone_s=0.2,
        boot_s=0.2,
        guest_ip_s=0.1,
        shutdown_s=0.1,
        disk_resize_s=0.1,
        remove_s=0.1,
        disk_create_s=SLOW_STEP_S,
        attach_answer_s=SLOW_STEP_S,
    )
    state = tmp_path_factory.mktemp("csi-slow-ovirt")
    with ovirt_engine(state, password="csi-faults", delays=delays) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def slow_vcsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A vcsim (Deckhouse's zone layout) whose disk creates and attaches take a while."""
    from devstack.vcsim import VcsimOptions
    from devstack.vcsim_inventory import ZoneLayout, seed

    delay_ms = SLOW_VCENTER_S * 1000
    local = LocalStack(
        StackOptions(
            state_dir=tmp_path_factory.mktemp("csi-slow-vcsim"),
            temporal=False,
            moto=False,
            kube=(),
            vcsim=VcsimOptions(
                password="csi-faults",
                # LockHandoff 0: reads are served while a delayed task waits.
                method_delays=(
                    ("CreateDisk", delay_ms),
                    ("AttachDisk", delay_ms),
                    ("LockHandoff", 0),
                ),
            ),
        )
    )
    local.start()
    try:
        assert local.vcsim is not None
        seed(local.vcsim, [], ZoneLayout())
        yield local
    finally:
        local.stop()


def volumes_named(cloud: CsiCloud, name: str) -> list[str]:
    return [
        v.id
        for v in has(cloud.driver.volumes).list_volumes(cloud.settings.cluster_name)
        if v.name == name
    ]


def attachment_live(cloud: CsiCloud, volume_id: str, node_id: str) -> bool:
    return bool(live_attachments(cloud_volume(cloud.driver, volume_id)))


@dataclass
class Holds:
    """How a cloud keeps a change made but unanswered, and what the worker needs for it."""

    worker_env: dict[str, str] = field(default_factory=dict)
    hold_create: Callable[[], Callable[[], None]] = lambda: lambda: None
    hold_attach: Callable[[], Callable[[], None]] = lambda: lambda: None
    #: The create of a volume of this name is under way in the cloud (the moment to kill):
    #: the volume IDs listed (as the driver lists them), or ``True``.
    create_seen: Callable[[CsiCloud, str], object] = volumes_named
    #: The attach of the volume to the node is under way in the cloud.
    attach_seen: Callable[[CsiCloud, str, str], bool] = attachment_live
    #: Every volume of this name in the cloud, owned by the cluster or not.
    named: Callable[[CsiCloud, str], list[str]] = volumes_named


@dataclass
class FaultCloud:
    cloud: CsiCloud
    holds: Holds


def nova_attachments(cloud: CsiCloud, volume_id: str, node_id: str) -> bool:
    """Nova lists the attachment on the server (Cinder lists it only once ``in-use``)."""
    path = f"/servers/{node_id}/os-volume_attachments"
    session = cast(OpenStackDriver, cloud.driver).session
    found = session.request("ListVolumeAttachments", "compute", "GET", path)
    return any(a.get("volumeId") == volume_id for a in (found or {}).get("volumeAttachments", []))


def vcenter_tasks(endpoint: Any, running: Callable[[str], bool], vm_uuid: str = "") -> bool:
    """vCenter runs a task ``running`` accepts (by ``descriptionId``): on the VM, else anywhere."""
    from cloudloop.cloud.vsphere.vmomi import PC, vim
    from devstack.vcsim_inventory import connect, disconnect

    si = connect(endpoint)
    try:
        holder: Any = si.content.taskManager
        holder_type: Any = vim.TaskManager
        if vm_uuid:
            holder = si.content.searchIndex.FindByUuid(None, vm_uuid, True, None)
            holder_type = vim.VirtualMachine
        spec = PC.FilterSpec(
            objectSet=[
                PC.ObjectSpec(
                    obj=holder,
                    skip=True,
                    selectSet=[
                        PC.TraversalSpec(name="t", type=holder_type, path="recentTask", skip=False)
                    ],
                )
            ],
            propSet=[PC.PropertySpec(type=vim.Task, pathSet=["info.descriptionId", "info.state"])],
        )
        found = si.content.propertyCollector.RetrieveContents([spec]) or []
        tasks = [{p.name: p.val for p in obj.propSet} for obj in found]
        return any(
            running(str(t.get("info.descriptionId"))) and str(t.get("info.state")) == "running"
            for t in tasks
        )
    finally:
        disconnect(si)


def disks_named(endpoint: Any, name: str) -> list[str]:
    """Every first-class disk of that name on any datastore, tagged for a cluster or not."""
    from cloudloop.cloud.vsphere.vmomi import vim
    from devstack.vcsim_inventory import connect, disconnect

    si = connect(endpoint)
    try:
        manager = vim.vslm.vcenter.VStorageObjectManager("VStorageObjectManager", si._stub)
        found = []
        for datacenter in si.content.rootFolder.childEntity:
            for store in datacenter.datastore:
                for disk in manager.ListVStorageObject(store) or []:
                    obj = manager.RetrieveVStorageObject(disk, store)
                    if obj.config.name == name:
                        found.append(f"{store._moId}:{disk.id}")
        return found
    finally:
        disconnect(si)


@pytest.fixture(params=["aws", "dvp", "openstack", "vsphere", "zvirt"])
async def fault_cloud(
    request: pytest.FixtureRequest, settings: Settings, stack: LocalStack
) -> AsyncIterator[FaultCloud]:
    if request.param == "aws":
        cloud = await aws_cloud(request, settings)
        with HoldingProxy(stack.moto_endpoint) as proxy:

            def hold(action: str) -> Callable[[], None]:
                return proxy.hold(action).release

            yield FaultCloud(
                cloud,
                Holds(
                    worker_env={"CLOUDLOOP_AWS__ENDPOINT_URL": proxy.url},
                    hold_create=lambda: hold("CreateVolume"),
                    hold_attach=lambda: hold("AttachVolume"),
                ),
            )
    elif request.param == "dvp":
        from devstack.dvp_simulator import ATTACH, DISK_READY, DvpParent

        cloud = await dvp_cloud(request, settings)
        parent: DvpParent = request.getfixturevalue("dvp_parent")

        def simulator_hold(step: str) -> Callable[[], None]:
            parent.simulator.hold(step)
            return lambda: parent.simulator.release(step)

        try:
            yield FaultCloud(
                cloud,
                Holds(
                    hold_create=lambda: simulator_hold(DISK_READY),
                    hold_attach=lambda: simulator_hold(ATTACH),
                ),
            )
        finally:
            parent.simulator.release()
    elif request.param == "openstack":
        from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint

        cloud = await openstack_cloud(request, settings)
        emulator: OpenStackEmulatorEndpoint = request.getfixturevalue("csi_openstack")
        admin = OpenStackEmulatorAdmin(emulator.admin_url)

        def volumes_held() -> Callable[[], None]:
            admin.hold("volume")  # new volumes stay creating, attaches reserved
            return lambda: admin.release("volume")

        try:
            yield FaultCloud(
                cloud,
                Holds(
                    hold_create=volumes_held,
                    hold_attach=volumes_held,
                    attach_seen=nova_attachments,
                ),
            )
        finally:
            admin.release("volume")
    elif request.param == "vsphere":
        from cloudloop.cloud.vsphere.volumes import CREATE_TASK_SUFFIX

        cloud = await vsphere_cloud(request, settings, engine="slow_vcsim")
        vcsim: LocalStack = request.getfixturevalue("slow_vcsim")
        endpoint = vcsim.vcsim
        yield FaultCloud(
            cloud,
            Holds(
                create_seen=lambda _, name: vcenter_tasks(
                    endpoint, lambda d: d.endswith(CREATE_TASK_SUFFIX)
                ),
                attach_seen=lambda _, volume_id, node_id: vcenter_tasks(
                    endpoint, lambda d: d == "VirtualMachine.attachDisk", node_id
                ),
                named=lambda _, name: disks_named(endpoint, name),
            ),
        )
    else:
        yield FaultCloud(await zvirt_cloud(request, settings, engine="slow_ovirt"), Holds())


def csi_worker_env(settings: Settings, stack: LocalStack, extra: dict[str, str]) -> dict[str, str]:
    """``cloudloop worker`` for the cloud of ``settings`` (what the chart's worker runs)."""
    return {
        **controller_env(settings, stack.kubeconfig, "unix:///unused"),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "1",
        **extra,
    }


def capability() -> csi_pb2.VolumeCapability:
    return csi_pb2.VolumeCapability(
        mount=csi_pb2.VolumeCapability.MountVolume(fs_type="ext4"),
        access_mode=csi_pb2.VolumeCapability.AccessMode(
            mode=csi_pb2.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
        ),
    )


def create_request(cloud: CsiCloud, name: str, zone: str) -> csi_pb2.CreateVolumeRequest:
    request = csi_pb2.CreateVolumeRequest(
        name=name,
        capacity_range=csi_pb2.CapacityRange(required_bytes=GIB),
        volume_capabilities=[capability()],
    )
    if zone:
        key = has(cloud.driver.volumes).volume_topology_key
        request.accessibility_requirements.requisite.add().segments[key] = zone
    return request


def publish_request(volume_id: str, node_id: str) -> csi_pb2.ControllerPublishVolumeRequest:
    return csi_pb2.ControllerPublishVolumeRequest(
        volume_id=volume_id, node_id=node_id, volume_capability=capability()
    )


async def workflow_running(client: Client, workflow_id: str) -> bool:
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return False
    return description.status is not None and description.status.name == "RUNNING"


async def cleanup(controller: csi_pb2_grpc.ControllerAsyncStub, volume_id: str) -> None:
    with contextlib.suppress(grpc.aio.AioRpcError):
        await controller.ControllerUnpublishVolume(
            csi_pb2.ControllerUnpublishVolumeRequest(volume_id=volume_id)
        )
        await controller.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=volume_id))


async def test_worker_killed_during_create_and_publish(
    fault_cloud: FaultCloud, client: Client, stack: LocalStack, workers: Workers
) -> None:
    cloud, holds = fault_cloud.cloud, fault_cloud.holds
    settings = csi_settings(cloud.settings, storage_classes=False)
    node_id, zone, _ = await cloud.new_node()
    env = csi_worker_env(settings, stack, holds.worker_env)
    worker = await asyncio.to_thread(workers.start, env)

    async def replace_worker() -> None:
        await asyncio.to_thread(worker.kill)  # SIGKILL: no last heartbeat, no cleanup
        await asyncio.to_thread(worker.start)

    async with (
        socket_folder() as sockets,
        controller_service(client, settings, cloud.driver, sockets.controller),
        channel(sockets.controller) as opened,
    ):
        controller = csi_pb2_grpc.ControllerStub(opened)
        name = f"pvc-{uuid.uuid4()}"
        release = holds.hold_create()
        create = asyncio.ensure_future(controller.CreateVolume(create_request(cloud, name, zone)))
        made = await eventually(
            lambda: holds.create_seen(cloud, name), what=f"{name} made in the cloud"
        )
        await replace_worker()
        release()
        response = await asyncio.wait_for(create, CONVERGE_S)
        volume_id = response.volume.volume_id
        try:
            assert await asyncio.to_thread(holds.named, cloud, name) == [volume_id]
            assert made in ([volume_id], True), made

            release = holds.hold_attach()
            publish = asyncio.ensure_future(
                controller.ControllerPublishVolume(publish_request(volume_id, node_id))
            )
            await eventually(
                lambda: holds.attach_seen(cloud, volume_id, node_id),
                what=f"{volume_id} attachment made in the cloud",
            )
            await replace_worker()
            release()
            await asyncio.wait_for(publish, CONVERGE_S)
            volume = await asyncio.to_thread(cloud_volume, cloud.driver, volume_id)
            assert live_attachments(volume) == [node_id], volume
        finally:
            await cleanup(controller, volume_id)


async def test_controller_killed_during_create_and_publish(
    fault_cloud: FaultCloud, client: Client, kube: Kube, stack: LocalStack, tmp_path: Path
) -> None:
    cloud = fault_cloud.cloud
    settings = csi_settings(cloud.settings, storage_classes=False)
    scope = settings.temporal.id_scope  # where the controller's workflow IDs live
    node_id, zone, _ = await cloud.new_node()
    deployment = CsiDeployment(settings, stack.kubeconfig, tmp_path / "logs")
    endpoint = f"unix://{deployment.socket}"
    await asyncio.to_thread(deployment.start_controller)
    name = f"pvc-{uuid.uuid4()}"
    volume_id = ""
    try:
        # No worker yet: the RPC waits for its workflow when the controller dies.
        async with channel(endpoint) as opened:
            create = asyncio.ensure_future(
                csi_pb2_grpc.ControllerStub(opened).CreateVolume(create_request(cloud, name, zone))
            )
            await eventually_async(
                lambda: workflow_running(client, scoped_id(scope, f"volume-create/{name}")),
                what="create started",
            )
            assert deployment.controller is not None
            await asyncio.to_thread(deployment.controller.kill)
            with pytest.raises(grpc.aio.AioRpcError) as lost:
                await create
            assert lost.value.code() is grpc.StatusCode.UNAVAILABLE
        await asyncio.to_thread(deployment.start_controller)
        async with (
            channel(endpoint) as opened,
            volume_worker(client, settings, cloud.driver, kube),
        ):
            response = await csi_pb2_grpc.ControllerStub(opened).CreateVolume(
                create_request(cloud, name, zone)
            )  # the sidecar's retry: joins the workflow
        volume_id = response.volume.volume_id
        assert await asyncio.to_thread(fault_cloud.holds.named, cloud, name) == [volume_id]

        async with channel(endpoint) as opened:
            publish = asyncio.ensure_future(
                csi_pb2_grpc.ControllerStub(opened).ControllerPublishVolume(
                    publish_request(volume_id, node_id)
                )
            )
            await eventually_async(
                lambda: workflow_running(client, scoped_id(scope, f"volume/{volume_id}")),
                what="attach started",
            )
            await asyncio.to_thread(deployment.controller.kill)
            with pytest.raises(grpc.aio.AioRpcError):
                await publish
        await asyncio.to_thread(deployment.start_controller)
        async with (
            channel(endpoint) as opened,
            volume_worker(client, settings, cloud.driver, kube),
        ):
            controller = csi_pb2_grpc.ControllerStub(opened)
            first = await controller.ControllerPublishVolume(publish_request(volume_id, node_id))
            again = await controller.ControllerPublishVolume(publish_request(volume_id, node_id))
            assert first.publish_context == again.publish_context
            volume = await asyncio.to_thread(cloud_volume, cloud.driver, volume_id)
            assert live_attachments(volume) == [node_id], volume
            await cleanup(controller, volume_id)
    finally:
        await asyncio.to_thread(deployment.stop)


async def test_publish_to_a_node_whose_vm_is_gone(
    fault_cloud: FaultCloud, client: Client, kube: Kube
) -> None:
    cloud = fault_cloud.cloud
    settings = csi_settings(cloud.settings, storage_classes=False)
    node_id, zone, _ = await cloud.new_node()
    async with (
        socket_folder() as sockets,
        volume_worker(client, settings, cloud.driver, kube),
        controller_service(client, settings, cloud.driver, sockets.controller),
        channel(sockets.controller) as opened,
    ):
        controller = csi_pb2_grpc.ControllerStub(opened)
        name = f"pvc-{uuid.uuid4()}"
        request = create_request(cloud, name, zone)
        volume_id = (await controller.CreateVolume(request)).volume.volume_id
        try:
            await cloud.remove_node(node_id)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await controller.ControllerPublishVolume(publish_request(volume_id, node_id))
            assert refused.value.code() is grpc.StatusCode.NOT_FOUND, refused.value.details()
            volume = await asyncio.to_thread(cloud_volume, cloud.driver, volume_id)
            assert volume is not None and live_attachments(volume) == []
            assert volume.attachments == [], volume.attachments
        finally:
            await cleanup(controller, volume_id)
        assert await asyncio.to_thread(volumes_named, cloud, name) == []
