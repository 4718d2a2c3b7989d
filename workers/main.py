"""The ``cloudloop worker`` process: a Temporal worker per task queue, one per domain.

Each domain (load balancers, machines, volumes, drains) has its own task queue
(``<task_queue>-<domain>``) with its own activity slots and activity rate
(``temporal.queues.<domain>``), so a drain storm never starves machine provisioning and no
domain floods the cloud API for the others. The general queue (``task_queue``) carries the cloud
probes and registers every workflow type and activity, so runs started before the split (long
lives: load balancers, machines) go on where they were started.

Before polling, the worker claims every queue of its set for its cluster
(:mod:`cloudloop.claim`): a queue another cluster serves makes it exit with an error naming
both, and a claim lost while running (re-checked every minute) stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.budget import LocalBudget
from activities.cloud import CloudActivities
from activities.kube import KubeActivities
from activities.layout import LayoutActivities
from activities.layout_cluster import ClusterResourceActivities
from activities.layout_converge import ConvergeActivities
from activities.loadbalancer import LoadBalancerActivities
from activities.machine import MachineActivities
from activities.termination import DrainActivities
from activities.volume import VolumeActivities
from cloudloop import temporal
from cloudloop.claim import ClaimRefused, for_process
from cloudloop.cloud.driver import Capability, CloudDriver, part_or_unsupported
from cloudloop.cloud.registry import Settings, provider_for
from cloudloop.kube.api import Kube
from cloudloop.metrics import MetricsServer
from cloudloop.metrics_auth import protect_metrics
from cloudloop.net import free_port
from cloudloop.settings import Domain
from workflows.claim import ClusterClaimWorkflow
from workflows.layout import LAYOUT_WORKFLOWS
from workflows.layout_converge import CONVERGE_WORKFLOWS
from workflows.loadbalancer import LoadBalancerWorkflow
from workflows.machine import MachineWorkflow
from workflows.probe import CloudProbeWorkflow
from workflows.termination import DRAIN_WORKFLOWS
from workflows.volume import VOLUME_WORKFLOWS

log = logging.getLogger(__name__)

#: The workflows of each domain's task queue.
DOMAIN_WORKFLOWS: dict[str, list[type]] = {
    Domain.LOAD_BALANCER: [LoadBalancerWorkflow],
    Domain.MACHINE: [MachineWorkflow],
    Domain.VOLUME: list(VOLUME_WORKFLOWS),
    Domain.DRAIN: list(DRAIN_WORKFLOWS),
}
#: The general queue's workflows: the probes, the layouts (``cloudloop layout``) and the queue
#: claims, then all.
WORKFLOWS: list[type] = [
    CloudProbeWorkflow,
    *LAYOUT_WORKFLOWS,
    *CONVERGE_WORKFLOWS,
    ClusterClaimWorkflow,
]
for _workflows in DOMAIN_WORKFLOWS.values():
    WORKFLOWS += _workflows


def build_worker(
    client: Client,
    settings: Settings,
    *,
    driver: CloudDriver,
    kube: Kube,
    task_queue: str | None = None,
) -> Worker:
    """One worker with every workflow and activity on ``task_queue`` (default: the general
    queue); tests and single-queue set-ups use it."""
    return temporal.make_worker(
        client,
        task_queue or settings.temporal.task_queue,
        workflows=WORKFLOWS,
        activities=all_activities(settings, driver, kube),
        graceful_shutdown_s=settings.temporal.graceful_shutdown_s,
        max_concurrent_activities=settings.temporal.max_concurrent_activities,
        poller_autoscaling=settings.temporal.poller_autoscaling,
    )


def build_workers(
    client: Client, settings: Settings, *, driver: CloudDriver, kube: Kube
) -> list[Worker]:
    """The general queue's worker, then one worker per domain queue with its own slots and
    activity rate."""
    activities = all_activities(settings, driver, kube)
    workers = [build_worker(client, settings, driver=driver, kube=kube)]
    for domain, workflows in DOMAIN_WORKFLOWS.items():
        queue = settings.temporal.queue_settings(domain)
        workers.append(
            temporal.make_worker(
                client,
                settings.temporal.queue_for(domain),
                workflows=workflows,
                activities=activities,
                graceful_shutdown_s=settings.temporal.graceful_shutdown_s,
                max_concurrent_activities=queue.max_concurrent_activities,
                activities_per_second=queue.activities_per_second,
                poller_autoscaling=settings.temporal.poller_autoscaling,
            )
        )
    return workers


def all_activities(
    settings: Settings, driver: CloudDriver, kube: Kube
) -> list[Callable[..., object]]:
    """Every activity, each bound to the capabilities of ``driver`` it uses and ``kube``.

    A capability the cloud lacks is wired as :class:`Unsupported` (every operation answers
    ``NotSupported``: e.g. the LB workflow then leaves the Service)."""

    def part(capability: Capability) -> Any:
        return part_or_unsupported(getattr(driver, capability.value), driver.provider, capability)

    activities = [
        *CloudActivities(part(Capability.DISCOVERY), provider=driver.provider).all(),
        *KubeActivities(kube).all(),
    ]
    activities += LoadBalancerActivities(
        part(Capability.LOAD_BALANCERS), part(Capability.INSTANCES), kube
    ).all()
    activities += MachineActivities(part(Capability.MACHINES), kube).all()
    volume_rate = settings.temporal.queue_settings(Domain.VOLUME).activities_per_second
    activities += VolumeActivities(
        part(Capability.VOLUMES),
        part(Capability.SNAPSHOTS),
        part(Capability.INSTANCES),
        part(Capability.DISCOVERY),
        provider=driver.provider,
        local_budget=LocalBudget(volume_rate),
    ).all()
    activities += LayoutActivities(settings, kube).all()
    activities += ConvergeActivities(kube).all()
    activities += ClusterResourceActivities(source_dir=settings.layouts.source_dir).all()
    provider = provider_for(settings)
    termination = (
        provider.termination(provider.section(settings), settings.nth, driver)
        if provider.termination is not None
        else None
    )
    activities += DrainActivities(kube, termination, settings.nth).all()
    return activities  # type: ignore[return-value]


async def run(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or ``stop``), then shut down gracefully; raise
    :class:`~cloudloop.claim.ClaimRefused` when another cluster serves a queue of the set."""
    from cloudloop.cloud.registry import driver_for
    from cloudloop.kube.client import api_client

    stop = stop or asyncio.Event()
    temporal.stop_on_signals(stop)
    runtime_bind = f"127.0.0.1:{free_port()}"
    metrics = MetricsServer(
        settings.metrics_bind,
        settings.metrics_port,
        temporal_metrics_url=f"http://{runtime_bind}/metrics",
        tls=protect_metrics(settings),
    ).start()
    client = await temporal.connect_with_retry(
        settings.temporal, runtime=temporal.new_runtime(runtime_bind), stop=stop
    )
    if client is None:  # stopped before Temporal answered
        metrics.stop()
        return
    kube = Kube(api_client(settings.kubeconfig))
    refusals: list[ClaimRefused] = []

    def refused(refusal: ClaimRefused) -> None:
        refusals.append(refusal)
        stop.set()

    claim = for_process(client, settings, kube, on_refused=refused)
    try:
        claimed = await claim.first(stop)
    except ClaimRefused:
        metrics.stop()
        raise
    if not claimed:  # stopped first
        metrics.stop()
        return
    workers = build_workers(client, settings, driver=driver_for(settings), kube=kube)
    log.info(
        "worker polling %s on %s (provider %s)",
        ", ".join(w.task_queue for w in workers),
        settings.temporal.address,
        settings.provider,
    )
    async with contextlib.AsyncExitStack() as running:
        for worker in workers:
            await running.enter_async_context(worker)
        metrics.health.add_liveness("workers", lambda: stopped_workers(workers))
        metrics.set_ready()
        keeper = asyncio.create_task(claim.keep(stop), name="queue-claim")
        await stop.wait()
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
        log.info(
            "stopping worker: waiting up to %.0fs for running activities",
            settings.temporal.graceful_shutdown_s,
        )
    metrics.stop()
    if refusals:
        raise refusals[0]


def stopped_workers(workers: list[Worker]) -> str | None:
    """Liveness: a task queue's worker that stopped polling (a fatal error) fails it."""
    stopped = [w.task_queue for w in workers if not w.is_running]
    return f"worker stopped polling {', '.join(stopped)}" if stopped else None
