"""``LayoutConverge``: one in-cluster converge pass (terraform-manager's job) as a durable workflow.

The cluster's Temporal Schedule (``layout-converge/<prefix>``, overlap SKIP) starts a pass every
interval. A pass plans (``layout.define``, ``layout.plan_module`` per module, base first),
reports each module's status (``layout.converge_report``), and with ``auto`` applies what is
safe (creations and in-place repairs, through the modules' ``LayoutModule`` apply children) and
holds every destructive step until the ``approve`` Update names it (or all) or
``approval_wait_s`` ends; after any change it plans and reports again.
Why: docs/decisions/0040-layout-bootstrap-and-converge.md.

Rules:
- A pass that cannot reach the cloud (define or plan fails) changes nothing: it reports
  ``error`` and ends.
- A replacement (delete, then create) runs only once approved, and once: the step's key is in a
  set; an approval given twice answers ``already``. A held step stays ``held``: the next pass asks.
- A node whose machine is to be made without bootstrap data is left absent, said in its note.
- The module children carry the IDs a CLI ``apply`` gives them (``layout/<prefix>/<module>``), so
  a pass never runs a module at the same time as a CLI action does.
- Nothing secret is in this workflow: statuses, keys, the plan's diffs (bootstrap data as a
  digest).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)

with workflow.unsafe.imports_passed_through():
    from cloudloop.layouts.model import LayoutDef, ModuleDef, ResourceDef
    from cloudloop.messages.layout import (
        DefineInput,
        LayoutActivity,
        LayoutTimings,
        ModuleInput,
        ModuleResult,
        PlanModuleInput,
        PlanModuleResult,
        StepInput,
        StepResult,
        module_workflow_id,
    )
    from cloudloop.messages.layout_converge import (
        ApproveInput,
        ApproveResult,
        ConvergeActivity,
        ConvergeInput,
        ConvergeQuery,
        ConvergeResult,
        ConvergeState,
        ConvergeUpdate,
        HeldStep,
        ReportInput,
        ReportResult,
    )
    from cloudloop.rules import converge as rules
    from cloudloop.rules import layout as layout_rules
    from workflows.layout import (
        DEFINITION_ERRORS,
        LayoutModuleWorkflow,
        failure_of,
        plan_module,
        step_retry,
    )


def _options(timings: LayoutTimings) -> dict[str, Any]:
    """A step's options, as the ``Layout`` workflow's: a dead worker costs a heartbeat timeout."""
    return {
        "start_to_close_timeout": timedelta(seconds=timings.step_timeout_s),
        "heartbeat_timeout": timedelta(seconds=timings.heartbeat_timeout_s),
        "retry_policy": step_retry(timings),
    }


class _Unplanned(Exception):
    """The pass could not plan (the cloud unreachable, the configuration refused)."""


@workflow.defn(name="LayoutConverge")
class LayoutConvergeWorkflow:
    def __init__(self) -> None:
        self._state = ConvergeState()
        self._approved: set[str] = set()
        #: One apply child of a module at a time (two held steps of one module share its ID).
        self._module_locks: dict[str, asyncio.Lock] = {}

    @workflow.query(name=ConvergeQuery.STATE)
    def state(self) -> ConvergeState:
        return self._state

    @workflow.update(name=ConvergeUpdate.APPROVE)
    def approve(self, input: ApproveInput) -> ApproveResult:
        keys = [input.step] if input.step else [h.key for h in self._approvable_steps()]
        result = ApproveResult()
        for key in keys:
            (result.already if key in self._approved else result.approved).append(key)
            self._approved.add(key)
        for step in self._state.held:
            if step.key in result.approved and step.outcome == "waiting":
                step.outcome = "approved"
        return result

    @approve.validator
    def _approvable(self, input: ApproveInput) -> None:
        known = [h.key for h in self._approvable_steps()]
        if input.step and input.step not in known:
            raise ValueError(
                f"no step {input.step!r} is waiting in this pass"
                + (f" (waiting: {', '.join(known)})" if known else "")
            )
        if not known:
            raise ValueError("no step of this pass is waiting for approval")

    def _approvable_steps(self) -> list[HeldStep]:
        """The steps an approval may name: waiting, or approved before (given twice, once)."""
        return [h for h in self._state.held if h.outcome in ("waiting", "approved", "done")]

    @workflow.run
    async def run(self, input: ConvergeInput) -> ConvergeResult:
        self._input = input
        self._started = workflow.now().isoformat()
        prefix = input.cluster.prefix
        try:
            layout, plans = await self._plan(None)
        except _Unplanned as err:
            result = ConvergeResult(prefix=prefix, status="error", error=str(err))
            self._state.phase, self._state.error = "failed", str(err)
            await self._report(result, None, [])
            return result
        try:
            return await self._converge(layout, plans)
        except DEFINITION_ERRORS as err:
            message = f"layout/{prefix}: the layout's definition is broken: {err}"
            result = ConvergeResult(prefix=prefix, status="error", error=message)
            await self._report(result, None, [])
            return result

    async def _converge(self, layout: LayoutDef, plans: list[PlanModuleResult]) -> ConvergeResult:
        input = self._input
        result = self._result(layout, plans)
        await self._report(result, layout, plans)
        if not input.auto:
            self._state.phase = "done"
            return result
        changed = False
        self._state.phase = "applying"
        statuses = {s.module: s for s in result.statuses}
        found = _found(plans)
        base, nodes = _split(layout)
        safe = [m for m in layout.modules if rules.has_safe_work(statuses[m.id])]
        unbootable = {m.id for m in nodes if m in safe and _machine_to_make(m, plans)}
        for module_id in unbootable:
            statuses[module_id].note = "no bootstrap data for its node: not made"
        if base in safe:
            answer = await self._apply_modules([base], {})
            changed = True
            if isinstance(answer[0], ModuleResult):
                found[base.id] = {s.key: s.outputs for s in answer[0].steps if s.outputs}
        todo = [m for m in nodes if m in safe and m.id not in unbootable]
        if todo:
            await self._apply_modules(todo, found.get(base.id, {}))
            changed = True
        if self._state.held:
            changed = await self._run_held(layout, found) or changed
        if changed:
            self._state.phase = "planning again"
            try:
                layout, plans = await self._plan(layout)
            except _Unplanned as err:
                final = ConvergeResult(
                    prefix=layout.prefix,
                    status="error",
                    error=str(err),
                    applied=list(self._state.applied),
                )
                await self._report(final, None, [])
                return final
            final = self._result(layout, plans)
            for status in final.statuses:
                if status.module in unbootable and status.status == "absent":
                    status.note = statuses[status.module].note
            result = final
            await self._report(result, layout, plans)
        self._state.phase = "done"
        return result

    # -- planning --------------------------------------------------------------------------
    async def _plan(self, layout: LayoutDef | None) -> tuple[LayoutDef, list[PlanModuleResult]]:
        input = self._input
        self._state.phase = "planning"
        try:
            if layout is None:
                layout = await workflow.execute_activity(
                    LayoutActivity.DEFINE,
                    DefineInput(
                        provider=input.provider,
                        source=input.source,
                        cluster=input.cluster,
                        bootstrap_from_cluster=input.bootstrap_from_cluster,
                    ),
                    result_type=LayoutDef,
                    summary="define",
                    **_options(input.timings),
                )
            base, nodes = _split(layout)
            base_plan = await plan_module(self._plan_input(base, {}), input.timings)
            external = {p.key: p.outputs for p in base_plan.resources if p.outputs}
            others = await asyncio.gather(
                *(plan_module(self._plan_input(m, external), input.timings) for m in nodes)
            )
        except ActivityError as err:
            raise _Unplanned(failure_of(err, "planning").message) from err
        return layout, [base_plan, *others]

    def _plan_input(self, module: ModuleDef, external: dict[str, Any]) -> PlanModuleInput:
        return PlanModuleInput(
            provider=self._input.provider,
            source=self._input.source,
            module=module,
            external=external,
        )

    def _result(self, layout: LayoutDef, plans: list[PlanModuleResult]) -> ConvergeResult:
        by_id = {p.module: p for p in plans}
        statuses = [rules.module_status(m, by_id[m.id]) for m in layout.modules]
        if not self._state.held:
            self._state.held = [h for m in layout.modules for h in rules.held_steps(m, by_id[m.id])]
        self._state.statuses = statuses
        return ConvergeResult(
            prefix=layout.prefix,
            status=rules.worst(s.status for s in statuses),
            statuses=statuses,
            applied=list(self._state.applied),
            held=list(self._state.held),
        )

    # -- acting ----------------------------------------------------------------------------
    async def _apply_modules(
        self, modules: list[ModuleDef], external: dict[str, Any]
    ) -> list[ModuleResult | ApplicationError]:
        answers = await asyncio.gather(*(self._apply_module(m, external) for m in modules))
        return list(answers)

    async def _apply_module(
        self, module: ModuleDef, external: dict[str, Any]
    ) -> ModuleResult | ApplicationError:
        input = self._input
        try:
            result: ModuleResult = await workflow.execute_child_workflow(
                LayoutModuleWorkflow.run,
                ModuleInput(
                    action="apply",
                    provider=input.provider,
                    source=input.source,
                    module=module,
                    external=external,
                    timings=input.timings,
                ),
                id=module_workflow_id(input.cluster.prefix, module.id, input.id_scope),
                static_summary=f"apply module {module.id} (converge pass)",
            )
        except (ChildWorkflowError, WorkflowAlreadyStartedError) as err:
            # (another apply of the module is running: this pass leaves it to that one)
            failure = (
                failure_of(err, module.id)
                if isinstance(err, ChildWorkflowError)
                else ApplicationError(f"{module.id}: a layout action is running on it")
            )
            self._state.error = failure.message
            return failure
        self._state.applied.append(module.id)
        return result

    async def _run_held(self, layout: LayoutDef, found: dict[str, dict[str, Any]]) -> bool:
        """Wait for each held step's approval (all at once); run the approved ones."""
        self._state.phase = "waiting for approval"
        answers = await asyncio.gather(
            *(self._run_step(layout, h, found) for h in self._state.held)
        )
        return any(answers)

    async def _run_step(
        self, layout: LayoutDef, step: HeldStep, found: dict[str, dict[str, Any]]
    ) -> bool:
        try:
            await workflow.wait_condition(
                lambda: step.key in self._approved,
                timeout=timedelta(seconds=self._input.approval_wait_s),
            )
        except TimeoutError:
            step.outcome = "held"
            return False
        step.outcome = "approved"
        module = layout.module(step.module)
        resource = next(r for r in module.resources if r.key == step.resource)
        if resource.key == module.machine and "user_data" not in resource.properties:
            step.outcome, step.error = "failed", "no bootstrap data for its node: not replaced"
            return False
        base, _ = _split(layout)
        known = {**found.get(base.id, {}), **found.get(module.id, {})}
        external = found.get(base.id, {}) if module is not base else {}
        # one module's replacements one at a time, delete and apply together: another step's
        # delete never runs under this step's apply
        async with self._module_locks.setdefault(module.id, asyncio.Lock()):
            answer = await self._replace(module, resource, step, known, external)
        if answer is None:
            return False
        if isinstance(answer, ApplicationError):
            step.outcome, step.error = "failed", answer.message
        else:
            step.outcome = "done"
        return True

    async def _replace(
        self,
        module: ModuleDef,
        resource: ResourceDef,
        step: HeldStep,
        known: dict[str, Any],
        external: dict[str, Any],
    ) -> ModuleResult | ApplicationError | None:
        """Delete ``resource`` (its inputs among ``known``), then apply its module with the
        base's ``external`` outputs (``None``: the delete failed, said on ``step``)."""
        try:
            await workflow.execute_activity(
                LayoutActivity.DELETE,
                StepInput(
                    provider=self._input.provider,
                    source=self._input.source,
                    resource=resource,
                    inputs=layout_rules.subset(
                        known, layout_rules.needs(resource) | {resource.key}
                    ),
                ),
                result_type=StepResult,
                summary=f"replace {resource.key}: delete",
                **_options(self._input.timings),
            )
        except ActivityError as err:
            step.outcome, step.error = "failed", failure_of(err, step.key).message
            return None
        return await self._apply_module(module, external)

    async def _report(
        self,
        result: ConvergeResult,
        layout: LayoutDef | None,
        plans: list[PlanModuleResult],
    ) -> None:
        nodes = {m.id: m.node_name for m in layout.modules if m.node_name} if layout else {}
        try:
            answer: ReportResult = await workflow.execute_activity(
                ConvergeActivity.REPORT,
                ReportInput(
                    provider=self._input.provider,
                    cluster=self._input.cluster,
                    result=result,
                    found=_found(plans),
                    nodes=nodes,
                    started=self._started,
                ),
                result_type=ReportResult,
                summary=f"report {result.status}",
                **_options(self._input.timings),
            )
        except ActivityError as err:  # the pass's work stands; its report is what failed
            self._state.error = failure_of(err, "reporting").message
            return
        if answer.previous and answer.previous != result.status:
            workflow.logger.info("cluster status %s -> %s", answer.previous, result.status)


def _split(layout: LayoutDef) -> tuple[ModuleDef, list[ModuleDef]]:
    [base] = [m for m in layout.modules if m.module == "base-infrastructure"]
    return base, [m for m in layout.modules if m is not base]


def _found(plans: list[PlanModuleResult]) -> dict[str, dict[str, Any]]:
    return {p.module: {r.key: r.outputs for r in p.resources if r.outputs} for p in plans}


def _machine_to_make(module: ModuleDef, plans: list[PlanModuleResult]) -> bool:
    """The node's machine is to be made, without bootstrap data (it could never join)."""
    machine = next((r for r in module.resources if r.key == module.machine), None)
    if machine is None or "user_data" in machine.properties:
        return False
    plan = next(p for p in plans if p.module == module.id)
    return any(r.key == machine.key and r.action == "create" for r in plan.resources)


CONVERGE_WORKFLOWS: list[type] = [LayoutConvergeWorkflow]
