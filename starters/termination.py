"""QueueProcessor: aws-node-termination-handler's queue-processor mode as a starter.

It long-polls the SQS queue, parses each message (``TerminationClient.parse_message``), finds the
instance (EC2) and its Node, and signals-with-start one :class:`DrainNodeWorkflow` per
interruption (ID from node + instance incarnation, ``USE_EXISTING``, reuse only after a failure).
It also refreshes the ``nth_tagged_instances``/``nth_tagged_nodes`` gauges periodically.
Why the messages are handled so: docs/decisions/0050-termination-handler-as-workflows.md.

Rules:
- A message stays held (visibility extended) while its workflow runs, is deleted once it
  succeeded and left for redelivery when it failed; a drain failed for good or a message received
  ``max_receive_count`` times is deleted with one ``InterruptionNotHandled`` Warning and counted
  in ``nth_sqs_poison_messages_total``.
- A copy of an interruption whose drain completed is deleted at once; messages about unknown or
  unmanaged instances, absent Nodes, tests, ignored kinds and malformed ones are deleted too.
- Nothing here stops the loop.
- Nodes are looked up in an informer's store (by name or providerID), never by listing per event:
  the shared one, or one of its own storing names and providerIDs only (:func:`node_identity`),
  which lists only once a Node may be needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import (
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError

from cloudloop import searchattrs
from cloudloop.cloud.errors import CloudError, NotFound
from cloudloop.cloud.registry import Settings, provider_for
from cloudloop.cloud.termination import (
    InstanceInfo,
    MalformedMessage,
    QueueMessage,
    TerminationClient,
)
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Node, ObjectMeta
from cloudloop.kube.events import record_event
from cloudloop.kube.informer import Informer
from cloudloop.kube.resources import NODES, ObjectRef
from cloudloop.messages.kube import EventSource
from cloudloop.messages.scope import scoped_id
from cloudloop.messages.termination import (
    DRAIN_SIGNAL,
    DrainInput,
    DrainOptions,
    DrainResult,
    InterruptionEvent,
    LifecycleInput,
    QueueSetupInput,
    QueueSetupResult,
    QueueSpec,
    drain_workflow_id,
    lifecycle_workflow_id,
    queue_workflow_id,
)
from cloudloop.metrics import (
    NTH_EVENTS_ERROR,
    NTH_SQS_MESSAGES,
    NTH_TAGGED_INSTANCES,
    NTH_TAGGED_NODES,
    POISON_MESSAGES,
)
from cloudloop.rules.termination import give_up_reason
from cloudloop.settings import Domain, NthSettings
from cloudloop.temporal import Start, signal_with_start
from starters.context import StarterContext
from workflows.termination import (
    CompleteLifecycleWorkflow,
    DrainNodeWorkflow,
    TerminationQueueWorkflow,
    is_cordon_only,
)

log = logging.getLogger(__name__)

#: An event older than its instance's launch (beyond clock skew) is about an earlier incarnation.
LAUNCH_SKEW = timedelta(seconds=60)
RECEIVE_BACKOFF_S = (1.0, 30.0)
#: How long an event waits for the Node informer's first list before asking the API server.
NODES_SYNC_TIMEOUT_S = 10.0


def queue_spec(settings: Settings) -> QueueSpec:
    """The managed queue of ``settings``' cluster (names SQS and EventBridge accept)."""
    nth = settings.nth
    name = re.sub(r"[^A-Za-z0-9_-]", "-", nth.queue_name or f"{settings.cluster_name}-nth")[:80]
    return QueueSpec(
        queue_name=name,
        rule_prefix=name[:46],  # + "-scheduled-change" stays within a rule name's 64
        lifecycle_hook_groups=list(nth.lifecycle_hook_groups),
        hook_name=nth.lifecycle_hook_name,
        hook_heartbeat_timeout_s=nth.lifecycle_hook_heartbeat_timeout_s,
        tags={"cloudloop.io/cluster": settings.cluster_name},
    )


