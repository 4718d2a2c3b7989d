"""DrainNodeWorkflow: one interruption of one instance → taint, cordon, drain, lifecycle action.

Steps: wait until the earliest event's start minus the grace period; taint then cordon (a
rebalance recommendation, unless rebalance draining is on, and ``cordon_only`` stop here);
drain (kubectl drain's filters, then eviction rounds that heartbeat) within the global timeout;
optionally wait for the node's VolumeAttachments; one webhook; ``CompleteLifecycleAction
(CONTINUE)`` for every ASG event; an Event on the Node and an ``actions`` count.
Why: docs/decisions/0050-termination-handler-as-workflows.md.

Rules:
- The workflow ID names the node and the instance incarnation
  (:func:`cloudloop.messages.termination.drain_workflow_id`), never the message: every delivery
  of one interruption is signalled-with-start into one workflow, adding its taint and, for ASG
  events, its lifecycle action.
- Lifecycle heartbeats run on a durable timer (``heartbeat_interval_s``) until the action is
  completed or ``heartbeat_until_s`` passed, so a worker restart does not lose them.
- Any failure fails the workflow: the message is left for redelivery, the node stays tainted and
  cordoned; a new delivery starts a new run (reuse allowed after a failure).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from workflows.timeouts import SINGLE_CALL_TIMEOUT

with workflow.unsafe.imports_passed_through():
    from cloudloop.messages.termination import (
        DRAIN_SIGNAL,
        CordonNodeInput,
        DrainActivity,
        DrainInput,
        DrainResult,
        EventKind,
        EvictPodsInput,
        EvictPodsResult,
        InterruptionEvent,
        LifecycleAction,
        LifecycleActionInput,
        LifecycleInput,
        ListPodsInput,
        NodeTaint,
        OutcomeInput,
        PodPlan,
        PodRef,
        QueueInfo,
        QueueRulesInput,
        QueueSetupInput,
        QueueSetupResult,
        TaintNodeInput,
        WaitVolumeAttachmentsInput,
        WebhookInput,
    )

#: Kubernetes calls: retry until they work (the drain's deadline bounds the eviction rounds).
KUBE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
#: AWS lifecycle calls: a few minutes of retries, then the run fails and the message returns.
AWS_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=10,
)
HEARTBEAT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
ONCE = RetryPolicy(maximum_attempts=1)
#: Pod lists per drain: the last one confirms no pod arrived while the others were evicted.
MAX_PLANS = 3


def is_cordon_only(event: InterruptionEvent, *, cordon_only: bool, rebalance_drains: bool) -> bool:
    return cordon_only or (
        event.kind == EventKind.REBALANCE_RECOMMENDATION and not rebalance_drains
    )


def _failure(err: BaseException) -> tuple[str, str]:
    """(type, message) of an activity or workflow failure."""
    cause = err.cause if isinstance(err, ActivityError) else err
    if isinstance(cause, ApplicationError):
        return cause.type or "ApplicationError", cause.message
    return type(cause).__name__, str(cause or err)


def _pod_names(pods: list[PodRef], shown: int = 5) -> str:
    """The first ``shown`` pods' keys, and how many more (an activity summary stays short)."""
    names = ", ".join(p.key for p in pods[:shown])
    return f"{names} and {len(pods) - shown} more" if len(pods) > shown else names


