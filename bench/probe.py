"""The foundation's round trip: CloudProbe created → Ready, against the same calls made directly.

``probe_workflow_median_s``: median over N probes of object created → ``Ready`` condition set,
through informer → starter → Temporal → activities (boto3 to moto, status patch, Event).
``probe_direct_median_s``: the same cloud call, status patch and Event made directly.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

from bench.context import BenchContext
from bench.overhead import overhead_ms
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.kube.bodies import CloudProbe
from cloudloop.kube.conditions import get_condition, set_condition
from cloudloop.kube.events import record_event
from cloudloop.kube.resources import CLOUD_PROBES, ObjectRef, Resource
from starters.probe import CloudProbeStarter
from workers.main import build_worker

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SAMPLES = 10


async def probe_overhead(ctx: BenchContext) -> dict[str, float]:
    kube, settings = ctx.kube, ctx.settings
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    driver = AwsDriver(AWS.section(settings))
    starter = CloudProbeStarter(
        kube,
        ctx.client,
        task_queue=settings.temporal.task_queue,
        cluster=settings.cluster_name,
        namespace=namespace,
    )
    worker = build_worker(ctx.client, settings, driver=driver, kube=kube)

    def create(name: str) -> CloudProbe:
        return kube.create(
            CLOUD_PROBES,
            {"metadata": {"name": name, "namespace": namespace}, "spec": {"provider": "aws"}},
            namespace,
        )

    def ready(name: str) -> bool:
        return get_condition(kube.get(CLOUD_PROBES, name, namespace) or {}, "Ready") is not None

    through_workflow: list[float] = []
    async with worker:
        task = asyncio.create_task(starter.run())
        await asyncio.to_thread(create, "warmup")
        while not await asyncio.to_thread(ready, "warmup"):
            await asyncio.sleep(0.01)
        for i in range(SAMPLES):
            started = time.monotonic()
            await asyncio.to_thread(create, f"p{i}")
            while not await asyncio.to_thread(ready, f"p{i}"):
                await asyncio.sleep(0.005)
            through_workflow.append(time.monotonic() - started)
        starter.stop()
        task.cancel()

    direct: list[float] = []
    for i in range(SAMPLES):
        started = time.monotonic()
        obj = await asyncio.to_thread(create, f"d{i}")
        ref = ObjectRef.of(CLOUD_PROBES, obj)
        zones = await asyncio.to_thread(driver.discovery.zones)
        current = await asyncio.to_thread(kube.get, CLOUD_PROBES, ref.name, namespace) or {}
        conditions = set_condition(
            (current.get("status") or {}).get("conditions"),
            type="Ready",
            status=True,
            reason="CloudReachable",
            message=f"{len(zones)} zones",
        )
        await asyncio.to_thread(
            kube.patch,
            CLOUD_PROBES,
            ref.name,
            {
                "status": {
                    "zones": [z.name for z in zones],
                    "conditions": conditions,
                    "observedGeneration": 1,
                }
            },
            namespace,
            subresource="status",
        )
        await asyncio.to_thread(
            record_event, kube, ref, type="Normal", reason="Probed", message="direct"
        )
        direct.append(time.monotonic() - started)
    kube.delete(NAMESPACES, namespace)

    workflow_median = statistics.median(through_workflow)
    direct_median = statistics.median(direct)
    return {
        "probe_workflow_median_s": workflow_median,
        "probe_direct_median_s": direct_median,
        "probe_overhead_ratio": workflow_median / direct_median,
        **overhead_ms("probe", through_workflow, direct),
    }
