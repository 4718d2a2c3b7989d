"""Volume workflows against the real stack: Temporal dev server, a worker, moto through boto3.

Create, delete, attach, detach and expand through :class:`cloudloop.csi.operations.VolumeOperations`
(the contract a CSI controller calls), checked against what moto then holds: CSI idempotency,
capacity and topology rules, single-node access, device names, joining a running request and
refusing a conflicting one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.tags import cluster_tag_key
from cloudloop.cloud.registry import Settings
from cloudloop.csi.operations import VolumeOperations
from cloudloop.kube.api import Kube
from cloudloop.messages.scope import scoped_id
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
from devstack.backends.aws import launch_instance
from devstack.local import LocalStack
from tests.helpers import eventually_async
from tests.volume.support import (
    GIB,
    attachments,
    describe_volume,
    instance_devices,
    make_volume,
    raw_history_text,
    unique,
    volumes_named,
)
from workers.main import build_worker

pytestmark = pytest.mark.stack


def make_worker(client: Client, settings: Settings, kube: Kube) -> Worker:
    return build_worker(
        client,
        settings,
        driver=AwsDriver(AWS.section(settings)),
        kube=kube,
        task_queue=settings.temporal.queue_for(Domain.VOLUME),  # where VolumeOperations starts
    )


@pytest.fixture
async def worker(client: Client, settings: Settings, kube: Kube) -> AsyncIterator[Worker]:
    async with make_worker(client, settings, kube) as running:
        yield running


async def started(client: Client, workflow_id: str) -> WorkflowExecutionDescription:
    """The workflow's description once it exists."""

    async def describe() -> WorkflowExecutionDescription | None:
        try:
            return await client.get_workflow_handle(workflow_id).describe()
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                return None
            raise

    return await eventually_async(describe, what=f"workflow {workflow_id} started")


async def in_moto(ec2: Any, volume_id: str) -> dict[str, Any]:
    volume = await asyncio.to_thread(describe_volume, ec2, volume_id)
    assert volume is not None, f"{volume_id} not in moto"
    return volume


async def test_create_is_idempotent_on_name(
    worker: Worker, ops: VolumeOperations, ec2: Any, settings: Settings
) -> None:
    name = unique("pvc")
    request = CreateVolumeRequest(
        name=name,
        capacity=CapacityRange(required_bytes=3 * GIB + 1),
        tags={"kubernetes.io/created-for/pvc/name": "data"},
    )
    first = await ops.create(request)
    assert first.code is Code.OK, first.message
    assert first.workflow_id == scoped_id(settings.temporal.id_scope, f"volume-create/{name}")
    assert first.volume is not None and first.volume.size_gib == 4  # rounded up to whole GiB

    raw = await in_moto(ec2, first.volume.id)
    tags = {t["Key"]: t["Value"] for t in raw["Tags"]}
    assert tags[cluster_tag_key(settings.cluster_name)] == "owned"
    assert tags["CSIVolumeName"] == name
    assert tags["ebs.csi.aws.com/cluster"] == "true"
    assert tags["kubernetes.io/created-for/pvc/name"] == "data"
    assert raw["Size"] == 4 and raw["State"] == "available"

    again = await ops.create(request)  # the finished workflow's ID runs again: same volume
    assert again.code is Code.OK
    assert again.volume is not None and again.volume.id == first.volume.id

    bigger = await ops.create(
        request.model_copy(update={"capacity": CapacityRange(required_bytes=8 * GIB)})
    )
    assert bigger.code is Code.ALREADY_EXISTS, bigger
    assert first.volume.id in bigger.message

    found = await asyncio.to_thread(volumes_named, ec2, settings.cluster_name, name)
    assert [v["VolumeId"] for v in found] == [first.volume.id]


