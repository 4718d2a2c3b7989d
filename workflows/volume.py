"""Volume workflows: create, delete, attach, detach and expand a cloud disk for a CSI controller.

Each workflow runs its operation's activity, which makes the cloud change and waits for it, and
turns a refusal (cloud error kind) into a result with a CSI code, so callers always get a result.

Rules:

- Local first. The activity runs first as a local activity, in the workflow task that started
  the workflow: the common case (an answer within seconds) costs one workflow task and no
  activity task. A local attempt that has waited ``LOCAL_WAIT_S`` for the cloud hands over
  (``HAND_OVER``, its progress in the details); a retryable failure or the local attempt's
  timeout goes on too: the same activity then runs as a heartbeating, retried activity
  (``resume`` carries the progress), visible as a pending activity in the UI. A refusal of the
  local attempt is the result. Every attempt reads what the cloud already has first, so running
  the activity again after a local attempt never repeats a change.
- A worker killed during the local attempt: the workflow task times out and another worker
  replays and runs it again (the same crash safety as an activity's heartbeat timeout).
- Runs started before the ``volume-local-first`` patch keep their single heartbeating activity.

Identity: a create runs as ``volume-create/<name>``; every other operation on an existing volume
runs as ``volume/<volume-id>``. One workflow ID per volume is what makes "at most one operation
per volume" atomic in Temporal: a second request for the same volume meets the running workflow
(conflict policy ``USE_EXISTING``) and the client compares the request it carries (memo) with its
own — equal joins, different is refused as pending (see :mod:`cloudloop.csi.operations`). The
operation's own name (``attach/<volume>/<node>``, ``detach/<volume>/<node>``, ``expand/<volume>``,
``volume-delete/<volume>``) is in the memo and the workflow's summary.

Snapshots run as ``snapshot-create/<name>`` and ``snapshot/<snapshot-id>`` the same way. Reads for
the CSI controller (one volume, the cluster's volumes, free capacity, snapshots) run as
``volume-read/<kind>/<random>``: they change nothing, take no lock and time out after 30 s.
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
    ReadVolumesWorkflow,
    CreateSnapshotWorkflow,
    DeleteSnapshotWorkflow,
]
