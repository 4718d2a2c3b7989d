"""Volume workflows: create, delete, attach, detach, expand and modify a cloud disk for CSI.

Each workflow runs its operation's activity (the cloud change and the wait for it) and turns a
refusal into a result with a CSI code. Local first: docs/decisions/0041-volume-operations-*.md.

Rules:
- Local first: the activity runs first as a local activity in the workflow task that started the
  workflow; after ``LOCAL_WAIT_S`` (``HAND_OVER``, progress in the details), a retryable failure
  or its timeout, the same activity goes on as a heartbeating, retried activity (``resume``). A
  refusal of the local attempt is the result. Every attempt reads the cloud first, so nothing is
  repeated; a worker killed meanwhile times the workflow task out and another replays it.
- Runs started before the ``volume-local-first`` patch keep their single heartbeating activity.
- Identity: a create runs as ``volume-create/<name>``, every other operation on a volume as
  ``volume/<volume-id>`` (snapshots: ``snapshot-create/<name>``, ``snapshot/<snapshot-id>``; a
  modify, which may wait hours for the cloud's cooldown, ``volume-modify/<volume-id>``): one
  workflow ID per volume makes "at most one operation per volume" atomic; a second request meets
  the running workflow (``USE_EXISTING``) and the memo decides: equal joins, different is
  refused as pending (:mod:`cloudloop.csi.operations`).
- Reads (``volume-read/<kind>/<random>``) change nothing, take no lock, time out after 30 s.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
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
        VolumeInput,
        VolumeResult,
        VolumeWorkflow,
        code_for,
    )

R = TypeVar("R", bound=VolumeResult)

#: One attempt: the cloud change plus the wait for it (EBS attach: seconds; create: < 1 min).
ATTEMPT_TIMEOUT = timedelta(minutes=5)
#: A worker that died mid-attempt is noticed after this; the next attempt resumes.
HEARTBEAT_TIMEOUT = timedelta(seconds=10)
#: All attempts; after that the result is UNAVAILABLE and a repeated request starts afresh.
OPERATION_TIMEOUT = timedelta(minutes=15)
CLOUD_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
)


def _root_application_error(err: BaseException | None) -> ApplicationError | None:
    while err is not None:
        if isinstance(err, ApplicationError):
            return err
        err = err.__cause__ if err.__cause__ is not None else getattr(err, "cause", None)
    return None


#: A read answers within this or not at all (the caller asks again).
READ_TIMEOUT = timedelta(seconds=30)
#: The local attempt: one cloud change and a short wait (the activity hands over after
#: ``activities.volume.LOCAL_WAIT_S``); longer only when a cloud call itself hangs.
LOCAL_ATTEMPT_TIMEOUT = timedelta(seconds=30)
LOCAL_ONCE = RetryPolicy(maximum_attempts=1)
LOCAL_FIRST_PATCH = "volume-local-first"


def _step(activity_name: str) -> str:
    """``volume.create`` → ``create volume`` (an activity summary's verb)."""
    noun, _, verb = activity_name.partition(".")
    return f"{verb} {noun}"


def _subject(input: VolumeInput) -> str:
    """What an activity acts on, for its summary: the name, the cloud IDs and the node."""
    fields = ("name", "volume_id", "snapshot_id", "source_volume_id", "node_id", "size_gib")
    parts = [f"{f}={getattr(input, f)}" for f in fields if getattr(input, f, "")]
    kind = getattr(input, "kind", "")
    return " ".join([str(kind)] * bool(kind) + parts)


def _failure_of(err: ActivityError | ApplicationError | TemporalTimeoutError) -> BaseException:
    """What failed: the activity error's cause (a local activity's error may come unwrapped)."""
    return err.cause or err if isinstance(err, ActivityError) else err


def _failure_result(failure: BaseException, result_type: type[R]) -> R:
    """The result with the CSI code of a failed activity."""
    cause = _root_application_error(failure)
    if isinstance(failure, TemporalTimeoutError):
        last = f" (last error: {cause.message})" if cause is not None else ""
        return result_type(code=Code.UNAVAILABLE, message=f"{failure.message}{last}")
    if cause is not None:
        return result_type(code=code_for(cause.type), message=cause.message)
    return result_type(code=Code.INTERNAL, message=str(failure))


async def _local_attempt(name: str, input: VolumeInput, result_type: type[R]) -> R | VolumeInput:
    """The local attempt's result (a refusal's included), or the input the heartbeating
    activity goes on with."""
    try:
        result: R = await workflow.execute_local_activity(
            name,
            input,
            result_type=result_type,
            summary=f"{_step(name)} {_subject(input)} (local attempt)",
            start_to_close_timeout=LOCAL_ATTEMPT_TIMEOUT,
            retry_policy=LOCAL_ONCE,
        )
        return result
    except (ActivityError, ApplicationError, TemporalTimeoutError) as err:
        failure = _failure_of(err)
        cause = _root_application_error(failure)
        if cause is None or isinstance(failure, TemporalTimeoutError):
            return input
        if cause.type == HAND_OVER:
            progress = cause.details[0] if cause.details else {}
            return input.model_copy(update={"resume": dict(progress)})
        if cause.non_retryable:
            return _failure_result(failure, result_type)
        return input


async def run_volume_activity(
    name: str,
    input: VolumeInput,
    result_type: type[R],
    *,
    timeout: timedelta = OPERATION_TIMEOUT,
) -> R:
    """Run the operation's activity (local first); a failure becomes a result with its CSI
    code."""
    deadline = workflow.now() + timeout
    attempt: R | VolumeInput = input
    if workflow.patched(LOCAL_FIRST_PATCH):
        attempt = await _local_attempt(name, input, result_type)
    if not isinstance(attempt, VolumeInput):
        result = attempt
    else:
        remaining = max(deadline - workflow.now(), timedelta(seconds=1))
        try:
            result = await workflow.execute_activity(
                name,
                attempt,
                result_type=result_type,
                summary=f"{_step(name)} {_subject(attempt)}",
                start_to_close_timeout=min(ATTEMPT_TIMEOUT, remaining),
                schedule_to_close_timeout=remaining,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=CLOUD_RETRY,
            )
        except ActivityError as err:
            result = _failure_result(_failure_of(err), result_type)
    result.workflow_id = workflow.info().workflow_id
    return result


@workflow.defn(name=VolumeWorkflow.CREATE)
class CreateVolumeWorkflow:
    @workflow.run
    async def run(self, input: CreateVolumeInput) -> CreateVolumeResult:
        return await run_volume_activity(VolumeActivity.CREATE, input, CreateVolumeResult)


@workflow.defn(name=VolumeWorkflow.DELETE)
class DeleteVolumeWorkflow:
    @workflow.run
    async def run(self, input: DeleteVolumeInput) -> DeleteVolumeResult:
        return await run_volume_activity(VolumeActivity.DELETE, input, DeleteVolumeResult)


@workflow.defn(name=VolumeWorkflow.ATTACH)
class AttachVolumeWorkflow:
    @workflow.run
    async def run(self, input: AttachVolumeInput) -> AttachResult:
        return await run_volume_activity(VolumeActivity.ATTACH, input, AttachResult)


@workflow.defn(name=VolumeWorkflow.DETACH)
class DetachVolumeWorkflow:
    @workflow.run
    async def run(self, input: DetachVolumeInput) -> DetachResult:
        return await run_volume_activity(VolumeActivity.DETACH, input, DetachResult)


@workflow.defn(name=VolumeWorkflow.EXPAND)
class ExpandVolumeWorkflow:
    @workflow.run
    async def run(self, input: ExpandVolumeInput) -> ExpandResult:
        return await run_volume_activity(VolumeActivity.EXPAND, input, ExpandResult)


#: The first wait after a cooldown refusal, doubled up to ``COOLDOWN_WAIT_MAX`` (never past the
#: cloud's own estimate): EBS's six hours cost about thirty ModifyVolume calls, not a worker.
COOLDOWN_WAIT_FIRST = timedelta(seconds=5)
COOLDOWN_WAIT_MAX = timedelta(minutes=15)


@workflow.defn(name=VolumeWorkflow.MODIFY)
class ModifyVolumeWorkflow:
    """ControllerModifyVolume: the activity changes the volume; the cloud's cooldown (EBS: one
    change per volume every six hours) is waited out on durable timers, then asked again."""

    @workflow.run
    async def run(self, input: ModifyVolumeInput) -> ModifyResult:
        wait = COOLDOWN_WAIT_FIRST
        while True:
            result = await run_volume_activity(VolumeActivity.MODIFY, input, ModifyResult)
            if result.cooldown_s <= 0:
                return result
            pause = min(wait, timedelta(seconds=result.cooldown_s))
            workflow.logger.info("%s: cooldown, next try in %s", input.volume_id, pause)
            await workflow.sleep(pause, summary=f"cooldown of {input.volume_id}: {result.message}")
            wait = min(wait * 2, COOLDOWN_WAIT_MAX)


@workflow.defn(name=VolumeWorkflow.READ)
class ReadVolumesWorkflow:
    @workflow.run
    async def run(self, input: ReadVolumesInput) -> ReadVolumesResult:
        return await run_volume_activity(
            VolumeActivity.READ, input, ReadVolumesResult, timeout=READ_TIMEOUT
        )


@workflow.defn(name=VolumeWorkflow.CREATE_SNAPSHOT)
class CreateSnapshotWorkflow:
    @workflow.run
    async def run(self, input: CreateSnapshotInput) -> SnapshotResult:
        return await run_volume_activity(VolumeActivity.CREATE_SNAPSHOT, input, SnapshotResult)


@workflow.defn(name=VolumeWorkflow.DELETE_SNAPSHOT)
class DeleteSnapshotWorkflow:
    @workflow.run
    async def run(self, input: DeleteSnapshotInput) -> SnapshotResult:
        return await run_volume_activity(VolumeActivity.DELETE_SNAPSHOT, input, SnapshotResult)


VOLUME_WORKFLOWS: list[type] = [
    CreateVolumeWorkflow,
    DeleteVolumeWorkflow,
    AttachVolumeWorkflow,
    DetachVolumeWorkflow,
    ExpandVolumeWorkflow,
    ModifyVolumeWorkflow,
    ReadVolumesWorkflow,
    CreateSnapshotWorkflow,
    DeleteSnapshotWorkflow,
]
