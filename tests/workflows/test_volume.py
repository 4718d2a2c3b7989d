"""The volume workflows' branches with fake activities on the time-skipping server.

Each runs its activity, locally first, and turns every outcome into a result with a CSI code:
success (the workflow ID filled in), a refusal of each cloud error kind (its code, not retried
when non-retryable), transient errors retried with backoff by the heartbeating activity until the
operation's time is up (then the last error's code) — never a workflow failure. A local attempt
that hands over passes its progress to the heartbeating activity.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from cloudloop.cloud.models import Snapshot, Volume
from cloudloop.messages.volume import (
    HAND_OVER,
    AttachResult,
    AttachVolumeInput,
    Code,
    CreateSnapshotInput,
    CreateVolumeInput,
    CreateVolumeResult,
    DeleteSnapshotInput,
    DeleteVolumeInput,
    DeleteVolumeResult,
    DetachResult,
    DetachVolumeInput,
    ExpandResult,
    ExpandVolumeInput,
    ModifyResult,
    ModifyVolumeInput,
    ReadVolumesInput,
    ReadVolumesResult,
    SnapshotResult,
    VolumeActivity,
    create_workflow_id,
    modify_workflow_id,
    read_workflow_id,
    snapshot_create_workflow_id,
    snapshot_workflow_id,
    volume_workflow_id,
)
from tests.workflows.conftest import Harness, running
from tests.workflows.histories import record
from tests.workflows.scripted import Script, fail, gaps
from workflows.volume import (
    OPERATION_TIMEOUT,
    VOLUME_WORKFLOWS,
    AttachVolumeWorkflow,
    CreateSnapshotWorkflow,
    CreateVolumeWorkflow,
    DeleteSnapshotWorkflow,
    DeleteVolumeWorkflow,
    DetachVolumeWorkflow,
    ExpandVolumeWorkflow,
    ModifyVolumeWorkflow,
    ReadVolumesWorkflow,
)

COMMON = {"cluster": "c1", "provider": "aws"}
#: (workflow run method, its activity, its input, a successful result)
OPERATIONS = [
    pytest.param(
        CreateVolumeWorkflow.run,
        VolumeActivity.CREATE,
        CreateVolumeInput(name="pvc-1", size_gib=4, **COMMON),
        CreateVolumeResult(volume=Volume(id="vol-1", size_gib=4, zone="us-east-1a")),
        id="create",
    ),
    pytest.param(
        DeleteVolumeWorkflow.run,
        VolumeActivity.DELETE,
        DeleteVolumeInput(volume_id="vol-1", **COMMON),
        DeleteVolumeResult(),
        id="delete",
    ),
    pytest.param(
        AttachVolumeWorkflow.run,
        VolumeActivity.ATTACH,
        AttachVolumeInput(volume_id="vol-1", node_id="i-1", **COMMON),
        AttachResult(device="/dev/xvdba", publish_context={"devicePath": "/dev/xvdba"}),
        id="attach",
    ),
    pytest.param(
        DetachVolumeWorkflow.run,
        VolumeActivity.DETACH,
        DetachVolumeInput(volume_id="vol-1", node_id="i-1", **COMMON),
        DetachResult(),
        id="detach",
    ),
    pytest.param(
        ExpandVolumeWorkflow.run,
        VolumeActivity.EXPAND,
        ExpandVolumeInput(volume_id="vol-1", size_gib=8, **COMMON),
        ExpandResult(size_gib=8),
        id="expand",
    ),
    pytest.param(
        ModifyVolumeWorkflow.run,
        VolumeActivity.MODIFY,
        ModifyVolumeInput(volume_id="vol-1", parameters={"iops": "4000"}, **COMMON),
        ModifyResult(message="volume vol-1 has iops=4000"),
        id="modify",
    ),
    pytest.param(
        CreateSnapshotWorkflow.run,
        VolumeActivity.CREATE_SNAPSHOT,
        CreateSnapshotInput(name="snap-1", source_volume_id="vol-1", **COMMON),
        SnapshotResult(snapshot=Snapshot(id="snap-1", source_volume_id="vol-1")),
        id="create-snapshot",
    ),
    pytest.param(
        DeleteSnapshotWorkflow.run,
        VolumeActivity.DELETE_SNAPSHOT,
        DeleteSnapshotInput(snapshot_id="snap-1", **COMMON),
        SnapshotResult(),
        id="delete-snapshot",
    ),
]
#: Reads give up after 30 s (READ_TIMEOUT) instead of the operations' 15 min.
READS = [
    pytest.param(
        ReadVolumesWorkflow.run,
        VolumeActivity.READ,
        ReadVolumesInput(kind="volumes", **COMMON),
        ReadVolumesResult(volumes=[Volume(id="vol-1", size_gib=4)]),
        id="read",
    ),
]


def workflow_id_of(input: Any) -> str:
    if isinstance(input, CreateVolumeInput):
        return create_workflow_id(input.name)
    if isinstance(input, CreateSnapshotInput):
        return snapshot_create_workflow_id(input.name)
    if isinstance(input, DeleteSnapshotInput):
        return snapshot_workflow_id(input.snapshot_id)
    if isinstance(input, ReadVolumesInput):
        return read_workflow_id(input.kind, "1")
    if isinstance(input, ModifyVolumeInput):
        return modify_workflow_id(input.volume_id)
    return volume_workflow_id(input.volume_id)


@pytest.fixture
async def wf(env: WorkflowEnvironment, script: Script) -> AsyncIterator[Harness]:
    async with running(env, script, VOLUME_WORKFLOWS) as harness:
        yield harness


@pytest.mark.parametrize(("run", "name", "input", "done"), OPERATIONS + READS)
async def test_success_carries_the_workflow_id(
    wf: Harness, run: Any, name: str, input: Any, done: Any
) -> None:
    wf.script.on(name, done)
    result = await wf.execute(run, input, id=workflow_id_of(input))
    assert result.code is Code.OK
    assert result.workflow_id == workflow_id_of(input)
    assert result.model_dump(exclude={"workflow_id"}) == done.model_dump(exclude={"workflow_id"})
    [call] = wf.script.of(name)
    assert call.input == input
    assert call.local  # the fast path: no activity task


@pytest.mark.parametrize(("run", "name", "input", "done"), OPERATIONS + READS)
async def test_a_local_attempt_hands_its_progress_over(
    wf: Harness, run: Any, name: str, input: Any, done: Any
) -> None:
    progress = {"volume_id": "vol-1", "detaching_from": ["i-1"]}
    wf.script.on(name, fail(HAND_OVER, "still waiting", non_retryable=True, details=progress), done)
    result = await wf.execute(run, input)
    assert result.code is Code.OK
    local, handed = wf.script.of(name)
    assert (local.local, handed.local) == (True, False)
    assert handed.input == input.model_copy(update={"resume": progress})


@pytest.mark.parametrize(("run", "name", "input", "done"), OPERATIONS + READS)
@pytest.mark.parametrize(
    ("kind", "code"),
    [
        pytest.param("NotFound", Code.NOT_FOUND, id="not-found"),
        pytest.param("InvalidRequest", Code.INVALID_ARGUMENT, id="invalid"),
        pytest.param("NotSupported", Code.UNIMPLEMENTED, id="not-supported"),
        pytest.param("OperationPending", Code.ABORTED, id="pending"),
        pytest.param("SomethingNew", Code.INTERNAL, id="unknown-kind"),
    ],
)
async def test_a_refusal_is_a_result_with_its_code(
    wf: Harness, run: Any, name: str, input: Any, done: Any, kind: str, code: Code
) -> None:
    wf.script.on(name, fail(kind, f"the cloud says {kind}", non_retryable=True))
    result = await wf.execute(run, input)
    assert (result.code, result.message) == (code, f"the cloud says {kind}")
    assert len(wf.script.of(name)) == 1  # non-retryable: one attempt


@pytest.mark.parametrize(("run", "name", "input", "done"), OPERATIONS + READS)
async def test_transient_errors_are_retried_with_backoff(
    wf: Harness, run: Any, name: str, input: Any, done: Any
) -> None:
    wf.script.on(name, fail("CloudThrottled"), fail("CloudUnreachable"), fail("CloudError"), done)
    handle = await wf.start(run, input, id=workflow_id_of(input))
    result = await handle.result()
    await record(handle, (await handle.describe()).workflow_type)
    assert result.code is Code.OK
    local, *retried = wf.script.of(name)
    assert local.local and not any(c.local for c in retried)
    assert [c.attempt for c in retried] == [1, 2, 3]
    assert gaps(retried) == pytest.approx([1, 2], abs=1)  # CLOUD_RETRY: 1 s doubling


@pytest.mark.parametrize(("run", "name", "input", "done"), OPERATIONS)
async def test_retried_until_the_operation_time_is_up(
    wf: Harness, run: Any, name: str, input: Any, done: Any
) -> None:
    wf.script.on(name, fail("CloudUnreachable", "connection refused"))
    result = await wf.execute(run, input)
    assert result.code is Code.UNAVAILABLE
    assert result.message == "connection refused"  # the last attempt's error
    # The heartbeating activity's attempts (a local attempt's time is the worker's clock).
    calls = [c for c in wf.script.of(name) if not c.local]
    assert max(gaps(calls)) == pytest.approx(30, abs=1)  # the backoff stops growing at 30 s
    assert (calls[-1].at - calls[0].at).total_seconds() <= OPERATION_TIMEOUT.total_seconds()


async def timers(handle: Any) -> list[int]:
    """The timers the workflow started, in seconds (local activities run on the worker's clock,
    so the history, not the calls' times, shows the waits)."""
    return [
        event.timer_started_event_attributes.start_to_fire_timeout.ToSeconds()
        async for event in handle.fetch_history_events()
        if event.HasField("timer_started_event_attributes")
    ]


async def test_a_modify_waits_out_the_cooldown_on_timers(wf: Harness) -> None:
    """EBS's cooldown (six hours left) is waited on timers of 5, 10, 20 s ... (never past the
    cloud's estimate); each wake-up asks the cloud again, and the first yes is the result."""
    input = ModifyVolumeInput(volume_id="vol-1", parameters={"iops": "4000"}, **COMMON)
    cooldown = ModifyResult(cooldown_s=6 * 3600, message="VolumeModificationRateExceeded")
    done = ModifyResult(message="volume vol-1 has iops=4000")
    wf.script.on(VolumeActivity.MODIFY, cooldown, cooldown, cooldown, done)
    handle = await wf.start(ModifyVolumeWorkflow.run, input, id=modify_workflow_id("vol-1"))
    result = await handle.result()
    await record(handle, (await handle.describe()).workflow_type)
    assert (result.code, result.cooldown_s, result.message) == (Code.OK, 0, done.message)
    assert len(wf.script.of(VolumeActivity.MODIFY)) == 4
    assert await timers(handle) == [5, 10, 20]


async def test_a_short_cooldown_is_waited_only_as_long_as_the_cloud_says(wf: Harness) -> None:
    input = ModifyVolumeInput(volume_id="vol-1", parameters={"iops": "4000"}, **COMMON)
    wf.script.on(VolumeActivity.MODIFY, ModifyResult(cooldown_s=2), ModifyResult())
    handle = await wf.start(ModifyVolumeWorkflow.run, input)
    assert (await handle.result()).code is Code.OK
    assert await timers(handle) == [2]
