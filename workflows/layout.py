"""Layout workflows: one ``Layout`` per cluster, a ``LayoutModule`` child per module instance.

``Layout`` (ID ``layout/<prefix>``; ``layout/<prefix>/plan`` for a plan) asks the provider's
layout part for the definitions (``layout.define``), then applies (checks, the base, then every
node module at once), destroys (the cluster's own objects first with a kubeconfig,
:data:`CLEAR_STEPS`; then the blockers check, the nodes, the base), adopts (an upstream
Terraform state's records placed and taken over) or plans (read-only diffs).
``LayoutModule`` (ID ``layout/<prefix>/<module>``) runs one activity per resource in dependency
waves. Each action step by step, and why: docs/decisions/0055-one-layout-engine-for-every-cloud.md.

Rules:
- Only ``layout.define`` reads the configuration and the cloud's zones.
- An apply makes nothing before ``layout.check_apply`` passed; a destroy deletes nothing before
  ``layout.check_destroy`` passed; plan and adopt create nothing.
- A failed step fails its module after its wave's other steps ended; a new apply resumes.
- A deterministic error in this code fails the workflow with a non-retryable ``ApplicationError``
  ``LayoutDefinitionInvalid`` naming what broke, never the workflow task.
- Every activity heartbeats; a retried step finds what its first attempt made. Nothing secret is
  in these inputs: activities read credentials through the ``ConfigSource``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from cloudloop.layouts.model import LayoutDef, ModuleDef, ResourceDef
    from cloudloop.layouts.tfstate import StateMap
    from cloudloop.messages.layout import (
        CLEAR_STEPS,
        CheckApplyInput,
        CheckDestroyInput,
        ClearClusterInput,
        ClearClusterResult,
        DefineInput,
        LayoutActivity,
        LayoutInput,
        LayoutProgress,
        LayoutQuery,
        LayoutResult,
        LayoutTimings,
        MapStateInput,
        ModuleInput,
        ModuleProgress,
        ModuleResult,
        ModuleState,
        PlanModuleInput,
        PlanModuleResult,
        ResourceStatus,
        StepInput,
        StepResult,
        module_workflow_id,
    )
    from cloudloop.rules import layout as rules


def step_retry(timings: LayoutTimings) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=10),
        maximum_attempts=timings.max_attempts,
    )


def activity_options(timings: LayoutTimings) -> dict[str, Any]:
    return {
        "start_to_close_timeout": timedelta(seconds=timings.step_timeout_s),
        "heartbeat_timeout": timedelta(seconds=timings.heartbeat_timeout_s),
        "retry_policy": step_retry(timings),
    }


def _clear_options(timings: LayoutTimings) -> dict[str, Any]:
    """A step of destroy's cluster phase: a wait may take ``cluster_wait_s`` on top."""
    return {
        "start_to_close_timeout": timedelta(
            seconds=timings.step_timeout_s + timings.cluster_wait_s
        ),
        "heartbeat_timeout": timedelta(seconds=timings.heartbeat_timeout_s),
        "retry_policy": step_retry(timings),
    }


#: Errors workflow code raises on a bad definition; the same on every replay and every retry.
DEFINITION_ERRORS = (LookupError, ValueError, TypeError)


def _broken(err: Exception, what: str) -> ApplicationError:
    """A definition error in workflow code as the workflow's failure (non-retryable)."""
    if isinstance(err, rules.Unresolved):
        detail = f"unresolved reference {err}"
    else:
        detail = f"{type(err).__name__}: {err}"
    return ApplicationError(
        f"{what}: the layout's definition is broken: {detail}",
        type="LayoutDefinitionInvalid",
        non_retryable=True,
    )


def failure_of(err: BaseException, what: str) -> ApplicationError:
    """The step's (or child's) failure as the workflow's, with the cloud's kind and message."""
    cause = err.cause if isinstance(err, ActivityError | ChildWorkflowError) else err
    while isinstance(cause, ChildWorkflowError | ActivityError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, ApplicationError):
        message = cause.message if cause.message.startswith(what) else f"{what}: {cause.message}"
        return ApplicationError(message, type=cause.type or "LayoutFailed", non_retryable=True)
    return ApplicationError(f"{what}: {cause or err}", type="LayoutFailed", non_retryable=True)


