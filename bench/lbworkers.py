"""Scale-out: the 200-LB burst with 1, 2 and 4 ``cloudloop worker`` processes.

Each round has its own task queue, namespace and starter (:class:`ServiceStarter` in this
process, ``PARALLELISM`` syncs, as the ``loadbalancers`` module); ``n`` real worker processes
(production settings: the load-balancer queue's 50 activity slots each, 50 activities/s across
workers) poll it. One Service warms the workers up (the round starts once it has ingress), then
``FLEET`` Services are created at once → all have ``status.loadBalancer.ingress``.

- ``lb_200_burst_wall_s_<n>_workers``: that wall, for n = 1, 2, 4.
- ``lb_200_burst_speedup_2_workers`` / ``_4_workers``: the 1-worker wall over the n-worker one.
- ``lb_200_burst_cpu_s_<n>_workers``: CPU seconds the whole stack spent in the wall
  (:mod:`bench.cpu`): on 2 shared cores a second worker adds CPU, not cores.

Rounds run 1, 2, 4 in that order: moto slows as it fills, so the later rounds meet the fuller
cloud (the speedups err low). The Services are left behind (the stack is thrown away).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.context import BenchContext
from bench.cpu import stack_cpu_by_command
from bench.lbscale import Process
from bench.loadbalancer import FLEET, PARALLELISM, _has_ingress, _make_nodes, _make_world, _service
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import SERVICES, Resource
from cloudloop.settings import Domain
from devstack.csi_deployment import provider_env
from starters.loadbalancer import ServiceStarter

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
WORKERS = (1, 2, 4)


async def lb_worker_figures(ctx: BenchContext) -> dict[str, float]:
    scope = uuid.uuid4().hex[:8]
    cluster = f"bench-lbw-{scope}"
    settings = ctx.settings.model_copy(update={"cluster_name": cluster})
    driver = AwsDriver(AWS.section(settings))
    world = await asyncio.to_thread(_make_world, driver, cluster)
    await asyncio.to_thread(_make_nodes, ctx, scope, world)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-lbworkers-"))
    figures: dict[str, float] = {}
    for count in WORKERS:
        wall, cpu = await _round(ctx, settings, scope, count, log_dir)
        figures[f"lb_200_burst_wall_s_{count}_workers"] = wall
        figures[f"lb_200_burst_cpu_s_{count}_workers"] = cpu
    for count in WORKERS[1:]:
        figures[f"lb_200_burst_speedup_{count}_workers"] = (
            figures["lb_200_burst_wall_s_1_workers"]
            / figures[f"lb_200_burst_wall_s_{count}_workers"]
        )
    return figures


async def _round(
    ctx: BenchContext, settings: Settings, scope: str, count: int, log_dir: Path
) -> tuple[float, float]:
    kube = ctx.kube
    queue = f"bench-lbw-{scope}-{count}"
    namespace = f"bench-lbw-{scope}-{count}"
    kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    env = {
        **os.environ,
        **provider_env(settings),
        "CLOUDLOOP_PROVIDER": "aws",
        "CLOUDLOOP_CLUSTER_NAME": settings.cluster_name,
        "CLOUDLOOP_KUBECONFIG": str(settings.kubeconfig),
        "CLOUDLOOP_TEMPORAL__ADDRESS": settings.temporal.address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": queue,
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "5",
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_DISCOVERY__ENABLED": "false",
    }
    workers = []
    for index in range(count):
        directory = log_dir / f"{count}-{index}"
        directory.mkdir()
        workers.append(Process("worker", env, directory))
    informers = Informers(kube)
    temporal = settings.temporal.model_copy(update={"task_queue": queue})
    starter = ServiceStarter(
        kube,
        ctx.client,
        services=informers.services(namespace=namespace),
        nodes=informers.nodes(label_selector=f"cloudloop-bench-lb={scope}"),
        task_queue=temporal.queue_for(Domain.LOAD_BALANCER),
        cluster=settings.cluster_name,
        provider=settings.provider,
        concurrency=PARALLELISM,
    )
    store = starter.services.store

    def create(name: str) -> None:
        kube.create(SERVICES, _service(name), namespace)

    async def wait_ingress(names: list[str], timeout: float) -> None:
        keys = [f"{namespace}/{name}" for name in names]
        deadline = time.monotonic() + timeout
        while not all(_has_ingress(store.get(key)) for key in keys):
            if time.monotonic() > deadline:
                done = sum(_has_ingress(store.get(key)) for key in keys)
                raise TimeoutError(f"{count} workers: {done} of {len(keys)} with ingress")
            await asyncio.sleep(0.01)

    task = asyncio.create_task(starter.run())
    try:
        # Every worker polls before the burst: one warm-up Service per worker.
        warm = [f"warm-{i}" for i in range(count)]
        for name in warm:
            await asyncio.to_thread(create, name)
        await wait_ingress(warm, 300)
        names = [f"f{i}" for i in range(FLEET)]
        cpu_before = sum(stack_cpu_by_command().values())
        started = time.monotonic()
        with ThreadPoolExecutor(PARALLELISM) as pool:
            await asyncio.to_thread(lambda: list(pool.map(create, names)))
        await wait_ingress(names, 600)
        wall = time.monotonic() - started
        cpu = sum(stack_cpu_by_command().values()) - cpu_before
    finally:
        starter.stop()
        informers.stop()
        await asyncio.gather(task, return_exceptions=True)
        for worker in workers:
            await asyncio.to_thread(worker.stop)
    return wall, cpu
