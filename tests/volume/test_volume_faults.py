"""Volume workflows survive a worker killed mid-operation (SIGKILL, real worker processes).

The first worker talks to moto through a :class:`HoldingProxy` that holds back the answer to one
EC2 call, so the kill lands at a known point: the cloud made the change, the worker never heard.
A fresh worker process on the same task queue must then converge without repeating the change:
one attachment after attach, none after detach, one volume after create. The kill lands in the
local first attempt (its workflow task times out, the next worker runs it again), or, for a
volume that stays ``creating``, in the heartbeating activity the local attempt handed over to.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client

from activities.volume import LOCAL_WAIT_S
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
from devstack.aws_front import ec2_lifecycle
from devstack.backends.aws import launch_instance
from devstack.local import LocalStack
from tests.helpers import eventually, eventually_async
from tests.holding_proxy import HoldingProxy
from tests.support.workers import Workers, aws_env, worker_env
from tests.volume.support import (
    attachments,
    instance_devices,
    make_volume,
    ran_again_after_the_kill,
    raw_history_text,
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
    assert await ran_again_after_the_kill(ops.client, result.workflow_id)


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
    assert await ran_again_after_the_kill(ops.client, result.workflow_id)


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


#: Longer than the local attempt's wait (``LOCAL_WAIT_S``), short enough for the test.
CREATING_S = LOCAL_WAIT_S + 7


@pytest.fixture
def slow_creates(stack: LocalStack) -> Iterator[None]:
    """New EBS volumes stay ``creating`` for ``CREATING_S`` (moto's lifecycle, reset after)."""
    ec2_lifecycle(stack.moto_endpoint, volume_creating_s=CREATING_S)
    try:
        yield
    finally:
        ec2_lifecycle(stack.moto_endpoint)


@pytest.mark.usefixtures("slow_creates")
async def test_crashed_create_resumes_from_its_heartbeat(
    workers: Workers,
    through_proxy: dict[str, str],
    proxy: HoldingProxy,
    ops: VolumeOperations,
    client: Client,
    ec2: Any,
    settings: Settings,
    stack: LocalStack,
) -> None:
    """A volume that stays ``creating``: the local attempt hands the wait over with the volume
    ID, the heartbeating activity heartbeats it; killed there, the retry takes the ID from the
    heartbeat details and goes straight back to waiting (no tag lookup, no second create)."""
    name = unique("pvc")
    first = await asyncio.to_thread(workers.start, through_proxy)
    create = asyncio.create_task(ops.create(CreateVolumeRequest(name=name)))
    [made] = await eventually(
        lambda: volumes_named(ec2, settings.cluster_name, name) or None, what="the volume made"
    )
    volume_id = made["VolumeId"]

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
    # The hand-over's failure (it names the volume) is encrypted like every payload.
    types, raw = await raw_history_text(stack.temporal_address, result.workflow_id)
    assert "EVENT_TYPE_MARKER_RECORDED" in types and volume_id not in raw
