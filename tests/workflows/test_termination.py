"""DrainNodeWorkflow and CompleteLifecycleWorkflow with fake activities on the time-skipping server.

The drain waits until the earliest event's start minus the grace period (an earlier event wakes
it), taints and cordons, evicts in rounds until the node is empty, sends one webhook, completes
every ASG lifecycle action (heartbeating them on a timer meanwhile) and records the outcome. A
missing Node, refused pods, failed evictions, a failed lifecycle completion and remaining
VolumeAttachments each end the way the module docstring says; a cancel reaches the eviction.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from cloudloop.messages.termination import (
    DrainActivity,
    DrainInput,
    DrainOptions,
    EventKind,
    EvictPodsResult,
    InterruptionEvent,
    LifecycleAction,
    LifecycleInput,
    PodNote,
    PodPlan,
    PodRef,
    QueueInfo,
    QueueSetupInput,
    QueueSpec,
)
from tests.workflows.conftest import Harness, running
from tests.workflows.histories import record
from tests.workflows.scripted import Gate, Script, fail
from workflows.termination import (
    DRAIN_SIGNAL,
    CompleteLifecycleWorkflow,
    DrainNodeWorkflow,
    TerminationQueueWorkflow,
    drain_workflow_id,
    queue_workflow_id,
)

A = DrainActivity
PODS = [PodRef(namespace="ns", name=f"web-{i}", uid=f"u{i}") for i in range(2)]
PLAN = PodPlan(evict=PODS)
EMPTY = PodPlan()
EVICTED = EvictPodsResult(evicted=PODS)


def action(token: str = "tok-1") -> LifecycleAction:
    return LifecycleAction(
        auto_scaling_group="asg-1", hook_name="nth", token=token, instance_id="i-1"
    )


def event(
    start: datetime, event_id: str = "e1", kind: EventKind = EventKind.SPOT_ITN, **more: Any
) -> InterruptionEvent:
    return InterruptionEvent(
        event_id=event_id,
        kind=kind,
        instance_id="i-1",
        start_time=start,
        description=f"{kind} for i-1",
        **more,
    )


def drain_input(first: InterruptionEvent, **options: Any) -> DrainInput:
    return DrainInput(
        node="node-1",
        cluster="c1",
        instance_id="i-1",
        provider_id="aws:///us-east-1a/i-1",
        event=first,
        options=DrainOptions(**{"node_termination_grace_period_s": 120, **options}),
    )


@pytest.fixture
async def wf(env: WorkflowEnvironment, script: Script) -> AsyncIterator[Harness]:
    script.on(A.TAINT_NODE, True).on(A.CORDON_NODE, True).on(A.LIST_PODS, PLAN, EMPTY)
    script.on(A.EVICT_PODS, EVICTED).on(A.SEND_WEBHOOK, True).on(A.RECORD_OUTCOME, None)
    script.on(A.COMPLETE_LIFECYCLE_ACTION, True).on(A.RECORD_LIFECYCLE_HEARTBEAT, True)
    workflows = [DrainNodeWorkflow, CompleteLifecycleWorkflow, TerminationQueueWorkflow]
    async with running(env, script, workflows) as harness:
        yield harness


async def now(wf: Harness) -> datetime:
    return await wf.env.get_current_time()


async def start(wf: Harness, input: DrainInput) -> Any:
    return await wf.start(
        DrainNodeWorkflow.run,
        input,
        id=drain_workflow_id(input.node, input.instance_id, input.instance_launch_time),
    )


def steps(script: Script) -> list[str]:
    return [n.removeprefix("drain.") for n in script.names() if n != A.RECORD_LIFECYCLE_HEARTBEAT]


async def test_due_event_taints_cordons_drains_and_reports(wf: Harness) -> None:
    handle = await start(wf, drain_input(event(await now(wf))))
    result = await handle.result()
    assert steps(wf.script) == [
        "taint_node",
        "cordon_node",
        "list_pods",
        "evict_pods",
        "list_pods",
        "send_webhook",
        "record_outcome",
    ]
    assert (result.action, result.evicted, result.node_found) == ("cordon-and-drain", 2, True)
    [taint] = wf.script.inputs(A.TAINT_NODE)
    assert [t.key for t in taint.taints] == ["aws-node-termination-handler/spot-itn"]
    [outcome] = wf.script.inputs(A.RECORD_OUTCOME)
    assert (outcome.ok, outcome.reason) == (True, "CordonAndDrain")
    assert handle.id in outcome.message


async def test_waits_until_start_minus_grace_and_an_earlier_event_wakes_it(wf: Harness) -> None:
    t0 = await now(wf)
    handle = await start(wf, drain_input(event(t0 + timedelta(hours=2))))
    await wf.env.sleep(timedelta(minutes=30))
    assert wf.script.calls == []
    await handle.signal(DRAIN_SIGNAL, event(t0 + timedelta(hours=1), "e2", EventKind.STATE_CHANGE))
    result = await handle.result()
    [taint] = wf.script.of(A.TAINT_NODE)
    due = t0 + timedelta(hours=1) - timedelta(seconds=120)
    assert abs((taint.at - due).total_seconds()) < 2
    assert len(taint.input.taints) == 2 and result.event_ids == ["e1", "e2"]


@pytest.mark.parametrize(
    ("options", "cordon_found", "expected", "summary"),
    [
        pytest.param(
            {"cordon_only": True},
            True,
            ["taint_node", "cordon_node", "send_webhook", "record_outcome"],
            "cordon of node-1 done",
            id="cordon-only",
        ),
        pytest.param(
            {}, False, ["taint_node", "cordon_node", "record_outcome"], "not found", id="no-node"
        ),
    ],
)
async def test_what_the_drain_skips(
    wf: Harness, options: dict[str, Any], cordon_found: bool, expected: list[str], summary: str
) -> None:
    wf.script.on(A.CORDON_NODE, cordon_found)
    result = await (await start(wf, drain_input(event(await now(wf)), **options))).result()
    assert steps(wf.script) == expected
    assert result.node_found is cordon_found
    assert summary in wf.script.inputs(A.RECORD_OUTCOME)[0].message


@pytest.mark.parametrize(
    ("script_it", "kind"),
    [
        pytest.param(
            {A.LIST_PODS: PodPlan(refused=[PodNote(pod=PODS[0], reason="DaemonSet")])},
            "DrainRefused",
            id="refused-pods",
        ),
        pytest.param(
            {A.EVICT_PODS: EvictPodsResult(failed=[PodNote(pod=PODS[0], reason="two PDBs")])},
            "EvictionFailed",
            id="eviction-failed",
        ),
        pytest.param(
            {A.TAINT_NODE: fail("Forbidden", "no RBAC", non_retryable=True)},
            "Forbidden",
            id="taint-refused",
        ),
    ],
)
async def test_a_failed_drain_fails_the_workflow_and_says_why(
    wf: Harness, script_it: dict[str, Any], kind: str
) -> None:
    for name, answer in script_it.items():
        wf.script.on(name, answer)
    handle = await start(wf, drain_input(event(await now(wf))))
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == kind and cause.non_retryable
    [outcome] = wf.script.inputs(A.RECORD_OUTCOME)
    assert (outcome.ok, outcome.reason) == (False, "CordonAndDrainError")
    assert A.SEND_WEBHOOK not in wf.script.names()


async def test_lifecycle_actions_heartbeat_while_waiting_and_complete_after(wf: Harness) -> None:
    t0 = await now(wf)
    first = event(t0 + timedelta(seconds=630), kind=EventKind.ASG_LIFECYCLE, lifecycle=action())
    handle = await start(wf, drain_input(first, heartbeat_interval_s=60))
    result = await handle.result()
    await record(handle, "DrainNode")
    beats = wf.script.of(A.RECORD_LIFECYCLE_HEARTBEAT)
    assert len(beats) == 8  # every 60 s until the drain starts (at start - 120 s: 510 s)
    assert result.lifecycle_actions_completed == ["tok-1"]
    assert steps(wf.script)[-2:] == ["complete_lifecycle_action", "record_outcome"]


async def test_an_event_arriving_mid_drain_is_tainted_and_its_action_completed(
    wf: Harness,
) -> None:
    gate = Gate(EVICTED)
    wf.script.on(A.EVICT_PODS, gate)
    handle = await start(wf, drain_input(event(await now(wf))))
    await gate.entered.wait()
    late = event(await now(wf), "e2", EventKind.ASG_LIFECYCLE, lifecycle=action("tok-2"))
    await handle.signal(DRAIN_SIGNAL, late)
    await handle.signal(DRAIN_SIGNAL, late)  # a duplicate delivery changes nothing
    gate.open()
    result = await handle.result()
    taints = [t.key for call in wf.script.inputs(A.TAINT_NODE) for t in call.taints]
    assert taints == [
        "aws-node-termination-handler/spot-itn",
        "aws-node-termination-handler/asg-lifecycle-termination",
    ]
    assert result.lifecycle_actions_completed == ["tok-2"]
    assert result.event_ids == ["e1", "e2"]


@pytest.mark.parametrize(
    ("name", "answer", "ok", "reason"),
    [
        pytest.param(
            A.SEND_WEBHOOK, fail("WebhookError", "503"), True, "CordonAndDrain", id="webhook-down"
        ),
        pytest.param(
            A.COMPLETE_LIFECYCLE_ACTION,
            fail("CloudAuthFailed", "expired", non_retryable=True),
            False,
            "PostDrainError",
            id="lifecycle-completion-refused",
        ),
    ],
)
async def test_after_the_drain(wf: Harness, name: str, answer: Any, ok: bool, reason: str) -> None:
    wf.script.on(name, answer)
    first = event(await now(wf), kind=EventKind.ASG_LIFECYCLE, lifecycle=action())
    handle = await start(wf, drain_input(first))
    if ok:
        await handle.result()
        assert len(wf.script.of(A.SEND_WEBHOOK)) == 1  # at most one notification
    else:
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    assert wf.script.inputs(A.RECORD_OUTCOME)[0].reason == reason


async def test_remaining_volume_attachments_are_reported(wf: Harness) -> None:
    wf.script.on(A.WAIT_VOLUME_ATTACHMENTS, ["csi-abc"])
    input = drain_input(event(await now(wf)), wait_for_volume_attachments=True)
    await (await start(wf, input)).result()
    reasons = [o.reason for o in wf.script.inputs(A.RECORD_OUTCOME)]
    assert reasons == ["VolumeAttachmentsRemain", "CordonAndDrain"]


async def test_a_cancelled_drain_cancels_its_eviction_and_records_a_failure(
    own_env: WorkflowEnvironment, script: Script
) -> None:
    """The drain's failure path catches the cancelled eviction like any other failure: the
    outcome is recorded and the run fails (type ``CancelledError``) rather than ending
    cancelled. (Its own server: the abandoned eviction stays in flight and holds the clock.)"""
    gate = Gate(EVICTED)
    script.on(A.TAINT_NODE, True).on(A.CORDON_NODE, True).on(A.LIST_PODS, PLAN)
    script.on(A.EVICT_PODS, gate).on(A.RECORD_OUTCOME, None)
    async with running(own_env, script, [DrainNodeWorkflow]) as wf:
        input = drain_input(event(await now(wf)), activity_heartbeat_timeout_s=0.5)
        handle = await start(wf, input)
        await gate.entered.wait()
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        await asyncio.wait_for(gate.cancelled.wait(), 10)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "CancelledError"
    [outcome] = script.inputs(A.RECORD_OUTCOME)
    assert (outcome.ok, outcome.reason) == (False, "CordonAndDrainError")


@pytest.mark.parametrize(
    "active", [pytest.param(True, id="active"), pytest.param(False, id="gone")]
)
async def test_a_late_lifecycle_action_is_completed(wf: Harness, active: bool) -> None:
    wf.script.on(A.COMPLETE_LIFECYCLE_ACTION, active)
    input = LifecycleInput(node="node-1", cluster="c1", action=action())
    handle = await wf.start(CompleteLifecycleWorkflow.run, input)
    assert await handle.result() is active
    if active:
        await record(handle, "CompleteLifecycleAction")
    [call] = wf.script.inputs(A.COMPLETE_LIFECYCLE_ACTION)
    assert call.action == action() and call.result == "CONTINUE"


async def test_the_queue_is_made_rules_then_hooks_and_removed(wf: Harness) -> None:
    """``TerminationQueue``: the queue, then its rules (with the queue's ARN), then the lifecycle
    hooks of the named groups; the removal is one step."""
    spec = QueueSpec(queue_name="c1-nth", rule_prefix="c1-nth", lifecycle_hook_groups=["asg-1"])
    info = QueueInfo(url="https://sqs/c1-nth", arn="arn:aws:sqs:us-east-1:1:c1-nth")
    wf.script.on(A.ENSURE_QUEUE, info).on(A.ENSURE_QUEUE_RULES, ["c1-nth-spot-itn"])
    wf.script.on(A.ENSURE_LIFECYCLE_HOOKS, ["asg-1"]).on(A.REMOVE_QUEUE, ["c1-nth"])
    handle = await wf.start(
        TerminationQueueWorkflow.run, QueueSetupInput(spec=spec), id=queue_workflow_id("c1")
    )
    result = await handle.result()
    await record(handle, "TerminationQueue")
    assert (result.queue_url, result.rules, result.hooks) == (
        info.url,
        ["c1-nth-spot-itn"],
        ["asg-1"],
    )
    assert wf.script.names() == [A.ENSURE_QUEUE, A.ENSURE_QUEUE_RULES, A.ENSURE_LIFECYCLE_HOOKS]
    [rules] = wf.script.inputs(A.ENSURE_QUEUE_RULES)
    assert rules.queue == info
    removal = await wf.start(
        TerminationQueueWorkflow.run,
        QueueSetupInput(spec=spec, remove=True),
        id=queue_workflow_id("c1", remove=True),
    )
    assert (await removal.result()).removed == ["c1-nth"]
