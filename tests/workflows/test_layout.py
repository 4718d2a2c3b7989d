"""The layout workflows' branches with fake activities on the time-skipping server.

Apply: the base module's child first, its resources in dependency waves (a wave's steps at
once), each step given only the outputs it refers to; then the node modules with the base's
outputs; references in module outputs and the discovery template resolved. A failed step fails
the run with the cloud's message after its wave's other steps ended, and no later module
starts. Destroy: a read-only look at the base, the destroy check (a refusal deletes nothing),
node modules before the base, each module last wave first, only what exists. Plan: per module,
the base's found outputs feeding the others; nothing else runs. A broken definition (an
unresolved reference in the discovery template or a module's outputs, a dependency cycle) fails
the run with a clear message instead of failing (and retrying) the workflow task forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource, LayoutDef, ModuleDef, ResourceDef, ref
from cloudloop.messages.layout import (
    LayoutActivity,
    LayoutInput,
    LayoutResult,
    PlanModuleInput,
    PlanModuleResult,
    ResourcePlan,
    StepInput,
    StepResult,
    module_workflow_id,
    workflow_id,
)
from tests.workflows.conftest import Harness, running
from tests.workflows.histories import record
from tests.workflows.scripted import Call, Script, fail
from workflows.layout import LAYOUT_WORKFLOWS, LayoutWorkflow

PREFIX = "p1"
VPC, SUBNET, SG = "t.vpc/p1", "t.subnet/p1-a", "t.sg/p1-node"
INSTANCE, EIP = "t.instance/p1-master-0", "t.eip/p1-master-0"


def layout() -> LayoutDef:
    base = ModuleDef(
        id="base",
        module="base-infrastructure",
        resources=[
            ResourceDef(kind="t.vpc", name="p1", properties={"cidr": "10.0.0.0/16"}),
            ResourceDef(kind="t.subnet", name="p1-a", properties={"vpc": ref(VPC)}),
            ResourceDef(kind="t.sg", name="p1-node", properties={"vpc": ref(VPC)}),
        ],
    )
    master = ModuleDef(
        id="master-0",
        module="master-node",
        node_name="p1-master-0",
        resources=[
            ResourceDef(
                kind="t.instance",
                name="p1-master-0",
                properties={"subnet": ref(SUBNET), "groups": [ref(SG)]},
                outputs=["id", "private_ip"],
            ),
            ResourceDef(kind="t.eip", name="p1-master-0", properties={"instance": ref(INSTANCE)}),
        ],
        outputs={"node_internal_ip_address": ref(INSTANCE, "private_ip"), "device": "/dev/xvdf"},
    )
    return LayoutDef(
        provider="aws",
        layout="WithoutNAT",
        prefix=PREFIX,
        uuid="u-1",
        modules=[base, master],
        discovery={"kind": "TestDiscoveryData", "subnets": {"a": ref(SUBNET)}},
    )


def layout_input(action: str) -> LayoutInput:
    return LayoutInput(
        action=action,
        provider="aws",
        source=ConfigSource(file="/etc/cluster.yaml"),
        cluster=ClusterIdentity(prefix=PREFIX, uuid="u-1"),
    )


async def created(call: Call) -> StepResult:
    step: StepInput = call.input
    key = step.resource.key
    return StepResult(
        key=key, action="created", outputs={"id": f"id-{key}", "private_ip": "10.0.0.5"}
    )


async def deleted(call: Call) -> StepResult:
    return StepResult(key=call.input.resource.key, action="deleted")


def found(*keys: str, destroy: bool = True) -> object:
    async def answer(call: Call) -> PlanModuleResult:
        plan: PlanModuleInput = call.input
        resources = [
            ResourcePlan(
                key=r.key,
                kind=r.kind,
                name=r.name,
                action=("delete" if destroy else "no-op") if r.key in keys else "create",
                outputs={"id": f"id-{r.key}"} if r.key in keys else {},
            )
            for r in plan.module.resources
        ]
        return PlanModuleResult(module=plan.module.id, resources=resources)

    return answer


@pytest.fixture
async def wf(env: WorkflowEnvironment, script: Script) -> AsyncIterator[Harness]:
    script.on(LayoutActivity.DEFINE, layout())
    script.on(LayoutActivity.CHECK_APPLY, [])
    async with running(env, script, LAYOUT_WORKFLOWS) as harness:
        yield harness


def keys(script: Script, name: str) -> list[str]:
    return [c.input.resource.key for c in script.of(name)]


async def test_apply_runs_the_base_then_the_nodes_in_dependency_waves(wf: Harness) -> None:
    wf.script.on(LayoutActivity.ENSURE, created)
    handle = await wf.start(LayoutWorkflow.run, layout_input("apply"), id=workflow_id(PREFIX))
    result: LayoutResult = await handle.result()
    await record(handle, "Layout")
    await record(wf.client.get_workflow_handle(module_workflow_id(PREFIX, "base")), "LayoutModule")

    order = keys(wf.script, LayoutActivity.ENSURE)
    assert order[0] == VPC and set(order[1:3]) == {SUBNET, SG} and order[3:] == [INSTANCE, EIP]
    steps = {c.input.resource.key: c.input for c in wf.script.of(LayoutActivity.ENSURE)}
    assert set(steps[SUBNET].inputs) == {VPC}  # only what it refers to
    assert set(steps[INSTANCE].inputs) == {SUBNET, SG}  # the base's outputs reach the node
    assert set(steps[EIP].inputs) == {INSTANCE}
    assert result.cloud_discovery_data == {
        "kind": "TestDiscoveryData",
        "subnets": {"a": f"id-{SUBNET}"},
    }
    [master] = [m for m in result.modules if m.module == "master-0"]
    assert master.outputs == {"node_internal_ip_address": "10.0.0.5", "device": "/dev/xvdf"}
    assert master.node_name == "p1-master-0"
    assert all(c.input.source.file == "/etc/cluster.yaml" for c in wf.script.calls)


async def test_a_refused_apply_check_makes_nothing(wf: Harness) -> None:
    """Every lookup that can refuse runs before the first create (``layout.check_apply``)."""
    wf.script.on(
        LayoutActivity.CHECK_APPLY,
        fail("NotFound", f"{VPC}: not found (it is looked up, never created)", non_retryable=True),
    )
    handle = await wf.start(LayoutWorkflow.run, layout_input("apply"), id=workflow_id(PREFIX))
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result()
    assert f"apply refused: {VPC}: not found" in str(caught.value.cause)
    [check] = wf.script.inputs(LayoutActivity.CHECK_APPLY)
    assert [m.id for m in check.layout.modules] == ["base", "master-0"]
    assert wf.script.of(LayoutActivity.ENSURE) == []


async def test_a_failed_step_fails_the_run_after_its_wave_and_starts_nothing_later(
    wf: Harness,
) -> None:
    async def subnet_fails(call: Call) -> StepResult:
        if call.input.resource.key == SUBNET:
            raise fail("InvalidRequest", "aws CreateSubnet: conflicting CIDR", non_retryable=True)
        return await created(call)

    wf.script.on(LayoutActivity.ENSURE, subnet_fails)
    handle = await wf.start(LayoutWorkflow.run, layout_input("apply"), id=workflow_id(PREFIX))
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result()
    assert "conflicting CIDR" in str(caught.value.cause)
    assert SUBNET in str(caught.value.cause)
    ensured = keys(wf.script, LayoutActivity.ENSURE)
    assert SG in ensured  # its wave's other step ran to its end
    assert INSTANCE not in ensured  # no node module started
    progress = await handle.query(LayoutWorkflow.progress)
    assert progress.phase == "failed" and "conflicting CIDR" in progress.error


async def test_destroy_goes_nodes_first_and_each_module_in_reverse(wf: Harness) -> None:
    wf.script.on(LayoutActivity.PLAN, found(VPC, SUBNET, SG, INSTANCE))  # the EIP is gone
    wf.script.on(LayoutActivity.CHECK_DESTROY, [])
    wf.script.on(LayoutActivity.DELETE, deleted)
    handle = await wf.start(LayoutWorkflow.run, layout_input("destroy"), id=workflow_id(PREFIX))
    result: LayoutResult = await handle.result()

    order = keys(wf.script, LayoutActivity.DELETE)
    assert order[0] == INSTANCE and set(order[1:3]) == {SUBNET, SG} and order[3] == VPC
    assert EIP not in order  # absent: nothing to delete
    [check] = wf.script.inputs(LayoutActivity.CHECK_DESTROY)
    assert check.found[VPC] == {"id": f"id-{VPC}"}
    [master] = [m for m in result.modules if m.module == "master-0"]
    assert [s.key for s in master.steps] == [INSTANCE]
    instance_step = next(
        c.input for c in wf.script.of(LayoutActivity.DELETE) if c.input.resource.key == INSTANCE
    )
    assert set(instance_step.inputs) == {SUBNET, SG}


async def test_a_refused_destroy_deletes_nothing(wf: Harness) -> None:
    wf.script.on(LayoutActivity.PLAN, found(VPC, SUBNET))
    wf.script.on(
        LayoutActivity.CHECK_DESTROY,
        fail("DestroyBlocked", "ELB a1b2 in the VPC", non_retryable=True),
    )
    handle = await wf.start(LayoutWorkflow.run, layout_input("destroy"), id=workflow_id(PREFIX))
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result()
    assert "ELB a1b2" in str(caught.value.cause)
    assert wf.script.of(LayoutActivity.DELETE) == []


async def test_plan_feeds_the_bases_found_outputs_to_the_nodes_and_changes_nothing(
    wf: Harness,
) -> None:
    wf.script.on(LayoutActivity.PLAN, found(VPC, SUBNET, destroy=False))
    result: LayoutResult = await wf.execute(
        LayoutWorkflow.run, layout_input("plan"), id=f"{workflow_id(PREFIX)}/plan"
    )
    plans = wf.script.inputs(LayoutActivity.PLAN)
    assert [p.module.id for p in plans] == ["base", "master-0"]
    assert set(plans[1].external) == {VPC, SUBNET}
    assert not plans[0].destroy and not plans[1].destroy
    assert set(wf.script.names()) == {LayoutActivity.DEFINE, LayoutActivity.PLAN}
    actions = {r.key: r.action for m in result.plan for r in m.resources}
    assert actions == {
        VPC: "no-op",
        SUBNET: "no-op",
        SG: "create",
        INSTANCE: "create",
        EIP: "create",
    }


async def test_a_layout_the_cloud_cannot_build_fails_before_any_step(wf: Harness) -> None:
    wf.script.on(
        LayoutActivity.DEFINE,
        fail(
            "LayoutConfigInvalid", "zone 'x' is not one of the cluster's zones", non_retryable=True
        ),
    )
    handle = await wf.start(LayoutWorkflow.run, layout_input("apply"), id=workflow_id(PREFIX))
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result()
    assert "zone 'x'" in str(caught.value.cause)
    assert wf.script.names() == [LayoutActivity.DEFINE]


async def test_a_plan_of_the_destroy_looks_at_every_module_as_a_destroy(wf: Harness) -> None:
    wf.script.on(LayoutActivity.PLAN, found(VPC, SUBNET, SG, INSTANCE))
    input = layout_input("plan").model_copy(update={"plan_destroy": True})
    result: LayoutResult = await wf.execute(
        LayoutWorkflow.run, input, id=f"{workflow_id(PREFIX)}/plan"
    )
    plans = wf.script.inputs(LayoutActivity.PLAN)
    assert [(p.module.id, p.destroy) for p in plans] == [("base", True), ("master-0", True)]
    actions = {r.key: r.action for m in result.plan for r in m.resources}
    assert actions[INSTANCE] == "delete" and actions[VPC] == "delete"
    assert set(wf.script.names()) == {LayoutActivity.DEFINE, LayoutActivity.PLAN}


async def failed_with(wf: Harness, definition: LayoutDef, action: str = "apply") -> str:
    """The message the run with ``definition`` fails with (not a hang: a failed workflow task
    would be retried forever)."""
    wf.script.on(LayoutActivity.DEFINE, definition)
    handle = await wf.start(LayoutWorkflow.run, layout_input(action), id=workflow_id(PREFIX))
    with pytest.raises(WorkflowFailureError) as caught:
        await asyncio.wait_for(handle.result(), timeout=60)
    progress = await handle.query(LayoutWorkflow.progress)
    assert progress.phase == "failed"
    cause: BaseException | None = caught.value.cause
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    assert isinstance(cause, ApplicationError) and cause.non_retryable
    assert cause.type == "LayoutDefinitionInvalid"
    assert progress.error == cause.message
    return cause.message


async def test_an_unresolved_reference_in_the_discovery_template_fails_the_run(
    wf: Harness,
) -> None:
    wf.script.on(LayoutActivity.ENSURE, created)
    broken = layout().model_copy(update={"discovery": {"zone": ref("t.zone/p1-nowhere")}})
    message = await failed_with(wf, broken)
    assert message == (
        "the cloud discovery data: the layout's definition is broken: "
        "unresolved reference t.zone/p1-nowhere.id"
    )


async def test_an_unresolved_reference_in_a_modules_outputs_fails_the_run(wf: Harness) -> None:
    wf.script.on(LayoutActivity.ENSURE, created)
    definition = layout()
    master = definition.modules[1]
    master.outputs = {"ip": ref(INSTANCE, "public_ip")}  # the step gives no public_ip
    message = await failed_with(wf, definition)
    assert message.startswith("master-0: the layout's definition is broken")
    assert f"unresolved reference {INSTANCE}.public_ip" in message


async def test_a_dependency_cycle_fails_the_run_before_any_step(wf: Harness) -> None:
    definition = layout()
    base = definition.modules[0]
    base.resources[0].properties["subnet"] = ref(SUBNET)  # the VPC needs its own subnet
    message = await failed_with(wf, definition)
    assert "dependency cycle" in message
    assert wf.script.of(LayoutActivity.ENSURE) == []


async def test_a_definition_without_a_base_module_fails_the_run(wf: Harness) -> None:
    definition = layout()
    definition.modules = definition.modules[1:]
    message = await failed_with(wf, definition, "destroy")
    assert message.startswith("layout/p1: the layout's definition is broken: ValueError")
