"""The in-cluster converge from outside the pass: its Schedule, approvals, and its metrics.

:func:`install_schedule` makes (or updates) the cluster's Schedule
``[<scope>/]layout-converge/<prefix>`` (overlap SKIP); :func:`running_pass`, :func:`approve` and
:func:`trigger` act on its pass; :class:`ConvergeStatusExporter` (a starter, so only the leader
exports) reads the status ConfigMap the passes write (``d8-system/cloudloop-layout-converge``)
every ``layouts.converge.export_interval_s`` and sets terraform-state-exporter's gauges.
Why: docs/decisions/0040-layout-bootstrap-and-converge.md.

Rules:
- Gauges come from the one ConfigMap, never from the worker that ran a pass. A missing or
  unreadable ConfigMap exports nothing; a node no longer reported loses its series.
- Approval through the cluster: the annotation ``converge.cloudloop.io/approve`` on that ConfigMap
  (a held step's key, or ``all``) is sent to the running pass as the ``approve`` Update and
  replaced by ``converge.cloudloop.io/approved`` (when, what was asked, what it did). Who may
  patch that ConfigMap may approve destructive steps: RBAC says who.
- A Temporal error keeps the annotation for the next round; a refusal (no pass running, no such
  step) is the answer, and the annotation goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from cloudloop import metrics, searchattrs
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import ConfigMap
from cloudloop.kube.resources import CONFIG_MAPS
from cloudloop.messages.layout_converge import (
    STATUSES,
    ApproveInput,
    ApproveResult,
    ConvergeInput,
    ConvergeState,
    pass_workflow_id,
    schedule_id,
)
from starters.context import StarterContext
from workflows.layout_converge import LayoutConvergeWorkflow

#: How often a just-made Schedule's NOT_FOUND is asked again, and how far apart.
DESCRIBE_ATTEMPTS = 5
DESCRIBE_RETRY_S = 0.5

log = logging.getLogger(__name__)

#: The status ConfigMap (namespace, name) and its key.
STATUS_CONFIG_MAP = ("d8-system", "cloudloop-layout-converge")
STATUS_KEY = "status.json"
#: The annotation that asks for an approval (a step's key, or ``all``), and its answer.
APPROVE_ANNOTATION = "converge.cloudloop.io/approve"
APPROVED_ANNOTATION = "converge.cloudloop.io/approved"


def read_status(kube: Kube) -> dict[str, Any] | None:
    """The last report (None when there is none or it does not parse)."""
    return status_of(_read_config_map(kube))


def _read_config_map(kube: Kube) -> ConfigMap | None:
    namespace, name = STATUS_CONFIG_MAP
    return kube.get(CONFIG_MAPS, name, namespace)


def status_of(config_map: ConfigMap | None) -> dict[str, Any] | None:
    """The report the status ConfigMap holds (None when there is none or it does not parse)."""
    text = ((config_map or {}).get("data") or {}).get(STATUS_KEY)
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# -- the Schedule ------------------------------------------------------------------------------
def _schedule(task_queue: str, input: ConvergeInput, interval_s: float) -> Schedule:
    prefix = input.cluster.prefix
    return Schedule(
        action=ScheduleActionStartWorkflow(
            LayoutConvergeWorkflow.run,
            input,
            id=pass_workflow_id(prefix, input.id_scope),
            task_queue=task_queue,
            typed_search_attributes=searchattrs.for_object(
                cluster=prefix,
                provider=input.provider,
                kind="LayoutConverge",
                namespace="",
                name=prefix,
            ),
            static_summary=f"converge pass of layout {prefix}",
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=interval_s))]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
        state=ScheduleState(note=f"cloudloop layout converge of {prefix}"),
    )


async def install_schedule(
    client: Client, task_queue: str, input: ConvergeInput, interval_s: float
) -> str:
    """Make the cluster's Schedule, or bring an existing one to these settings: ``created``
    or ``updated`` (a Schedule an operator paused stays paused, with its note: an upgrade's
    install Job never resumes it)."""
    sid = schedule_id(input.cluster.prefix, input.id_scope)
    wanted = _schedule(task_queue, input, interval_s)
    try:
        await client.create_schedule(sid, wanted)
        return "created"
    except ScheduleAlreadyRunningError:
        pass

    def update(current: ScheduleUpdateInput) -> ScheduleUpdate:
        state = current.description.schedule.state
        if state.paused:
            wanted.state = ScheduleState(paused=True, note=state.note or wanted.state.note)
        return ScheduleUpdate(schedule=wanted)

    await client.get_schedule_handle(sid).update(update)
    return "updated"


async def trigger(client: Client, prefix: str, scope: str = "") -> None:
    """Start a pass now (skipped when one is running: the Schedule's overlap policy)."""
    await client.get_schedule_handle(schedule_id(prefix, scope)).trigger()


async def running_pass(
    client: Client, prefix: str, scope: str = ""
) -> WorkflowHandle[LayoutConvergeWorkflow, Any] | None:
    """The pass the cluster's Schedule is running, if any. A Schedule made a moment ago may
    not be described yet (its scheduler workflow starts after the create call answers): a
    NOT_FOUND is asked again a few times before it is an answer."""
    handle = client.get_schedule_handle(schedule_id(prefix, scope))
    for attempt in range(DESCRIBE_ATTEMPTS):
        try:
            described = await handle.describe()
            break
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND or attempt == DESCRIBE_ATTEMPTS - 1:
                raise
            await asyncio.sleep(DESCRIBE_RETRY_S)
    for action in described.info.running_actions:
        workflow_id = getattr(action, "workflow_id", "")
        if workflow_id:
            return client.get_workflow_handle_for(LayoutConvergeWorkflow.run, workflow_id)
    return None


async def pass_state(handle: WorkflowHandle[LayoutConvergeWorkflow, Any]) -> ConvergeState:
    state: ConvergeState = await handle.query(LayoutConvergeWorkflow.state)
    return state


async def approve(
    handle: WorkflowHandle[LayoutConvergeWorkflow, Any], step: str = ""
) -> ApproveResult:
    """Approve ``step`` (or every waiting step) of the pass; the pass refuses an unknown one."""
    result: ApproveResult = await handle.execute_update(
        LayoutConvergeWorkflow.approve, ApproveInput(step=step)
    )
    return result


async def approve_from_annotation(
    kube: Kube,
    client: Client,
    found: ConfigMap | None,
    scope: str = "",
    task_queue: str = "",
) -> str | None:
    """Act on the approve annotation of ``found`` (the status ConfigMap as read), if it has one:
    the answer written back (``None``: nothing was asked). Raises on a Temporal error (the
    annotation stays). The pass must run on ``task_queue`` (this cluster's, when given): the
    ConfigMap names the layout, and whoever may patch it could name another cluster's."""
    annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
    asked = annotations.get(APPROVE_ANNOTATION)
    if found is None or asked is None:
        return None
    asked = str(asked).strip()
    step = "" if asked in ("", "all") else asked
    prefix = str((status_of(found) or {}).get("cluster") or "")
    if not prefix:
        outcome = "refused: no converge pass has reported here yet"
    else:
        handle = await running_pass(client, prefix, scope)
        if handle is None:
            outcome = f"refused: no converge pass of {prefix} is running"
        elif task_queue and (await handle.describe()).task_queue != task_queue:
            outcome = f"refused: the converge pass of {prefix} is not this cluster's"
        else:
            try:
                result = await approve(handle, step)
            except WorkflowUpdateFailedError as err:
                cause = err.cause
                outcome = f"refused: {getattr(cause, 'message', cause)}"
            else:
                parts = [f"approved {k}" for k in result.approved]
                parts += [f"already approved {k}" for k in result.already]
                outcome = "; ".join(parts) or "approved nothing"
    answer = f"{datetime.now(UTC).isoformat(timespec='seconds')} {asked or 'all'}: {outcome}"
    # the version read: an ask rewritten meanwhile is a conflict, answered in the next round
    version = str((found.get("metadata") or {}).get("resourceVersion") or "")
    annotated: dict[str, Any] = {APPROVE_ANNOTATION: None, APPROVED_ANNOTATION: answer}
    patch = {"metadata": {"annotations": annotated, "resourceVersion": version or None}}
    namespace, name = STATUS_CONFIG_MAP
    await asyncio.to_thread(kube.patch, CONFIG_MAPS, name, patch, namespace)
    log.info("layout converge: approval by annotation: %s", answer)
    return answer


# -- the metrics -------------------------------------------------------------------------------
def export(document: dict[str, Any] | None) -> None:
    """Set the gauges from one report. None (no report) clears the labelled series and sets the
    held steps and the last success time to 0: nothing is known of a pass."""
    for gauge in (
        metrics.CONVERGE_CLUSTER_STATUS,
        metrics.CONVERGE_NODE_STATUS,
        metrics.CONVERGE_RESOURCES,
    ):
        gauge.clear()
    if document is None:
        metrics.CONVERGE_HELD_STEPS.set(0)
        metrics.CONVERGE_LAST_SUCCESS.set(0)
        return
    modules = [m for m in document.get("modules") or [] if isinstance(m, dict)]
    for module in modules:
        status = str(module.get("status", ""))
        name = str(module.get("name", ""))
        if name:
            group = str(module.get("node_group", ""))
            for known in STATUSES:
                metrics.CONVERGE_NODE_STATUS.labels(group, name, known).set(status == known)
        else:
            for known in STATUSES:
                metrics.CONVERGE_CLUSTER_STATUS.labels(known).set(status == known)
        for action, key in (
            ("create", "to_create"),
            ("change", "to_change"),
            ("replace", "to_replace"),
        ):
            metrics.CONVERGE_RESOURCES.labels(str(module.get("module", "")), action).set(
                float(module.get(key) or 0)
            )
    held = [h for h in document.get("held") or [] if isinstance(h, dict)]
    metrics.CONVERGE_HELD_STEPS.set(sum(1 for h in held if h.get("outcome") in ("waiting", "held")))
    success = str(document.get("lastSuccess") or "")
    with contextlib.suppress(ValueError):
        if success:
            stamp = datetime.fromisoformat(success)
            stamp = stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
            metrics.CONVERGE_LAST_SUCCESS.set(stamp.timestamp())


class ConvergeStatusExporter:
    """Exports the status ConfigMap as metrics while this starter leads, and acts on its approve
    annotation."""

    def __init__(
        self,
        kube: Kube,
        interval_s: float,
        client: Client | None = None,
        scope: str = "",
        task_queue: str = "",
    ) -> None:
        self.kube, self.interval_s = kube, interval_s
        #: The approvals by annotation go through it (none: they are not read), to passes on
        #: ``task_queue`` only (this cluster's).
        self.client, self.scope, self.task_queue = client, scope, task_queue
        self._stopped = asyncio.Event()

    @classmethod
    def from_context(cls, context: StarterContext) -> ConvergeStatusExporter | None:
        converge = context.settings.layouts.converge
        if not converge.enabled:
            return None
        temporal = context.settings.temporal
        return cls(
            context.kube,
            converge.export_interval_s,
            context.client,
            temporal.id_scope,
            temporal.task_queue,
        )

    def stop(self) -> None:
        self._stopped.set()

    async def run(self) -> None:
        while not self._stopped.is_set():
            found: ConfigMap | None = None
            try:  # one read a round: the report exported, the annotation acted on
                found = await asyncio.to_thread(_read_config_map, self.kube)
                export(status_of(found))
            except Exception:
                log.exception("layout converge: reading the status ConfigMap failed")
            if self.client is not None and found is not None:
                try:
                    await approve_from_annotation(
                        self.kube, self.client, found, self.scope, self.task_queue
                    )
                except Exception:  # Temporal or the API server: the annotation stays, asked again
                    log.exception("layout converge: the approval by annotation failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), timeout=self.interval_s)
