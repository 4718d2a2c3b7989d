"""Volume attach through the workflow against the same EC2 calls made directly, in one run.

``attach_workflow_median_s``: median over N volumes of request → attached, through
:class:`cloudloop.csi.operations.VolumeOperations` (start or join the workflow, memo check, one
heartbeating activity, result) with an in-process worker.
``attach_direct_median_s``: the activity's own driver calls made directly in a thread
(DescribeVolumes, DescribeInstances, AttachVolume, DescribeVolumes until ``attached``).
``attach_overhead_ratio``: the two medians divided (goal ≤ 1.3).
``attach_cloud_calls_per_attach``: EC2 calls per workflow attach, from the request counter.
``attach_step_<step>_median_s``: where the workflow path's time goes (:mod:`bench.breakdown`).
Samples alternate between the two paths, each on its own instance, so drift hits both alike.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from bench.breakdown import Sample, breakdown, cloud_seconds
from bench.context import BenchContext
from bench.node import cloud_requests
from bench.overhead import overhead_ms
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.csi.operations import VolumeOperations
from cloudloop.messages.scope import scoped_id
from cloudloop.messages.volume import AttachVolumeRequest, Code, volume_workflow_id
from cloudloop.settings import Domain
from devstack.backends.aws import launch_instance
from workers.main import build_worker

SAMPLES = 20
ZONE = "us-east-1a"


def _instance(ec2: Any) -> str:
    return launch_instance(ec2, ZONE)


def _volumes(ec2: Any, count: int) -> list[str]:
    return [str(ec2.create_volume(AvailabilityZone=ZONE, Size=1)["VolumeId"]) for _ in range(count)]


def attach_directly(driver: AwsDriver, volume_id: str, instance_id: str) -> str:
    """What the attach activity does, without Temporal: read, attach, read until attached."""
    volume = driver.volumes.get_volume(volume_id)
    driver.volumes.attach_volume(volume, instance_id)
    while True:
        current = driver.volumes.get_volume(volume_id)
        for attachment in current.attachments:
            if attachment.instance_id == instance_id and attachment.state == "attached":
                return attachment.device
        time.sleep(0.1)


async def volume_figures(ctx: BenchContext) -> dict[str, float]:
    settings = ctx.settings
    driver = AwsDriver(AWS.section(settings))
    ec2 = driver.session.client("ec2")
    through_node, direct_node = _instance(ec2), _instance(ec2)
    through_volumes = _volumes(ec2, SAMPLES + 1)
    direct_volumes = _volumes(ec2, SAMPLES + 1)
    ops = VolumeOperations.from_settings(ctx.client, settings)

    samples: list[Sample] = []

    async def through_workflow(volume_id: str) -> float:
        requested, cloud_before = time.time(), cloud_seconds()
        started = time.monotonic()
        result = await ops.attach(AttachVolumeRequest(volume_id=volume_id, node_id=through_node))
        elapsed = time.monotonic() - started
        if result.code is not Code.OK:
            raise RuntimeError(f"attach {volume_id} failed: {result.code} {result.message}")
        samples.append(
            Sample(
                workflow_id=scoped_id(settings.temporal.id_scope, volume_workflow_id(volume_id)),
                requested=requested,
                seen=requested + elapsed,
                cloud_s=cloud_seconds() - cloud_before,
            )
        )
        return elapsed

    async def direct(volume_id: str) -> float:
        started = time.monotonic()
        await asyncio.to_thread(attach_directly, driver, volume_id, direct_node)
        return time.monotonic() - started

    workflow_s: list[float] = []
    direct_s: list[float] = []
    calls = 0.0
    queue = settings.temporal.queue_for(Domain.VOLUME)  # where VolumeOperations starts them
    async with build_worker(ctx.client, settings, driver=driver, kube=ctx.kube, task_queue=queue):
        await through_workflow(through_volumes[0])  # warm-up: worker caches, boto3 clients
        await direct(direct_volumes[0])
        for through_volume, direct_volume in zip(
            through_volumes[1:], direct_volumes[1:], strict=True
        ):
            before = cloud_requests()
            workflow_s.append(await through_workflow(through_volume))
            calls += cloud_requests() - before
            direct_s.append(await direct(direct_volume))
    steps = await breakdown(ctx.client, "attach", samples[1:])

    workflow_median = statistics.median(workflow_s)
    direct_median = statistics.median(direct_s)
    return {
        "attach_workflow_median_s": workflow_median,
        "attach_direct_median_s": direct_median,
        "attach_overhead_ratio": workflow_median / direct_median,
        **overhead_ms("attach", workflow_s, direct_s),
        "attach_cloud_calls_per_attach": calls / SAMPLES,
        **steps,
    }
