"""MachineWorkflow: one per Cluster API InfraMachine UID (DeckhouseMachine, ZvirtMachine).

It creates the VM through the cloud driver, waits for it to run with an address, writes
``spec.providerID``, addresses, ``ready``/``initialization.provisioned`` and the ``Ready`` and
``VirtualMachineReady`` conditions onto the InfraMachine, then waits for deletion. On deletion it
removes everything it created (VM, disks, attachments, cloud-init data) and takes the finalizer
off last; a deletion during provisioning cancels the provisioning first.

A failed provisioning leaves a condition and waits here, visible in the Temporal UI, until a retry
(``cloudloop retry machine``, a new ``cloudloop.io/retry`` annotation, a changed spec) or, for a
transient error, until a backoff timer fires. The starter feeds the desired state through the
``desired`` signal (signal-with-start), so one workflow follows the object from start to end.

A machine lives as long as its object, so every loop continues as new when the server suggests
it: the running VM's refresh, a VM that stays Pending, the wait after a failure and the delete
retries, carrying the attempts, the failures in a row (backoff) and the delete failures. A run
that continues in the middle of provisioning resumes it (the create activity finds its VM by
name). Versioning: the new continue-as-new points are behind ``workflow.patched``
(:data:`PATCH_CONTINUE_AS_NEW_IN_EVERY_LOOP`), so runs recorded before replay as they ran.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from cloudloop.messages.machine import (
        CreateMachineInput,
        DeleteMachineInput,
        DeleteMachineResult,
        Machine,
        MachineActivity,
        MachineCondition,
        MachineDesired,
        MachineEvent,
        MachineInput,
        MachineProgress,
        MachineQuery,
        MachineResult,
        MachineSignal,
        ObserveMachineInput,
        ObserveMachineResult,
        RemoveFinalizerInput,
        ReportMachineInput,
        RetryRequest,
        SecretName,
    )
    from cloudloop.rules import machine as capi

#: Creating: a few attempts; invalid specs, auth and conflicts fail at once (non-retryable).
CREATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=5,
)
OBSERVE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=10,
)
DELETE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=10,
)
#: Kube writes retry until they succeed; a 4xx other than conflict fails the activity at once.
KUBE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
KUBE_TIMEOUT = timedelta(seconds=10)
#: Patch ID: continue-as-new in the Pending, failed and deleting loops too.
PATCH_CONTINUE_AS_NEW_IN_EVERY_LOOP = "continue-as-new-in-every-loop"
#: Patch ID: the create activity writes the "creating" and provisioned statuses itself.
PATCH_REPORT_IN_CREATE = "report-in-create"


class _ContinueAsNewDue(Exception):
    """Raised inside a provisioning attempt: the run continues as new, resuming it."""


class MachineFailure(Exception):
    """A provisioning attempt that did not end with a running VM."""

    def __init__(self, reason: str, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retryable = retryable

    @classmethod
    def of(cls, err: ActivityError, reason: str, what: str) -> MachineFailure:
        cause = err.cause
        if isinstance(cause, ApplicationError):
            kind = cause.type or "Error"
            return cls(
                reason, f"{what}: {kind}: {cause.message}", retryable=not cause.non_retryable
            )
        return cls(reason, f"{what}: {cause or err}", retryable=True)


@workflow.defn(name="Machine")
class MachineWorkflow:
    def __init__(self) -> None:
        self._desired: MachineDesired | None = None
        self._retry_requested = False
        self._spec_changed = False
        self._progress = MachineProgress(phase="Waiting")
        self._reported: tuple[object, ...] | None = None

    # -- messages --------------------------------------------------------------------------
    @workflow.signal(name=MachineSignal.DESIRED)
    def desired(self, desired: MachineDesired) -> None:
        previous = self._desired
        self._desired = desired
        if previous is None:
            return
        if desired.retry_token and desired.retry_token != previous.retry_token:
            self._retry_requested = True
        if desired.spec.provider_spec != previous.spec.provider_spec:
            self._spec_changed = True

    @workflow.signal(name=MachineSignal.RETRY)
    def retry(self, request: RetryRequest) -> None:
        workflow.logger.info("retry requested (%s)", request.source or "signal")
        self._retry_requested = True

    @workflow.query(name=MachineQuery.PROGRESS)
    def progress(self) -> MachineProgress:
        return self._progress

    # -- the life of one machine -----------------------------------------------------------
    @workflow.run
    async def run(self, input: MachineInput) -> MachineResult:
        self._input = input
        if self._desired is None:
            self._desired = input.desired
        self._machine: Machine | None = input.provisioned
        self._was_provisioned = input.provisioned is not None
        self._attempts = input.attempts
        self._failures = input.failures
        self._resume_attempt = input.resume_attempt
        if self._machine is not None:
            self._set_progress("Provisioned", capi.REASON_VM_RUNNING, "")

        failure: MachineFailure | None = None
        while not self._deleting():
            if failure is not None:
                await self._wait_for_retry(failure)
                failure = None
                if not self._deleting() and self._continue_as_new_suggested():
                    self._continue_as_new()
            elif self._machine is None:
                failure = await self._provision_until_done()
            else:
                failure = await self._watch_provisioned()
        await self._deprovision()
        return MachineResult(
            attempts=self._attempts,
            provider_id=self._machine.provider_id if self._machine else "",
        )

    def _continue_as_new_suggested(self) -> bool:
        """The server suggests it, and this run records the newer continue-as-new points."""
        return workflow.info().is_continue_as_new_suggested() and workflow.patched(
            PATCH_CONTINUE_AS_NEW_IN_EVERY_LOOP
        )

    def _continue_as_new(self, *, resume_attempt: bool = False, delete_failures: int = 0) -> None:
        workflow.logger.info("continuing as new (%d attempts so far)", self._attempts)
        workflow.continue_as_new(
            self._input.model_copy(
                update={
                    "desired": self._current,
                    "provisioned": self._machine,
                    "attempts": self._attempts,
                    "failures": self._failures,
                    "delete_failures": delete_failures,
                    "resume_attempt": resume_attempt,
                }
            )
        )

    def _deleting(self) -> bool:
        assert self._desired is not None
        return self._desired.deleting

    @property
    def _current(self) -> MachineDesired:
        assert self._desired is not None
        return self._desired

    @property
    def _name(self) -> str:
        """``DeckhouseMachine ns/name``: the object a summary speaks of."""
        ref = self._input.object
        return f"{ref.kind} {ref.key}"

    def _set_progress(self, phase: str, reason: str, message: str) -> None:
        detail = f"{phase}: {reason}" + (f" ({message})" if message else "")
        workflow.set_current_details(f"{detail}; {self._attempts} attempts so far")
        self._progress = MachineProgress.model_validate(
            {
                "phase": phase,
                "attempts": self._attempts,
                "reason": reason,
                "message": message,
                "provider_id": self._machine.provider_id if self._machine else "",
            }
        )

    async def _wait_unpaused(self) -> None:
        await workflow.wait_condition(lambda: not self._current.paused or self._deleting())

    # -- provisioning ----------------------------------------------------------------------
    async def _provision_until_done(self) -> MachineFailure | None:
        """One provisioning attempt; a deletion cancels it (and waits for the cancellation)."""
        self._retry_requested = False
        self._spec_changed = False
        if self._resume_attempt:  # the same attempt, in a new run
            self._resume_attempt = False
        else:
            self._attempts += 1
        attempt = asyncio.create_task(self._provision())
        await workflow.wait_condition(lambda: attempt.done() or self._deleting())
        if not attempt.done():
            attempt.cancel()
        await workflow.wait([attempt])
        if attempt.cancelled():
            return None
        error = attempt.exception()
        if error is None:
            self._machine = attempt.result()
            self._failures = 0
            return None
        if isinstance(error, MachineFailure):
            return error
        if isinstance(error, _ContinueAsNewDue):
            self._continue_as_new(resume_attempt=True)
        if self._deleting() and isinstance(error, ActivityError):
            return None  # the cancelled activity's error
        raise error

    async def _provision(self) -> Machine:
        self._set_progress("Waiting", "", "")
        if not self._current.infrastructure_ready:
            await self._report_verdict(
                capi.VmVerdict(
                    reason=capi.REASON_WAITING_FOR_INFRASTRUCTURE,
                    status="False",
                    message="Cluster infrastructure is not ready yet",
                )
            )
            await workflow.wait_condition(lambda: self._current.infrastructure_ready)
        if not self._current.bootstrap_secret:
            await self._report_verdict(
                capi.VmVerdict(
                    reason=capi.REASON_WAITING_FOR_BOOTSTRAP,
                    status="False",
                    message="Bootstrap cloud-init secret is missing",
                )
            )
            await workflow.wait_condition(lambda: bool(self._current.bootstrap_secret))
        await self._wait_unpaused()

        desired = self._current
        timings = self._input.timings
        creating = capi.VmVerdict(
            reason=capi.REASON_VM_NOT_READY,
            status="Unknown",
            message="Creating the VM, its disks and its cloud-init data",
        )
        self._set_progress("Provisioning", creating.reason, creating.message)
        create = CreateMachineInput(
            spec=desired.spec,
            bootstrap=SecretName(
                namespace=self._input.object.namespace, name=desired.bootstrap_secret
            ),
            window_s=timings.observe_window_s,
            poll=timings.poll,
        )
        in_create = workflow.patched(PATCH_REPORT_IN_CREATE)
        if in_create:
            # The create activity writes the "creating" status first and, when the VM runs
            # before it returns, the provisioned one: no local activity, no workflow task wait.
            if self._report_key(creating, None) != self._reported:
                create.creating = self._report_input(creating, None, None)
            create.provisioned = self._provisioned_template()
        else:
            # Written first, locally: one activity and one workflow task fewer than beside CREATE.
            await self._report_verdict(creating)
        try:
            observed: ObserveMachineResult = await workflow.execute_activity(
                MachineActivity.CREATE,
                create,
                summary=f"create (or adopt) the VM of {self._name}",
                result_type=ObserveMachineResult,
                start_to_close_timeout=timedelta(seconds=timings.observe_window_s + 120),
                heartbeat_timeout=timedelta(seconds=timings.heartbeat_timeout_s),
                retry_policy=CREATE_RETRY,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        except ActivityError as err:
            raise MachineFailure.of(
                err, capi.REASON_VM_ERROR, "No VM can be found or created for Machine"
            ) from err
        if in_create and observed.creating_reported:
            self._reported = self._report_key(creating, None)
        if in_create and observed.provisioned_reported and observed.machine is not None:
            # the status below is what the activity wrote: not written again
            self._reported = self._report_key(capi.classify(observed.machine), observed.machine)

        while True:
            machine = observed.machine
            verdict = capi.classify(machine)
            if verdict.provisioned:
                break
            if machine is None:
                raise MachineFailure(verdict.reason, "VirtualMachine disappeared", retryable=True)
            if verdict.reason == capi.REASON_VM_FAILED:
                raise MachineFailure(verdict.reason, verdict.message, retryable=True)
            if self._continue_as_new_suggested():  # a VM Pending for long: a fresh history
                raise _ContinueAsNewDue()
            await self._wait_unpaused()
            self._set_progress("Provisioning", verdict.reason, verdict.message)
            report = asyncio.create_task(self._report_verdict(verdict, beside=True))
            try:
                observed = await workflow.execute_activity(
                    MachineActivity.OBSERVE,
                    ObserveMachineInput(
                        spec=desired.spec,
                        last_reason=verdict.reason,
                        window_s=timings.observe_window_s,
                        poll=timings.poll,
                    ),
                    summary=f"watch the VM of {self._name} until it runs with an address",
                    result_type=ObserveMachineResult,
                    start_to_close_timeout=timedelta(seconds=timings.observe_window_s + 60),
                    heartbeat_timeout=timedelta(seconds=timings.heartbeat_timeout_s),
                    retry_policy=OBSERVE_RETRY,
                )
            except ActivityError as err:
                raise MachineFailure.of(
                    err, capi.REASON_VM_ERROR, "Cannot get the VirtualMachine"
                ) from err
            finally:
                await report
        await self._wait_unpaused()

        assert machine is not None
        self._machine = machine
        self._was_provisioned = True
        await self._report_verdict(
            capi.classify(machine),
            machine=machine,
            event=self._provisioned_event(machine.provider_id),
        )
        self._set_progress("Provisioned", capi.REASON_VM_RUNNING, "VM is running and ready")
        return machine

    async def _wait_for_retry(self, failure: MachineFailure) -> None:
        """Report the failure; wait for a retry request, a new spec, deletion or the backoff."""
        self._failures += 1
        ref = self._input.object
        hint = (
            f"; retry with `cloudloop retry machine {ref.namespace}/{ref.name}` "
            f"or a new {capi.RETRY_ANNOTATION} annotation"
        )
        timings = self._input.timings
        backoff = min(
            timings.retry_backoff_s * 2 ** (self._failures - 1), timings.retry_backoff_max_s
        )
        if failure.retryable:
            hint += f" (retried automatically in {backoff:.0f}s)"
        self._set_progress("Failed", failure.reason, failure.message)
        workflow.logger.warning("machine provisioning failed: %s", failure.message)
        await self._report_verdict(
            capi.VmVerdict(reason=failure.reason, status="False", message=failure.message + hint),
            event=MachineEvent(
                type="Warning", reason="ProvisioningFailed", message=failure.message
            ),
        )

        def wanted() -> bool:
            return self._retry_requested or self._spec_changed or self._deleting()

        if failure.retryable:
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(wanted, timeout=backoff)
        else:
            await workflow.wait_condition(wanted)

    async def _watch_provisioned(self) -> MachineFailure | None:
        """Look at the running VM every ``refresh_interval_s``; report what changed."""
        assert self._machine is not None
        self._retry_requested = self._spec_changed = False  # nothing to retry while it runs
        timings = self._input.timings
        try:
            await workflow.wait_condition(self._deleting, timeout=timings.refresh_interval_s)
            return None
        except TimeoutError:
            pass
        if workflow.info().is_continue_as_new_suggested():
            workflow.continue_as_new(
                self._input.model_copy(
                    update={
                        "desired": self._current,
                        "provisioned": self._machine,
                        "attempts": self._attempts,
                    }
                )
            )
        try:
            observed = await workflow.execute_activity(
                MachineActivity.OBSERVE,
                ObserveMachineInput(spec=self._current.spec, last_reason="", window_s=0.0),
                summary=f"look at the running VM of {self._name}",
                result_type=ObserveMachineResult,
                start_to_close_timeout=timedelta(seconds=60),
                heartbeat_timeout=timedelta(seconds=timings.heartbeat_timeout_s),
                retry_policy=OBSERVE_RETRY,
            )
        except ActivityError as err:
            workflow.logger.warning("could not look at the VM: %s", err.cause or err)
            return None
        verdict = capi.classify(observed.machine)
        if observed.machine is None:
            self._machine = None
            return MachineFailure(verdict.reason, "VirtualMachine disappeared", retryable=False)
        await self._report_verdict(
            verdict, machine=observed.machine if verdict.provisioned else None
        )
        return None

    # -- deletion --------------------------------------------------------------------------
    async def _deprovision(self) -> None:
        await self._wait_unpaused()
        self._set_progress("Deleting", capi.REASON_DELETING, "deleting the VM and its disks")
        await self._report_verdict(
            capi.VmVerdict(
                reason=capi.REASON_DELETING,
                status="False",
                message="Deleting the VM, its disks and its cloud-init data",
            )
        )
        timings = self._input.timings
        failures = self._input.delete_failures
        while True:
            if failures and self._continue_as_new_suggested():
                self._continue_as_new(delete_failures=failures)
            try:
                await workflow.execute_activity(
                    MachineActivity.DELETE,
                    DeleteMachineInput(spec=self._current.spec, poll=timings.poll),
                    summary=f"delete the VM of {self._name} and all it was made with",
                    result_type=DeleteMachineResult,
                    start_to_close_timeout=timedelta(minutes=15),
                    heartbeat_timeout=timedelta(seconds=timings.heartbeat_timeout_s),
                    retry_policy=DELETE_RETRY,
                )
                break
            except ActivityError as err:
                failures += 1
                failure = MachineFailure.of(err, capi.REASON_VM_ERROR, "Deleting the VM failed")
                backoff = min(
                    timings.retry_backoff_s * 2 ** (failures - 1), timings.retry_backoff_max_s
                )
                self._set_progress("Deleting", failure.reason, failure.message)
                await self._report_verdict(
                    capi.VmVerdict(
                        reason=failure.reason,
                        status="False",
                        message=f"{failure.message} (retried in {backoff:.0f}s)",
                    )
                )
                self._retry_requested = False
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(lambda: self._retry_requested, timeout=backoff)
        await workflow.execute_local_activity(
            MachineActivity.REMOVE_FINALIZER,
            RemoveFinalizerInput(object=self._input.object, finalizer=self._input.finalizer),
            summary=f"remove the finalizer of {self._name}",
            start_to_close_timeout=KUBE_TIMEOUT,
            retry_policy=KUBE_RETRY,
        )
        self._set_progress("Deleted", capi.REASON_DELETING, "the VM and its disks are gone")

    # -- status ----------------------------------------------------------------------------
    def _report_key(self, verdict: capi.VmVerdict, machine: Machine | None) -> tuple[object, ...]:
        """What a status write says: the same one is not written twice in a row."""
        paused = self._current.paused
        return (verdict.reason, verdict.status, verdict.message, machine is not None, paused)

    def _report_input(
        self, verdict: capi.VmVerdict, machine: Machine | None, event: MachineEvent | None
    ) -> ReportMachineInput:
        paused = self._current.paused
        conditions: list[MachineCondition] = [
            *capi.vm_conditions(verdict),
            MachineCondition(
                type=capi.PAUSED,
                status="True" if paused else "False",
                reason=capi.REASON_PAUSED if paused else capi.REASON_NOT_PAUSED,
                message="reconciliation is paused" if paused else "",
            ),
        ]
        report = ReportMachineInput(object=self._input.object, conditions=conditions, event=event)
        if machine is not None:
            report.provider_id = machine.provider_id
            report.id_field = self._input.id_field
            report.machine_id = machine.id
            report.addresses = machine.addresses
            report.ready = True
            report.provisioned = True
        elif verdict.reason != capi.REASON_DELETING:
            report.ready = False
            if not self._was_provisioned:  # provisioned never flips back (CAPI contract)
                report.provisioned = False
        return report

    def _provisioned_template(self) -> ReportMachineInput:
        """The status :meth:`_provision` writes once the VM runs, without the VM's fields (the
        create activity fills in providerID, ID and addresses, and ``{provider_id}``)."""
        running = capi.VmVerdict(
            reason=capi.REASON_VM_RUNNING, status="True", message="VM is running and ready"
        )
        report = self._report_input(running, None, self._provisioned_event("{provider_id}"))
        report.id_field = self._input.id_field
        report.ready = True
        report.provisioned = True
        return report

    def _provisioned_event(self, provider_id: str) -> MachineEvent:
        return MachineEvent(
            type="Normal",
            reason="Provisioned",
            message=f"VM {provider_id} is running after {self._attempts} attempt(s)",
        )

    async def _report_verdict(
        self,
        verdict: capi.VmVerdict,
        *,
        machine: Machine | None = None,
        beside: bool = False,
        event: MachineEvent | None = None,
    ) -> None:
        """Write the conditions (and, for a running VM, providerID, addresses, ready).

        A local activity (no round trip through the task queue) unless it runs ``beside``
        another activity: a local one would hold the workflow task, and so that activity, back.
        """
        key = self._report_key(verdict, machine)
        if key == self._reported:
            return
        report = self._report_input(verdict, machine, event)
        report_what = (
            f"providerID {machine.provider_id} and Ready"
            if machine is not None
            else f"{verdict.reason} ({verdict.status})"
        )
        try:
            if beside:
                await workflow.execute_activity(
                    MachineActivity.REPORT,
                    report,
                    summary=f"write {report_what} onto {self._name}",
                    result_type=bool,
                    start_to_close_timeout=KUBE_TIMEOUT,
                    retry_policy=KUBE_RETRY,
                )
            else:
                await workflow.execute_local_activity(
                    MachineActivity.REPORT,
                    report,
                    summary=f"write {report_what} onto {self._name}",
                    result_type=bool,
                    start_to_close_timeout=KUBE_TIMEOUT,
                    retry_policy=KUBE_RETRY,
                )
            self._reported = key
        except ActivityError as err:
            workflow.logger.warning("could not write the machine's status: %s", err.cause or err)