async def test_create_honours_capacity_and_topology(
    worker: Worker, ops: VolumeOperations, ec2: Any
) -> None:
    preferred = await ops.create(
        CreateVolumeRequest(
            name=unique("pvc"),
            topology=Topology(
                requisite=["us-east-1b", "us-east-1c"], preferred=["us-east-1c", "us-east-1b"]
            ),
        )
    )
    assert preferred.code is Code.OK, preferred.message
    assert preferred.volume is not None
    assert preferred.volume.zone == "us-east-1c"
    assert preferred.volume.size_gib == 1  # no capacity asked: the smallest volume
    assert (await in_moto(ec2, preferred.volume.id))["AvailabilityZone"] == "us-east-1c"

    nowhere = await ops.create(
        CreateVolumeRequest(name=unique("pvc"), topology=Topology(requisite=["mars-1a"]))
    )
    assert nowhere.code is Code.RESOURCE_EXHAUSTED, nowhere
    assert "mars-1a" in nowhere.message

    too_big = await ops.create(
        CreateVolumeRequest(
            name=unique("pvc"),
            capacity=CapacityRange(required_bytes=GIB + 1, limit_bytes=GIB + 512 * 1024 * 1024),
        )
    )
    assert too_big.code is Code.OUT_OF_RANGE, too_big
    assert too_big.workflow_id == ""  # refused before any workflow started

    unnamed = await ops.create(CreateVolumeRequest(name=""))
    assert unnamed.code is Code.INVALID_ARGUMENT


async def test_attach_detach_delete_lifecycle(
    worker: Worker, ops: VolumeOperations, ec2: Any, settings: Settings
) -> None:
    node_a = await asyncio.to_thread(launch_instance, ec2, "us-east-1a")
    node_b = await asyncio.to_thread(launch_instance, ec2, "us-east-1a")
    created = await ops.create(
        CreateVolumeRequest(name=unique("pvc"), topology=Topology(requisite=["us-east-1a"]))
    )
    assert created.code is Code.OK and created.volume is not None, created.message
    volume_id = created.volume.id

    attached = await ops.attach(AttachVolumeRequest(volume_id=volume_id, node_id=node_a))
    assert attached.code is Code.OK, attached.message
    assert attached.workflow_id == scoped_id(settings.temporal.id_scope, f"volume/{volume_id}")
    assert attached.device.startswith("/dev/xvd")
    # The node finds the disk by its NVMe serial (the volume ID without dash), else by name.
    assert attached.publish_context == {
        "devicePath": attached.device,
        "serial": volume_id.replace("-", "", 1),
    }
    (attachment,) = await asyncio.to_thread(attachments, ec2, volume_id)
    assert (attachment["InstanceId"], attachment["Device"], attachment["State"]) == (
        node_a,
        attached.device,
        "attached",
    )

    # Same node again (a providerID names it too): OK with the same publish context.
    again = await ops.attach(
        AttachVolumeRequest(volume_id=volume_id, node_id=f"aws:///us-east-1a/{node_a}")
    )
    assert again.code is Code.OK, again.message
    assert again.publish_context == attached.publish_context

    elsewhere = await ops.attach(AttachVolumeRequest(volume_id=volume_id, node_id=node_b))
    assert elsewhere.code is Code.FAILED_PRECONDITION, elsewhere
    assert node_a in elsewhere.message

    in_use = await ops.delete(DeleteVolumeRequest(volume_id=volume_id))
    assert in_use.code is Code.FAILED_PRECONDITION, in_use
    assert node_a in in_use.message

    detached = await ops.detach(DetachVolumeRequest(volume_id=volume_id, node_id=node_a))
    assert detached.code is Code.OK, detached.message
    assert await asyncio.to_thread(attachments, ec2, volume_id) == []
    assert (await in_moto(ec2, volume_id))["State"] == "available"

    for repeat in (
        DetachVolumeRequest(volume_id=volume_id, node_id=node_a),  # already detached
        DetachVolumeRequest(volume_id=volume_id, node_id=node_b),  # never attached there
        DetachVolumeRequest(volume_id=volume_id, node_id="i-0000000000000dead"),  # no such node
    ):
        result = await ops.detach(repeat)
        assert result.code is Code.OK, (repeat, result)

    deleted = await ops.delete(DeleteVolumeRequest(volume_id=volume_id))
    assert deleted.code is Code.OK, deleted.message
    assert await asyncio.to_thread(describe_volume, ec2, volume_id) is None
    assert (await ops.delete(DeleteVolumeRequest(volume_id=volume_id))).code is Code.OK
    gone = await ops.detach(DetachVolumeRequest(volume_id=volume_id, node_id=node_a))
    assert gone.code is Code.OK, gone


