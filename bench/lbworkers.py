"""Scale-out: the 200-LB burst with 1, 2 and 4 ``cloudloop worker`` processes.

Each round has its own task queue, namespace and starter (:class:`ServiceStarter` in this
process, ``PARALLELISM`` syncs, as the ``loadbalancers`` module); ``n`` real worker processes
(production settings: the load-balancer queue's 50 activity slots each, 50 activities/s across
workers) poll it. One Service warms the workers up (the round starts once it has ingress), then
``FLEET`` Services are created at once → all have ``status.loadBalancer.ingress``.

- ``lb_200_burst_wall_s_<n>_workers``: that wall, for n = 1, 2, 4.
- ``lb_200_burst_speedup_2_workers`` / ``_4_workers``: the 1-worker wall over the n-worker one.
- ``lb_200_burst_cpu_s_<n>_workers``: CPU seconds the whole stack spent in the wall
  (:mod:`bench.cpu`): on 2 shared cores a second worker adds CPU, not cores. The per-process
  split (bench = starter + kube client, ``cli`` = the cloudloop workers, ``moto_ext`` = moto,
  ``aws_front``, Temporal, kube-apiserver) goes to stderr: moto is one process, its requests
  served under one interpreter lock, so its CPU seconds over the wall is how near one core the
  burst keeps the cloud.
- ``lb_200_burst_cloud_calls_<n>_workers``: AWS requests the front served in the burst (its own
  request count): the same work in every round.

Then the same burst in the shape users scale out for: the AWS front answers every call
``LATENCY_S`` late (a real endpoint's 100-300 ms, :func:`devstack.aws_front.set_latency`) and
each worker has ``CLOUD_SLOTS`` load-balancer activity slots, so one worker is bound by its own
slots while the cloud waits, not by the machine's CPU; ``LATENCY_FLEET`` (100) Services:
``lb_100_burst_wall_s_<n>_workers_cloud_latency``, ``..._cpu_s_...``, ``..._cloud_calls_...``
and ``lb_100_burst_speedup_<n>_workers_cloud_latency``.

Every round keeps the production per-queue rate (50 activities/s across all workers, a
server-side limit no replica count raises; 200 ensures take ≥ 4 s of it).

Rounds run 1, 2, 4 in that order: moto slows as it fills, so the later rounds meet the fuller
cloud (the speedups err low). The Services are left behind (the stack is thrown away).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.context import BenchContext
from bench.cpu import cpu_spent, process_cpu, stack_cpu_by_command
from bench.lbscale import Process
from bench.loadbalancer import FLEET, PARALLELISM, _has_ingress, _make_nodes, _make_world, _service
from cloudloop import codec
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import SERVICES, Resource
from cloudloop.settings import Domain, TaskQueueSettings
from devstack.aws_front import set_latency, stats
from devstack.csi_deployment import provider_env
from starters.loadbalancer import ServiceStarter

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
WORKERS = (1, 2, 4)
#: The cloud-latency rounds: each AWS answer this late (uniform), as a real endpoint answers.
LATENCY_S = (0.1, 0.3)
#: ... and each worker's load-balancer activity slots: modest, so one worker is slot-bound.
CLOUD_SLOTS = 5
#: ... and Services in that burst: half the production-shape burst, which keeps one worker
#: slot-bound (100 x ~11 calls x ~0.2 s over 5 slots: >= 44 s, twice the 2-worker floor) and the
#: three rounds at ~90 s together instead of ~240 s (200 Services): the whole bench's budget.
LATENCY_FLEET = 100


async def lb_worker_figures(ctx: BenchContext) -> dict[str, float]:
    scope = uuid.uuid4().hex[:8]
    cluster = f"bench-lbw-{scope}"
    settings = ctx.settings.model_copy(update={"cluster_name": cluster})
    driver = AwsDriver(AWS.section(settings))
    world = await asyncio.to_thread(_make_world, driver, cluster)
    await asyncio.to_thread(_make_nodes, ctx, scope, world)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-lbworkers-"))
    figures: dict[str, float] = {}
    endpoint = ctx.stack.aws_endpoint
    for fleet, suffix, slots in (
        (FLEET, "", None),
        (LATENCY_FLEET, "_cloud_latency", CLOUD_SLOTS),
    ):
        name = f"lb_{fleet}_burst"
        if slots is not None:
            set_latency(endpoint, *LATENCY_S)
        try:
            for count in WORKERS:
                wall, cpu, calls = await _round(ctx, settings, scope, count, log_dir, slots, fleet)
                figures[f"{name}_wall_s_{count}_workers{suffix}"] = wall
                figures[f"{name}_cpu_s_{count}_workers{suffix}"] = cpu
                figures[f"{name}_cloud_calls_{count}_workers{suffix}"] = calls
        finally:
            set_latency(endpoint)
        for count in WORKERS[1:]:
            figures[f"{name}_speedup_{count}_workers{suffix}"] = (
                figures[f"{name}_wall_s_1_workers{suffix}"]
                / figures[f"{name}_wall_s_{count}_workers{suffix}"]
            )
    return figures


def _cloud_calls(endpoint: str) -> int:
    """EC2 and ELB requests the front served since its last reset, whoever made them (equal
    counts across rounds show the rounds did the same work)."""
    requests = stats(endpoint)["requests"]
    return sum(
        n for key, n in requests.items() if key.split(":")[0] in ("ec2", "elasticloadbalancing")
    )


async def _round(
    ctx: BenchContext,
    settings: Settings,
    scope: str,
    count: int,
    log_dir: Path,
    slots: int | None,
    fleet: int,
) -> tuple[float, float, int]:
    """One burst of ``fleet`` Services with ``count`` workers (``slots`` load-balancer activity
    slots each, None: production's): its wall, the stack's CPU seconds in it and the AWS
    requests it made."""
    kube = ctx.kube
    shape = "l" if slots else "c"
    queue = f"bench-lbw-{scope}-{shape}{count}"
    namespace = f"bench-lbw-{scope}-{shape}{count}"
    queues = {domain: TaskQueueSettings().model_dump() for domain in Domain.ALL}
    if slots is not None:
        queues[Domain.LOAD_BALANCER]["max_concurrent_activities"] = slots
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
        **codec.process_env(settings.temporal.codec),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_DISCOVERY__ENABLED": "false",
        "CLOUDLOOP_TEMPORAL__QUEUES": json.dumps(queues),
    }
    workers = []
    for index in range(count):
        directory = log_dir / f"{shape}{count}-{index}"
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
        names = [f"f{i}" for i in range(fleet)]
        stats(ctx.stack.aws_endpoint, reset=True)
        cpu_before = stack_cpu_by_command()
        workers_before = [process_cpu(w.popen.pid) for w in workers]
        started = time.monotonic()
        with ThreadPoolExecutor(PARALLELISM) as pool:
            await asyncio.to_thread(lambda: list(pool.map(create, names)))
        await wait_ingress(names, 600)
        wall = time.monotonic() - started
        cpu_after = stack_cpu_by_command()
        workers_cpu = [
            process_cpu(w.popen.pid) - b for w, b in zip(workers, workers_before, strict=True)
        ]
        cpu = sum(cpu_after.values()) - sum(cpu_before.values())
        calls = _cloud_calls(ctx.stack.aws_endpoint)
        print(
            f"lb_{fleet}_burst {count} workers, slots {slots or 'production'}: wall {wall:.1f} s, "
            f"{calls} AWS calls, CPU s {cpu_spent(cpu_before, cpu_after)} (cli: the workers, "
            f"each {' '.join(f'{c:.2f}' for c in workers_cpu)}; moto_ext: moto; aws_front: "
            "the AWS front)",
            file=sys.stderr,
            flush=True,
        )
    finally:
        starter.stop()
        informers.stop()
        await asyncio.gather(task, return_exceptions=True)
        # All at once: each waits out its own graceful shutdown.
        await asyncio.gather(*(asyncio.to_thread(worker.stop) for worker in workers))
    return wall, cpu, calls
