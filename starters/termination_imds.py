"""ImdsNotices: the starter's half of aws-node-termination-handler's instance-metadata mode.

The IMDS node agents (:mod:`cloudloop.nodeagents.termination_imds`, a DaemonSet holding no
Temporal or cloud credential) record what their node's metadata service says on their own Node:
the annotation :data:`~cloudloop.messages.termination.NOTICES_ANNOTATION`. This starter, leader
elected and holding the Temporal connection, watches Nodes (the CCM's informer when it holds
every Node, else one of its own storing only names, providerIDs and that annotation) and
signals-with-start the same :class:`~workflows.termination.DrainNodeWorkflow` the queue processor
does (:func:`~starters.termination.start_drain`) for each notice: the workflow ID is the Node and
the instance incarnation, so a notice seen by both modes, recorded again or read again after a
leader change, joins one drain (a completed drain blocks a new run).

Rules: a Node's notices drain that Node only: the workflow is named after the Node the annotation
is on, whatever the annotation says, and an annotation that is not a valid account of that Node's
instance (not JSON, not the typed body, another instance than its ``spec.providerID``) drains
nothing: one ``InvalidInterruptionNotice`` Warning on the Node per distinct annotation, a log line
and ``events_error_total{event_error_where="imds-notice"}``. A start Temporal refuses or misses is
tried again every :data:`RETRY_S` until it works or the annotation changes. Nothing here stops the
loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client

from cloudloop.cloud.registry import provider_for
from cloudloop.cloud.termination import InstanceInfo
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Node, ObjectMeta
from cloudloop.kube.events import record_event
from cloudloop.kube.informer import Informer, WatchEvent
from cloudloop.kube.resources import NODES, ObjectRef
from cloudloop.messages.kube import EventSource
from cloudloop.messages.termination import NOTICES_ANNOTATION, NodeNotices
from cloudloop.metrics import NTH_EVENTS_ERROR
from cloudloop.rules.termination import InvalidNotices, read_node_notices
from cloudloop.settings import Domain, NthSettings
from starters.context import StarterContext
from starters.termination import start_drain

log = logging.getLogger(__name__)

#: How soon a drain Temporal did not start is tried again.
RETRY_S = 2.0
INVALID_NOTICE = "InvalidInterruptionNotice"


def notices_view(node: Mapping[str, Any]) -> Node:
    """What this starter stores of a Node in an informer of its own: name, resourceVersion,
    the notices annotation and the providerID."""
    meta = node.get("metadata", {})
    kept_meta: ObjectMeta = {}
    if "name" in meta:
        kept_meta["name"] = meta["name"]
    if "resourceVersion" in meta:
        kept_meta["resourceVersion"] = meta["resourceVersion"]
    text = (meta.get("annotations") or {}).get(NOTICES_ANNOTATION)
    if text is not None:
        kept_meta["annotations"] = {NOTICES_ANNOTATION: text}
    kept: Node = {"metadata": kept_meta}
    provider_id = node.get("spec", {}).get("providerID")
    if provider_id:
        kept["spec"] = {"providerID": provider_id}
    return kept


def instance_of(notices: NodeNotices, provider_id: str) -> InstanceInfo:
    """The instance the notices are about, as the drain's input names it."""
    return InstanceInfo(
        id=notices.instance_id,
        state="running",
        provider_id=provider_id or f"aws:///{notices.zone}/{notices.instance_id}",
        launch_time=notices.instance_launch_time,
        zone=notices.zone,
        instance_type=notices.instance_type,
    )


@dataclass
class NodeState:
    """What this starter did about one Node's annotation."""

    text: str = ""
    #: Event IDs whose drain was started (or joined) for ``text``'s instance incarnation.
    started: set[str] = field(default_factory=set)
    #: Some start failed: the Node is handled again after :data:`RETRY_S`.
    retry: bool = False


