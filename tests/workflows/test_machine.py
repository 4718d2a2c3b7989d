"""MachineWorkflow's branches with fake activities on the time-skipping server.

One workflow per InfraMachine: it waits for the cluster infrastructure and the bootstrap Secret,
creates the VM and watches it until it runs with an address, reports it, looks at it again every
refresh interval, and on deletion removes the VM and then the finalizer. A refused spec waits
for a retry (signal, annotation, new spec); a transient failure is retried after a backoff; a
deletion during provisioning cancels the create first; the run continues as new carrying the
provisioned VM and the attempt count.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest
from temporalio import workflow as temporal_workflow
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from cloudloop.cloud.models import InstanceState, Machine, MachineSpec, NodeAddress
from cloudloop.kube.resources import ObjectRef
from cloudloop.messages.machine import (
    MachineActivity,
    MachineDesired,
    MachineInput,
    MachineProgress,
    MachineQuery,
    MachineResult,
    MachineSignal,
    ObserveMachineResult,
    ReportMachineInput,
    RetryRequest,
    workflow_id,
)
from cloudloop.rules import machine as capi
from tests.helpers import eventually_async
from tests.workflows.conftest import Harness, running
from tests.workflows.histories import record
from tests.workflows.scripted import Gate, Script, fail, gaps
from workflows.machine import MachineWorkflow

CREATE, OBSERVE, DELETE = MachineActivity.CREATE, MachineActivity.OBSERVE, MachineActivity.DELETE
REPORT, UNFINALIZE = MachineActivity.REPORT, MachineActivity.REMOVE_FINALIZER
RUNNING = Machine(
    id="vm-1",
    provider_id="dvp://vm-1",
    state=InstanceState.RUNNING,
    phase="Running",
    addresses=[NodeAddress(type="InternalIP", address="10.0.0.5")],
)
STARTING = Machine(
    id="vm-1", provider_id="dvp://vm-1", state=InstanceState.PENDING, phase="Starting"
)
UP = ObserveMachineResult(machine=RUNNING, reason=capi.REASON_VM_RUNNING)
BOOTING = ObserveMachineResult(machine=STARTING, reason=capi.REASON_VM_NOT_READY)
GONE = ObserveMachineResult(machine=None, reason=capi.REASON_VM_ERROR)
DELETED = {"attempts": 1}


def desired(**changes: Any) -> MachineDesired:
    spec = MachineSpec(
        name="worker-0",
        namespace="ns",
        cluster="c1",
        machine_uid="uid-0",
        provider_spec={"vmClassName": "generic", "cpu": {"cores": 2}},
    )
    fields: dict[str, Any] = {"spec": spec, "infrastructure_ready": True, "bootstrap_secret": "b"}
    return MachineDesired(**{**fields, **changes})


def machine_input(**changes: Any) -> MachineInput:
    ref = ObjectRef(
        group="infrastructure.cluster.x-k8s.io",
        version="v1alpha1",
        plural="deckhousemachines",
        kind="DeckhouseMachine",
        namespace="ns",
        name="worker-0",
        uid="uid-0",
    )
    fields: dict[str, Any] = {
        "object": ref,
        "provider": "dvp",
        "finalizer": "cloudloop.io/machine",
        "desired": desired(),
    }
    return MachineInput(**{**fields, **changes})


@pytest.fixture
async def wf(env: WorkflowEnvironment, script: Script) -> AsyncIterator[Harness]:
    script.on(REPORT, True).on(UNFINALIZE, True).on(DELETE, DELETED)
    async with running(env, script, [MachineWorkflow]) as harness:
        yield harness


async def start(wf: Harness, input: MachineInput | None = None) -> Any:
    input = input or machine_input()
    ref = input.object
    return await wf.start(
        MachineWorkflow.run,
        input,
        id=workflow_id(ref.namespace, ref.name, ref.uid),
        start_signal=MachineSignal.DESIRED,
        start_signal_args=[input.desired],
    )


async def progress(handle: WorkflowHandle[Any, Any]) -> MachineProgress:
    found: MachineProgress = await handle.query(MachineQuery.PROGRESS, result_type=MachineProgress)
    return found


async def phase_is(handle: WorkflowHandle[Any, Any], phase: str) -> MachineProgress:
    async def check() -> MachineProgress | None:
        now = await progress(handle)
        return now if now.phase == phase else None

    return await eventually_async(check, timeout=30, what=f"phase {phase}")


async def delete(wf: Harness, handle: WorkflowHandle[Any, Any]) -> Any:
    await handle.signal(MachineSignal.DESIRED, desired(deleting=True))
    return await handle.result()


def reports(script: Script) -> list[ReportMachineInput]:
    """The statuses written, in order: each ``REPORT``, and the "creating" status a ``CREATE``
    call writes before its cloud call (the real activity does; the fake only records it)."""
    found: list[ReportMachineInput] = []
    for call in script.calls:
        if call.name == REPORT:
            found.append(call.input)
        elif call.name == CREATE and call.input.creating is not None:
            found.append(call.input.creating)
    return found


def vm_reasons(script: Script) -> list[str]:
    return [c.reason for r in reports(script) for c in r.conditions if c.type == capi.VM_READY]


async def test_provisions_reports_and_deletes_with_the_finalizer_last(wf: Harness) -> None:
    wf.script.on(CREATE, BOOTING).on(OBSERVE, BOOTING, UP)
    handle = await start(wf)
    await phase_is(handle, "Provisioned")
    [create] = wf.script.inputs(CREATE)
    assert create.bootstrap.name == "b" and create.bootstrap.namespace == "ns"
    provisioned = reports(wf.script)[-1]
    assert provisioned.provider_id == "dvp://vm-1" and provisioned.ready is True
    assert provisioned.event is not None and provisioned.event.reason == "Provisioned"

    result = await delete(wf, handle)
    assert (result.attempts, result.provider_id) == (1, "dvp://vm-1")
    await record(handle, "Machine")
    assert wf.script.names()[-2:] == [DELETE, UNFINALIZE]
    assert vm_reasons(wf.script)[-1] == capi.REASON_DELETING


async def test_the_create_activity_writes_the_statuses_around_it(wf: Harness) -> None:
    """The "creating" and provisioned statuses go to the create activity (no local activity
    before or after it); what it wrote is not written again, what it could not write is."""
    reported = UP.model_copy(update={"creating_reported": True, "provisioned_reported": True})
    wf.script.on(CREATE, reported)
    handle = await start(wf)
    await phase_is(handle, "Provisioned")
    [create] = wf.script.inputs(CREATE)
    assert create.creating is not None and create.creating.ready is False
    template = create.provisioned
    assert template is not None and (template.ready, template.provisioned) == (True, True)
    assert template.event is not None and "{provider_id}" in template.event.message
    assert wf.script.of(REPORT) == []  # nothing written around the activity
    await delete(wf, handle)

    wf.script.calls.clear()
    wf.script.on(CREATE, UP.model_copy(update={"creating_reported": True}))
    other = machine_input().object.model_copy(update={"uid": "uid-1"})
    handle = await start(wf, machine_input(object=other))
    await phase_is(handle, "Provisioned")
    [provisioned] = wf.script.inputs(REPORT)  # the activity did not write it: the workflow does
    assert provisioned.provider_id == "dvp://vm-1" and provisioned.ready is True
    assert provisioned.event is not None and "dvp://vm-1" in provisioned.event.message
    await delete(wf, handle)


@pytest.mark.parametrize(
    ("missing", "reason"),
    [
        pytest.param(
            {"infrastructure_ready": False},
            capi.REASON_WAITING_FOR_INFRASTRUCTURE,
            id="cluster-infrastructure",
        ),
        pytest.param({"bootstrap_secret": ""}, capi.REASON_WAITING_FOR_BOOTSTRAP, id="bootstrap"),
        pytest.param({"paused": True}, capi.REASON_VM_NOT_READY, id="paused"),
    ],
)
async def test_waits_for_what_is_missing_then_provisions(
    wf: Harness, missing: dict[str, Any], reason: str
) -> None:
    wf.script.on(CREATE, UP)
    handle = await start(wf, machine_input(desired=desired(**missing)))
    await wf.env.sleep(timedelta(hours=1))
    assert wf.script.of(CREATE) == []
    if reason != capi.REASON_VM_NOT_READY:
        assert vm_reasons(wf.script) == [reason]
    await handle.signal(MachineSignal.DESIRED, desired())
    await phase_is(handle, "Provisioned")
    assert len(wf.script.of(CREATE)) == 1
    await delete(wf, handle)


RetryBy = Callable[[WorkflowHandle[Any, Any]], Any]


async def by_signal(handle: WorkflowHandle[Any, Any]) -> None:
    await handle.signal(MachineSignal.RETRY, RetryRequest(token="1", source="cli"))


async def by_annotation(handle: WorkflowHandle[Any, Any]) -> None:
    await handle.signal(MachineSignal.DESIRED, desired(retry_token="t-1"))


async def by_new_spec(handle: WorkflowHandle[Any, Any]) -> None:
    changed = desired()
    changed.spec.provider_spec["vmClassName"] = "fixed"
    await handle.signal(MachineSignal.DESIRED, changed)


@pytest.mark.parametrize(
    "retry",
    [
        pytest.param(by_signal, id="retry-signal"),
        pytest.param(by_annotation, id="retry-annotation"),
        pytest.param(by_new_spec, id="new-spec"),
    ],
)
async def test_a_refused_spec_waits_for_a_retry(wf: Harness, retry: RetryBy) -> None:
    wf.script.on(CREATE, fail("InvalidRequest", "no such vmClass", non_retryable=True), UP)
    handle = await start(wf)
    failed = await phase_is(handle, "Failed")
    assert "InvalidRequest: no such vmClass" in failed.message
    warning = reports(wf.script)[-1]
    assert warning.event is not None and warning.event.reason == "ProvisioningFailed"
    assert "cloudloop retry machine ns/worker-0" in warning.conditions[0].message
    await wf.env.sleep(timedelta(days=1))
    assert len(wf.script.of(CREATE)) == 1  # never retried by itself

    await retry(handle)
    provisioned = await phase_is(handle, "Provisioned")
    assert provisioned.attempts == 2
    await delete(wf, handle)


async def test_a_transient_failure_is_retried_after_the_backoff(wf: Harness) -> None:
    down = fail("CloudUnreachable", "parent cluster unreachable")
    wf.script.on(CREATE, *[down] * 5, UP)  # CREATE_RETRY: 5 attempts
    handle = await start(wf)
    await wf.script.called(CREATE)
    await wf.env.sleep(timedelta(minutes=1))  # 1+2+4+8 s of retries, then 10 s of backoff
    provisioned = await phase_is(handle, "Provisioned")
    assert provisioned.attempts == 2
    failures = [r.event.reason for r in reports(wf.script) if r.event]
    assert failures == ["ProvisioningFailed", "Provisioned"]
    assert "retried automatically in 10s" in reports(wf.script)[-3].conditions[0].message
    calls = wf.script.of(CREATE)
    assert [c.attempt for c in calls] == [1, 2, 3, 4, 5, 1]
    assert gaps(calls)[-1] == pytest.approx(10, abs=1)  # retry_backoff_s
    await delete(wf, handle)


async def test_a_failing_vm_is_a_retryable_failure(wf: Harness) -> None:
    degraded = Machine(
        id="vm-1",
        provider_id="dvp://vm-1",
        state=InstanceState.PENDING,
        phase="Degraded",
        failed=True,
        message="disk provisioning failed",
    )
    wf.script.on(CREATE, ObserveMachineResult(machine=degraded, reason=capi.REASON_VM_FAILED), UP)
    handle = await start(wf)
    failed = await phase_is(handle, "Failed")
    assert failed.reason == capi.REASON_VM_FAILED
    await wf.env.sleep(timedelta(seconds=15))
    assert (await phase_is(handle, "Provisioned")).attempts == 2
    await delete(wf, handle)


async def test_deleting_during_provisioning_cancels_the_create_first(wf: Harness) -> None:
    gate = Gate(UP)
    wf.script.on(CREATE, gate)
    # The SDK sends heartbeats (and so learns of a cancel) every 0.8 x the heartbeat timeout.
    handle = await start(wf, machine_input(timings={"heartbeat_timeout_s": 0.5}))
    await gate.entered.wait()
    result = await delete(wf, handle)
    assert gate.cancelled.is_set()
    assert [n for n in wf.script.names() if n != REPORT] == [CREATE, DELETE, UNFINALIZE]
    assert result.provider_id == ""


async def test_a_vm_that_disappears_is_reported_and_waits(wf: Harness) -> None:
    wf.script.on(CREATE, UP).on(OBSERVE, GONE)
    handle = await start(wf, machine_input(timings={"refresh_interval_s": 60}))
    await phase_is(handle, "Provisioned")
    await wf.env.sleep(timedelta(seconds=61))
    failed = await phase_is(handle, "Failed")
    assert failed.message == "VirtualMachine disappeared"
    await wf.env.sleep(timedelta(days=1))
    assert len(wf.script.of(CREATE)) == 1  # not recreated behind the user's back
    await delete(wf, handle)


async def test_a_failed_delete_is_retried_and_the_finalizer_stays_until_it_works(
    wf: Harness,
) -> None:
    wf.script.on(CREATE, UP)
    wf.script.on(DELETE, fail("CloudUnreachable", non_retryable=True), DELETED)
    handle = await start(wf)
    await phase_is(handle, "Provisioned")
    await handle.signal(MachineSignal.DESIRED, desired(deleting=True))
    await wf.script.called(DELETE)
    assert wf.script.of(UNFINALIZE) == []
    await handle.result()
    assert gaps(wf.script.of(DELETE)) == pytest.approx([10], abs=1)  # retry_backoff_s
    assert wf.script.names()[-1] == UNFINALIZE


async def test_continues_as_new_carrying_the_provisioned_vm(
    wf: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server suggests continue-as-new at ~4K events; here after 30 (the same API)."""
    monkeypatch.setattr(
        temporal_workflow.Info,
        "is_continue_as_new_suggested",
        lambda info: info.get_current_history_length() > 30,
    )
    wf.script.on(CREATE, UP).on(OBSERVE, UP)
    handle = await start(wf, machine_input(timings={"refresh_interval_s": 60}))
    await phase_is(handle, "Provisioned")
    first_run: str = (await handle.describe()).run_id
    latest = wf.client.get_workflow_handle(handle.id, result_type=MachineResult)

    async def new_run() -> bool:
        await wf.env.sleep(timedelta(seconds=60))
        run_id: str = (await latest.describe()).run_id
        return run_id != first_run

    await eventually_async(new_run, timeout=30, what="a new run")
    carried = await phase_is(latest, "Provisioned")
    assert (carried.attempts, carried.provider_id) == (1, "dvp://vm-1")
    result = await delete(wf, latest)
    assert len(wf.script.of(CREATE)) == 1  # the new run did not create the VM again
    assert result.provider_id == "dvp://vm-1"


async def test_a_continued_run_starts_from_the_carried_state(wf: Harness) -> None:
    handle = await start(wf, machine_input(provisioned=RUNNING, attempts=3))
    assert (await progress(handle)).phase == "Provisioned"
    result = await delete(wf, handle)
    assert (result.attempts, result.provider_id) == (3, "dvp://vm-1")
    assert CREATE not in wf.script.names()
