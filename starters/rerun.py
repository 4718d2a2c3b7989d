"""``cloudloop retry workflow|layout|drain|volume``: run a workflow that ended without
completing again, with the input, queue, timeouts, memo and search attributes of its last run.

Rules: only a run that failed, timed out, was terminated or cancelled is run again (a running
or completed one is refused, named); the new run goes to the queue of the old one, and only
when that queue is one of this cluster's and no other cluster claims it; the input payloads
are decoded with this process's codec and encoded again once (never stored in plaintext); a
second retry racing this one is refused by the ID reuse policy, not run twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio.api.history.v1 import HistoryEvent, WorkflowExecutionStartedEventAttributes
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
)
from temporalio.common import RawValue, RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from cloudloop import claim
from cloudloop.cloud.registry import Settings
from cloudloop.messages.layout import workflow_id as layout_workflow_id
from cloudloop.messages.scope import scoped_id
from cloudloop.messages.volume import volume_workflow_id

#: The ends a retry is for: the run did not complete.
RETRYABLE = frozenset(
    {
        WorkflowExecutionStatus.FAILED,
        WorkflowExecutionStatus.TIMED_OUT,
        WorkflowExecutionStatus.TERMINATED,
        WorkflowExecutionStatus.CANCELED,
    }
)
#: The runs of a node's drains ``retry drain`` looks at (one per interruption).
DRAIN_SEARCH_LIMIT = 100


class RetryRefused(RuntimeError):
    """The workflow cannot be run again (why, for the command's output)."""


@dataclass(frozen=True)
class Rerun:
    workflow_id: str
    workflow_type: str
    task_queue: str
    old_run_id: str
    new_run_id: str
    old_status: str

    def __str__(self) -> str:
        return (
            f"started {self.workflow_type} {self.workflow_id} again on {self.task_queue} "
            f"(run {self.new_run_id}; the {self.old_status.lower()} run was {self.old_run_id})"
        )


async def rerun(client: Client, settings: Settings, workflow_id: str) -> Rerun:
    """Run ``workflow_id``'s last run again (see the module's rules)."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        description = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise RetryRefused(f"no workflow {workflow_id}") from None
        raise
    status = description.status
    if status not in RETRYABLE:
        named = status.name.lower() if status else "in an unknown state"
        raise RetryRefused(f"workflow {workflow_id} is {named}: nothing to retry")
    queue = description.task_queue
    ours = settings.temporal.all_queues()
    if queue not in ours:
        raise RetryRefused(
            f"workflow {workflow_id} ran on queue {queue}, not one of this cluster's "
            f"({', '.join(ours)}): it is another cluster's work"
        )
    mine = claim.ClusterIdentity.named_by(settings)
    await claim.refuse_if_claimed_elsewhere(client, [queue], mine)
    started = await _started_event(client, workflow_id, description.run_id)
    attributes = started.workflow_execution_started_event_attributes
    payloads = list(attributes.input.payloads)
    codec = client.data_converter.payload_codec
    if codec is not None and payloads:
        payloads = await codec.decode(payloads)
    try:
        new = await client.start_workflow(
            description.workflow_type,
            args=[RawValue(payload) for payload in payloads],
            id=workflow_id,
            task_queue=queue,
            execution_timeout=_duration(attributes, "workflow_execution_timeout"),
            run_timeout=_duration(attributes, "workflow_run_timeout"),
            task_timeout=_duration(attributes, "workflow_task_timeout"),
            retry_policy=(
                RetryPolicy.from_proto(attributes.retry_policy)
                if attributes.HasField("retry_policy")
                else None
            ),
            memo=await description.memo(),
            search_attributes=description.typed_search_attributes,
            static_summary=await description.static_summary(),
            # A retry racing this one (or the starter's own new run) is refused, not doubled.
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
        )
    except WorkflowAlreadyStartedError:
        raise RetryRefused(f"workflow {workflow_id} was started again meanwhile") from None
    return Rerun(
        workflow_id=workflow_id,
        workflow_type=description.workflow_type,
        task_queue=queue,
        old_run_id=description.run_id,
        new_run_id=new.result_run_id or "",
        old_status=status.name if status else "",
    )


async def _started_event(client: Client, workflow_id: str, run_id: str) -> HistoryEvent:
    async for event in client.get_workflow_handle(
        workflow_id, run_id=run_id
    ).fetch_history_events():
        if event.HasField("workflow_execution_started_event_attributes"):
            return event
        break
    raise RetryRefused(f"workflow {workflow_id}: its history has no start event")


def _duration(attributes: WorkflowExecutionStartedEventAttributes, field: str) -> timedelta | None:
    """A timeout of the old run (unset or zero: none)."""
    if not attributes.HasField(field):  # type: ignore[arg-type]
        return None
    value: timedelta = getattr(attributes, field).ToTimedelta()
    return value if value.total_seconds() > 0 else None


def layout_id(settings: Settings, prefix: str) -> str:
    """The layout action's workflow ID of ``prefix`` in this cluster's ID scope."""
    return layout_workflow_id(prefix, settings.temporal.id_scope)


def volume_id(settings: Settings, volume: str) -> str:
    """The workflow ID the operations on an existing volume run under."""
    return scoped_id(settings.temporal.id_scope, volume_workflow_id(volume))


async def drain_id(client: Client, settings: Settings, node: str) -> str:
    """The newest drain of ``node`` that did not complete (one per instance incarnation)."""
    prefix = scoped_id(settings.temporal.id_scope, f"drain/{node}/")
    query = f'WorkflowType = "DrainNode" AND WorkflowId STARTS_WITH "{prefix}"'
    failed: list[tuple[datetime, str]] = []
    async for execution in client.list_workflows(query, limit=DRAIN_SEARCH_LIMIT):
        if execution.status in RETRYABLE:
            failed.append((execution.start_time, execution.id))
    if not failed:
        raise RetryRefused(f"no drain of node {node} ended without completing")
    return max(failed)[1]
