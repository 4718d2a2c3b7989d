"""``LayoutConverge`` with fake activities on the time-skipping server.

A pass plans (define, the base, then the nodes with the base's found outputs) and reports each
module's status; without auto-converge that is all. With it, the modules with something to
create or repair run their apply child (the base first); a node whose machine is to be made
without bootstrap data is not made; a replacement waits for the ``approve`` Update (an approval
given twice acts once; the step is deleted, then its module applied) or, unapproved, stays held
when the wait ends; a pass that cannot plan reports ``error`` and changes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource, LayoutDef, ModuleDef, ResourceDef, ref
from cloudloop.messages.layout import (
    FieldChange,
    LayoutActivity,
    PlanModuleInput,
    PlanModuleResult,
    ResourcePlan,
    StepInput,
    StepResult,
)
from cloudloop.messages.layout_converge import (
    ApproveInput,
    ConvergeActivity,
    ConvergeInput,
    ConvergeResult,
    ReportInput,
    ReportResult,
)
from tests.workflows.conftest import Harness, running
from tests.workflows.scripted import Call, Script, fail
from workflows.layout import LAYOUT_WORKFLOWS
from workflows.layout_converge import CONVERGE_WORKFLOWS, LayoutConvergeWorkflow

PREFIX = "c1"
NET, VM = "t.net/c1", "t.vm/c1-master-0"
BOOT = {"$file": "boot.yaml", "sha256": "ab" * 32, "bytes": 10}


def layout(*, bootstrap: bool = True) -> LayoutDef:
    base = ModuleDef(
        id="base",
        module="base-infrastructure",
        resources=[ResourceDef(kind="t.net", name="c1", properties={"cidr": "10.0.0.0/16"})],
    )
    master = ModuleDef(
        id="master-0",
        module="master-node",
        node_name="c1-master-0",
        group="master",
        machine=VM,
        resources=[
            ResourceDef(
                kind="t.vm",
                name="c1-master-0",
                properties={"net": ref(NET), **({"user_data": BOOT} if bootstrap else {})},
            )
        ],
    )
    return LayoutDef(provider="aws", layout="L", prefix=PREFIX, uuid="u-1", modules=[base, master])


def converge_input(*, auto: bool = True, wait_s: float = 600) -> ConvergeInput:
    return ConvergeInput(
        provider="aws",
        source=ConfigSource(file="/etc/cluster.yaml"),
        cluster=ClusterIdentity(prefix=PREFIX, uuid="u-1"),
        auto=auto,
        approval_wait_s=wait_s,
    )


def plan(actions: dict[str, str], changes: dict[str, list[FieldChange]] | None = None) -> object:
    """Plans with each key's action (``no-op`` for the rest), found outputs unless ``create``."""

    async def answer(call: Call) -> PlanModuleResult:
        given: PlanModuleInput = call.input
        resources = [
            ResourcePlan(
                key=r.key,
                kind=r.kind,
                name=r.name,
                action=actions.get(r.key, "no-op"),
                changes=(changes or {}).get(r.key, []),
                outputs={} if actions.get(r.key) == "create" else {"id": f"id-{r.key}"},
            )
            for r in given.module.resources
        ]
        return PlanModuleResult(module=given.module.id, resources=resources)

    return answer


async def ensured(call: Call) -> StepResult:
    step: StepInput = call.input
    return StepResult(key=step.resource.key, action="created", outputs={"id": "new"})


REPORTED = ReportResult(written=["d8-system/cloudloop-layout-converge"])
CIDR = FieldChange(
    field="cidr (needs replacement; not repaired)", have="a", want="b", how="replace"
)
TAGS = FieldChange(field="tags", have={}, want={"x": "y"}, how="repair")


@pytest.fixture
async def harness(env: WorkflowEnvironment, script: Script) -> AsyncIterator[Harness]:
    async with running(env, script, [*CONVERGE_WORKFLOWS, *LAYOUT_WORKFLOWS]) as h:
        yield h


def reports(script: Script) -> list[ReportInput]:
    return script.inputs(ConvergeActivity.REPORT)


def statuses(report: ReportInput) -> dict[str, str]:
    return {s.module: s.status for s in report.result.statuses}


async def test_without_auto_a_pass_plans_and_reports_only(harness: Harness) -> None:
    harness.script.on(LayoutActivity.DEFINE, layout())
    harness.script.on(LayoutActivity.PLAN, plan({VM: "update"}, {VM: [TAGS]}))
    harness.script.on(ConvergeActivity.REPORT, REPORTED)

    result: ConvergeResult = await harness.execute(
        LayoutConvergeWorkflow.run, converge_input(auto=False)
    )

    assert result.status == "changed"
    assert {s.module: (s.status, s.to_change) for s in result.statuses} == {
        "base": ("ok", 0),
        "master-0": ("changed", 1),
    }
    assert harness.script.of(LayoutActivity.ENSURE) == []
    [report] = reports(harness.script)
    assert statuses(report) == {"base": "ok", "master-0": "changed"}
    assert report.found["base"] == {NET: {"id": f"id-{NET}"}}
    assert report.nodes == {"master-0": "c1-master-0"}
    define = harness.script.inputs(LayoutActivity.DEFINE)[0]
    assert define.bootstrap_from_cluster is True