async def plan_module(input: PlanModuleInput, timings: LayoutTimings) -> PlanModuleResult:
    result: PlanModuleResult = await workflow.execute_activity(
        LayoutActivity.PLAN,
        input,
        result_type=PlanModuleResult,
        summary=f"plan {'the destroy of ' if input.destroy else ''}module {input.module.id}",
        **activity_options(timings),
    )
    return result


@workflow.defn(name="LayoutModule")
class LayoutModuleWorkflow:
    def __init__(self) -> None:
        self._progress = ModuleProgress(module="", action="")

    @workflow.query(name=LayoutQuery.PROGRESS)
    def progress(self) -> ModuleProgress:
        return self._progress

    @workflow.run
    async def run(self, input: ModuleInput) -> ModuleResult:
        try:
            return await self._run(input)
        except DEFINITION_ERRORS as err:
            raise _broken(err, input.module.id) from err

    async def _run(self, input: ModuleInput) -> ModuleResult:
        module = input.module
        self._progress = ModuleProgress(
            module=module.id,
            action=input.action,
            resources=[ResourceStatus(key=r.key) for r in module.resources],
        )
        if input.action == "apply":
            steps = await self._apply(input)
        elif input.action == "adopt":
            steps = await self._run_waves(
                rules.waves(module.resources),
                LayoutActivity.ADOPT,
                input,
                dict(input.external),
            )
        else:
            steps = await self._destroy(input)
        outputs: dict[str, Any] = {}
        if input.action == "apply":
            known = {**input.external, **{s.key: s.outputs for s in steps}}
            outputs = rules.resolve(module.outputs, known)
        return ModuleResult(
            module=module.id, steps=steps, outputs=outputs, node_name=module.node_name
        )

    def _status(self, key: str) -> ResourceStatus:
        return next(s for s in self._progress.resources if s.key == key)

    async def _step(
        self, activity: str, input: ModuleInput, resource: ResourceDef, known: dict[str, Any]
    ) -> StepResult:
        status = self._status(resource.key)
        status.state = "running"
        try:
            result: StepResult = await workflow.execute_activity(
                activity,
                StepInput(
                    provider=input.provider,
                    source=input.source,
                    resource=resource,
                    inputs=rules.subset(known, rules.needs(resource)),
                    cloud_id=input.adopt.get(resource.key, ""),
                ),
                result_type=StepResult,
                summary=f"{activity.rsplit('.', 1)[-1]} {resource.key}",
                **activity_options(input.timings),
            )
        except ActivityError as err:
            failure = failure_of(err, resource.key)
            status.state, status.error = "failed", failure.message
            raise failure from err
        status.state, status.action, status.changes = "done", result.action, result.changes
        return result

    async def _run_waves(
        self,
        waves: list[list[ResourceDef]],
        activity: str,
        input: ModuleInput,
        known: dict[str, Any],
    ) -> list[StepResult]:
        results: list[StepResult] = []
        for wave in waves:
            answers = await asyncio.gather(
                *(self._step(activity, input, r, known) for r in wave), return_exceptions=True
            )
            for answer in answers:
                if isinstance(answer, BaseException):
                    raise answer
                results.append(answer)
                known[answer.key] = answer.outputs
        return results

    async def _apply(self, input: ModuleInput) -> list[StepResult]:
        known: dict[str, Any] = dict(input.external)
        return await self._run_waves(
            rules.waves(input.module.resources), LayoutActivity.ENSURE, input, known
        )

    async def _destroy(self, input: ModuleInput) -> list[StepResult]:
        try:
            plan = await plan_module(
                PlanModuleInput(
                    provider=input.provider,
                    source=input.source,
                    module=input.module,
                    external=input.external,
                    destroy=True,
                ),
                input.timings,
            )
        except ActivityError as err:
            raise failure_of(err, f"looking at {input.module.id}") from err
        found = {p.key: p.outputs for p in plan.resources if p.outputs}
        doomed = {p.key for p in plan.resources if p.action == "delete"}
        results: list[StepResult] = []
        for resource in input.module.resources:
            if resource.key not in doomed:
                status = self._status(resource.key)
                status.state, status.action = "done", "absent"
        known: dict[str, Any] = {**input.external, **found}
        waves = [
            [r for r in wave if r.key in doomed]
            for wave in reversed(rules.waves(input.module.resources))
        ]
        results += await self._run_waves(
            [w for w in waves if w], LayoutActivity.DELETE, input, known
        )
        return results


