"""The ``cloudloop starter`` process: leader election, then every starter side by side."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from cloudloop import temporal
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.leader import run_as_leader
from cloudloop.metrics import MetricsServer
from cloudloop.settings import Settings
from starters.probes import CloudProbeStarter

log = logging.getLogger(__name__)


async def run(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Run the starters while leading; return on SIGTERM/SIGINT (or ``stop``)."""
    stop = stop or asyncio.Event()
    temporal.stop_on_signals(stop)
    metrics = MetricsServer(settings.metrics_bind, settings.metrics_port).start()
    api = api_client(settings.kubeconfig)
    kube = Kube(api)
    client = await temporal.connect(settings.temporal)
    metrics.set_ready()  # a standby replica is healthy too

    starters = [
        CloudProbeStarter(
            kube, client, task_queue=settings.temporal.task_queue, cluster=settings.cluster_name
        )
    ]

    async def lead() -> None:
        tasks = [asyncio.create_task(s.run(), name=type(s).__name__) for s in starters]
        try:
            await stop.wait()
        finally:
            for s in starters:
                s.stop()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    try:
        leader = asyncio.create_task(run_as_leader(api, settings.leader_election, lead))
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({leader, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not leader.done():  # still waiting for the Lease
            leader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await leader
        stopped.cancel()
    finally:
        metrics.stop()
        log.info("starter stopped")
