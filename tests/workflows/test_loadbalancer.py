"""LoadBalancerWorkflow's branches with fake activities on the time-skipping server.

The entity workflow of one Service: ``apply`` ensures the LB (a node-set change only updates the
backends), invalid input is a Warning and is not retried until the Service changes, "handled
elsewhere" is silent, transient failures back off 5 s doubling, a teardown deletes and completes
(or ensures again when an ``apply`` came meanwhile), signals during a step are coalesced into the
next reconcile, and the run continues as new with its whole state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from cloudloop.cloud.models import LoadBalancerPort
from cloudloop.kube.resources import SERVICES, ObjectRef
from cloudloop.messages.kube import KubeActivity
from cloudloop.messages.loadbalancer import (
    ApplyRequest,
    DeleteLoadBalancerInput,
    DesiredLoadBalancer,
    EnsureLoadBalancerInput,
    EnsureLoadBalancerResult,
    LoadBalancerActivity,
    LoadBalancerNode,
    LoadBalancerQuery,
    LoadBalancerResult,
    LoadBalancerSignal,
    LoadBalancerState,
    LoadBalancerTarget,
    ResyncLoadBalancerInput,
    ResyncLoadBalancerResult,
    workflow_id,
)
from tests.helpers import eventually_async
from tests.workflows.conftest import Harness, running
from tests.workflows.histories import TEST_KEYS, record
from tests.workflows.scripted import Gate, Script, fail, gaps
from workflows.loadbalancer import LoadBalancerWorkflow

ENSURE, UPDATE = LoadBalancerActivity.ENSURE, LoadBalancerActivity.UPDATE_BACKENDS
GET, DELETE = LoadBalancerActivity.GET, LoadBalancerActivity.DELETE
RESYNC = LoadBalancerActivity.RESYNC
EVENT = KubeActivity.RECORD_EVENT
INGRESS = EnsureLoadBalancerResult(ingress=["a1.elb.example"])


def node(name: str) -> LoadBalancerNode:
    return LoadBalancerNode(name=name, provider_id=f"aws:///us-east-1a/i-{name}")


def desired(*nodes: str, port: int = 80, **annotations: str) -> DesiredLoadBalancer:
    return DesiredLoadBalancer(
        ports=[LoadBalancerPort(name="http", port=port, node_port=30080)],
        annotations=annotations,
        nodes=[node(n) for n in nodes],
    )


def state(history_limit: int = 0) -> LoadBalancerState:
    service = ObjectRef.of(
        SERVICES, {"metadata": {"name": "web", "namespace": "ns", "uid": "1234-5678"}}
    )
    target = LoadBalancerTarget(service=service, cluster="c1", provider="aws")
    return LoadBalancerState(target=target, history_limit=history_limit)


@pytest.fixture
async def wf(env: WorkflowEnvironment, script: Script) -> AsyncIterator[Harness]:
    script.on(EVENT, None)
    async with running(env, script, [LoadBalancerWorkflow]) as harness:
        yield harness


async def start(wf: Harness, *requests: DesiredLoadBalancer, limit: int = 0) -> Any:
    """Signal-with-start as the starter does: the first ``apply`` starts the workflow."""
    initial = state(limit)
    handle = await wf.start(
        LoadBalancerWorkflow.run,
        initial,
        id=workflow_id(initial.target.service),
        start_signal=LoadBalancerSignal.APPLY,
        start_signal_args=[ApplyRequest(desired=requests[0])],
    )
    for request in requests[1:]:
        await apply(handle, request)
    return handle


async def apply(handle: WorkflowHandle[Any, Any], request: DesiredLoadBalancer) -> None:
    await handle.signal(LoadBalancerSignal.APPLY, ApplyRequest(desired=request))


async def current(handle: WorkflowHandle[Any, Any]) -> LoadBalancerState:
    found: LoadBalancerState = await handle.query(
        LoadBalancerQuery.STATE, result_type=LoadBalancerState
    )
    return found


async def tear_down(wf: Harness, handle: WorkflowHandle[Any, Any]) -> Any:
    wf.script.on(DELETE, True)
    await handle.signal(LoadBalancerSignal.TEAR_DOWN)
    return await handle.result()


def reasons(script: Script) -> list[str]:
    return [e.reason for e in script.inputs(EVENT)]


async def test_apply_ensures_then_tear_down_deletes_and_completes(wf: Harness) -> None:
    wf.script.on(ENSURE, INGRESS)
    handle = await start(wf, desired("n1", "n2"))
    [ensured] = await wf.script.called(ENSURE)
    assert isinstance(ensured.input, EnsureLoadBalancerInput)
    assert [n.name for n in ensured.input.desired.nodes] == ["n1", "n2"]
    assert ensured.input.add_finalizer is False

    result = await tear_down(wf, handle)
    assert result.deleted
    await record(handle, "LoadBalancer")
    assert wf.script.names().count(ENSURE) == 1
    assert reasons(wf.script) == ["DeletedLoadBalancer"]
    assert all(workflow_id(state().target.service) in e.message for e in wf.script.inputs(EVENT))


async def test_tear_down_is_one_activity_that_announces_the_delete(wf: Harness) -> None:
    """``lb.delete`` looks up and records ``DeletingLoadBalancer`` itself: no ``lb.get``, no
    Event activity before it (``lb-delete-one-activity``)."""
    wf.script.on(ENSURE, INGRESS)
    handle = await start(wf, desired("n1"))
    await wf.script.called(ENSURE)
    await tear_down(wf, handle)
    [deleted] = wf.script.of(DELETE)
    assert isinstance(deleted.input, DeleteLoadBalancerInput)
    assert deleted.input.announce is True
    assert GET not in wf.script.names()


async def test_without_nodes_the_lb_is_ensured_with_a_warning(wf: Harness) -> None:
    wf.script.on(ENSURE, INGRESS)
    handle = await start(wf, desired())
    await wf.script.called(ENSURE)
    await tear_down(wf, handle)
    assert reasons(wf.script)[0] == "UnAvailableLoadBalancer"


@pytest.mark.parametrize(
    ("update", "then", "events"),
    [
        pytest.param(None, [UPDATE], ["UpdatedLoadBalancer"], id="updated"),
        pytest.param(
            fail("NotFound", "lb gone", non_retryable=True),
            [UPDATE, ENSURE],
            [],
            id="lb-missing-ensured-again",
        ),
        pytest.param(
            fail("NotSupported", non_retryable=True), [UPDATE], [], id="handled-elsewhere"
        ),
        pytest.param(
            fail("InvalidRequest", "bad node", non_retryable=True),
            [UPDATE],
            ["UpdateLoadBalancerFailed"],
            id="invalid-not-retried",
        ),
    ],
)
async def test_a_node_set_change_only_updates_the_backends(
    wf: Harness, update: Any, then: list[str], events: list[str]
) -> None:
    wf.script.on(ENSURE, INGRESS).on(UPDATE, update)
    handle = await start(wf, desired("n1"))
    await wf.script.called(ENSURE)
    await apply(handle, desired("n1", "n2"))
    await wf.script.called(then[-1], then.count(then[-1]) + (then[-1] == ENSURE))
    await wf.env.sleep(timedelta(minutes=10))  # nothing more happens: no retry loop
    names = [n for n in wf.script.names() if n != EVENT]
    assert names == [ENSURE, *then]
    assert reasons(wf.script) == events
    await tear_down(wf, handle)


@pytest.mark.parametrize(
    ("kind", "events"),
    [
        pytest.param("InvalidRequest", ["SyncLoadBalancerFailed"], id="invalid-annotation"),
        pytest.param("NotSupported", [], id="handled-elsewhere"),
    ],
)
async def test_a_refused_ensure_waits_for_the_service_to_change(
    wf: Harness, kind: str, events: list[str]
) -> None:
    wf.script.on(ENSURE, fail(kind, "unknown annotation value", non_retryable=True))
    handle = await start(wf, desired("n1", scheme="bogus"))
    await wf.script.called(ENSURE)
    await wf.env.sleep(timedelta(hours=1))
    assert len(wf.script.of(ENSURE)) == 1  # not retried
    assert reasons(wf.script) == events
    if events:
        assert "unknown annotation value" in wf.script.inputs(EVENT)[0].message

    wf.script.on(ENSURE, INGRESS)
    await apply(handle, desired("n1", scheme="internet-facing"))  # the Service changed
    await wf.script.called(ENSURE, 2)
    await tear_down(wf, handle)


async def test_transient_failures_back_off_5s_doubling_and_recover(wf: Harness) -> None:
    down = fail("CloudUnreachable", "connection refused")
    # Each reconcile is 3 quick attempts (CLOUD_RETRY), then the workflow's own backoff.
    wf.script.on(ENSURE, *[down] * 9, INGRESS)
    handle = await start(wf, desired("n1"))
    await wf.script.called(ENSURE)
    await wf.env.sleep(timedelta(seconds=60))
    calls = await wf.script.called(ENSURE, 10)
    firsts = [c for c in calls if c.attempt == 1]
    assert gaps(firsts) == pytest.approx([8, 13, 23], abs=1)  # 3 s of retries + 5, 10, 20 s
    assert reasons(wf.script) == ["SyncLoadBalancerFailed"] * 3
    assert (await current(handle)).applied == desired("n1")
    await tear_down(wf, handle)


async def test_a_new_desired_state_cuts_the_backoff_short(wf: Harness) -> None:
    wf.script.on(ENSURE, fail("CloudUnreachable", non_retryable=True), INGRESS)
    handle = await start(wf, desired("n1"))
    await wf.script.called(ENSURE)
    await apply(handle, desired("n1", port=8080))
    calls = await wf.script.called(ENSURE, 2)
    assert (calls[1].at - calls[0].at).total_seconds() < 1  # not after the 5 s backoff
    assert calls[1].input.desired.ports[0].port == 8080
    await tear_down(wf, handle)


async def test_signals_during_an_ensure_are_coalesced_into_one_reconcile(wf: Harness) -> None:
    gate = Gate(INGRESS)
    wf.script.on(ENSURE, gate, INGRESS)
    handle = await start(wf, desired("n1"))
    await gate.entered.wait()
    for port in (81, 82, 83):  # three Service edits while the cloud works
        await apply(handle, desired("n1", port=port))
    gate.open()
    calls = await wf.script.called(ENSURE, 2)
    await wf.env.sleep(timedelta(minutes=5))
    assert [c.input.desired.ports[0].port for c in wf.script.of(ENSURE)] == [80, 83]
    assert calls[1].input.current_ingress == INGRESS.ingress
    await tear_down(wf, handle)


async def test_tear_down_during_an_ensure_deletes_after_it(wf: Harness) -> None:
    gate = Gate(INGRESS)
    wf.script.on(ENSURE, gate).on(DELETE, True)
    handle = await start(wf, desired("n1"))
    await gate.entered.wait()
    await handle.signal(LoadBalancerSignal.TEAR_DOWN)
    gate.open()
    assert (await handle.result()).deleted
    assert [n for n in wf.script.names() if n != EVENT] == [ENSURE, DELETE]


async def test_an_apply_during_the_delete_brings_the_lb_back(wf: Harness) -> None:
    gate = Gate(True)
    wf.script.on(ENSURE, INGRESS).on(DELETE, gate)
    handle = await start(wf, desired("n1"))
    await wf.script.called(ENSURE)
    await handle.signal(LoadBalancerSignal.TEAR_DOWN)
    await gate.entered.wait()
    await apply(handle, desired("n1"))  # the Service lost its LB type, then got it back
    gate.open()
    calls = await wf.script.called(ENSURE, 2)
    assert calls[1].input.add_finalizer is True  # the teardown had removed it
    described = await handle.describe()
    assert described.status == WorkflowExecutionStatus.RUNNING
    await tear_down(wf, handle)


async def test_a_failed_delete_is_retried_after_the_backoff(wf: Harness) -> None:
    wf.script.on(ENSURE, INGRESS)
    wf.script.on(DELETE, fail("CloudThrottled", non_retryable=True), True)
    handle = await start(wf, desired("n1"))
    await wf.script.called(ENSURE)
    await handle.signal(LoadBalancerSignal.TEAR_DOWN)
    assert (await handle.result()).deleted
    deletes = wf.script.of(DELETE)
    assert gaps(deletes) == pytest.approx([5], abs=1)
    assert "SyncLoadBalancerFailed" in reasons(wf.script)


async def test_a_service_gone_during_ensure_tears_the_lb_down(wf: Harness) -> None:
    wf.script.on(ENSURE, EnsureLoadBalancerResult(service_gone=True))
    wf.script.on(DELETE, True)
    handle = await start(wf, desired("n1"))
    assert (await handle.result()).deleted
    assert [n for n in wf.script.names() if n != EVENT] == [ENSURE, DELETE]


async def test_continues_as_new_with_its_whole_state(wf: Harness) -> None:
    wf.script.on(ENSURE, INGRESS).on(UPDATE, None)
    handle = await start(wf, desired("n1"), limit=40)
    first_run: str = (await handle.describe()).run_id
    # A change read by the first workflow task would fold into the ensure: no update to count.
    await wf.script.called(ENSURE)
    for count in range(2, 8):  # node-set changes until the history passes its limit
        await apply(handle, desired(*[f"n{i}" for i in range(1, count + 1)]))
        await wf.script.called(UPDATE, count - 1)

    latest = wf.client.get_workflow_handle(handle.id, result_type=LoadBalancerResult)

    async def new_run() -> bool:
        run_id: str = (await latest.describe()).run_id
        return run_id != first_run

    await eventually_async(new_run, timeout=30, what="a new run")
    history = await wf.client.get_workflow_handle(handle.id, run_id=first_run).fetch_history()
    assert history.events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    carried = await current(latest)
    assert carried.applied == desired(*[f"n{i}" for i in range(1, 8)])
    assert carried.ingress == INGRESS.ingress and carried.history_limit == 40

    # The next node change in the new run is a backend update: ``applied`` came along.
    await apply(latest, desired("n1"))
    await wf.script.called(UPDATE, 7)
    assert wf.script.names().count(ENSURE) == 1
    await tear_down(wf, latest)


async def test_a_failing_lb_continues_as_new_with_its_backoff(wf: Harness) -> None:
    """An ensure that keeps failing still continues as new (``continue-as-new-while-failing``),
    carrying the failures in a row and the pending retry: the new run backs off first."""
    down = fail("CloudUnreachable", "connection refused")
    wf.script.on(ENSURE, *[down] * 12, INGRESS)  # 4 failed reconciles of 3 attempts
    handle = await start(wf, desired("n1"), limit=40)
    first_run: str = (await handle.describe()).run_id
    latest = wf.client.get_workflow_handle(handle.id, result_type=LoadBalancerResult)

    async def new_run() -> bool:
        run_id: str = (await latest.describe()).run_id
        return run_id != first_run

    for _ in range(20):  # the server's clock moves on only while the test sleeps
        if await new_run():
            break
        await wf.env.sleep(timedelta(seconds=5))
    await eventually_async(new_run, timeout=30, what="a new run while failing")
    carried = await current(latest)
    assert carried.failures >= 1 and carried.retry_pending and carried.applied is None
    first = wf.client.get_workflow_handle(handle.id, run_id=first_run)
    history = await first.fetch_history()
    assert history.events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    await record(first, "LoadBalancer.continue-as-new-while-failing")

    await wf.env.sleep(timedelta(seconds=600))
    await wf.script.called(ENSURE, 13)
    assert (await current(latest)).applied == desired("n1")
    await tear_down(wf, latest)


# -- drift repair -------------------------------------------------------------------------
async def start_resyncing(wf: Harness, request: DesiredLoadBalancer, period_s: float) -> Any:
    initial = state()
    return await wf.start(
        LoadBalancerWorkflow.run,
        initial,
        id=workflow_id(initial.target.service),
        start_signal=LoadBalancerSignal.APPLY,
        start_signal_args=[ApplyRequest(desired=request, resync_period_s=period_s)],
    )


async def test_an_idle_lb_is_checked_every_period_and_repaired(wf: Harness) -> None:
    in_sync = ResyncLoadBalancerResult(ingress=INGRESS.ingress)
    repaired = ResyncLoadBalancerResult(repaired=["the ELB is missing"], ingress=["a2.elb"])
    wf.script.on(ENSURE, INGRESS).on(RESYNC, in_sync, repaired, in_sync)
    handle = await start_resyncing(wf, desired("n1"), 60)
    [ensured] = await wf.script.called(ENSURE)
    await wf.env.sleep(timedelta(seconds=185))
    checks = await wf.script.called(RESYNC, 3)
    assert gaps([ensured, *checks]) == pytest.approx([60, 60, 60], abs=2)
    first = checks[0].input
    assert isinstance(first, ResyncLoadBalancerInput)
    assert first.desired == desired("n1") and first.current_ingress == INGRESS.ingress
    assert checks[2].input.current_ingress == ["a2.elb"]  # the repair's ingress is kept
    assert (await current(handle)).ingress == ["a2.elb"]
    assert wf.script.names().count(ENSURE) == 1  # the activity repairs, not the workflow
    await tear_down(wf, handle)
    await record(handle, "LoadBalancer.drift-repair")


async def test_no_drift_checks_without_a_period_or_while_work_is_pending(wf: Harness) -> None:
    down = fail("CloudUnreachable", "connection refused")
    wf.script.on(ENSURE, INGRESS).on(RESYNC, ResyncLoadBalancerResult())
    handle = await start(wf, desired("n1"))  # no resync_period_s: the state's 0
    await wf.script.called(ENSURE)
    await wf.env.sleep(timedelta(seconds=300))
    assert RESYNC not in wf.script.names()
    await tear_down(wf, handle)

    wf.script.on(ENSURE, *[down] * 3, INGRESS)  # a failed reconcile backs off, never checks
    again = await start_resyncing(wf, desired("n2"), 1)
    await wf.script.called(ENSURE, 2)
    await wf.env.sleep(timedelta(seconds=15))  # 3 s of retries, the 5 s backoff, then periods
    await wf.script.called(RESYNC)
    names = wf.script.names()
    assert names.count(ENSURE) == 5
    assert names.index(RESYNC) > max(i for i, name in enumerate(names) if name == ENSURE)
    await tear_down(wf, again)


async def test_a_check_refused_or_handled_elsewhere_waits_for_the_service(wf: Harness) -> None:
    refused = fail("InvalidRequest", "certificate gone", non_retryable=True)
    elsewhere = fail("NotSupported", "handled elsewhere", non_retryable=True)
    wf.script.on(ENSURE, INGRESS).on(UPDATE, None)
    wf.script.on(RESYNC, refused, elsewhere, ResyncLoadBalancerResult())
    handle = await start_resyncing(wf, desired("n1"), 30)
    await wf.script.called(ENSURE)
    await wf.env.sleep(timedelta(seconds=100))
    assert len(wf.script.of(RESYNC)) == 1
    assert reasons(wf.script) == ["SyncLoadBalancerFailed"]
    assert "certificate gone" in wf.script.inputs(EVENT)[0].message

    await handle.signal(
        LoadBalancerSignal.APPLY, ApplyRequest(desired=desired("n1", "n2"), resync_period_s=30)
    )
    await wf.script.called(UPDATE)
    await wf.env.sleep(timedelta(seconds=100))
    assert len(wf.script.of(RESYNC)) == 2  # NotSupported: no Event, no more checks
    assert reasons(wf.script) == ["SyncLoadBalancerFailed", "UpdatedLoadBalancer"]
    await tear_down(wf, handle)


async def test_a_failed_repair_warns_and_the_next_period_tries_again(wf: Harness) -> None:
    down = fail("CloudUnreachable", "connection refused")
    repaired = ResyncLoadBalancerResult(repaired=["listener 80 missing"], ingress=INGRESS.ingress)
    wf.script.on(ENSURE, INGRESS).on(RESYNC, down, down, down, repaired)
    handle = await start_resyncing(wf, desired("n1"), 60)
    await wf.script.called(ENSURE)
    await wf.env.sleep(timedelta(seconds=130))
    calls = await wf.script.called(RESYNC, 4)
    assert [c.attempt for c in calls] == [1, 2, 3, 1]
    assert reasons(wf.script) == ["SyncLoadBalancerFailed"]
    assert "Error repairing load balancer drift" in wf.script.inputs(EVENT)[0].message
    await tear_down(wf, handle)


async def test_readable_in_the_temporal_ui(wf: Harness) -> None:
    """Every activity says what it does to which Service (user metadata summary, encrypted as
    every payload: the UI shows it through the codec server), the run keeps
    a current-details line (waiting for what, last error), and ``describe`` answers its state
    as JSON."""
    wf.script.on(ENSURE, fail("InvalidRequest", "bad annotation", non_retryable=True), INGRESS)
    handle = await start(wf, desired("n1", "n2"))

    async def refused() -> dict[str, Any] | None:
        described: dict[str, Any] = await handle.query(LoadBalancerQuery.DESCRIBE)
        return described if described["last_error"] else None

    described = await eventually_async(refused, what="the refusal described")
    assert described["service"] == "ns/web" and described["nodes"] == 2
    assert described["last_error"] == "InvalidRequest: bad annotation"
    assert "waiting for the Service to change" in described["phase"]
    assert not described["in_sync"]
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "waiting for the Service to change" in metadata.current_details
    assert "last error: InvalidRequest: bad annotation" in metadata.current_details

    await apply(handle, desired("n1", "n2", "n3"))

    async def in_sync() -> dict[str, Any] | None:
        described: dict[str, Any] = await handle.query(LoadBalancerQuery.DESCRIBE)
        return described if described["in_sync"] else None

    described = await eventually_async(in_sync, what="in sync")
    assert described["ingress"] == ["a1.elb.example"] and described["last_error"] == ""
    assert described["phase"].startswith("in sync (a1.elb.example, 3 nodes)")
    stored = [
        e.user_metadata.summary
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    # encrypted in the history (they name the Service); the UI reads them through the codec
    assert stored and all(s.metadata["encoding"] == b"binary/encrypted" for s in stored)
    summaries = [TEST_KEYS.decrypt(s).data.decode() for s in stored]
    assert any("ensure the load balancer of ns/web" in s and "3 nodes" in s for s in summaries), (
        summaries
    )
    assert any("Warning Event SyncLoadBalancerFailed on ns/web" in s for s in summaries)
    await tear_down(wf, handle)