class ImdsNotices:
    def __init__(
        self,
        kube: Kube,
        client: Client,
        nth: NthSettings,
        *,
        task_queue: str,
        cluster: str,
        provider: str = "",
        id_scope: str = "",
        nodes: Informer[Node] | None = None,
    ) -> None:
        self.kube = kube
        self.client = client
        self.nth = nth
        self.task_queue = task_queue
        self.cluster = cluster
        self.provider = provider
        #: The cluster's workflow-ID scope: the drain's ID is the queue mode's for one notice.
        self.id_scope = id_scope
        self._own_nodes = nodes is None
        self.nodes = (
            nodes if nodes is not None else Informer[Node](kube, NODES, transform=notices_view)
        )
        self.state: dict[str, NodeState] = {}
        self._stopped = asyncio.Event()

    @classmethod
    def from_context(cls, context: StarterContext) -> ImdsNotices | None:
        provider = provider_for(context.settings)
        if provider.termination is None or provider.instance_metadata is None:
            return None
        return cls(
            context.kube,
            context.client,
            context.settings.nth,
            task_queue=context.queue(Domain.DRAIN),
            cluster=context.cluster,
            provider=provider.name,
            id_scope=context.settings.temporal.id_scope,
            # The CCM's Node informer when it holds every Node; else one of its own (views).
            nodes=None if context.settings.ccm.node_selector else context.informers.nodes(),
        )

    def stop(self) -> None:
        self._stopped.set()
        if self._own_nodes:
            self.nodes.stop()

    async def run(self) -> None:
        retries = asyncio.create_task(self._retry_loop())
        try:
            async for event in self.nodes.events():
                if self._stopped.is_set():
                    return
                await self.handle(event)
        finally:
            retries.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await retries

    async def _retry_loop(self) -> None:
        while True:
            await asyncio.sleep(RETRY_S)
            for name in [n for n, s in self.state.items() if s.retry]:
                node = self.nodes.store.get(name)
                if node is not None:
                    await self.handle(WatchEvent("MODIFIED", node))

    async def handle(self, event: WatchEvent[Node]) -> list[str]:
        """Start (or join) the drains a Node's notices ask for; the workflow IDs started now."""
        node = event.object
        name = str(node["metadata"]["name"])
        text = (node["metadata"].get("annotations") or {}).get(NOTICES_ANNOTATION)
        if event.type == "DELETED" or not text:
            self.state.pop(name, None)
            return []
        state = self.state.get(name)
        if state is not None and state.text == text and not state.retry:
            return []  # seen (another field of the Node changed)
        provider_id = str(node.get("spec", {}).get("providerID") or "")
        try:
            notices = read_node_notices(text, provider_id)
        except InvalidNotices as exc:
            self.state[name] = NodeState(text=text)
            await self._invalid(name, exc)
            return []
        if state is None or state.text != text:
            # The same incarnation keeps what was started; another one starts afresh.
            started = set(state.started) if state is not None and _same(state, notices) else set()
            state = self.state[name] = NodeState(text=text, started=started)
        state.retry = False
        instance = instance_of(notices, provider_id)
        started_now: list[str] = []
        for notice in notices.notices:
            if notice.event_id in state.started:
                continue
            try:
                wf_id, _, start = await start_drain(
                    self.client,
                    self.nth,
                    notice,
                    instance,
                    name,
                    task_queue=self.task_queue,
                    cluster=self.cluster,
                    provider=self.provider,
                    id_scope=self.id_scope,
                )
            except Exception as exc:  # Temporal unreachable: again after RETRY_S
                NTH_EVENTS_ERROR.labels("imds-start-workflow").inc()
                log.warning("IMDS %s on %s: drain not started: %s", notice.event_id, name, exc)
                state.retry = True
                continue
            state.started.add(notice.event_id)
            started_now.append(wf_id)
            log.info(
                "IMDS %s on %s → %s%s",
                notice.event_id,
                name,
                wf_id,
                "" if start else " (completed before)",
            )
        return started_now

    async def _invalid(self, node: str, exc: InvalidNotices) -> None:
        NTH_EVENTS_ERROR.labels("imds-notice").inc()
        text = f"The interruption notices on this Node are not valid, nothing drained: {exc}"
        ref = ObjectRef(plural=NODES.plural, kind=NODES.kind, name=node)
        await asyncio.to_thread(
            record_event,
            self.kube,
            ref,
            type="Warning",
            reason=INVALID_NOTICE,
            message=text,
            component=EventSource.TERMINATION,
        )


def _same(state: NodeState, notices: NodeNotices) -> bool:
    try:
        before = read_node_notices(state.text)
    except InvalidNotices:
        return False
    return (before.instance_id, before.instance_launch_time) == (
        notices.instance_id,
        notices.instance_launch_time,
    )
