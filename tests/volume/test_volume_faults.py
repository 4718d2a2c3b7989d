"""Volume workflows survive a worker killed mid-operation (SIGKILL, real worker processes).

The first worker talks to moto through a :class:`HoldingProxy` that holds back the answer to one
EC2 call, so the kill lands at a known point: the cloud made the change, the worker never heard.
A fresh worker process on the same task queue must then converge without repeating the change:
one attachment after attach, none after detach, one volume after create.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client

from cloudloop.cloud.registry import Settings
from cloudloop.csi.operations import VolumeOperations
from cloudloop.messages.scope import scoped_id
from cloudloop.messages.volume import (
    AttachVolumeRequest,
    Code,
    CreateVolumeRequest,
    DetachVolumeRequest,
    Topology,
)
from devstack.backends.aws import launch_instance
from devstack.local import LocalStack
from tests.helpers import eventually, eventually_async
from tests.holding_proxy import HoldingProxy
from tests.support.workers import Workers, aws_env, worker_env
from tests.volume.support import (
    attachments,
    instance_devices,
    make_volume,
    unique,
    volumes_named,
)

pytestmark = [pytest.mark.stack, pytest.mark.fault]


@pytest.fixture
def proxy(stack: LocalStack) -> Iterator[HoldingProxy]:
    with HoldingProxy(stack.moto_endpoint) as running:
        yield running


@pytest.fixture
def through_proxy(settings: Settings, stack: LocalStack, proxy: HoldingProxy) -> dict[str, str]:
    """A worker's environment with EC2 behind the holding proxy."""
    return worker_env(settings, stack, aws_env(proxy.url), graceful_shutdown_s=None)


async def last_activity_attempt(client: Client, workflow_id: str) -> int:
    attempts = [
        event.activity_task_started_event_attributes.attempt
        async for event in client.get_workflow_handle(workflow_id).fetch_history_events()
        if event.HasField("activity_task_started_event_attributes")
    ]
    return attempts[-1]


async def test_worker_killed_during_attach(
    workers: Workers,
    proxy: HoldingProxy,
    through_proxy: dict[str, str],
    ops: VolumeOperations,
    ec2: Any,
) -> None:
    node = await asyncio.to_thread(launch_instance, ec2, "us-east-1a")
    volume_id = await asyncio.to_thread(make_volume, ec2, "us-east-1a")
    held = proxy.hold("AttachVolume")
    first = await asyncio.to_thread(workers.start, through_proxy)

    attach = asyncio.create_task(ops.attach(AttachVolumeRequest(volume_id=volume_id, node_id=node)))
    await eventually(held.reached.is_set, what="AttachVolume reached moto")
    (made,) = await asyncio.to_thread(attachments, ec2, volume_id)
    assert made["InstanceId"] == node
    first.kill()  # SIGKILL: no graceful shutdown, no last heartbeat

    await asyncio.to_thread(workers.start, through_proxy)
    result = await asyncio.wait_for(attach, 120)
    assert result.code is Code.OK, result.message
    assert result.device == made["Device"]
    (attachment,) = await asyncio.to_thread(attachments, ec2, volume_id)
    assert (attachment["InstanceId"], attachment["State"]) == (node, "attached")
    mapped = await asyncio.to_thread(instance_devices, ec2, node)
    assert [d for d, v in mapped.items() if v == volume_id] == [result.device]
    assert proxy.actions().count("AttachVolume") == 1  # the retry found it, never re-attached
    assert await last_activity_attempt(ops.client, result.workflow_id) >= 2


async def test_worker_killed_during_detach(
    workers: Workers,
    proxy: HoldingProxy,
    through_proxy: dict[str, str],
    ops: VolumeOperations,
    ec2: Any,
) -> None:
    node = await asyncio.to_thread(launch_instance, ec2, "us-east-1a")
    volume_id = await asyncio.to_thread(make_volume, ec2, "us-east-1a")
    await asyncio.to_thread(
        ec2.attach_volume, VolumeId=volume_id, InstanceId=node, Device="/dev/xvdba"
    )
    held = proxy.hold("DetachVolume")
    first = await asyncio.to_thread(workers.start, through_proxy)

    detach = asyncio.create_task(ops.detach(DetachVolumeRequest(volume_id=volume_id, node_id=node)))
    await eventually(held.reached.is_set, what="DetachVolume reached moto")
    first.kill()  # SIGKILL: no graceful shutdown, no last heartbeat

    await asyncio.to_thread(workers.start, through_proxy)
    result = await asyncio.wait_for(detach, 120)
    assert result.code is Code.OK, result.message
    assert await asyncio.to_thread(attachments, ec2, volume_id) == []
    assert volume_id not in (await asyncio.to_thread(instance_devices, ec2, node)).values()
    assert await last_activity_attempt(ops.client, result.workflow_id) >= 2


