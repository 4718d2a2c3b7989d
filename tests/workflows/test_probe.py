"""CloudProbeWorkflow's branches with fake activities on the time-skipping server.

A cloud answer becomes ``Ready=True`` and a ``Probed`` Event; every failure (refused at once,
retried until the attempts run out) becomes ``Ready=False`` with the error kind as the
reason and a ``ProbeFailed`` Warning, and the workflow itself completes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from cloudloop.cloud.models import Zone
from cloudloop.kube.resources import CLOUD_PROBES, ObjectRef
from cloudloop.messages.kube import KubeActivity, PatchStatusInput, RecordEventInput
from cloudloop.messages.probe import ProbeActivity, ProbeInput, ZoneList, workflow_id
from tests.workflows.conftest import Harness, running
from tests.workflows.histories import record
from tests.workflows.scripted import Script, fail, gaps
from workflows.probe import CloudProbeWorkflow

ZONES = ZoneList(
    zones=[Zone(name="us-east-1b", region="us-east-1"), Zone(name="us-east-1a", region="us-east-1")]
)


def probe_input(generation: int = 1) -> ProbeInput:
    ref = ObjectRef.of(
        CLOUD_PROBES,
        {"metadata": {"name": "zones", "namespace": "ns", "uid": "uid-1"}},
    )
    return ProbeInput(object=ref, generation=generation, provider="aws", cluster="c1")


@pytest.fixture
async def wf(env: WorkflowEnvironment, script: Script) -> AsyncIterator[Harness]:
    script.on(KubeActivity.PATCH_STATUS, True).on(KubeActivity.RECORD_EVENT, None)
    async with running(env, script, [CloudProbeWorkflow]) as harness:
        yield harness


async def test_zones_make_the_probe_ready(wf: Harness) -> None:
    wf.script.on(ProbeActivity.DISCOVER_ZONES, ZONES)
    input = probe_input()
    handle = await wf.start(CloudProbeWorkflow.run, input, id=workflow_id(input))
    result = await handle.result()
    await record(handle, "CloudProbe")

    assert result.ok and result.zones == ["us-east-1a", "us-east-1b"]
    [patch] = wf.script.inputs(KubeActivity.PATCH_STATUS)
    assert isinstance(patch, PatchStatusInput)
    assert patch.status == {"zones": ["us-east-1a", "us-east-1b"], "workflowID": workflow_id(input)}
    assert patch.condition is not None and patch.condition.status is True
    assert patch.condition.reason == "CloudReachable"
    assert patch.observed_generation == 1
    [event] = wf.script.inputs(KubeActivity.RECORD_EVENT)
    assert isinstance(event, RecordEventInput)
    assert (event.type, event.reason) == ("Normal", "Probed")
    assert workflow_id(input) in event.message


@pytest.mark.parametrize(
    ("answers", "attempts", "reason"),
    [
        pytest.param(
            [fail("CloudAuthFailed", "bad key", non_retryable=True)],
            1,
            "CloudAuthFailed",
            id="auth-failed-not-retried",
        ),
        pytest.param(
            [fail("NotSupported", "no zones here", non_retryable=True)],
            1,
            "NotSupported",
            id="not-supported",
        ),
        pytest.param(
            [fail("CloudUnreachable", "connection refused")],
            3,
            "CloudUnreachable",
            id="retries-exhausted",
        ),
        pytest.param(
            [fail("CloudUnreachable"), fail("CloudUnreachable"), ZONES],
            3,
            "CloudReachable",
            id="retried-then-answered",
        ),
    ],
)
async def test_cloud_failures_become_a_condition(
    wf: Harness, answers: list[Any], attempts: int, reason: str
) -> None:
    wf.script.on(ProbeActivity.DISCOVER_ZONES, *answers)
    result = await wf.execute(CloudProbeWorkflow.run, probe_input())

    calls = wf.script.of(ProbeActivity.DISCOVER_ZONES)
    assert [c.attempt for c in calls] == list(range(1, attempts + 1))
    assert result.reason == reason
    [patch] = wf.script.inputs(KubeActivity.PATCH_STATUS)
    assert patch.condition.reason == reason
    assert patch.condition.status is result.ok
    [event] = wf.script.inputs(KubeActivity.RECORD_EVENT)
    expected = ("Normal", "Probed") if result.ok else ("Warning", "ProbeFailed")
    assert (event.type, event.reason) == expected
    if not result.ok:
        assert result.zones == [] and patch.status["zones"] == []


async def test_retries_back_off_as_the_policy_says(wf: Harness) -> None:
    wf.script.on(ProbeActivity.DISCOVER_ZONES, fail("CloudThrottled"))
    await wf.execute(CloudProbeWorkflow.run, probe_input())
    # CLOUD_RETRY: 1 s, doubling, at most 5 s (server time between attempts).
    assert gaps(wf.script.of(ProbeActivity.DISCOVER_ZONES)) == pytest.approx([1, 2], abs=1)


async def test_a_failing_status_write_is_retried_until_it_lands(wf: Harness) -> None:
    wf.script.on(ProbeActivity.DISCOVER_ZONES, ZONES)
    wf.script.on(KubeActivity.PATCH_STATUS, fail("KubeError"), fail("KubeError"), True)
    result = await wf.execute(CloudProbeWorkflow.run, probe_input())
    assert result.ok
    assert [c.attempt for c in wf.script.of(KubeActivity.PATCH_STATUS)] == [1, 2, 3]
    assert len(wf.script.of(KubeActivity.RECORD_EVENT)) == 1
