"""Temporal actions per operation, counted from the histories the other benchmarks left behind.

Temporal bills and throttles by actions. An action here is a workflow task, an activity (a
scheduled activity or a local-activity marker), a signal or a timer; the counts come from the
stored histories of this bench run (run after the benchmarks named below:
``python -m bench loadbalancers volumes machines csi termination actions``), medians over up to
``SAMPLES`` workflows of each kind:

- ``temporal_actions_per_lb_ensure``: a ``LoadBalancer`` workflow from its start to the workflow
  task after its first successful ``lb.ensure`` (Service created → ingress written).
- ``temporal_actions_per_lb_delete``: a ``LoadBalancer`` workflow from its ``tear_down`` signal
  to its completion (Service deleted → LB, status, finalizer gone; ``DeletedLoadBalancer``).
- ``temporal_actions_per_attach``: a whole ``AttachVolume`` workflow.
- ``temporal_actions_per_machine``: a whole ``Machine`` workflow (create, ready, delete).
- ``temporal_actions_per_csi_create``: a whole ``CreateVolume`` workflow (``csi`` benchmark).
- ``temporal_actions_per_drain``: a whole ``DrainNode`` workflow (``termination`` benchmark:
  cordon, evictions, the lifecycle action).

A kind with no finished workflow in the run prints no figure.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from bench.context import BenchContext
from cloudloop.messages.loadbalancer import LoadBalancerSignal
from cloudloop.messages.volume import VolumeWorkflow

SAMPLES = 30
LOCAL_ACTIVITY_MARKER = "core_local_activity"
_ACTIONS = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
    EventType.EVENT_TYPE_TIMER_STARTED,
}


def actions(events: Sequence[HistoryEvent]) -> int:
    """Workflow tasks + activities (local ones too) + signals + timers among ``events``."""
    count = 0
    for event in events:
        if event.event_type in _ACTIONS:
            count += 1
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = event.marker_recorded_event_attributes.marker_name
            count += marker == LOCAL_ACTIVITY_MARKER
    return count


def until_first(events: Sequence[HistoryEvent], activity_type: str) -> list[HistoryEvent] | None:
    """The events up to the workflow task completed after the first successful
    ``activity_type``; ``None`` when it never succeeded."""
    scheduled: set[int] = set()
    done = False
    for index, event in enumerate(events):
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == activity_type:
                scheduled.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = done or event.activity_task_completed_event_attributes.scheduled_event_id in (
                scheduled
            )
        elif done and event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            # the commands of this task (e.g. the drift-repair timer) belong to the ensure
            rest = events[index + 1 :]
            tail = []
            for later in rest:
                if later.event_type in (
                    EventType.EVENT_TYPE_TIMER_STARTED,
                    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
                ):
                    tail.append(later)
                else:
                    break
            return [*events[: index + 1], *tail]
    return None


def from_signal(events: Sequence[HistoryEvent], signal: str) -> list[HistoryEvent] | None:
    """The events from the first ``signal`` on; ``None`` when it never came."""
    for index, event in enumerate(events):
        if (
            event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            and event.workflow_execution_signaled_event_attributes.signal_name == signal
        ):
            return list(events[index:])
    return None


async def _histories(
    ctx: BenchContext,
    workflow_type: str,
    window: Callable[[list[HistoryEvent]], list[HistoryEvent] | None] = lambda events: events,
) -> list[list[HistoryEvent]]:
    """Up to ``SAMPLES`` completed workflows' ``window`` of events (skipping ``None`` windows
    and the ``lbscale`` benchmark's workflows, whose ensures were "handled elsewhere")."""
    found: list[list[HistoryEvent]] = []
    async for execution in ctx.client.list_workflows(f"WorkflowType = '{workflow_type}'"):
        if execution.status is None or execution.status.name != "COMPLETED":
            continue
        if execution.id.startswith("lb/bench-lbscale-"):
            continue
        handle = ctx.client.get_workflow_handle(execution.id, run_id=execution.run_id)
        events = window(list((await handle.fetch_history()).events))
        if events is not None:
            found.append(events)
        if len(found) >= SAMPLES:
            break
    return found


async def temporal_action_figures(ctx: BenchContext) -> dict[str, float]:
    kinds: list[tuple[str, str, Callable[[list[HistoryEvent]], list[HistoryEvent] | None]]] = [
        ("temporal_actions_per_lb_ensure", "LoadBalancer", lambda e: until_first(e, "lb.ensure")),
        (
            "temporal_actions_per_lb_delete",
            "LoadBalancer",
            lambda e: from_signal(e, LoadBalancerSignal.TEAR_DOWN),
        ),
        ("temporal_actions_per_attach", "AttachVolume", lambda e: e),
        ("temporal_actions_per_machine", "Machine", lambda e: e),
        ("temporal_actions_per_csi_create", VolumeWorkflow.CREATE, lambda e: e),
        ("temporal_actions_per_drain", "DrainNode", lambda e: e),
    ]
    figures: dict[str, float] = {}
    for figure, workflow_type, window in kinds:
        counts = [actions(events) for events in await _histories(ctx, workflow_type, window)]
        if counts:
            figures[figure] = statistics.median(counts)
    return figures