async def setup_queue(
    client: Client, settings: Settings, *, remove: bool = False, task_queue: str = ""
) -> QueueSetupResult:
    """Run the ``TerminationQueue`` workflow (install, or ``remove``) on the drain task queue
    (or ``task_queue``) and wait for its result; a second caller joins the running one."""
    result: QueueSetupResult = await client.execute_workflow(
        TerminationQueueWorkflow.run,
        QueueSetupInput(spec=queue_spec(settings), remove=remove),
        id=scoped_id(
            settings.temporal.id_scope, queue_workflow_id(settings.cluster_name, remove=remove)
        ),
        task_queue=task_queue or settings.temporal.queue_for(Domain.DRAIN),
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        search_attributes=searchattrs.for_object(
            cluster=settings.cluster_name,
            provider=settings.provider,
            kind="TerminationQueue",
            namespace="",
            name=queue_spec(settings).queue_name,
        ),
        static_summary=f"{'remove' if remove else 'make'} the interruption queue",
    )
    return result


def drain_options(nth: NthSettings) -> DrainOptions:
    return DrainOptions(
        cordon_only=nth.cordon_only,
        taint_effect=nth.taint_effect,
        node_termination_grace_period_s=nth.node_termination_grace_period_s,
        pod_termination_grace_period_s=nth.pod_termination_grace_period_s,
        ignore_daemonsets=nth.ignore_daemonsets,
        delete_emptydir_data=nth.delete_emptydir_data,
        force=nth.force,
        heartbeat_interval_s=nth.heartbeat_interval_s,
        heartbeat_until_s=nth.heartbeat_until_s,
        eviction_retry_interval_s=nth.eviction_retry_interval_s,
        drain_poll_interval_s=nth.drain_poll_interval_s,
        drain_round_s=nth.drain_round_s,
        activity_heartbeat_timeout_s=nth.activity_heartbeat_timeout_s,
        wait_for_volume_attachments=nth.wait_for_volume_attachments,
        volume_attachment_timeout_s=nth.volume_attachment_timeout_s,
    )


async def start_drain(
    client: Client,
    nth: NthSettings,
    event: InterruptionEvent,
    instance: InstanceInfo,
    node: str,
    *,
    task_queue: str,
    cluster: str,
    provider: str,
    id_scope: str = "",
) -> tuple[str, TypedSearchAttributes, Start | None]:
    """Signal-with-start the drain of ``node`` for ``event`` (queue and IMDS mode alike): one
    workflow ID per node and instance incarnation, whichever mode or replica sees it first
    (within the cluster's ``id_scope``: another cluster's Node of the same name and instance ID
    has a drain of its own).
    (workflow ID, its search attributes, the start or ``None`` when a completed run blocks it)."""
    cordon_only = is_cordon_only(
        event, cordon_only=nth.cordon_only, rebalance_drains=nth.enable_rebalance_draining
    )
    options = drain_options(nth).model_copy(update={"cordon_only": cordon_only})
    input = DrainInput(
        node=node,
        cluster=cluster,
        instance_id=instance.id,
        instance_launch_time=instance.launch_time,
        instance_type=instance.instance_type,
        zone=instance.zone,
        provider_id=instance.provider_id,
        event=event,
        options=options,
    )
    wf_id = scoped_id(
        id_scope,
        drain_workflow_id(node, instance.id, instance.launch_time, cordon_only=cordon_only),
    )
    attributes = searchattrs.for_object(
        cluster=cluster, provider=provider, kind="Node", namespace="", name=node
    )
    start = await signal_with_start(
        client,
        DrainNodeWorkflow.run,
        input,
        kind="DrainNode",
        id=wf_id,
        task_queue=task_queue,
        summary=f"drain Node {node} ({instance.id}): {event.kind}",
        signal=DRAIN_SIGNAL,
        signal_args=[event],
        search_attributes=attributes,
    )
    return wf_id, attributes, start


def node_identity(node: Mapping[str, Any]) -> Node:
    """What the handler reads of a Node (its name and providerID) and what the informer
    compares (resourceVersion): its own informer's stored projection."""
    meta = node.get("metadata", {})
    identity: ObjectMeta = {}
    if "name" in meta:
        identity["name"] = meta["name"]
    if "resourceVersion" in meta:
        identity["resourceVersion"] = meta["resourceVersion"]
    kept: Node = {"metadata": identity}
    provider_id = node.get("spec", {}).get("providerID")
    if provider_id:
        kept["spec"] = {"providerID": provider_id}
    return kept