@workflow.defn(name="DrainNode")
class DrainNodeWorkflow:
    @workflow.init
    def __init__(self, input: DrainInput) -> None:
        self._input = input
        self._events: dict[str, InterruptionEvent] = {}
        self._tainted: set[str] = set()
        self._actions: dict[str, LifecycleAction] = {}
        self._completed: list[str] = []
        self._heartbeats: list[asyncio.Task[None]] = []
        self._heartbeats_stopped = False
        self._changed = False

    @workflow.signal(name=DRAIN_SIGNAL)
    def add_event(self, event: InterruptionEvent) -> None:
        """Another message about the same interruption (any kind, any replica)."""
        if event.event_id in self._events:
            return
        self._events[event.event_id] = event
        self._changed = True
        action = event.lifecycle
        if action is not None and action.token not in self._actions:
            self._actions[action.token] = action
            options = self._input.options
            if not self._heartbeats_stopped and options.heartbeat_interval_s > 0:
                self._heartbeats.append(asyncio.create_task(self._heartbeat(action)))

    @workflow.query
    def event_ids(self) -> list[str]:
        return list(self._events)

    # -- lifecycle heartbeats --------------------------------------------------------------
    async def _heartbeat(self, action: LifecycleAction) -> None:
        options = self._input.options
        until = workflow.now() + timedelta(seconds=options.heartbeat_until_s)
        while True:
            try:
                await workflow.wait_condition(
                    lambda: self._heartbeats_stopped,
                    timeout=timedelta(seconds=options.heartbeat_interval_s),
                )
                return
            except TimeoutError:
                pass
            if workflow.now() >= until:
                workflow.logger.info("lifecycle heartbeats for %s: limit reached", action.token)
                return
            try:
                alive = await workflow.execute_activity(
                    DrainActivity.RECORD_LIFECYCLE_HEARTBEAT,
                    LifecycleActionInput(action=action),
                    result_type=bool,
                    summary=f"keep the lifecycle action of {self._input.node} alive",
                    start_to_close_timeout=SINGLE_CALL_TIMEOUT,
                    retry_policy=HEARTBEAT_RETRY,
                )
            except ActivityError as err:
                workflow.logger.warning("lifecycle heartbeat failed: %s", _failure(err)[1])
                continue
            if not alive:
                workflow.logger.info("lifecycle action %s is no longer active", action.token)
                return

    async def _stop_heartbeats(self) -> None:
        self._heartbeats_stopped = True
        if self._heartbeats:
            await asyncio.gather(*self._heartbeats)

    # -- steps -----------------------------------------------------------------------------
    async def _wait_until_due(self) -> None:
        grace = timedelta(seconds=self._input.options.node_termination_grace_period_s)
        while True:
            due = min(e.start_time for e in self._events.values()) - grace
            left = (due - workflow.now()).total_seconds()
            if left <= 0:
                return
            self._changed = False  # an earlier event wakes the wait
            try:
                await workflow.wait_condition(lambda: self._changed, timeout=left)
            except TimeoutError:
                return

    async def _taint(self) -> bool:
        """Taint for every event not tainted yet; ``False`` when the Node does not exist."""
        new = [e for e in self._events.values() if e.event_id not in self._tainted]
        if not new:
            return True
        found: bool = await workflow.execute_activity(
            DrainActivity.TAINT_NODE,
            TaintNodeInput(
                node=self._input.node,
                taints=[
                    NodeTaint(
                        key=e.taint_key,
                        value=e.taint_value,
                        effect=self._input.options.taint_effect,
                    )
                    for e in new
                ],
            ),
            result_type=bool,
            summary=f"taint Node {self._input.node}: {len(new)} event(s)",
            start_to_close_timeout=SINGLE_CALL_TIMEOUT,
            retry_policy=KUBE_RETRY,
        )
        self._tainted.update(e.event_id for e in new)
        return found

    async def _drain(self) -> int:
        options = self._input.options
        node = self._input.node
        deadline = workflow.now() + timedelta(seconds=options.node_termination_grace_period_s)
        grace = options.pod_termination_grace_period_s
        evicted = 0
        for _ in range(MAX_PLANS):
            plan = await workflow.execute_activity(
                DrainActivity.LIST_PODS,
                ListPodsInput(
                    node=node,
                    ignore_daemonsets=options.ignore_daemonsets,
                    delete_emptydir_data=options.delete_emptydir_data,
                    force=options.force,
                ),
                result_type=PodPlan,
                summary=f"list the pods to evict from {node}",
                start_to_close_timeout=SINGLE_CALL_TIMEOUT,
                retry_policy=KUBE_RETRY,
            )
            if plan.refused:
                listed = ", ".join(f"{n.pod.key} ({n.reason})" for n in plan.refused[:5])
                raise ApplicationError(
                    f"cannot drain {node}: {len(plan.refused)} pod(s) may not be evicted: {listed}",
                    type="DrainRefused",
                    non_retryable=True,
                )
            pods = plan.evict
            if not pods:
                break
            while pods:
                if workflow.now() >= deadline:
                    raise self._timeout(len(pods), [])
                round = await workflow.execute_activity(
                    DrainActivity.EVICT_PODS,
                    EvictPodsInput(
                        node=node,
                        pods=pods,
                        grace_period_s=grace if grace >= 0 else None,
                        retry_interval_s=options.eviction_retry_interval_s,
                        poll_interval_s=options.drain_poll_interval_s,
                        deadline=deadline,
                        round_s=options.drain_round_s,
                        workflow_id=workflow.info().workflow_id,
                    ),
                    result_type=EvictPodsResult,
                    summary=f"evict {len(pods)} pod(s) from {node}: {_pod_names(pods)}",
                    start_to_close_timeout=timedelta(seconds=options.drain_round_s + 120),
                    heartbeat_timeout=timedelta(seconds=options.activity_heartbeat_timeout_s),
                    retry_policy=KUBE_RETRY,
                )
                evicted += len(round.evicted)
                if round.failed:
                    listed = ", ".join(f"{n.pod.key}: {n.reason}" for n in round.failed[:3])
                    raise ApplicationError(
                        f"eviction failed on {node}: {listed}",
                        type="EvictionFailed",
                        non_retryable=True,
                    )
                pods = round.remaining
                if pods and workflow.now() >= deadline:
                    raise self._timeout(
                        len(pods), [f"{n.pod.key}: {n.reason}" for n in round.blocked]
                    )
        return evicted

    def _timeout(self, remaining: int, blocked: list[str]) -> ApplicationError:
        limit = self._input.options.node_termination_grace_period_s
        detail = f"; blocked: {'; '.join(blocked[:3])}" if blocked else ""
        return ApplicationError(
            f"global timeout reached: {limit:g}s; {remaining} pod(s) still on "
            f"{self._input.node}{detail}",
            type="DrainTimeout",
            non_retryable=True,
        )

    async def _wait_volume_attachments(self) -> None:
        options = self._input.options
        left = await workflow.execute_activity(
            DrainActivity.WAIT_VOLUME_ATTACHMENTS,
            WaitVolumeAttachmentsInput(
                node=self._input.node, timeout_s=options.volume_attachment_timeout_s
            ),
            result_type=list[str],
            summary=f"wait for the VolumeAttachments of {self._input.node} to go",
            start_to_close_timeout=timedelta(seconds=options.volume_attachment_timeout_s + 120),
            heartbeat_timeout=timedelta(seconds=options.activity_heartbeat_timeout_s),
            retry_policy=KUBE_RETRY,
        )
        if left:
            await self._outcome(
                "wait-volume-attachments",
                False,
                "VolumeAttachmentsRemain",
                f"{len(left)} VolumeAttachment(s) still name the node after "
                f"{options.volume_attachment_timeout_s:g}s: {', '.join(left[:5])}",
            )

    async def _send_webhook(self) -> None:
        event = next(iter(self._events.values()))
        action = next(iter(self._actions.values()), None)
        try:
            await workflow.execute_activity(
                DrainActivity.SEND_WEBHOOK,
                WebhookInput(
                    event_id=event.event_id,
                    kind=event.kind.value,
                    instance_id=self._input.instance_id,
                    node_name=self._input.node,
                    description=event.description,
                    start_time=event.start_time,
                    state=event.state,
                    auto_scaling_group=action.auto_scaling_group if action else "",
                    instance_type=self._input.instance_type,
                    availability_zone=self._input.zone,
                    provider_id=self._input.provider_id,
                ),
                result_type=bool,
                summary=f"send the webhook for {self._input.node} ({event.kind.value})",
                start_to_close_timeout=timedelta(seconds=15),
                retry_policy=ONCE,  # at most one notification per drain
            )
        except ActivityError as err:
            workflow.logger.warning("webhook not sent: %s", _failure(err)[1])

    async def _complete_lifecycle_actions(self) -> None:
        while todo := [a for t, a in self._actions.items() if t not in self._completed]:
            for action in todo:
                active = await workflow.execute_activity(
                    DrainActivity.COMPLETE_LIFECYCLE_ACTION,
                    LifecycleActionInput(action=action),
                    result_type=bool,
                    summary=f"complete the lifecycle action of {self._input.node}",
                    start_to_close_timeout=SINGLE_CALL_TIMEOUT,
                    retry_policy=AWS_RETRY,
                )
                if not active:  # completed by an earlier attempt, or expired
                    workflow.logger.info("lifecycle action %s was no longer active", action.token)
                self._completed.append(action.token)

    async def _outcome(self, action: str, ok: bool, reason: str, message: str) -> None:
        await workflow.execute_activity(
            DrainActivity.RECORD_OUTCOME,
            OutcomeInput(
                node=self._input.node,
                action=action,
                ok=ok,
                reason=reason,
                message=f"{message} (workflow {workflow.info().workflow_id})",
            ),
            summary=f"{'Event' if ok else 'Warning'} {reason} on Node {self._input.node}",
            start_to_close_timeout=SINGLE_CALL_TIMEOUT,
            retry_policy=KUBE_RETRY,
        )

    # -- run -------------------------------------------------------------------------------
    @workflow.run
    async def run(self, input: DrainInput) -> DrainResult:
        self.add_event(input.event)
        options = input.options
        action = "cordon" if options.cordon_only else "cordon-and-drain"
        result = DrainResult(node=input.node, action=action)
        try:
            await self._wait_until_due()
            result.node_found = await self._taint()
            if result.node_found:
                result.node_found = await workflow.execute_activity(
                    DrainActivity.CORDON_NODE,
                    CordonNodeInput(node=input.node),
                    result_type=bool,
                    summary=f"cordon Node {input.node}",
                    start_to_close_timeout=SINGLE_CALL_TIMEOUT,
                    retry_policy=KUBE_RETRY,
                )
            if result.node_found and not options.cordon_only:
                result.evicted = await self._drain()
            if result.node_found and options.wait_for_volume_attachments:
                await self._wait_volume_attachments()
            if result.node_found:
                await self._taint()  # events that arrived meanwhile
        except (ActivityError, ApplicationError) as err:
            kind, message = _failure(err)
            await self._stop_heartbeats()
            await self._outcome(action, False, "CordonAndDrainError", f"{kind}: {message}")
            raise ApplicationError(message, type=kind, non_retryable=True) from err

        if result.node_found:
            await self._send_webhook()
        await self._stop_heartbeats()
        try:
            await self._complete_lifecycle_actions()
        except ActivityError as err:
            kind, message = _failure(err)
            await self._outcome("post-drain", False, "PostDrainError", f"{kind}: {message}")
            raise ApplicationError(message, type=kind, non_retryable=True) from err
        summary = (
            f"{action} of {input.node} done: {result.evicted} pod(s) evicted, "
            f"{len(self._completed)} lifecycle action(s) completed"
            if result.node_found
            else f"node {input.node} not found; {len(self._completed)} lifecycle action(s) "
            "completed"
        )
        await self._outcome(
            action, True, "CordonAndDrain" if not options.cordon_only else "Cordon", summary
        )
        await self._complete_lifecycle_actions()  # an event that arrived during the last step
        result.event_ids = list(self._events)
        result.lifecycle_actions_completed = list(self._completed)
        return result


