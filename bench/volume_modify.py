"""ControllerModifyVolume on EBS through the workflow against the same calls made directly.

``modify_workflow_median_s``: median over N fresh gp3 volumes of request → the volume has
iops 4000 / throughput 200, through :class:`cloudloop.csi.operations.VolumeOperations` (the
``ModifyVolume`` workflow, its activity local first) with an in-process worker.
``modify_direct_median_s``: the activity's driver calls made directly in a thread (read, the
pending-modification read, ModifyVolume, reads until the volume has the parameters).
``modify_overhead_ratio``: the two medians divided. ``modify_cloud_calls_per_change``: EC2
calls per workflow modify, from the request counter. ``modify_repeat_modify_calls``: the
``ModifyVolume`` requests the AWS front saw when every change was asked for a second time
(goal 0: a volume that has its parameters spends no six-hour cooldown).
Samples alternate between the two paths, each on its own volume.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from bench.context import BenchContext
from bench.node import cloud_requests
from bench.overhead import overhead_ms
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.csi.operations import VolumeOperations
from cloudloop.messages.volume import Code, ModifyVolumeRequest
from cloudloop.settings import Domain
from devstack.aws_front import stats as front_stats
from workers.main import build_worker

SAMPLES = 10
ZONE = "us-east-1a"
PARAMETERS = {"iops": "4000", "throughput": "200"}


def _volumes(ec2: Any, count: int) -> list[str]:
    return [
        str(ec2.create_volume(AvailabilityZone=ZONE, Size=10, VolumeType="gp3")["VolumeId"])
        for _ in range(count)
    ]


def modify_directly(driver: AwsDriver, volume_id: str) -> None:
    """What the modify activity does, without Temporal."""
    volumes = driver.volumes
    volume = volumes.get_volume(volume_id)
    if not volumes.volume_changes(volume, PARAMETERS):
        return
    volumes.get_volume_modification(volume_id)  # none in progress
    volumes.modify_volume(volume, PARAMETERS)
    while True:
        volumes.get_volume_modification(volume_id)  # not failed
        if not volumes.volume_changes(volumes.get_volume(volume_id), PARAMETERS):
            return
        time.sleep(0.1)


def _front_modifies(ctx: BenchContext) -> int:
    return int(front_stats(ctx.stack.aws_endpoint)["requests"].get("ec2:ModifyVolume", 0))


async def volume_modify_figures(ctx: BenchContext) -> dict[str, float]:
    settings = ctx.settings
    driver = AwsDriver(AWS.section(settings))
    ec2 = driver.session.client("ec2")
    through_volumes = _volumes(ec2, SAMPLES + 1)
    direct_volumes = _volumes(ec2, SAMPLES + 1)
    ops = VolumeOperations.from_settings(ctx.client, settings, limits=driver.volumes)

    async def through_workflow(volume_id: str) -> float:
        started = time.monotonic()
        result = await ops.modify(ModifyVolumeRequest(volume_id=volume_id, parameters=PARAMETERS))
        elapsed = time.monotonic() - started
        if result.code is not Code.OK or result.cooldown_s:
            raise RuntimeError(f"modify {volume_id} failed: {result.code} {result.message}")
        return elapsed

    async def direct(volume_id: str) -> float:
        started = time.monotonic()
        await asyncio.to_thread(modify_directly, driver, volume_id)
        return time.monotonic() - started

    workflow_s: list[float] = []
    direct_s: list[float] = []
    calls = 0.0
    queue = settings.temporal.queue_for(Domain.VOLUME)
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
        modifies = _front_modifies(ctx)
        for volume_id in through_volumes:  # asked again: already done, nothing to spend
            await through_workflow(volume_id)
        repeated = _front_modifies(ctx) - modifies
    for volume_id in through_volumes + direct_volumes:
        ec2.delete_volume(VolumeId=volume_id)

    workflow_median = statistics.median(workflow_s)
    direct_median = statistics.median(direct_s)
    return {
        "modify_workflow_median_s": workflow_median,
        "modify_direct_median_s": direct_median,
        "modify_overhead_ratio": workflow_median / direct_median,
        **overhead_ms("modify", workflow_s, direct_s),
        "modify_cloud_calls_per_change": calls / SAMPLES,
        "modify_repeat_modify_calls": float(repeated),
    }