async def test_auto_applies_creations_and_repairs_then_reports_again(harness: Harness) -> None:
    harness.script.on(LayoutActivity.DEFINE, layout())
    harness.script.on(
        LayoutActivity.PLAN,
        plan({NET: "update", VM: "create"}, {NET: [TAGS]}),
        plan({NET: "update", VM: "create"}, {NET: [TAGS]}),
        plan({}),
    )
    harness.script.on(LayoutActivity.ENSURE, ensured)
    harness.script.on(ConvergeActivity.REPORT, REPORTED)

    result: ConvergeResult = await harness.execute(LayoutConvergeWorkflow.run, converge_input())

    assert result.status == "ok"
    assert sorted(result.applied) == ["base", "master-0"]
    assert [s.resource.key for s in harness.script.inputs(LayoutActivity.ENSURE)] == [NET, VM]
    first, last = reports(harness.script)
    assert statuses(first) == {"base": "changed", "master-0": "absent"}
    assert statuses(last) == {"base": "ok", "master-0": "ok"}
    # the define ran once: the second plan used the same definitions
    assert len(harness.script.of(LayoutActivity.DEFINE)) == 1


async def test_a_node_without_bootstrap_data_is_not_made(harness: Harness) -> None:
    harness.script.on(LayoutActivity.DEFINE, layout(bootstrap=False))
    harness.script.on(LayoutActivity.PLAN, plan({VM: "create"}))
    harness.script.on(ConvergeActivity.REPORT, REPORTED)

    result: ConvergeResult = await harness.execute(LayoutConvergeWorkflow.run, converge_input())

    assert harness.script.of(LayoutActivity.ENSURE) == []
    [master] = [s for s in result.statuses if s.module == "master-0"]
    assert master.status == "absent"
    assert "no bootstrap data" in master.note
    assert result.applied == []


async def test_a_replacement_waits_for_approval_and_acts_once(harness: Harness) -> None:
    harness.script.on(LayoutActivity.DEFINE, layout())
    harness.script.on(LayoutActivity.PLAN, plan({NET: "update"}, {NET: [CIDR]}), plan({}), plan({}))
    harness.script.on(LayoutActivity.DELETE, StepResult(key=NET, action="deleted"))
    harness.script.on(LayoutActivity.ENSURE, ensured)
    harness.script.on(ConvergeActivity.REPORT, REPORTED)
    handle = await harness.start(LayoutConvergeWorkflow.run, converge_input())
    await harness.script.called(ConvergeActivity.REPORT)

    # the pass waits, the step and its diff visible in its query
    for _ in range(100):
        state = await handle.query(LayoutConvergeWorkflow.state)
        if state.phase == "waiting for approval":
            break
        await asyncio.sleep(0.05)
    assert [(h.key, h.outcome) for h in state.held] == [(f"base/{NET}", "waiting")]
    assert state.held[0].changes[0].have == "a"
    assert harness.script.of(LayoutActivity.DELETE) == []
    assert statuses(reports(harness.script)[0])["base"] == "destructively_changed"

    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update(LayoutConvergeWorkflow.approve, ApproveInput(step="base/x"))
    first = await handle.execute_update(
        LayoutConvergeWorkflow.approve, ApproveInput(step=f"base/{NET}")
    )
    second = await handle.execute_update(LayoutConvergeWorkflow.approve, ApproveInput())
    result: ConvergeResult = await handle.result()

    assert first.approved == [f"base/{NET}"]
    assert second.approved == [] and second.already == [f"base/{NET}"]
    assert [d.resource.key for d in harness.script.inputs(LayoutActivity.DELETE)] == [NET]
    assert [e.resource.key for e in harness.script.inputs(LayoutActivity.ENSURE)] == [NET]
    assert [(h.key, h.outcome) for h in result.held] == [(f"base/{NET}", "done")]
    assert result.status == "ok"


async def test_an_unapproved_replacement_stays_held(harness: Harness) -> None:
    harness.script.on(LayoutActivity.DEFINE, layout())
    harness.script.on(LayoutActivity.PLAN, plan({NET: "update"}, {NET: [CIDR]}))
    harness.script.on(ConvergeActivity.REPORT, REPORTED)

    result: ConvergeResult = await harness.execute(
        LayoutConvergeWorkflow.run, converge_input(wait_s=60)
    )

    assert harness.script.of(LayoutActivity.DELETE) == []
    assert [h.outcome for h in result.held] == ["held"]
    assert result.status == "destructively_changed"
    assert len(reports(harness.script)) == 1


async def test_a_pass_that_cannot_plan_reports_error_and_changes_nothing(
    harness: Harness,
) -> None:
    harness.script.on(LayoutActivity.DEFINE, layout())
    harness.script.on(
        LayoutActivity.PLAN, fail("CloudUnavailable", "cloud down", non_retryable=True)
    )
    harness.script.on(ConvergeActivity.REPORT, REPORTED)

    result: ConvergeResult = await harness.execute(LayoutConvergeWorkflow.run, converge_input())

    assert result.status == "error"
    assert "cloud down" in result.error
    assert harness.script.of(LayoutActivity.ENSURE) == []
    assert harness.script.of(LayoutActivity.DELETE) == []
    [report] = reports(harness.script)
    assert report.result.status == "error" and report.found == {}
