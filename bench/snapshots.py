"""The CSI snapshot figures: CreateSnapshot through the controller against the same EBS calls made
directly, on AWS (moto behind the AWS front).

``snapshot_create_median_s``: median over N snapshots of one 1 GiB EBS volume: CreateSnapshot RPCs
to the controller (in this process) → ``VolumeOperations.create_snapshot`` → the
``CreateSnapshot`` workflow and its activity (tag lookup, source check, EC2 CreateSnapshot,
duplicate check) → the response, asked again every 0.1 s until ``ready_to_use`` (what
csi-snapshotter does with a pending snapshot).
``snapshot_create_direct_median_s``: the activity's own driver calls made directly in a thread
(DescribeSnapshots, DescribeVolumes, CreateSnapshot, DescribeSnapshots), then DescribeSnapshots
every 0.1 s until the snapshot is completed: the direct EBS CreateSnapshot and wait.
``snapshot_create_overhead_ratio``: the two medians divided (goal ≤ 1.3); samples alternate.
Every snapshot is deleted after its sample, outside the timings.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from pathlib import Path

import grpc

from bench.context import BenchContext
from bench.overhead import overhead_ms
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.models import SnapshotSpec, VolumeSpec
from cloudloop.cloud.registry import Settings
from cloudloop.csi.operations import VolumeOperations
from cloudloop.csi.server import controller_server
from cloudloop.csi.v1 import csi_pb2, csi_pb2_grpc
from cloudloop.settings import CsiSettings, Domain
from workers.main import build_worker

SAMPLES = 20
POLL_S = 0.1
ZONE = "us-east-1a"


def snapshot_directly(driver: AwsDriver, name: str, volume_id: str, cluster: str) -> str:
    """What the create activity does, then the wait until completed, without Temporal."""
    driver.snapshots.find_snapshot(name, cluster)
    driver.volumes.get_volume(volume_id)
    made = driver.snapshots.create_snapshot(
        SnapshotSpec(name=name, source_volume_id=volume_id, cluster=cluster, client_token=name)
    )
    driver.snapshots.find_snapshot(name, cluster)
    while not driver.snapshots.get_snapshot(made.id).ready:
        time.sleep(POLL_S)
    return made.id


def source_volume(driver: AwsDriver, cluster: str) -> str:
    name = f"bench-snapshot-source-{uuid.uuid4().hex[:8]}"
    created = driver.volumes.create_volume(
        VolumeSpec(name=name, size_gib=1, zone=ZONE, cluster=cluster, client_token=name)
    )
    while driver.volumes.get_volume(created.id).state != "available":
        time.sleep(POLL_S)
    return created.id


async def snapshot_figures(ctx: BenchContext) -> dict[str, float]:
    settings: Settings = ctx.settings.model_copy(
        update={
            "csi": CsiSettings(driver_name=f"bench-{uuid.uuid4().hex[:6]}.csi.cloudloop.io"),
            "cluster_name": f"bench-snap-{uuid.uuid4().hex[:6]}",
            "temporal": ctx.settings.temporal.model_copy(
                update={"task_queue": f"bench-snap-{uuid.uuid4().hex[:6]}"}
            ),
        }
    )
    cluster = settings.cluster_name
    driver = AwsDriver(AWS.section(settings))
    volume_id = await asyncio.to_thread(source_volume, driver, cluster)
    server = controller_server(
        VolumeOperations.from_settings(ctx.client, settings), settings, driver
    )
    socket = Path(f"/tmp/cloudloop-bench-snap-{uuid.uuid4().hex[:8]}.sock")
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    through_s: list[float] = []
    direct_s: list[float] = []
    taken: list[str] = []
    try:
        async with (
            build_worker(
                ctx.client,
                settings,
                driver=driver,
                kube=ctx.kube,
                task_queue=settings.temporal.queue_for(Domain.VOLUME),
            ),
            grpc.aio.insecure_channel(f"unix://{socket}") as channel,
        ):
            controller = csi_pb2_grpc.ControllerStub(channel)

            async def through() -> float:
                request = csi_pb2.CreateSnapshotRequest(
                    name=f"snapshot-{uuid.uuid4()}", source_volume_id=volume_id
                )
                started = time.monotonic()
                while True:
                    response = await controller.CreateSnapshot(request)
                    if response.snapshot.ready_to_use:
                        break
                    await asyncio.sleep(POLL_S)
                elapsed = time.monotonic() - started
                taken.append(response.snapshot.snapshot_id)
                return elapsed

            async def direct() -> float:
                name = f"snapshot-{uuid.uuid4()}"
                started = time.monotonic()
                made = await asyncio.to_thread(snapshot_directly, driver, name, volume_id, cluster)
                elapsed = time.monotonic() - started
                taken.append(made)
                return elapsed

            await through()  # warm-up: worker caches, boto3 clients, the channel
            await direct()
            for _ in range(SAMPLES):
                through_s.append(await through())
                direct_s.append(await direct())
    finally:
        await server.stop(1)
        socket.unlink(missing_ok=True)
        for snapshot_id in taken:
            await asyncio.to_thread(driver.snapshots.delete_snapshot, snapshot_id)
        await asyncio.to_thread(driver.volumes.delete_volume, volume_id)
    through_median, direct_median = statistics.median(through_s), statistics.median(direct_s)
    return {
        "snapshot_create_median_s": through_median,
        "snapshot_create_direct_median_s": direct_median,
        "snapshot_create_overhead_ratio": through_median / direct_median,
        **overhead_ms("snapshot_create", through_s, direct_s),
    }
