"""LoadBalancerWorkflow: one long-lived entity workflow per Service owns that Service's cloud LB.

The starter sends the desired state with the ``apply`` signal and asks for the teardown with
``tear_down`` (signal-with-start, ``USE_EXISTING``). The main loop reconciles with
``lb.ensure`` (config changed), ``lb.update_backends`` (only the node set changed), ``lb.delete``
(tear-down, then the workflow completes) and, when idle for ``resync_period_s``, ``lb.resync``
(drift repair). Why, step by step: docs/decisions/0047-one-load-balancer-workflow-per-service.md.

Rules:
- Handlers only record what they receive; the main loop works through it under one lock, so every
  change to one LB is serialised and a burst of changes is coalesced into one reconcile.
- ``InvalidRequest`` gives a Warning ``SyncLoadBalancerFailed`` and waits for the next change;
  ``NotSupported`` is a silent no-op; other failures give the Warning and are retried with the
  upstream backoff, sooner when a new desired state arrives. Every Event names the workflow ID.
- The run continues as new when the server suggests it (or after ``history_limit`` events),
  carrying the retry state, so a failing LB keeps a bounded history and its backoff.
- Replay of recorded runs is kept by patches: :data:`PATCH_DELETE_ONE_ACTIVITY`,
  :data:`PATCH_CONTINUE_AS_NEW_WHILE_FAILING` and the resync step's ``workflow.patched``.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from workflows.timeouts import SINGLE_CALL_TIMEOUT

with workflow.unsafe.imports_passed_through():
    from cloudloop.messages.errors import ErrorKind
    from cloudloop.messages.kube import EventSource, KubeActivity, RecordEventInput
    from cloudloop.messages.loadbalancer import (
        ApplyRequest,
        DeleteLoadBalancerInput,
        DesiredLoadBalancer,
        EnsureLoadBalancerInput,
        EnsureLoadBalancerResult,
        LoadBalancerActivity,
        LoadBalancerFound,
        LoadBalancerLookup,
        LoadBalancerQuery,
        LoadBalancerResult,
        LoadBalancerSignal,
        LoadBalancerState,
        ResyncLoadBalancerInput,
        ResyncLoadBalancerResult,
        UpdateBackendsInput,
    )

#: A few quick attempts per reconcile; the workflow's own backoff takes over after that.
CLOUD_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=5), maximum_attempts=3
)
EVENT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=5,
)
CLOUD_TIMEOUT = timedelta(minutes=5)
#: A worker that dies mid-call is noticed after this long (the activities heartbeat every 2 s).
HEARTBEAT_TIMEOUT = timedelta(seconds=10)
#: Upstream service-controller backoff: 5 s doubling up to 300 s.
BACKOFF_MIN_S, BACKOFF_MAX_S = 5.0, 300.0
#: ``workflow.patched`` marker of the drift-repair timer (it added commands to the idle wait).
DRIFT_REPAIR_PATCH = "lb-drift-repair"
#: Patch ID: continue-as-new also while a reconcile is failing (retry state carried).
PATCH_CONTINUE_AS_NEW_WHILE_FAILING = "continue-as-new-while-failing"
#: Patch ID: the tear-down's lookup and ``DeletingLoadBalancer`` Event inside ``lb.delete``
#: (two activities fewer per delete) instead of ``lb.get`` and an Event activity before it.
PATCH_DELETE_ONE_ACTIVITY = "lb-delete-one-activity"


def _failure(err: ActivityError) -> tuple[str, str]:
    """The error kind (``ApplicationError.type``) and message behind an activity failure."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return cause.type or ErrorKind.CLOUD_ERROR, cause.message
    return type(cause).__name__ if cause else "ActivityError", str(cause or err)


def _hosts(desired: DesiredLoadBalancer) -> str:
    """The hosts an Event names: the node names, or their number when sent by reference."""
    if desired.node_set is not None:
        return f"{desired.node_set.count} nodes"
    return ", ".join(n.name for n in desired.nodes)