@dataclass
class Dispatch:
    """What one event of a message came to: a workflow to wait for, done, or keep the message."""

    handle: WorkflowHandle[Any, Any] | None = None
    keep_message: bool = False
    note: str = ""
    node: str = ""


class QueueProcessor:
    def __init__(
        self,
        kube: Kube,
        client: Client,
        aws: TerminationClient,
        nth: NthSettings,
        *,
        task_queue: str,
        cluster: str,
        provider: str = "",
        nodes: Informer[Node] | None = None,
        settings: Settings | None = None,
        id_scope: str = "",
    ) -> None:
        #: The queue read: ``nth.queue_url``, or (empty) the managed queue, made at start.
        self.queue_url = nth.queue_url
        #: Whole settings of a managed queue (its name, tags, hooks); ``None``: not managed.
        self.settings = settings if not nth.queue_url and nth.manage_queue else None
        self.kube = kube
        self.client = client
        self.aws = aws
        self.nth = nth
        self.task_queue = task_queue
        self.cluster = cluster
        self.provider = provider
        self.id_scope = id_scope
        self._own_nodes = nodes is None
        self.nodes = (
            nodes if nodes is not None else Informer[Node](kube, NODES, transform=node_identity)
        )
        self._stopped = asyncio.Event()
        self._tasks: set[asyncio.Task[str]] = set()

    @classmethod
    def from_context(cls, context: StarterContext) -> QueueProcessor | None:
        nth = context.settings.nth
        if not nth.queue_url and not nth.manage_queue:
            log.info("node termination handler's queue mode off: no queue URL, none managed")
            return None
        provider = provider_for(context.settings)
        if provider.termination is None:
            log.info("node termination handler off: provider %s has none", provider.name)
            return None
        return cls(
            context.kube,
            context.client,
            provider.termination(provider.section(context.settings), nth, context.driver),
            nth,
            task_queue=context.queue(Domain.DRAIN),
            cluster=context.cluster,
            provider=provider.name,
            # The CCM's Node informer when it holds every Node; else one of node identities.
            nodes=None if context.settings.ccm.node_selector else context.informers.nodes(),
            settings=context.settings,
            id_scope=context.settings.temporal.id_scope,
        )

    def stop(self) -> None:
        self._stopped.set()
        if self._own_nodes:
            self.nodes.stop()

    async def make_queue(self) -> bool:
        """Make (or find) the managed queue, retried with backoff; ``False`` once stopped."""
        assert self.settings is not None
        backoff = RECEIVE_BACKOFF_S[0]
        while not self._stopped.is_set():
            try:
                result = await setup_queue(self.client, self.settings, task_queue=self.task_queue)
            except Exception as exc:  # Temporal or AWS: the workflow failed; again later
                NTH_EVENTS_ERROR.labels("make-queue").inc()
                log.warning("interruption queue not made (retrying in %.0fs): %s", backoff, exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), backoff)
                backoff = min(backoff * 2, RECEIVE_BACKOFF_S[1])
                continue
            self.queue_url = result.queue_url
            log.info(
                "interruption queue %s: %d rule(s), lifecycle hooks %s",
                result.queue_url,
                len(result.rules),
                result.hooks or "none",
            )
            return True
        return False

    async def run(self) -> None:
        if not self.queue_url and not await self.make_queue():
            return
        if not self.nth.check_tag_before_draining:  # any message may name a Node: list now
            self.nodes.start()
        metrics = asyncio.create_task(self._tagged_metrics_loop())
        backoff = RECEIVE_BACKOFF_S[0]
        try:
            while not self._stopped.is_set():
                free = self.nth.max_in_flight_messages - len(self._tasks)
                if free <= 0:
                    await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
                    continue
                try:
                    messages = await asyncio.to_thread(
                        self.aws.receive,
                        self.queue_url,
                        max_messages=min(self.nth.max_messages, free),
                        wait_s=self.nth.wait_time_s,
                        visibility_s=self.nth.visibility_timeout_s,
                    )
                    backoff = RECEIVE_BACKOFF_S[0]
                except NotFound as exc:  # the queue was deleted behind our back
                    NTH_EVENTS_ERROR.labels("queue-missing").inc()
                    if self.settings is not None:
                        log.warning("interruption queue is gone (%s); making it again", exc)
                        if not await self.make_queue():
                            return
                        continue
                    log.error("interruption queue %s does not exist: %s", self.queue_url, exc)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopped.wait(), RECEIVE_BACKOFF_S[1])
                    continue
                except Exception as exc:  # CloudError, or anything else: the loop goes on
                    NTH_EVENTS_ERROR.labels("receive").inc()
                    log.warning("SQS receive failed (retrying in %.0fs): %s", backoff, exc)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopped.wait(), backoff)
                    backoff = min(backoff * 2, RECEIVE_BACKOFF_S[1])
                    continue
                for message in messages:
                    task = asyncio.create_task(self.handle_message(message))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
        finally:
            metrics.cancel()
            for task in [*self._tasks]:
                task.cancel()
            await asyncio.gather(*self._tasks, metrics, return_exceptions=True)

    # -- one message -----------------------------------------------------------------------
    async def handle_message(self, message: QueueMessage) -> str:
        """Handle one message to its end; return its fate (``deleted``, ``left``, ...)."""
        try:
            fate = await self._handle(message)
        except asyncio.CancelledError:
            raise
        except Exception:  # one bad message never stops the queue
            NTH_EVENTS_ERROR.labels("process").inc()
            log.exception("SQS message %s: could not be handled; left", message.message_id)
            fate = "left"
        NTH_SQS_MESSAGES.labels(fate).inc()
        return fate

    async def _handle(self, message: QueueMessage) -> str:
        try:
            parsed = self.aws.parse_message(
                message.body, message_id=message.message_id, now=datetime.now(UTC)
            )
        except MalformedMessage as exc:
            NTH_EVENTS_ERROR.labels("parse").inc()
            log.warning("SQS message %s is malformed, deleting it: %s", message.message_id, exc)
            return await self._delete(message, "malformed")
        if parsed.ignored:
            log.info("SQS message %s needs no action (%s)", message.message_id, parsed.ignored)
            return await self._delete(message, "ignored")

        dispatches = await asyncio.gather(*(self.dispatch(e) for e in parsed.events))
        for d in dispatches:
            if d.note:
                log.info("SQS message %s: %s", message.message_id, d.note)
        if any(d.keep_message for d in dispatches):
            return "left"
        started = [d for d in dispatches if d.handle is not None]
        if not started:
            return await self._delete(message, "skipped")
        failure = await self._hold_until_done(message, [d.handle for d in started if d.handle])
        if failure is None:
            return await self._delete(message, "deleted")
        reason = give_up_reason(failure[0], message.receive_count, self.nth.max_receive_count)
        if reason is None:
            return "left"
        return await self._give_up(message, reason, failure, [d.node for d in started])

    async def _give_up(
        self, message: QueueMessage, reason: str, failure: tuple[str, str], nodes: list[str]
    ) -> str:
        """Delete a message that redelivery cannot help, with one Warning per Node."""
        fate = await self._delete(message, "poison")
        if fate != "poison":
            return fate
        POISON_MESSAGES.labels(reason).inc()
        why = (
            f"its drain failed for good ({failure[0]})"
            if reason == "permanent"
            else f"it was received {message.receive_count} times"
        )
        text = (
            f"Gave up on SQS message {message.message_id}: {why}: {failure[1]}; the message is "
            "deleted, the node stays tainted and cordoned"
        )
        for node in sorted(set(nodes)):
            ref = ObjectRef(plural=NODES.plural, kind=NODES.kind, name=node)
            await asyncio.to_thread(
                record_event,
                self.kube,
                ref,
                type="Warning",
                reason="InterruptionNotHandled",
                message=text,
                component=EventSource.TERMINATION,
            )
        return fate

    async def _delete(self, message: QueueMessage, fate: str) -> str:
        try:
            await asyncio.to_thread(self.aws.delete, self.queue_url, message.receipt_handle)
        except CloudError as exc:
            NTH_EVENTS_ERROR.labels("delete-message").inc()
            log.warning("SQS message %s could not be deleted: %s", message.message_id, exc)
            return "left"
        return fate

    async def _hold_until_done(
        self, message: QueueMessage, handles: list[WorkflowHandle[Any, Any]]
    ) -> tuple[str, str] | None:
        """Keep the message invisible while its workflows run; ``None`` if all succeeded, else
        the (failure type, message) of one that failed."""
        extender = asyncio.create_task(self._keep_invisible(message))
        try:
            results = await asyncio.gather(*(h.result() for h in handles), return_exceptions=True)
        finally:
            extender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await extender
        failure: tuple[str, str] | None = None
        for handle, result in zip(handles, results, strict=True):
            if isinstance(result, WorkflowFailureError):
                cause = result.cause
                failure = (
                    (cause.type or "ApplicationError", cause.message)
                    if isinstance(cause, ApplicationError)
                    else (type(cause).__name__, str(cause))
                )
                NTH_EVENTS_ERROR.labels("drain").inc()
                log.warning(
                    "workflow %s failed; SQS message %s left for redelivery: %s",
                    handle.id,
                    message.message_id,
                    result.cause,
                )
            elif isinstance(result, BaseException):
                failure = failure or ("NoResult", str(result))
                NTH_EVENTS_ERROR.labels("workflow-result").inc()
                log.warning("workflow %s: no result (%s); message left", handle.id, result)
        return failure

    async def _keep_invisible(self, message: QueueMessage) -> None:
        period = max(0.5, self.nth.visibility_timeout_s / 2)
        while True:
            await asyncio.sleep(period)
            try:
                await asyncio.to_thread(
                    self.aws.extend,
                    self.queue_url,
                    message.receipt_handle,
                    self.nth.visibility_timeout_s,
                )
            except CloudError as exc:
                log.warning("SQS message %s: visibility not extended: %s", message.message_id, exc)

    # -- one event -------------------------------------------------------------------------
    def find_node(self, instance: InstanceInfo) -> str | None:
        """The Node of an instance in the informer's store: by private DNS name, or by
        providerID (call once the informer has listed)."""
        if self.nth.use_provider_id:
            for candidate in list(self.nodes.store.values()):
                provider_id = str(candidate.get("spec", {}).get("providerID", ""))
                if provider_id.endswith(f"/{instance.id}"):
                    return str(candidate["metadata"]["name"])
            return None
        if not instance.private_dns_name:
            return None
        node = self.nodes.store.get(instance.private_dns_name)
        return None if node is None else str(node["metadata"]["name"])

    def find_node_live(self, instance: InstanceInfo) -> str | None:
        """The Node of an instance from the API server (only when the store has none)."""
        if self.nth.use_provider_id:
            for candidate in self.kube.list(NODES)["items"]:
                provider_id = str(candidate.get("spec", {}).get("providerID", ""))
                if provider_id.endswith(f"/{instance.id}"):
                    return str(candidate["metadata"]["name"])
            return None
        if not instance.private_dns_name:
            return None
        node = self.kube.get(NODES, instance.private_dns_name)
        return None if node is None else str(node["metadata"]["name"])

    def _skip(self, note: str) -> Dispatch:
        return Dispatch(keep_message=not self.nth.delete_message_if_node_not_found, note=note)

    async def dispatch(self, event: InterruptionEvent) -> Dispatch:
        """Start or join the drain of the event's node; errors keep the message."""
        try:
            instance = await asyncio.to_thread(self.aws.describe_instance, event.instance_id)
            if instance is None:
                return self._skip(f"instance {event.instance_id} does not exist")
            if self.nth.check_tag_before_draining and self.nth.managed_tag not in instance.tags:
                return Dispatch(note=f"instance {instance.id} is not tagged {self.nth.managed_tag}")
            launch = instance.launch_time
            if launch is not None and launch > event.start_time + LAUNCH_SKEW:
                return Dispatch(note=f"{event.event_id} predates the launch of {instance.id}")
            self.nodes.start()
            listed = await self.nodes.wait_synced(NODES_SYNC_TIMEOUT_S)
            node = self.find_node(instance) if listed else None
            if node is None:  # a Node the informer has not seen (yet): ask once
                node = await asyncio.to_thread(self.find_node_live, instance)
            if node is None:
                return self._skip(f"instance {instance.id} has no Node in the cluster")
            return await self._start(event, instance, node)
        except CloudError as exc:
            NTH_EVENTS_ERROR.labels("describe-instance").inc()
            return Dispatch(keep_message=True, note=f"{event.event_id}: {exc}")

    async def _start(self, event: InterruptionEvent, instance: InstanceInfo, node: str) -> Dispatch:
        wf_id, attributes, start = await start_drain(
            self.client,
            self.nth,
            event,
            instance,
            node,
            task_queue=self.task_queue,
            cluster=self.cluster,
            provider=self.provider,
            id_scope=self.id_scope,
        )
        if start is None:
            # Only a successful run blocks a new one: this interruption was handled already.
            if event.lifecycle is None or await self._completed_by(wf_id, event.lifecycle.token):
                return Dispatch(note=f"{event.event_id}: {wf_id} already completed")
            return await self._complete_late_lifecycle(event, node, attributes)
        return Dispatch(handle=start.handle, note=f"{event.event_id} → {wf_id}", node=node)

    async def _completed_by(self, wf_id: str, token: str) -> bool:
        """Whether the completed drain ``wf_id`` completed the lifecycle action ``token``."""
        try:
            result = await self.client.get_workflow_handle(wf_id, result_type=DrainResult).result()
        except Exception as exc:  # not readable (e.g. past retention): complete it anyway
            log.info("drain %s: result not readable (%s)", wf_id, exc)
            return False
        return token in result.lifecycle_actions_completed

    async def _complete_late_lifecycle(
        self, event: InterruptionEvent, node: str, attributes: TypedSearchAttributes
    ) -> Dispatch:
        assert event.lifecycle is not None
        wf_id = lifecycle_workflow_id(event.lifecycle)
        start = await signal_with_start(
            self.client,
            CompleteLifecycleWorkflow.run,
            LifecycleInput(node=node, cluster=self.cluster, action=event.lifecycle),
            kind="CompleteLifecycle",
            id=wf_id,
            task_queue=self.task_queue,
            summary=f"complete the lifecycle action of Node {node}",
            search_attributes=attributes,
        )
        if start is None:
            return Dispatch(note=f"{event.event_id}: lifecycle action already completed")
        return Dispatch(handle=start.handle, note=f"{event.event_id}: drained before; → {wf_id}")

    # -- gauges ----------------------------------------------------------------------------
    def refresh_tagged_metrics(self) -> tuple[int, int]:
        """(tagged instances, tagged nodes), also set on the gauges."""
        instances = list(self.aws.tagged_instances(self.nth.managed_tag))
        if not instances:  # no Node to count (nor, checking the tag, to drain): none listed
            NTH_TAGGED_INSTANCES.set(0)
            NTH_TAGGED_NODES.set(0)
            return 0, 0
        ids = {i.id for i in instances}
        names = {i.private_dns_name for i in instances if i.private_dns_name}
        self.nodes.start()
        listed = self.nodes.synced.wait(NODES_SYNC_TIMEOUT_S)
        items = list(self.nodes.store.values()) if listed else self.kube.list(NODES)["items"]
        nodes = 0
        for node in items:
            provider_id = str(node.get("spec", {}).get("providerID", ""))
            if node["metadata"]["name"] in names or provider_id.rsplit("/", 1)[-1] in ids:
                nodes += 1
        NTH_TAGGED_INSTANCES.set(len(instances))
        NTH_TAGGED_NODES.set(nodes)
        return len(instances), nodes

    async def _tagged_metrics_loop(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.refresh_tagged_metrics)
            except Exception as exc:
                NTH_EVENTS_ERROR.labels("tagged-metrics").inc()
                log.warning("tagged node metrics not refreshed: %s", exc)
            await asyncio.sleep(self.nth.tagged_metrics_interval_s)