async def test_a_quick_attach_is_one_workflow_task_and_stays_encrypted(
    worker: Worker, ops: VolumeOperations, ec2: Any, stack: LocalStack
) -> None:
    """The local first attempt: no activity task, one workflow task; its marker (the result
    with the device) is as encrypted as an activity's result."""
    node = await asyncio.to_thread(launch_instance, ec2, "us-east-1a")
    volume_id = await asyncio.to_thread(make_volume, ec2, "us-east-1a")
    attached = await ops.attach(AttachVolumeRequest(volume_id=volume_id, node_id=node))
    assert attached.code is Code.OK, attached.message
    types, raw = await raw_history_text(stack.temporal_address, attached.workflow_id)
    assert "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED" not in types, types
    assert types.count("EVENT_TYPE_WORKFLOW_TASK_COMPLETED") == 1, types
    assert "EVENT_TYPE_MARKER_RECORDED" in types, types
    for plain in (node, attached.device):
        assert plain not in raw, plain


async def test_detach_without_node_detaches_everywhere(
    worker: Worker, ops: VolumeOperations, ec2: Any, settings: Settings
) -> None:
    node = await asyncio.to_thread(launch_instance, ec2, "us-east-1a")
    volume_id = await asyncio.to_thread(make_volume, ec2, "us-east-1a")
    assert (await ops.attach(AttachVolumeRequest(volume_id=volume_id, node_id=node))).ok
    result = await ops.detach(DetachVolumeRequest(volume_id=volume_id))
    assert result.code is Code.OK, result.message
    assert result.workflow_id == scoped_id(settings.temporal.id_scope, f"volume/{volume_id}")
    assert await asyncio.to_thread(attachments, ec2, volume_id) == []


async def test_unknown_volume_or_node(worker: Worker, ops: VolumeOperations, ec2: Any) -> None:
    node = await asyncio.to_thread(launch_instance, ec2, "us-east-1a")
    volume_id = await asyncio.to_thread(make_volume, ec2, "us-east-1a")
    cases = [
        AttachVolumeRequest(volume_id="fake-vol-id", node_id=node),
        AttachVolumeRequest(volume_id="vol-00000000000000000", node_id=node),
        AttachVolumeRequest(volume_id=volume_id, node_id="fake-node-id"),
        AttachVolumeRequest(volume_id=volume_id, node_id="i-0000000000000dead"),
    ]
    for request in cases:
        result = await ops.attach(request)
        assert result.code is Code.NOT_FOUND, (request, result)
    assert (await ops.delete(DeleteVolumeRequest(volume_id="fake-vol-id"))).code is Code.OK
    missing = await ops.expand(
        ExpandVolumeRequest(
            volume_id="vol-00000000000000000", capacity=CapacityRange(required_bytes=GIB)
        )
    )
    assert missing.code is Code.NOT_FOUND
    assert await asyncio.to_thread(attachments, ec2, volume_id) == []


async def test_attach_across_zones_is_refused(
    worker: Worker, ops: VolumeOperations, ec2: Any
) -> None:
    node = await asyncio.to_thread(launch_instance, ec2, "us-east-1b")
    volume_id = await asyncio.to_thread(make_volume, ec2, "us-east-1a")
    result = await ops.attach(AttachVolumeRequest(volume_id=volume_id, node_id=node))
    assert result.code is Code.FAILED_PRECONDITION, result
    assert "us-east-1b" in result.message
    assert await asyncio.to_thread(attachments, ec2, volume_id) == []


async def test_concurrent_attaches_to_one_instance_get_distinct_devices(
    worker: Worker, ops: VolumeOperations, ec2: Any
) -> None:
    node = await asyncio.to_thread(launch_instance, ec2, "us-east-1a")
    volume_ids = [await asyncio.to_thread(make_volume, ec2, "us-east-1a") for _ in range(8)]
    results = await asyncio.gather(
        *(ops.attach(AttachVolumeRequest(volume_id=v, node_id=node)) for v in volume_ids)
    )
    assert [r.code for r in results] == [Code.OK] * 8, [r.message for r in results]
    devices = {r.device: v for r, v in zip(results, volume_ids, strict=True)}
    assert len(devices) == 8
    mapped = await asyncio.to_thread(instance_devices, ec2, node)
    assert {d: v for d, v in mapped.items() if d in devices} == devices


