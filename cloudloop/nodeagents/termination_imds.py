"""ImdsAgent: aws-node-termination-handler's instance-metadata mode on one node
(``cloudloop termination-imds``, the chart's ``nth-imds`` DaemonSet), reporting through the
Kubernetes API only.

Every ``imds_poll_interval_s`` it asks the node's metadata service (the provider's
``instance_metadata``) for the four kinds of notice and records each new one on its own Node:
the annotation :data:`~cloudloop.messages.termination.NOTICES_ANNOTATION` and a Normal Event with
upstream's reason. The leader-elected starter (:mod:`starters.termination_imds`) watches the
annotation and signals-with-start the drain. Why: docs/decisions/node-agents-credentials.md,
docs/decisions/0050-termination-handler-as-workflows.md.

Rules:
- No Temporal connection and no cloud credential (:class:`~cloudloop.settings.ImdsAgentSettings`);
  its ServiceAccount may change only this annotation of the Node it runs on.
- Each monitor fails on its own (counted in ``events_error_total{event_error_where=
  "imds-<monitor>"}``, logged, one Warning Event per failure streak); the loop never stops.
- A notice is recorded once per instance incarnation (:func:`~cloudloop.rules.termination.
  notice_key`); at start the agent reads back what its Node says, so a restart records nothing
  twice. A write the API server refuses or misses is tried again at the next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cloudloop.cloud.termination import InstanceInfo, MalformedMessage
from cloudloop.kube.api import Kube
from cloudloop.kube.events import record_event
from cloudloop.kube.resources import NODES, ObjectRef
from cloudloop.messages.kube import EventSource
from cloudloop.messages.termination import (
    MAX_NOTICES,
    NOTICES_ANNOTATION,
    EventKind,
    InterruptionEvent,
    NodeNotices,
)
from cloudloop.metrics import NTH_EVENTS_ERROR
from cloudloop.rules.termination import InvalidNotices, notice_key, read_node_notices
from cloudloop.settings import ImdsAgentNthSettings, ImdsAgentSettings

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


def notices_patch(notices: NodeNotices) -> dict[str, Any]:
    """The merge patch writing ``notices`` onto a Node: that one annotation, nothing else."""
    return {"metadata": {"annotations": {NOTICES_ANNOTATION: notices.model_dump_json()}}}


class ImdsAgent:
    def __init__(self, kube: Kube, metadata: Any, nth: ImdsAgentNthSettings, *, node: str) -> None:
        self.kube = kube
        self.metadata = metadata
        self.nth = nth
        self.node = node
        self.instance: InstanceInfo | None = None
        self.monitors: Monitors = {}
        #: What the Node says (and will say once written): the instance and its notices.
        self.notices: NodeNotices | None = None
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
        """The instance behind this node (retried with backoff until it answers or a stop), and
        the notices its Node already records about this incarnation."""
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
            self.notices = await asyncio.to_thread(self._recorded, instance)
            log.info(
                "IMDS mode on node %s: instance %s (%d notice(s) recorded before)",
                self.node,
                instance.id,
                len(self.notices.notices),
            )
            return instance
        return None

    def _recorded(self, instance: InstanceInfo) -> NodeNotices:
        """The notices of this incarnation the Node holds already (none if it cannot be read)."""
        fresh = NodeNotices(
            instance_id=instance.id,
            instance_launch_time=instance.launch_time,
            zone=instance.zone,
            instance_type=instance.instance_type,
        )
        try:
            node = self.kube.get(NODES, self.node)
        except Exception as exc:  # the API server is down: the first write says all again
            log.warning("Node %s not read (%s): its notices are written afresh", self.node, exc)
            return fresh
        text = ((node or {}).get("metadata", {}).get("annotations") or {}).get(NOTICES_ANNOTATION)
        if not text:
            return fresh
        try:
            recorded = read_node_notices(text)
        except InvalidNotices as exc:
            log.warning("Node %s: its notices are replaced: %s", self.node, exc)
            return fresh
        same = (recorded.instance_id, recorded.instance_launch_time) == (
            instance.id,
            instance.launch_time,
        )
        return recorded if same else fresh

    async def poll_once(self) -> list[str]:
        """One round of every monitor; the event IDs of the notices recorded now."""
        assert self.instance is not None and self.notices is not None
        now = datetime.now(UTC)
        seen = {notice_key(n) for n in self.notices.notices}
        new: list[InterruptionEvent] = []
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
                if notice_key(event) not in seen:
                    seen.add(notice_key(event))
                    new.append(event)
        if not new:
            return []
        kept = [*self.notices.notices, *new][-MAX_NOTICES:]
        notices = self.notices.model_copy(update={"notices": kept})
        try:
            await asyncio.to_thread(self.kube.patch, NODES, self.node, notices_patch(notices))
        except Exception as exc:  # refused or unreachable: the next poll writes them again
            NTH_EVENTS_ERROR.labels("imds-record-notice").inc()
            log.warning("Node %s: notices not recorded (next poll again): %s", self.node, exc)
            return []
        self.notices = notices
        for event in new:
            reason = INTERRUPTION_REASONS.get(event.kind, "UnknownInterruption")
            text = f"{event.description} ({event.event_id})"
            await asyncio.to_thread(self._event, "Normal", reason, text)
            log.info("IMDS %s on %s: recorded on the Node", event.event_id, self.node)
        return [e.event_id for e in new]

    async def run(self) -> None:
        if await self.identify() is None:
            return
        while not self._stopped.is_set():
            await self.poll_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), self.nth.imds_poll_interval_s)


def stop_on_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGTERM and SIGINT (the kubelet's stop, a Ctrl-C)."""
    import signal

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


async def run_imds_agent(settings: ImdsAgentSettings, *, stop: asyncio.Event | None = None) -> int:
    """``cloudloop termination-imds``: the agent of ``nth.node_name`` until SIGTERM; the exit
    status (2: the configuration cannot work)."""
    from cloudloop.cloud.registry import DEFAULT_PROVIDER, PROVIDERS
    from cloudloop.kube.client import api_client

    stop = stop or asyncio.Event()
    stop_on_signals(stop)
    provider = settings.provider or DEFAULT_PROVIDER
    record = PROVIDERS.get(provider)
    if record is None or record.instance_metadata is None:
        log.error("IMDS mode: provider %r has no instance metadata service", provider)
        return 2
    if not settings.nth.node_name:
        log.error("IMDS mode needs this node's name (NODE_NAME or --node-name)")
        return 2
    agent = ImdsAgent(
        Kube(api_client(settings.kubeconfig, qps_pool=4)),
        record.instance_metadata(settings.nth.imds_endpoint, settings.nth.imds_timeout_s),
        settings.nth,
        node=settings.nth.node_name,
    )
    task = asyncio.create_task(agent.run())
    await stop.wait()
    agent.stop()
    with contextlib.suppress(asyncio.CancelledError, TimeoutError):
        await asyncio.wait_for(task, 10)
    return 0
