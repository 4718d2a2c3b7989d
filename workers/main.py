"""The ``cloudloop worker`` process: one Temporal worker on the configured task queue."""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import Client
from temporalio.worker import Worker

from activities.cloud import CloudActivities
from activities.kube import KubeActivities
from activities.loadbalancer import LoadBalancerActivities
from activities.machine import MachineActivities
from activities.termination import DrainActivities
from activities.volume import VolumeActivities
from cloudloop import temporal
from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.registry import provider_for
from cloudloop.kube.api import Kube
from cloudloop.metrics import MetricsServer
from cloudloop.metrics_auth import protect_metrics
from cloudloop.net import free_port
from cloudloop.settings import Settings
from workflows.loadbalancer import LoadBalancerWorkflow
from workflows.machine import MachineWorkflow
from workflows.probe import CloudProbeWorkflow
from workflows.termination import DRAIN_WORKFLOWS
from workflows.volume import VOLUME_WORKFLOWS

log = logging.getLogger(__name__)

WORKFLOWS: list[type] = [CloudProbeWorkflow, LoadBalancerWorkflow]
WORKFLOWS += VOLUME_WORKFLOWS
WORKFLOWS += DRAIN_WORKFLOWS
WORKFLOWS += [MachineWorkflow]


def build_worker(
    client: Client,
    settings: Settings,
    *,
    driver: CloudDriver,
    kube: Kube,
    task_queue: str | None = None,
) -> Worker:
    """The worker with every workflow and the activities bound to ``driver`` and ``kube``."""
    activities = [*CloudActivities(driver).all(), *KubeActivities(kube).all()]
    activities += LoadBalancerActivities(driver, kube).all()
    activities += MachineActivities(driver, kube).all()
    activities += VolumeActivities(driver).all()
    provider = provider_for(settings)
    termination = (
        provider.termination(provider.section(settings), settings.nth)
        if provider.termination is not None
        else None
    )
    activities += DrainActivities(kube, termination, settings.nth).all()
    return temporal.make_worker(
        client,
        task_queue or settings.temporal.task_queue,
        workflows=WORKFLOWS,
        activities=activities,  # type: ignore[arg-type]
        graceful_shutdown_s=settings.temporal.graceful_shutdown_s,
    )


async def run(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or ``stop``), then shut down gracefully."""
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
    worker = build_worker(
        client, settings, driver=driver_for(settings), kube=Kube(api_client(settings.kubeconfig))
    )
    log.info(
        "worker polling %s on %s (provider %s)",
        settings.temporal.task_queue,
        settings.temporal.address,
        settings.provider,
    )
    async with worker:
        metrics.set_ready()
        await stop.wait()
        log.info(
            "stopping worker: waiting up to %.0fs for running activities",
            settings.temporal.graceful_shutdown_s,
        )
    metrics.stop()