@workflow.defn(name="CompleteLifecycleAction")
class CompleteLifecycleWorkflow:
    """A lifecycle action that arrived after its instance's drain completed: continue it."""

    @workflow.run
    async def run(self, input: LifecycleInput) -> bool:
        active: bool = await workflow.execute_activity(
            DrainActivity.COMPLETE_LIFECYCLE_ACTION,
            LifecycleActionInput(action=input.action),
            result_type=bool,
            summary=f"complete the lifecycle action of instance {input.action.instance_id}",
            start_to_close_timeout=SINGLE_CALL_TIMEOUT,
            retry_policy=AWS_RETRY,
        )
        return active


#: A queue step makes several AWS calls (five rules and their targets); it heartbeats, so a dead
#: worker costs the heartbeat timeout, not this.
QUEUE_STEP_TIMEOUT = timedelta(minutes=1)


@workflow.defn(name="TerminationQueue")
class TerminationQueueWorkflow:
    """The queue mode's AWS side, made idempotently (queue, then rules, target and policy, then
    lifecycle hooks: each step finds what exists first) or removed; AWS errors are retried a few
    minutes, then the run fails and the caller starts it again."""

    @workflow.run
    async def run(self, input: QueueSetupInput) -> QueueSetupResult:
        if input.remove:
            removed: list[str] = await workflow.execute_activity(
                DrainActivity.REMOVE_QUEUE,
                input.spec,
                result_type=list[str],
                summary="remove the interruption queue, its rules and hooks",
                start_to_close_timeout=QUEUE_STEP_TIMEOUT,
                heartbeat_timeout=SINGLE_CALL_TIMEOUT,
                retry_policy=AWS_RETRY,
            )
            return QueueSetupResult(removed=removed)
        queue = await workflow.execute_activity(
            DrainActivity.ENSURE_QUEUE,
            input.spec,
            result_type=QueueInfo,
            summary="find or make the interruption queue",
            start_to_close_timeout=SINGLE_CALL_TIMEOUT,
            retry_policy=AWS_RETRY,
        )
        rules: list[str] = await workflow.execute_activity(
            DrainActivity.ENSURE_QUEUE_RULES,
            QueueRulesInput(spec=input.spec, queue=queue),
            result_type=list[str],
            summary="find or make the EventBridge rules into the queue",
            start_to_close_timeout=QUEUE_STEP_TIMEOUT,
            heartbeat_timeout=SINGLE_CALL_TIMEOUT,
            retry_policy=AWS_RETRY,
        )
        hooks: list[str] = []
        if input.spec.lifecycle_hook_groups:
            hooks = await workflow.execute_activity(
                DrainActivity.ENSURE_LIFECYCLE_HOOKS,
                input.spec,
                result_type=list[str],
                summary="find or make the lifecycle hooks of "
                f"{len(input.spec.lifecycle_hook_groups)} Auto Scaling group(s)",
                start_to_close_timeout=QUEUE_STEP_TIMEOUT,
                heartbeat_timeout=SINGLE_CALL_TIMEOUT,
                retry_policy=AWS_RETRY,
            )
        return QueueSetupResult(queue_url=queue.url, queue_arn=queue.arn, rules=rules, hooks=hooks)


#: Registered by the worker.
DRAIN_WORKFLOWS: list[type] = [
    DrainNodeWorkflow,
    CompleteLifecycleWorkflow,
    TerminationQueueWorkflow,
]
