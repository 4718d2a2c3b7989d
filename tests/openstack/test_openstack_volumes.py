"""Cinder volumes through the volume workflows (the contract a CSI controller calls) on the real
stack: create idempotent on the name with the cluster's metadata and the topology's zone,
attach through Nova (device, single node), delete refused while attached, detach, extend
available and in use, quota as RESOURCE_EXHAUSTED, an unknown volume or node."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from cloudloop.cloud.openstack import PROVIDER as OPENSTACK
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.registry import Settings
from cloudloop.csi.operations import VolumeOperations
from cloudloop.kube.api import Kube
from cloudloop.messages.volume import (
    AttachVolumeRequest,
    CapacityRange,
    Code,
    CreateVolumeRequest,
    DeleteVolumeRequest,
    DetachVolumeRequest,
    ExpandVolumeRequest,
    Topology,
)
from cloudloop.settings import Domain
from devstack.openstack_emulator import OpenStackEmulatorAdmin
from tests.volume.support import GIB, unique
from workers.main import build_worker

pytestmark = pytest.mark.stack


@pytest.fixture
async def worker(client: Client, os_settings: Settings, kube: Kube) -> AsyncIterator[Worker]:
    driver = OpenStackDriver(OPENSTACK.section(os_settings))
    queue = os_settings.temporal.queue_for(Domain.VOLUME)  # where VolumeOperations starts them
    async with build_worker(
        client, os_settings, driver=driver, kube=kube, task_queue=queue
    ) as running:
        yield running
    driver.close()


@pytest.fixture
def ops(client: Client, os_settings: Settings) -> VolumeOperations:
    return VolumeOperations.from_settings(client, os_settings)


def volume(admin: OpenStackEmulatorAdmin, volume_id: str) -> dict[str, Any] | None:
    return next((v for v in admin.rows("volumes") if v["id"] == volume_id), None)


async def test_create_is_idempotent_and_carries_the_cluster(
    worker: Worker, ops: VolumeOperations, admin: OpenStackEmulatorAdmin, os_settings: Settings
) -> None:
    name = unique("pvc")
    request = CreateVolumeRequest(
        name=name,
        capacity=CapacityRange(required_bytes=2 * GIB + 1),
        volume_type="ssd",
        topology=Topology(requisite=["nova-b"]),
        tags={"csi.storage.k8s.io/pvc/name": "data"},
    )
    first = await ops.create(request)
    assert first.code is Code.OK and first.volume is not None, first.message
    assert (first.volume.size_gib, first.volume.zone, first.volume.volume_type) == (
        3,
        "nova-b",
        "ssd",
    )
    raw = volume(admin, first.volume.id)
    assert raw is not None and raw["name"] == name and raw["status"] == "available"
    assert raw["description"] == "Created by OpenStack Cinder CSI driver"
    assert raw["metadata"] == {
        "cinder.csi.openstack.org/cluster": os_settings.cluster_name,
        "csi.storage.k8s.io/pvc/name": "data",
    }
    again = await ops.create(request)
    assert again.code is Code.OK and again.volume is not None and again.volume.id == first.volume.id
    other = await ops.create(
        request.model_copy(update={"capacity": CapacityRange(required_bytes=5 * GIB)})
    )
    assert other.code is Code.ALREADY_EXISTS, other
    assert len([v for v in admin.rows("volumes") if v["name"] == name]) == 1


async def test_attach_detach_extend_delete(
    worker: Worker, ops: VolumeOperations, admin: OpenStackEmulatorAdmin
) -> None:
    a, b = (s["id"] for s in admin.seed_servers(2, prefix="vol"))
    created = await ops.create(
        CreateVolumeRequest(name=unique("pvc"), topology=Topology(requisite=["nova"]))
    )
    assert created.code is Code.OK and created.volume is not None, created.message
    volume_id = created.volume.id

    grown = await ops.expand(
        ExpandVolumeRequest(volume_id=volume_id, capacity=CapacityRange(required_bytes=2 * GIB))
    )
    assert grown.code is Code.OK, grown.message
    assert volume(admin, volume_id)["size"] == 2  # type: ignore[index]

    attached = await ops.attach(AttachVolumeRequest(volume_id=volume_id, node_id=a))
    assert attached.code is Code.OK, attached.message
    assert attached.device == "/dev/vdb"
    # The guest finds it as virtio-<first 20 characters of the ID> (cinder-csi's serial).
    assert attached.publish_context == {"devicePath": "/dev/vdb", "serial": volume_id}
    raw = volume(admin, volume_id)
    assert raw is not None and raw["status"] == "in-use" and raw["attachments"][0]["server_id"] == a
    again = await ops.attach(AttachVolumeRequest(volume_id=volume_id, node_id=f"openstack:///{a}"))
    assert again.code is Code.OK and again.device == attached.device, again.message
    elsewhere = await ops.attach(AttachVolumeRequest(volume_id=volume_id, node_id=b))
    assert elsewhere.code is Code.FAILED_PRECONDITION and a in elsewhere.message, elsewhere

    in_use = await ops.delete(DeleteVolumeRequest(volume_id=volume_id))
    assert in_use.code is Code.FAILED_PRECONDITION, in_use
    online = await ops.expand(
        ExpandVolumeRequest(volume_id=volume_id, capacity=CapacityRange(required_bytes=3 * GIB))
    )
    assert online.code is Code.OK, online.message  # in-use extend (microversion 3.42)
    assert volume(admin, volume_id)["size"] == 3  # type: ignore[index]

    detached = await ops.detach(DetachVolumeRequest(volume_id=volume_id, node_id=a))
    assert detached.code is Code.OK, detached.message
    assert volume(admin, volume_id)["status"] == "available"  # type: ignore[index]
    for repeat in (a, b, "00000000-0000-0000-0000-00000000dead"):
        result = await ops.detach(DetachVolumeRequest(volume_id=volume_id, node_id=repeat))
        assert result.code is Code.OK, (repeat, result)

    deleted = await ops.delete(DeleteVolumeRequest(volume_id=volume_id))
    assert deleted.code is Code.OK, deleted.message
    assert (await ops.delete(DeleteVolumeRequest(volume_id=volume_id))).code is Code.OK
    await asyncio.sleep(0.3)
    assert volume(admin, volume_id) is None


async def test_quota_unknown_volume_and_node(
    worker: Worker, ops: VolumeOperations, admin: OpenStackEmulatorAdmin
) -> None:
    too_big = await ops.create(
        CreateVolumeRequest(name=unique("pvc"), capacity=CapacityRange(required_bytes=20000 * GIB))
    )
    assert too_big.code is Code.RESOURCE_EXHAUSTED, too_big
    missing = "00000000-0000-0000-0000-0000000000aa"
    assert (await ops.delete(DeleteVolumeRequest(volume_id=missing))).code is Code.OK
    unknown = await ops.attach(AttachVolumeRequest(volume_id=missing, node_id=missing))
    assert unknown.code is Code.NOT_FOUND, unknown
    created = await ops.create(CreateVolumeRequest(name=unique("pvc")))
    assert created.volume is not None
    no_node = await ops.attach(AttachVolumeRequest(volume_id=created.volume.id, node_id=missing))
    assert no_node.code is Code.NOT_FOUND, no_node
    assert (await ops.delete(DeleteVolumeRequest(volume_id=created.volume.id))).code is Code.OK