@workflow.defn(name="Layout")
class LayoutWorkflow:
    def __init__(self) -> None:
        self._progress = LayoutProgress(action="plan")

    @workflow.query(name=LayoutQuery.PROGRESS)
    def progress(self) -> LayoutProgress:
        return self._progress

    @workflow.run
    async def run(self, input: LayoutInput) -> LayoutResult:
        self._input = input
        self._progress = LayoutProgress(action=input.action)
        try:
            layout: LayoutDef = await workflow.execute_activity(
                LayoutActivity.DEFINE,
                DefineInput(provider=input.provider, source=input.source, cluster=input.cluster),
                result_type=LayoutDef,
                summary=f"define the {input.provider} layout of {input.cluster.prefix}",
                **activity_options(input.timings),
            )
        except ActivityError as err:
            raise self._failed(failure_of(err, "defining the layout")) from err
        try:
            return await self._run(input, layout)
        except DEFINITION_ERRORS as err:
            raise self._failed(_broken(err, f"layout/{layout.prefix}")) from err

    async def _run(self, input: LayoutInput, layout: LayoutDef) -> LayoutResult:
        self._progress.modules = [
            ModuleState(
                module=m.id, workflow_id=module_workflow_id(layout.prefix, m.id, input.id_scope)
            )
            for m in layout.modules
        ]
        result = LayoutResult(action=input.action, layout=layout.layout, prefix=layout.prefix)
        base, nodes = self._split(layout)
        if input.action == "plan":
            self._progress.phase = "planning"
            result.plan = await self._plan(base, nodes)
        elif input.action == "apply":
            await self._apply(layout, base, nodes, result)
        elif input.action == "adopt":
            await self._adopt(layout, base, nodes, result)
        else:
            await self._destroy(layout, base, nodes, result)
        self._progress.phase = "done"
        return result

    def _failed(self, failure: ApplicationError) -> ApplicationError:
        self._progress.phase, self._progress.error = "failed", failure.message
        return failure

    @staticmethod
    def _split(layout: LayoutDef) -> tuple[ModuleDef, list[ModuleDef]]:
        [base] = [m for m in layout.modules if m.module == "base-infrastructure"]
        return base, [m for m in layout.modules if m is not base]

    def _plan_input(
        self, module: ModuleDef, external: dict[str, Any], *, destroy: bool = False
    ) -> PlanModuleInput:
        return PlanModuleInput(
            provider=self._input.provider,
            source=self._input.source,
            module=module,
            external=external,
            destroy=destroy,
        )

    async def _plan(self, base: ModuleDef, nodes: list[ModuleDef]) -> list[PlanModuleResult]:
        destroy = self._input.plan_destroy
        try:
            base_plan = await plan_module(
                self._plan_input(base, {}, destroy=destroy), self._input.timings
            )
            found = {p.key: p.outputs for p in base_plan.resources if p.outputs}
            others = await asyncio.gather(
                *(
                    plan_module(self._plan_input(m, found, destroy=destroy), self._input.timings)
                    for m in nodes
                )
            )
        except ActivityError as err:
            raise self._failed(failure_of(err, "planning")) from err
        return [base_plan, *others]

    async def _child(
        self,
        module: ModuleDef,
        action: str,
        external: dict[str, Any],
        adopt: dict[str, str] | None = None,
    ) -> ModuleResult:
        state = next(s for s in self._progress.modules if s.module == module.id)
        state.state = "running"
        try:
            result: ModuleResult = await workflow.execute_child_workflow(
                LayoutModuleWorkflow.run,
                ModuleInput(
                    action=action if action in ("apply", "adopt") else "destroy",
                    provider=self._input.provider,
                    source=self._input.source,
                    module=module,
                    external=external,
                    timings=self._input.timings,
                    adopt={
                        r.key: (adopt or {})[r.key]
                        for r in module.resources
                        if r.key in (adopt or {})
                    },
                ),
                id=state.workflow_id,
                static_summary=f"{action} module {module.id}",
            )
        except ChildWorkflowError as err:
            failure = failure_of(err, module.id)
            state.state, state.error = "failed", failure.message
            raise failure from err
        state.state = "done"
        return result

    async def _children(
        self,
        modules: list[ModuleDef],
        action: str,
        external: dict[str, Any],
        adopt: dict[str, str] | None = None,
    ) -> list[ModuleResult]:
        answers = await asyncio.gather(
            *(self._child(m, action, external, adopt) for m in modules), return_exceptions=True
        )
        for answer in answers:
            if isinstance(answer, ApplicationError):
                raise self._failed(answer)
            if isinstance(answer, BaseException):
                raise answer
        return [a for a in answers if isinstance(a, ModuleResult)]

    async def _apply(
        self, layout: LayoutDef, base: ModuleDef, nodes: list[ModuleDef], result: LayoutResult
    ) -> None:
        if workflow.patched("layout-check-apply"):
            self._progress.phase = "checking"
            try:
                await workflow.execute_activity(
                    LayoutActivity.CHECK_APPLY,
                    CheckApplyInput(
                        provider=self._input.provider, source=self._input.source, layout=layout
                    ),
                    result_type=list[str],
                    summary="check every lookup the apply needs, before any create",
                    **activity_options(self._input.timings),
                )
            except ActivityError as err:
                raise self._failed(failure_of(err, "apply refused")) from err
        self._progress.phase = "base-infrastructure"
        base_result = (await self._children([base], "apply", {}))[0]
        external = {s.key: s.outputs for s in base_result.steps}
        self._progress.phase = "nodes"
        node_results = await self._children(nodes, "apply", external)
        result.modules = [base_result, *node_results]
        try:
            result.cloud_discovery_data = rules.resolve(layout.discovery, external)
        except rules.Unresolved as err:
            raise self._failed(_broken(err, "the cloud discovery data")) from err
        result.outputs = base_result.outputs

    async def _adopt(
        self, layout: LayoutDef, base: ModuleDef, nodes: list[ModuleDef], result: LayoutResult
    ) -> None:
        self._progress.phase = "mapping"
        try:
            placed: StateMap = await workflow.execute_activity(
                LayoutActivity.MAP_STATE,
                MapStateInput(
                    provider=self._input.provider,
                    source=self._input.source,
                    layout=layout,
                    state=self._input.state,
                ),
                result_type=StateMap,
                summary="place the Terraform state's resources on the layout's",
                **activity_options(self._input.timings),
            )
        except ActivityError as err:
            raise self._failed(failure_of(err, "reading the Terraform state")) from err
        result.adopted, result.unmapped = placed.addresses, placed.unmapped
        self._progress.phase = "base-infrastructure"
        base_result = (await self._children([base], "adopt", {}, placed.ids))[0]
        external = {s.key: s.outputs for s in base_result.steps if s.outputs}
        self._progress.phase = "nodes"
        node_results = await self._children(nodes, "adopt", external, placed.ids)
        result.modules = [base_result, *node_results]

    async def _clear_cluster(self) -> None:
        """Destroy's first phase (only with a kubeconfig): the cluster's own cloud objects."""
        self._progress.phase = "cluster-resources"
        timings = self._input.timings
        for step in CLEAR_STEPS:
            try:
                await workflow.execute_activity(
                    LayoutActivity.CLEAR_CLUSTER,
                    ClearClusterInput(
                        kubeconfig=self._input.kubeconfig,
                        cluster=self._input.cluster,
                        step=step,
                        wait_s=timings.cluster_wait_s,
                    ),
                    result_type=ClearClusterResult,
                    summary=step,
                    **_clear_options(timings),
                )
            except ActivityError as err:
                raise self._failed(
                    failure_of(err, f"deleting the cluster's resources ({step})")
                ) from err

    async def _destroy(
        self, layout: LayoutDef, base: ModuleDef, nodes: list[ModuleDef], result: LayoutResult
    ) -> None:
        if self._input.kubeconfig:
            await self._clear_cluster()
        self._progress.phase = "checking"
        try:
            base_plan = await plan_module(
                self._plan_input(base, {}, destroy=True), self._input.timings
            )
            found = {p.key: p.outputs for p in base_plan.resources if p.outputs}
            await workflow.execute_activity(
                LayoutActivity.CHECK_DESTROY,
                CheckDestroyInput(
                    provider=self._input.provider,
                    source=self._input.source,
                    layout=layout,
                    found=found,
                    cleared=bool(self._input.kubeconfig),
                ),
                summary="check nothing the destroy would delete is still in use",
                result_type=list[str],
                **activity_options(self._input.timings),
            )
        except ActivityError as err:
            raise self._failed(failure_of(err, "destroy refused")) from err
        self._progress.phase = "nodes"
        node_results = await self._children(nodes, "destroy", found)
        self._progress.phase = "base-infrastructure"
        base_result = (await self._children([base], "destroy", {}))[0]
        result.modules = [*node_results, base_result]


LAYOUT_WORKFLOWS: list[type] = [LayoutWorkflow, LayoutModuleWorkflow]