async def test_expand(worker: Worker, ops: VolumeOperations, ec2: Any) -> None:
    volume_id = await asyncio.to_thread(make_volume, ec2, "us-east-1a", 2)
    grown = await ops.expand(
        ExpandVolumeRequest(volume_id=volume_id, capacity=CapacityRange(required_bytes=5 * GIB - 1))
    )
    assert grown.code is Code.OK, grown.message
    assert grown.size_gib == 5 and grown.node_expansion_required
    assert (await in_moto(ec2, volume_id))["Size"] == 5

    smaller = await ops.expand(
        ExpandVolumeRequest(volume_id=volume_id, capacity=CapacityRange(required_bytes=3 * GIB))
    )
    assert smaller.code is Code.OK and smaller.size_gib == 5
    assert (await in_moto(ec2, volume_id))["Size"] == 5

    bounded = await ops.expand(
        ExpandVolumeRequest(
            volume_id=volume_id, capacity=CapacityRange(required_bytes=9 * GIB, limit_bytes=8 * GIB)
        )
    )
    assert bounded.code is Code.OUT_OF_RANGE


async def test_repeated_request_joins_and_conflicting_one_is_refused(
    client: Client, settings: Settings, kube: Kube, ops: VolumeOperations, ec2: Any
) -> None:
    """With no worker yet, requests stay running: a repeat joins, a conflicting one is refused."""
    node = await asyncio.to_thread(launch_instance, ec2, "us-east-1a")
    volume_id = await asyncio.to_thread(make_volume, ec2, "us-east-1a", 2)
    attach = AttachVolumeRequest(volume_id=volume_id, node_id=node)
    first = asyncio.create_task(ops.attach(attach))
    handle = client.get_workflow_handle(
        scoped_id(settings.temporal.id_scope, f"volume/{volume_id}")
    )
    running = await started(client, handle.id)

    second = asyncio.create_task(ops.attach(attach))
    detach = await ops.detach(DetachVolumeRequest(volume_id=volume_id, node_id=node))
    assert detach.code is Code.ABORTED, detach
    assert f"attach/{volume_id}/{node}" in detach.message and "pending" in detach.message
    expand = await ops.expand(
        ExpandVolumeRequest(volume_id=volume_id, capacity=CapacityRange(required_bytes=4 * GIB))
    )
    assert expand.code is Code.ABORTED, expand
    delete = await ops.delete(DeleteVolumeRequest(volume_id=volume_id))
    assert delete.code is Code.ABORTED, delete
    name = unique("pvc")
    create = asyncio.create_task(ops.create(CreateVolumeRequest(name=name)))
    await started(client, scoped_id(settings.temporal.id_scope, f"volume-create/{name}"))
    other_size = await ops.create(
        CreateVolumeRequest(name=name, capacity=CapacityRange(required_bytes=2 * GIB))
    )
    assert other_size.code is Code.ABORTED, other_size
    assert not first.done() and not second.done()

    async with make_worker(client, settings, kube):
        results = await asyncio.gather(first, second, create)
        joined, repeated, created = results
        assert joined.code is Code.OK and repeated.code is Code.OK, results
        assert joined.device == repeated.device
        assert created.code is Code.OK and created.volume is not None
        assert (await handle.describe()).run_id == running.run_id  # one run served both
        assert len(await asyncio.to_thread(attachments, ec2, volume_id)) == 1

        expand_to_4 = ExpandVolumeRequest(
            volume_id=volume_id, capacity=CapacityRange(required_bytes=4 * GIB)
        )
        assert (await ops.expand(expand_to_4)).code is Code.OK  # the volume is free again


async def test_volume_workflows_are_searchable(
    worker: Worker, client: Client, ops: VolumeOperations, settings: Settings, ec2: Any
) -> None:
    node = await asyncio.to_thread(launch_instance, ec2, "us-east-1a")
    volume_id = await asyncio.to_thread(make_volume, ec2, "us-east-1a")
    assert (await ops.attach(AttachVolumeRequest(volume_id=volume_id, node_id=node))).ok
    assert (await ops.detach(DetachVolumeRequest(volume_id=volume_id, node_id=node))).ok
    query = (
        f"CloudloopCluster='{settings.cluster_name}' AND CloudloopKind='Volume' "
        f"AND CloudloopName='{volume_id}'"
    )

    async def runs() -> list[str] | None:
        found = [wf.workflow_type async for wf in client.list_workflows(query)]
        return found if len(found) == 2 else None

    assert sorted(await eventually_async(runs, what="two volume workflows")) == [
        "AttachVolume",
        "DetachVolume",
    ]
