"""CloudProbeWorkflow: checks that a cloud answers with the worker's credentials, and reports it.

The foundation's round trip: a ``CloudProbe`` object's starter runs this once per generation; it
lists the cloud's zones, writes them and a ``Ready`` condition onto the object's status and
records an Event naming the workflow. A cloud failure is a result, not a workflow failure.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from workflows.timeouts import SINGLE_CALL_TIMEOUT

with workflow.unsafe.imports_passed_through():
    from cloudloop.messages.errors import ErrorKind
    from cloudloop.messages.kube import (
        ConditionUpdate,
        KubeActivity,
        PatchStatusInput,
        RecordEventInput,
    )
    from cloudloop.messages.probe import (
        CloudCallInput,
        ProbeActivity,
        ProbeInput,
        ProbeResult,
        ZoneList,
    )

#: Cloud calls: a few quick attempts; auth and "not supported" fail at once (non-retryable).
CLOUD_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=5), maximum_attempts=3
)
KUBE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)


@workflow.defn(name="CloudProbe")
class CloudProbeWorkflow:
    @workflow.run
    async def run(self, input: ProbeInput) -> ProbeResult:
        wf_id = workflow.info().workflow_id
        try:
            found = await workflow.execute_activity(
                ProbeActivity.DISCOVER_ZONES,
                CloudCallInput(provider=input.provider),
                result_type=ZoneList,
                summary=f"ask {input.provider} for its zones",
                start_to_close_timeout=SINGLE_CALL_TIMEOUT,
                retry_policy=CLOUD_RETRY,
            )
            zones = sorted(z.name for z in found.zones)
            result = ProbeResult(
                ok=True,
                reason="CloudReachable",
                zones=zones,
                message=f"{input.provider} answered with {len(zones)} zones",
            )
        except ActivityError as err:
            cause = err.cause
            reason = (
                cause.type
                if isinstance(cause, ApplicationError) and cause.type
                else ErrorKind.CLOUD_ERROR
            )
            message = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
            result = ProbeResult(ok=False, reason=reason, message=message)

        await workflow.execute_activity(
            KubeActivity.PATCH_STATUS,
            PatchStatusInput(
                object=input.object,
                status={"zones": result.zones, "workflowID": wf_id},
                condition=ConditionUpdate(
                    type="Ready", status=result.ok, reason=result.reason, message=result.message
                ),
                observed_generation=input.generation,
            ),
            summary=f"write Ready={result.ok} ({result.reason}) onto the CloudProbe",
            start_to_close_timeout=SINGLE_CALL_TIMEOUT,
            retry_policy=KUBE_RETRY,
        )
        await workflow.execute_activity(
            KubeActivity.RECORD_EVENT,
            RecordEventInput(
                object=input.object,
                type="Normal" if result.ok else "Warning",
                reason="Probed" if result.ok else "ProbeFailed",
                message=f"{result.message} (workflow {wf_id})",
            ),
            summary=f"Event {'Probed' if result.ok else 'ProbeFailed'} on the CloudProbe",
            start_to_close_timeout=SINGLE_CALL_TIMEOUT,
            retry_policy=KUBE_RETRY,
        )
        return result
