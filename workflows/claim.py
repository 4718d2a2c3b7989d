"""ClusterClaimWorkflow: a task queue's record of the cluster that serves it, until released.

The claim's identity lives in its search attributes (set by whoever starts it); the workflow
only waits. Releasing is terminating it (``cloudloop temporal release-claim``), which needs no
worker: the released cluster's workers may be gone for good. One workflow task in its whole
life, no timer, no activity: a history of a handful of events (no continue-as-new needed).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from cloudloop.messages.claim import CLAIM_WORKFLOW, ClaimInput


@workflow.defn(name=CLAIM_WORKFLOW)
class ClusterClaimWorkflow:
    @workflow.run
    async def run(self, input: ClaimInput) -> None:
        await workflow.wait_condition(lambda: False)
