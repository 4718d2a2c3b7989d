"""A burst of 1,000 volumes through the CSI controller and the ``CreateVolume`` workflow (moto).

- ``pvc_1000_burst_wall_s``: 1,000 CreateVolume RPCs sent at once to the CSI controller (in
  this process, as external-provisioner sends one per PVC) → ``VolumeOperations.create`` →
  one ``CreateVolume`` workflow each (worker in this process, production settings) → every
  response. The scheduler and external-provisioner are not in this wall (``pvc_bound_median_s``
  times them for one PVC); each request is the one a PVC makes.
- ``pvc_1000_burst_duplicates``: EBS volumes in moto carrying the burst's ``CSIVolumeName`` tags,
  minus the distinct names (goal 0: the workflow ID and the client token make one volume a name).
- ``pvc_1000_burst_cloud_calls_per_volume``: AWS requests of the burst ÷ 1,000.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import grpc

from bench.context import BenchContext
from bench.csi import _request
from bench.node import cloud_requests
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.volumes import CSI_NAME_TAG
from cloudloop.csi.operations import VolumeOperations
from cloudloop.csi.server import controller_server
from cloudloop.csi.v1 import csi_pb2_grpc
from cloudloop.settings import CsiSettings, Domain
from workers.main import build_worker

BURST = 1000


def _volume_names(driver: AwsDriver, cluster: str) -> Counter[str]:
    """``CSIVolumeName`` → how many volumes of ``cluster`` carry it (every page)."""
    names: Counter[str] = Counter()
    pages = driver.session.client("ec2").get_paginator("describe_volumes")
    for page in pages.paginate(
        Filters=[{"Name": "tag-key", "Values": [f"kubernetes.io/cluster/{cluster}"]}],
        PaginationConfig={"PageSize": 500},
    ):
        for volume in page.get("Volumes", []):
            tags = {t["Key"]: t["Value"] for t in volume.get("Tags", [])}
            if CSI_NAME_TAG in tags:
                names[tags[CSI_NAME_TAG]] += 1
    return names


async def pvc_burst_figures(ctx: BenchContext) -> dict[str, float]:
    scope = uuid.uuid4().hex[:6]
    settings = ctx.settings.model_copy(
        update={
            "csi": CsiSettings(driver_name=f"bench-{scope}.csi.cloudloop.io"),
            "cluster_name": f"bench-pvcburst-{scope}",
            "temporal": ctx.settings.temporal.model_copy(
                update={"task_queue": f"bench-pvcburst-{scope}"}
            ),
        }
    )
    driver = AwsDriver(AWS.section(settings))
    server = controller_server(
        VolumeOperations.from_settings(ctx.client, settings), settings, driver
    )
    socket = Path(f"/tmp/cloudloop-bench-pvcburst-{scope}.sock")
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    names = [f"pvc-{uuid.uuid4()}" for _ in range(BURST)]
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
            await controller.CreateVolume(_request(f"warm-{scope}"))  # worker caches, clients
            before = cloud_requests()
            started = time.monotonic()

            async def create(name: str) -> Any:
                # external-provisioner retries a failed or timed-out CreateVolume with the
                # same name; so does this burst, until the volume is answered.
                while True:
                    try:
                        return await controller.CreateVolume(_request(name), timeout=300)
                    except grpc.aio.AioRpcError as exc:
                        if time.monotonic() - started > 900:
                            raise
                        if exc.code() not in (
                            grpc.StatusCode.UNKNOWN,  # a Temporal RPC timed out in the burst
                            grpc.StatusCode.DEADLINE_EXCEEDED,
                            grpc.StatusCode.ABORTED,
                            grpc.StatusCode.UNAVAILABLE,
                            grpc.StatusCode.RESOURCE_EXHAUSTED,
                        ):
                            raise
                        await asyncio.sleep(1.0)

            answers = await asyncio.gather(*(create(n) for n in names))
            wall = time.monotonic() - started
            calls = cloud_requests() - before
    finally:
        await server.stop(1)
        socket.unlink(missing_ok=True)
    counted = await asyncio.to_thread(_volume_names, driver, settings.cluster_name)
    burst = {n: counted.get(n, 0) for n in names}
    missing = [n for n, c in burst.items() if c == 0]
    if missing or len({a.volume.volume_id for a in answers}) != BURST:
        raise AssertionError(f"{len(missing)} of {BURST} volumes missing, or IDs shared")
    return {
        "pvc_1000_burst_wall_s": wall,
        "pvc_1000_burst_duplicates": float(sum(burst.values()) - BURST),
        "pvc_1000_burst_cloud_calls_per_volume": calls / BURST,
    }