@workflow.defn(name="LoadBalancer")
class LoadBalancerWorkflow:
    @workflow.init
    def __init__(self, state: LoadBalancerState) -> None:
        self.state = state
        self.lock = asyncio.Lock()
        self.version = 0  # bumped by every signal
        self.failures = state.failures
        # The version whose reconcile failed; a retry carried over waits for its backoff too.
        self.retry_version: int | None = 0 if state.retry_pending else None
        self.resync_due = False
        self.resync_off: int | None = None  # the version whose drift check cannot run
        self.events: list[workflow.ActivityHandle[None]] = []
        self.last_error = ""  # the cloud's last refusal, for the UI's current details
        self.phase = "waiting for the Service's desired state"

    # -- handlers: record only -------------------------------------------------------------
    @workflow.signal(name=LoadBalancerSignal.APPLY)
    def apply(self, request: ApplyRequest) -> None:
        if self.state.ingress is None:
            self.state.ingress = list(request.observed_ingress)
        self.state.desired = request.desired
        if request.resync_period_s is not None:
            self.state.resync_period_s = request.resync_period_s
        self.state.tear_down = False
        self.version += 1

    @workflow.signal(name=LoadBalancerSignal.TEAR_DOWN)
    def tear_down(self) -> None:
        self.state.tear_down = True
        self.version += 1

    @workflow.query(name=LoadBalancerQuery.STATE)
    def current_state(self) -> LoadBalancerState:
        return self.state

    @workflow.query(name=LoadBalancerQuery.DESCRIBE)
    def describe(self) -> dict[str, Any]:
        """What this workflow is doing, for people (``temporal workflow query --type describe``)."""
        desired, applied = self.state.desired, self.state.applied
        return {
            "service": self.state.target.service.key,
            "load_balancer": self.state.target.name,
            "phase": self.phase,
            "nodes": desired.node_count if desired is not None else None,
            "ports": [p.port for p in desired.ports] if desired is not None else [],
            "in_sync": desired is not None and desired == applied,
            "ingress": self.state.ingress,
            "failures_in_a_row": self.failures,
            "last_error": self.last_error,
            "next_retry_s": self._backoff_s() if self.retry_version is not None else None,
            "drift_check_every_s": self.state.resync_period_s,
        }

    def _backoff_s(self) -> float:
        return float(min(BACKOFF_MIN_S * 2 ** max(self.failures - 1, 0), BACKOFF_MAX_S))

    def _show(self, phase: str) -> None:
        """The one line the Temporal UI shows as the workflow's current details."""
        self.phase = phase
        error = f"; last error: {self.last_error}" if self.last_error else ""
        workflow.set_current_details(f"{phase}{error}")

    def _what(self, desired: DesiredLoadBalancer | None = None) -> str:
        """``default/web (a1b2…, 3 nodes)``: the Service and its LB, for summaries."""
        nodes = f", {desired.node_count} nodes" if desired is not None else ""
        return f"{self.state.target.service.key} ({self.state.target.name}{nodes})"

    # -- main loop -------------------------------------------------------------------------
    @workflow.run
    async def run(self, state: LoadBalancerState) -> LoadBalancerResult:
        while True:
            await self._wait_for_work()
            torn_down = False
            async with self.lock:
                if self.state.tear_down:
                    torn_down = await self._delete()
                elif self._pending():
                    await self._reconcile()
                elif self.resync_due:
                    await self._resync()
            self.resync_due = False
            await self._flush_events()
            if torn_down and self.state.tear_down:
                break  # deleted, and no apply came meanwhile: done
            if self._continue_as_new_due():
                if self._idle():
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    if self._idle():
                        self._continue_as_new()
                elif workflow.patched(PATCH_CONTINUE_AS_NEW_WHILE_FAILING):
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    self._continue_as_new()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return LoadBalancerResult(deleted=True)

    def _continue_as_new(self) -> None:
        """Continue as new with the whole state, retry state included."""
        self.state.failures = self.failures
        self.state.retry_pending = self.retry_version is not None
        workflow.logger.info("continuing as new (%d failures in a row)", self.failures)
        workflow.continue_as_new(self.state)

    def _pending(self) -> bool:
        desired = self.state.desired
        return desired is not None and desired not in (self.state.applied, self.state.rejected)

    def _idle(self) -> bool:
        return not (self.state.tear_down or self._pending() or self.retry_version is not None)

    def _continue_as_new_due(self) -> bool:
        info = workflow.info()
        limit = self.state.history_limit
        if limit and info.get_current_history_length() >= limit:
            return True
        return info.is_continue_as_new_suggested()

    async def _wait_for_work(self) -> None:
        if self.retry_version is not None:  # back off, unless something new arrives
            failed = self.retry_version
            delay = self._backoff_s()
            self._show(f"failed {self.failures}x in a row; retrying in {delay:.0f}s")
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self.version != failed, timeout=timedelta(seconds=delay)
                )
            self.retry_version = None
            return

        def work() -> bool:
            return self.state.tear_down or self._pending() or self._continue_as_new_due()

        period = self.state.resync_period_s
        if self.state.rejected is not None and self.state.desired == self.state.rejected:
            self._show("the cloud refused this desired state; waiting for the Service to change")
        elif self.state.applied is None:
            self._show("waiting for the Service's desired state")
        else:
            ingress = ", ".join(self.state.ingress or []) or "no ingress yet"
            check = f"; next drift check in {period:.0f}s" if period > 0 else ""
            self._show(f"in sync ({ingress}, {self.state.applied.node_count} nodes){check}")
        if (
            self.state.applied is None
            or period <= 0
            or self.resync_off == self.version
            or not workflow.patched(DRIFT_REPAIR_PATCH)
        ):
            await workflow.wait_condition(work)
            return
        try:
            await workflow.wait_condition(work, timeout=timedelta(seconds=period))
        except TimeoutError:
            self.resync_due = True

    def _retry_later(self, version: int) -> None:
        self.failures += 1
        self.retry_version = version

    def _succeeded(self) -> None:
        self.failures = 0
        self.retry_version = None

    # -- steps -----------------------------------------------------------------------------
    async def _reconcile(self) -> None:
        desired = self.state.desired
        assert desired is not None
        if (
            desired.same_config(self.state.applied)
            and not self.state.finalizer_removed
            and desired != self.state.rejected
        ):
            await self._update_backends(desired, self.version)
        else:
            await self._ensure(desired, self.version)

    async def _ensure(self, desired: DesiredLoadBalancer, version: int) -> None:
        # lb.ensure records EnsuringLoadBalancer and EnsuredLoadBalancer itself.
        if not desired.node_count:
            self._event(
                "Warning",
                "UnAvailableLoadBalancer",
                "There are no available nodes for LoadBalancer",
            )
        self._show(f"ensuring the load balancer ({desired.node_count} nodes)")
        try:
            result = await workflow.execute_activity(
                LoadBalancerActivity.ENSURE,
                EnsureLoadBalancerInput(
                    target=self.state.target,
                    desired=desired,
                    current_ingress=self.state.ingress or [],
                    add_finalizer=self.state.finalizer_removed,
                ),
                summary=f"ensure the load balancer of {self._what(desired)}",
                result_type=EnsureLoadBalancerResult,
                start_to_close_timeout=CLOUD_TIMEOUT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=CLOUD_RETRY,
            )
        except ActivityError as err:
            kind, message = _failure(err)
            self.last_error = f"{kind}: {message}"
            if kind == ErrorKind.NOT_SUPPORTED:  # another controller's LB: nothing to do, silently
                workflow.logger.info("load balancer handled elsewhere: %s", message)
                self.state.applied = desired
                self._succeeded()
                return
            self._event(
                "Warning", "SyncLoadBalancerFailed", f"Error syncing load balancer: {message}"
            )
            if (
                kind == ErrorKind.INVALID_REQUEST
            ):  # retrying cannot help; wait for the Service to change
                workflow.logger.warning("invalid load balancer request, not retried: %s", message)
                self.state.rejected = desired
                self._succeeded()
            else:
                workflow.logger.warning("ensuring the load balancer failed (%s): %s", kind, message)
                self._retry_later(version)
            return
        self._succeeded()
        self.last_error = ""
        self.state.rejected = None
        if result.service_gone:  # deleted without waiting for the finalizer: clean up
            workflow.logger.info("the Service is gone; tearing the load balancer down")
            self.state.tear_down = True
            return
        self.state.finalizer_removed = False
        self.state.applied = desired
        self.state.ingress = result.ingress

    async def _update_backends(self, desired: DesiredLoadBalancer, version: int) -> None:
        self._show(f"updating the backends to {desired.node_count} nodes")
        try:
            await workflow.execute_activity(
                LoadBalancerActivity.UPDATE_BACKENDS,
                UpdateBackendsInput(target=self.state.target, desired=desired),
                summary=f"update the backends of {self._what(desired)}",
                start_to_close_timeout=CLOUD_TIMEOUT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=CLOUD_RETRY,
            )
        except ActivityError as err:
            kind, message = _failure(err)
            self.last_error = f"{kind}: {message}"
            if kind == ErrorKind.NOT_FOUND:  # the LB went missing: ensure it again
                workflow.logger.info("load balancer not found (%s); ensuring it again", message)
                self.state.applied = None
                return
            if kind == ErrorKind.NOT_SUPPORTED:
                self.state.applied = desired
                return
            hosts = _hosts(desired)
            self._event(
                "Warning",
                "UpdateLoadBalancerFailed",
                f"Error updating load balancer with new hosts [{hosts}]: {message}",
            )
            if kind == ErrorKind.INVALID_REQUEST:
                self.state.rejected = desired
                self._succeeded()
            else:
                self._retry_later(version)
            return
        self._succeeded()
        self.state.applied = desired
        if not desired.node_count:
            self._event(
                "Warning",
                "UnAvailableLoadBalancer",
                "There are no available nodes for LoadBalancer",
            )
        hosts = _hosts(desired)
        self._event(
            "Normal", "UpdatedLoadBalancer", f"Updated load balancer with new hosts [{hosts}]"
        )

    async def _resync(self) -> None:
        """Drift repair: compare the cloud LB with the applied state, put it back if needed."""
        applied = self.state.applied
        if applied is None:
            return
        self._show("checking the cloud load balancer for drift")
        try:
            result = await workflow.execute_activity(
                LoadBalancerActivity.RESYNC,
                ResyncLoadBalancerInput(
                    target=self.state.target,
                    desired=applied,
                    current_ingress=self.state.ingress or [],
                ),
                summary=f"check {self._what(applied)} for drift, repair it",
                result_type=ResyncLoadBalancerResult,
                start_to_close_timeout=CLOUD_TIMEOUT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=CLOUD_RETRY,
            )
        except ActivityError as err:
            kind, message = _failure(err)
            self.last_error = f"{kind}: {message}"
            workflow.logger.warning("drift check failed (%s): %s", kind, message)
            if kind in (
                ErrorKind.NOT_SUPPORTED,
                ErrorKind.INVALID_REQUEST,
            ):  # not until the Service changes
                self.resync_off = self.version
            if kind != ErrorKind.NOT_SUPPORTED:
                self._event(
                    "Warning",
                    "SyncLoadBalancerFailed",
                    f"Error repairing load balancer drift: {message}",
                )
            return  # otherwise the next period tries again
        if result.service_gone:
            self.state.tear_down = True
            return
        if result.repaired:
            self.state.ingress = result.ingress

    async def _delete(self) -> bool:
        version = self.version
        target = self.state.target
        self._show("deleting the load balancer")
        try:
            announce = workflow.patched(PATCH_DELETE_ONE_ACTIVITY)
            if not announce:  # a run recorded before the patch: its lookup, then its Event
                found = await workflow.execute_activity(
                    LoadBalancerActivity.GET,
                    LoadBalancerLookup(target=target),
                    summary=f"look up the load balancer of {self._what()}",
                    result_type=LoadBalancerFound,
                    start_to_close_timeout=SINGLE_CALL_TIMEOUT,
                    retry_policy=CLOUD_RETRY,
                )
                if found.exists:
                    self._event("Normal", "DeletingLoadBalancer", "Deleting load balancer")
            await workflow.execute_activity(
                LoadBalancerActivity.DELETE,
                DeleteLoadBalancerInput(target=target, announce=announce),
                summary=f"delete the load balancer of {self._what()}, then the finalizer",
                start_to_close_timeout=CLOUD_TIMEOUT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=CLOUD_RETRY,
            )
        except ActivityError as err:
            kind, message = _failure(err)
            self.last_error = f"{kind}: {message}"
            workflow.logger.warning("deleting the load balancer failed (%s): %s", kind, message)
            self._event(
                "Warning", "SyncLoadBalancerFailed", f"Error deleting load balancer: {message}"
            )
            self._retry_later(version)
            return False
        self._succeeded()
        self.state.applied = None
        self.state.rejected = None
        self.state.ingress = []
        self.state.finalizer_removed = True
        self._event("Normal", "DeletedLoadBalancer", "Deleted load balancer")
        return True

    # -- Events ----------------------------------------------------------------------------
    def _event(self, type: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        """Record an Event without waiting for it (it runs beside the cloud work)."""
        wf_id = workflow.info().workflow_id
        self.events.append(
            workflow.start_activity(
                KubeActivity.RECORD_EVENT,
                RecordEventInput(
                    object=self.state.target.service,
                    type=type,
                    reason=reason,
                    message=f"{message} (workflow {wf_id})",
                    component=EventSource.SERVICE,
                ),
                summary=f"{type} Event {reason} on {self.state.target.service.key}",
                start_to_close_timeout=SINGLE_CALL_TIMEOUT,
                retry_policy=EVENT_RETRY,
            )
        )

    async def _flush_events(self) -> None:
        events, self.events = self.events, []
        for handle in events:
            try:
                await handle
            except ActivityError as err:
                workflow.logger.warning("could not record an Event: %s", err)
