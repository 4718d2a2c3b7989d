"""The ``cloudloop starter`` process: leader election, then every starter side by side.

:data:`STARTERS` lists the factories; a factory returns ``None`` when its capability is turned
off by settings or not supported by the configured cloud. Each starter runs under the
:class:`~starters.supervisor.Supervisor` (restarted with backoff when it fails). ``/healthz``
fails for a crash-looping starter, a dead elector or a Lease not renewed in time; ``/readyz`` also
for informers that have not heard from the API server for ``STALE_AFTER_S``.

Every start or signal first makes sure this cluster holds its queue set (the client is gated by
:func:`cloudloop.claim.gated`; every replica claims from its start, the leader or not): a queue
another cluster serves stops the process with an error naming both (:mod:`cloudloop.claim`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from cloudloop import temporal
from cloudloop.claim import ClaimRefused, for_process, gated
from cloudloop.cloud.registry import Settings, driver_for
from cloudloop.health import Health
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.informer import Informers
from cloudloop.kube.leader import run_as_leader
from cloudloop.metrics import MetricsServer
from cloudloop.metrics_auth import protect_metrics
from starters.context import Starter, StarterContext
from starters.discovery import CloudDataDiscoverer
from starters.layout_converge import ConvergeStatusExporter
from starters.loadbalancer import ServiceStarter, UnservedLoadBalancers
from starters.machine import MachineStarter
from starters.node import NodeSync
from starters.probe import CloudProbeStarter
from starters.registration import CloudProviderRegistration
from starters.route import RouteSync
from starters.supervisor import Supervisor
from starters.termination import QueueProcessor
from starters.termination_imds import ImdsNotices

log = logging.getLogger(__name__)

#: An informer failing to list or watch for this long makes the starter not ready.
STALE_AFTER_S = 60.0

STARTERS: list[Callable[[StarterContext], Starter | None]] = [
    CloudProbeStarter.from_context,
    NodeSync.from_context,
    RouteSync.from_context,
    CloudDataDiscoverer.from_context,
    MachineStarter.from_context,
    CloudProviderRegistration.from_context,
    ServiceStarter.from_context,
    UnservedLoadBalancers.from_context,
    QueueProcessor.from_context,
    ImdsNotices.from_context,
    ConvergeStatusExporter.from_context,
]


async def run_starters(context: StarterContext, stop: asyncio.Event) -> None:
    """Run every enabled starter until ``stop`` is set; then stop and await them all."""
    starters = [s for s in (factory(context) for factory in STARTERS) if s is not None]
    supervisor = Supervisor(context.health)
    context.health.add_readiness("informers", lambda: context.informers.staleness(STALE_AFTER_S))
    tasks = [
        asyncio.create_task(supervisor.run(type(s).__name__, s.run, stop), name=type(s).__name__)
        for s in starters
    ]
    log.info("starters running: %s", ", ".join(t.get_name() for t in tasks))
    try:
        await stop.wait()
    finally:
        for starter in starters:
            starter.stop()
        context.informers.stop()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def run(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Run the starters while leading; return on SIGTERM/SIGINT (or ``stop``); raise
    :class:`~cloudloop.claim.ClaimRefused` when another cluster serves a queue of the set."""
    stop = stop or asyncio.Event()
    temporal.stop_on_signals(stop)
    health = Health()
    metrics = MetricsServer(
        settings.metrics_bind, settings.metrics_port, health=health, tls=protect_metrics(settings)
    ).start()
    api = api_client(settings.kubeconfig)
    kube = Kube(api)
    # Lazy: node sync, routes and discovery must not wait for Temporal (no bootstrap deadlock).
    client = await temporal.connect(settings.temporal, lazy=True)
    refusals: list[ClaimRefused] = []

    def refused(refusal: ClaimRefused) -> None:
        refusals.append(refusal)
        stop.set()

    claim = for_process(client, settings, kube, on_refused=refused)
    claiming = asyncio.create_task(claim.hold(stop), name="queue-claim")
    context = StarterContext(
        settings=settings,
        kube=kube,
        client=gated(client, claim),
        driver=driver_for(settings),
        informers=Informers(kube),
        health=health,
    )
    metrics.set_ready()  # a standby replica is healthy too

    try:
        leader = asyncio.create_task(
            run_as_leader(
                api,
                settings.leader_election,
                lambda: run_starters(context, stop),
                health=health,
            )
        )
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({leader, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not leader.done():  # still waiting for the Lease
            leader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await leader
        stopped.cancel()
    finally:
        claiming.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await claiming
        metrics.stop()
        log.info("starter stopped")
    if refusals:
        raise refusals[0]
