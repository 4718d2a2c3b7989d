"""Where the time of a workflow-path sample goes: steps read from the workflow's history.

A benchmark records, for each sample, the wall-clock time the request was made, the time the
caller saw the result, the workflow it went through and the cloud time spent meanwhile (the
``cloud_api_request_duration_seconds`` sum, from :func:`cloud_seconds`). :func:`breakdown` turns
them into per-step medians, printed as ``<prefix>_step_<step>_median_s`` beside the figures:

- ``starter``: request made → ``WorkflowExecutionStarted`` (informer, starter, the start RPC);
- ``workflow_task_dispatch``: started → the first workflow task started (eager start: ~0);
- ``workflow_task_run``: that task started → completed (the worker builds the workflow in its
  sandbox, runs it to the activity, answers);
- ``activity_schedule_to_start``: ``ActivityTaskScheduled`` → ``ActivityTaskStarted``;
- ``activity_cloud``: the cloud requests made during the sample;
- ``activity_other``: the rest of the activity (status write, Events, SDK) up to its completion,
  or up to the caller seeing the result when that came first (a status the caller watches);
  a local activity (a marker, no activity task) runs inside the first workflow task: its
  ``activity_*`` steps span that task, from its start to its completion RPC;
- ``final_workflow_task``: activity completed → ``WorkflowExecutionCompleted`` (the workflow task
  that returns the result; none for a long-lived workflow);
- ``result``: the last of these → the caller saw the result (the result's long poll, a watch).

The steps are consecutive, so they add up to the sample's time (medians need not).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import REGISTRY
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

STEPS = (
    "starter",
    "workflow_task_dispatch",
    "workflow_task_run",
    "activity_schedule_to_start",
    "activity_cloud",
    "activity_other",
    "final_workflow_task",
    "result",
)
_MARKS = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: "started",
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED: "task_started",
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: "task_completed",
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "scheduled",
    EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED: "activity_started",
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_completed",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "completed",
    EventType.EVENT_TYPE_MARKER_RECORDED: "marker",
}


def cloud_seconds() -> float:
    """Seconds spent in cloud requests by this process so far (all providers, operations)."""
    total = 0.0
    for metric in REGISTRY.collect():
        if metric.name == "cloud_api_request_duration_seconds":
            total += sum(s.value for s in metric.samples if s.name.endswith("_seconds_sum"))
    return total


@dataclass
class Sample:
    """One request through a workflow: wall-clock times (``time.time()``) and its workflow."""

    workflow_id: str
    requested: float
    seen: float
    cloud_s: float = 0.0
    run_id: str | None = None


async def steps_of(client: Client, sample: Sample) -> dict[str, float]:
    """The sample's consecutive steps, from the first of each marked event in its history."""
    handle = client.get_workflow_handle(sample.workflow_id, run_id=sample.run_id)
    history = await handle.fetch_history()
    marks: dict[str, float] = {}
    for event in history.events:
        name = _MARKS.get(event.event_type)
        if name is not None and name not in marks:
            marks[name] = event.event_time.ToDatetime().timestamp()
    started = marks.get("started", sample.requested)
    task_started = marks.get("task_started", started)
    scheduled = marks.get("scheduled", task_started)
    activity_started = marks.get("activity_started", scheduled)
    activity_end = min(marks.get("activity_completed", sample.seen), sample.seen)
    if "scheduled" not in marks and "marker" in marks:  # a local activity in the first task
        activity_end = min(marks.get("task_completed", sample.seen), sample.seen)
    activity_s = max(activity_end - activity_started, 0.0)
    cloud = min(sample.cloud_s, activity_s)
    completed = min(marks.get("completed", activity_end), sample.seen)
    return {
        "starter": started - sample.requested,
        "workflow_task_dispatch": task_started - started,
        "workflow_task_run": scheduled - task_started,
        "activity_schedule_to_start": activity_started - scheduled,
        "activity_cloud": cloud,
        "activity_other": activity_s - cloud,
        "final_workflow_task": max(completed - activity_end, 0.0),
        "result": max(sample.seen - max(completed, activity_end), 0.0),
    }


async def timeline(client: Client, sample: Sample) -> str:
    """The sample's history as ``+<ms> <event>`` from the request on, then ``+<ms> seen``:
    printed on stderr, for reading where a workflow path's time goes event by event."""
    handle = client.get_workflow_handle(sample.workflow_id, run_id=sample.run_id)
    history = await handle.fetch_history()
    lines = []
    for event in history.events:
        at = event.event_time.ToDatetime().timestamp() - sample.requested
        name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name += f" {event.activity_task_scheduled_event_attributes.activity_type.name}"
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            name += f" {event.marker_recorded_event_attributes.marker_name}"
        lines.append(f"+{at * 1000:7.1f} ms {name}")
    lines.append(f"+{(sample.seen - sample.requested) * 1000:7.1f} ms seen by the caller")
    return "\n".join(lines)


async def breakdown(client: Client, prefix: str, samples: Iterable[Sample]) -> dict[str, float]:
    """``<prefix>_step_<step>_median_s`` for every step, over ``samples``."""
    per_step: dict[str, list[float]] = {step: [] for step in STEPS}
    for sample in samples:
        for step, seconds in (await steps_of(client, sample)).items():
            per_step[step].append(seconds)
    return {
        f"{prefix}_step_{step}_median_s": statistics.median(values)
        for step, values in per_step.items()
        if values
    }
