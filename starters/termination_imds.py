"""ImdsMonitor: aws-node-termination-handler's instance-metadata mode, one process per node
(``cloudloop termination-imds``, the chart's DaemonSet).

Every ``imds_poll_interval_s`` it asks the node's metadata service (IMDSv2, the cloud's
``instance_metadata()``) for Spot interruption notices, scheduled events, rebalance
recommendations and the ASG target lifecycle state, and signals-with-start the same
:class:`~workflows.termination.DrainNodeWorkflow` the queue processor does (:func:`start_drain`):
the workflow ID is the node and the instance incarnation (the identity document's ``pendingTime``,
EC2's ``LaunchTime``), so a notice seen by both modes, or polled again, is one drain.

Rules: each monitor fails on its own (a timeout, a 5xx, an answer that is not what the path
promises); a failure is counted in ``events_error_total{event_error_where="imds-<monitor>"}``,
logged, and shown once per failure streak as a Warning Event on the Node (upstream's
``MonitorError``); the loop never stops. A dispatched notice is a Normal Event with upstream's
reason (``SpotInterruption``, ``ScheduledEvent``, ``RebalanceRecommendation``, ``ASGLifecycle``). A
notice is dispatched once per process (Spot, rebalance and ASG notices by kind, scheduled events
by ID); a dispatch that fails (Temporal unreachable) is tried again at the next poll. Departure
from upstream: the drain runs in the workers, not in this process, and an IMDS ASG termination
carries no lifecycle token (the queue mode, or the hook's timeout, completes the action).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client

from cloudloop.cloud.registry import Settings
from cloudloop.cloud.termination import (
    EventKind,
    InstanceInfo,
    InterruptionEvent,
    MalformedMessage,
)
from cloudloop.kube.api import Kube
from cloudloop.kube.events import record_event
from cloudloop.kube.resources import NODES, ObjectRef
from cloudloop.messages.kube import EventSource
from cloudloop.metrics import NTH_EVENTS_ERROR
from cloudloop.settings import Domain, NthSettings
from starters.termination import start_drain

log = logging.getLogger(__name__)

IDENTITY_BACKOFF_S = (1.0, 30.0)
#: Upstream's Event reasons (``pkg/observability/k8s-events.go``).
MONITOR_ERROR = "MonitorError"
INTERRUPTION_REASONS = {
    EventKind.SPOT_ITN: "SpotInterruption",
    EventKind.SCHEDULED_EVENT: "ScheduledEvent",
    EventKind.REBALANCE_RECOMMENDATION: "RebalanceRecommendation",
    EventKind.ASG_LIFECYCLE: "ASGLifecycle",
}
Monitors = dict[str, Callable[[datetime], list[InterruptionEvent]]]


def dedup_key(event: InterruptionEvent) -> str:
    """Upstream's IMDS IDs of Spot, rebalance and ASG notices hash their answer, which may
    change between polls; one of each kind per incarnation is enough."""
    if event.kind == EventKind.SCHEDULED_EVENT:
        return f"{event.kind}/{event.event_id}"
    return str(event.kind)


class ImdsMonitor:
    def __init__(
        self,
        kube: Kube,
        client: Client,
        metadata: Any,
        nth: NthSettings,
        *,
        node: str,
        task_queue: str,
        cluster: str,
        provider: str,
    ) -> None:
        self.kube = kube
        self.client = client
        self.metadata = metadata
        self.nth = nth
        self.node = node
        self.task_queue = task_queue
        self.cluster = cluster
        self.provider = provider
        self.instance: InstanceInfo | None = None
        self.monitors: Monitors = {}
        self.dispatched: dict[str, str] = {}  # dedup key → workflow ID
        self._failing: set[str] = set()
        self._stopped = asyncio.Event()

    def stop(self) -> None:
        self._stopped.set()

    def _event(self, type: str, reason: str, message: str) -> None:
        ref = ObjectRef(plural=NODES.plural, kind=NODES.kind, name=self.node)
        record_event(
            self.kube,
            ref,
            type="Warning" if type == "Warning" else "Normal",
            reason=reason,
            message=message,
            component=EventSource.TERMINATION,
        )

    async def _failed(self, where: str, exc: Exception) -> None:
        NTH_EVENTS_ERROR.labels(f"imds-{where}").inc()
        what = "malformed answer" if isinstance(exc, MalformedMessage) else "no answer"
        log.warning("instance metadata, %s: %s: %s", where, what, exc)
        if where in self._failing:
            return
        self._failing.add(where)
        text = (
            f"There was a problem monitoring for events in monitor '{where}': {what}: {exc}; "
            f"polling again every {self.nth.imds_poll_interval_s:g}s"
        )
        await asyncio.to_thread(self._event, "Warning", MONITOR_ERROR, text)

    async def identify(self) -> InstanceInfo | None:
        """The instance behind this node (retried with backoff until it answers or a stop)."""
        backoff = IDENTITY_BACKOFF_S[0]
        while not self._stopped.is_set():
            try:
                instance: InstanceInfo = await asyncio.to_thread(self.metadata.identity)
            except Exception as exc:
                await self._failed("identity", exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), backoff)
                backoff = min(backoff * 2, IDENTITY_BACKOFF_S[1])
                continue
            self._failing.discard("identity")
            self.instance = instance
            self.monitors = self.metadata.monitors(instance)
            log.info("IMDS mode on node %s: instance %s", self.node, instance.id)
            return instance
        return None

    async def poll_once(self) -> list[str]:
        """One round of every monitor; the workflow IDs of the notices dispatched now."""
        assert self.instance is not None
        now = datetime.now(UTC)
        started: list[str] = []
        for name, monitor in self.monitors.items():
            try:
                events = await asyncio.to_thread(monitor, now)
            except Exception as exc:  # ImdsError, MalformedMessage, anything: next poll
                await self._failed(name, exc)
                continue
            if name in self._failing:
                self._failing.discard(name)
                log.info("instance metadata, %s: answering again", name)
            for event in events:
                key = dedup_key(event)
                if key in self.dispatched:
                    continue
                try:
                    wf_id, _, start = await start_drain(
                        self.client,
                        self.nth,
                        event,
                        self.instance,
                        self.node,
                        task_queue=self.task_queue,
                        cluster=self.cluster,
                        provider=self.provider,
                    )
                except Exception as exc:  # Temporal unreachable: the next poll tries again
                    NTH_EVENTS_ERROR.labels("imds-start-workflow").inc()
                    log.warning("IMDS %s: drain not started: %s", event.event_id, exc)
                    continue
                self.dispatched[key] = wf_id
                started.append(wf_id)
                reason = INTERRUPTION_REASONS.get(event.kind, "UnknownInterruption")
                text = f"{event.description} ({event.event_id}; workflow {wf_id})"
                await asyncio.to_thread(self._event, "Normal", reason, text)
                log.info(
                    "IMDS %s on %s → %s%s",
                    event.event_id,
                    self.node,
                    wf_id,
                    "" if start else " (completed before)",
                )
        return started

    async def run(self) -> None:
        if await self.identify() is None:
            return
        while not self._stopped.is_set():
            await self.poll_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), self.nth.imds_poll_interval_s)


async def run_imds(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """``cloudloop termination-imds``: the monitor of ``nth.node_name`` until SIGTERM."""
    from cloudloop import temporal
    from cloudloop.cloud.registry import provider_for
    from cloudloop.kube.client import api_client

    stop = stop or asyncio.Event()
    temporal.stop_on_signals(stop)
    nth = settings.nth
    provider = provider_for(settings)
    if provider.termination is None or not nth.node_name:
        log.error("IMDS mode needs a provider with a termination handler and NODE_NAME")
        return
    client = await temporal.connect(settings.temporal, lazy=True)
    aws = provider.termination(provider.section(settings), nth, None)
    monitor = ImdsMonitor(
        Kube(api_client(settings.kubeconfig)),
        client,
        aws.instance_metadata(),
        nth,
        node=nth.node_name,
        task_queue=settings.temporal.queue_for(Domain.DRAIN),
        cluster=settings.cluster_name,
        provider=provider.name,
    )
    task = asyncio.create_task(monitor.run())
    await stop.wait()
    monitor.stop()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