async def test_crashed_create_adopts_its_volume(
    workers: Workers,
    through_proxy: dict[str, str],
    proxy: HoldingProxy,
    ops: VolumeOperations,
    ec2: Any,
    settings: Settings,
) -> None:
    """Killed before it learned the new volume's ID: the retry finds the volume by its tags."""
    name = unique("pvc")
    held = proxy.hold("CreateVolume")
    first = await asyncio.to_thread(workers.start, through_proxy)

    create = asyncio.create_task(
        ops.create(CreateVolumeRequest(name=name, topology=Topology(requisite=["us-east-1b"])))
    )
    await eventually(held.reached.is_set, what="CreateVolume reached moto")
    (made,) = await asyncio.to_thread(volumes_named, ec2, settings.cluster_name, name)
    first.kill()  # SIGKILL: no graceful shutdown, no last heartbeat

    await asyncio.to_thread(workers.start, through_proxy)
    result = await asyncio.wait_for(create, 120)
    assert result.code is Code.OK, result.message
    assert result.volume is not None and result.volume.id == made["VolumeId"]
    found = await asyncio.to_thread(volumes_named, ec2, settings.cluster_name, name)
    assert [v["VolumeId"] for v in found] == [made["VolumeId"]]
    assert proxy.actions().count("CreateVolume") == 1


async def test_crashed_create_resumes_from_its_heartbeat(
    workers: Workers,
    through_proxy: dict[str, str],
    proxy: HoldingProxy,
    ops: VolumeOperations,
    client: Client,
    ec2: Any,
    settings: Settings,
) -> None:
    """Killed while waiting for ``available``: the retry takes the volume ID from the heartbeat
    details and goes straight back to waiting (no tag lookup, no second create)."""
    name = unique("pvc")
    held = proxy.hold("DescribeVolumes", when=lambda params: "VolumeId.1" in params)
    first = await asyncio.to_thread(workers.start, through_proxy)

    create = asyncio.create_task(ops.create(CreateVolumeRequest(name=name)))
    await eventually(held.reached.is_set, what="the wait for available reached moto")
    volume_id = held.params["VolumeId.1"]

    async def heartbeat_has_volume() -> bool:
        description = await client.get_workflow_handle(
            scoped_id(settings.temporal.id_scope, f"volume-create/{name}")
        ).describe()
        codec = client.data_converter.payload_codec  # the raw description is still encrypted
        for pending in description.raw_description.pending_activities:
            payloads = list(pending.heartbeat_details.payloads)
            for payload in await codec.decode(payloads) if codec else payloads:
                if json.loads(payload.data).get("volume_id") == volume_id:
                    return True
        return False

    await eventually_async(heartbeat_has_volume, what="the volume ID in the heartbeat details")
    first.kill()  # SIGKILL: no graceful shutdown, no last heartbeat
    seen_before_restart = len(proxy.requests)

    await asyncio.to_thread(workers.start, through_proxy)
    result = await asyncio.wait_for(create, 120)
    assert result.code is Code.OK, result.message
    assert result.volume is not None and result.volume.id == volume_id
    after_restart = proxy.requests[seen_before_restart:]
    first_read = after_restart[0]  # resumed: the volume read by its ID, no tag lookup
    assert (first_read.get("Action"), first_read.get("VolumeId.1")) == (
        "DescribeVolumes",
        volume_id,
    )
    assert "CreateVolume" not in [p.get("Action") for p in after_restart]
    found = await asyncio.to_thread(volumes_named, ec2, settings.cluster_name, name)
    assert [v["VolumeId"] for v in found] == [volume_id]
