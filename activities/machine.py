"""Machine activities: the VM through the cloud driver, the InfraMachine through the kube API.

``create`` reads the bootstrap data from its Secret and hands the bytes straight to the driver,
so the data never enters workflow history or logs. ``observe`` and ``delete`` poll the cloud with
backoff and heartbeat its progress (phase, polls, attempts) in their details; a retried attempt
after a worker crash picks the count up from there. Driver errors become ``ApplicationError``
with the error kind as ``type`` (see :mod:`activities.cloud`).

``create`` also writes the statuses on either side of it, when the workflow passes them: the
"creating" one beside the Secret read and the cloud call (a thread of its own: nothing waits for
a report), and the provisioned one (providerID, addresses, ready, the
``Provisioned`` Event) once the VM runs within its window — only on the object's version its own
"creating" write left (a ``resourceVersion`` precondition), so a pause or any other change
meanwhile leaves that write to the workflow, which waits for the pause to end. A failed
"creating" write is logged and the create goes on (it is a report, not a decision).
"""

from __future__ import annotations

import base64
import binascii
import contextvars
import functools
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.cloud import cloud_errors
from activities.heartbeats import Heartbeat, heartbeating
from activities.kube import kube_errors
from cloudloop.cloud.driver import Machines
from cloudloop.cloud.models import Machine, MachineSpec
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import InfraObject
from cloudloop.kube.conditions import set_condition
from cloudloop.kube.events import record_event
from cloudloop.kube.finalizers import remove_finalizer
from cloudloop.kube.resources import SECRETS
from cloudloop.messages.kube import EventSource
from cloudloop.messages.machine import (
    CreateMachineInput,
    DeleteMachineInput,
    DeleteMachineResult,
    MachineActivity,
    ObserveMachineInput,
    ObserveMachineResult,
    PollSchedule,
    RemoveFinalizerInput,
    ReportMachineInput,
    SecretName,
)
from cloudloop.rules import machine as capi
from cloudloop.rules.machine import BOOTSTRAP_DATA_KEY


def _previous_count(key: str) -> int:
    """A counter from the last attempt's heartbeat details (0 on the first attempt)."""
    details = activity.info().heartbeat_details
    if details and isinstance(details[0], dict):
        return int(details[0].get(key, 0) or 0)
    return 0


class MachineActivities:
    """The VM through the machines capability, the InfraMachine through ``kube``."""

    def __init__(self, machines: Machines, kube: Kube) -> None:
        self.machines = machines
        self.kube = kube

    # -- cloud -----------------------------------------------------------------------------
    @activity.defn(name=MachineActivity.CREATE)
    def create(self, input: CreateMachineInput) -> ObserveMachineResult:
        """Create (or adopt) the VM, then watch it while it is not ready (up to ``window_s``).

        A cancellation waits until the driver's create call has returned, so nothing it makes
        is left behind by the deletion that follows.
        """
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="machine-status") as beside:
            # The "creating" status is written beside the Secret read and the cloud call (a
            # report: nothing waits for it), in this activity's context (its logger).
            creating = (
                beside.submit(contextvars.copy_context().run, self._write_softly, input.creating)
                if input.creating is not None
                else None
            )
            user_data = self._bootstrap_data(input.bootstrap)
            progress: dict[str, Any] = {"step": "creating"}
            with heartbeating(1.0, details=functools.partial(dict, progress)) as beat:
                with activity.shield_thread_cancel_exception(), cloud_errors():
                    machine = self.machines.create_machine(input.spec, user_data)
                del user_data
                progress.update(step="created", phase=machine.phase)
                beat.now()
                result = self._watch(
                    input.spec,
                    machine,
                    capi.REASON_VM_NOT_READY,
                    input.window_s,
                    input.poll,
                    progress,
                    beat,
                )
                written = creating.result() if creating is not None else None
                result.creating_reported = written is not None
                running = result.machine is not None and capi.classify(result.machine).provisioned
                if written is not None and input.provisioned is not None and running:
                    assert result.machine is not None
                    result.provisioned_reported = self._write_provisioned(
                        input.provisioned, result.machine, written
                    )
                return result

    def _write_softly(self, report: ReportMachineInput) -> InfraObject | None:
        """The "creating" status, before the create: the object as written, or ``None`` when it
        is gone or the write failed (a report, not a decision: logged, the create goes on)."""
        try:
            return self._write(report)
        except KubeError as exc:
            activity.logger.warning("%s: status not written: %s", report.object.key, exc)
            return None

    def _write_provisioned(
        self, template: ReportMachineInput, machine: Machine, written: InfraObject
    ) -> bool:
        """providerID, addresses, ready and the ``Provisioned`` Event, if the object is as this
        activity last wrote it (its resourceVersion): anything else that changed it meanwhile
        (a pause, a new spec) leaves the write to the workflow, which sees that change."""
        version = str(written["metadata"].get("resourceVersion") or "")
        if not version or not machine.provider_id:
            return False
        event = template.event
        if event is not None:
            message = event.message.replace("{provider_id}", machine.provider_id)
            event = event.model_copy(update={"message": message})
        report = template.model_copy(
            update={
                "provider_id": machine.provider_id,
                "machine_id": machine.id,
                "addresses": machine.addresses,
                "event": event,
            }
        )
        try:
            return self._write(report, resource_version=version) is not None
        except KubeError as exc:
            if not exc.conflict:
                activity.logger.warning("%s: status not written: %s", report.object.key, exc)
            return False

    def _bootstrap_data(self, ref: SecretName) -> bytes:
        with kube_errors():
            secret = self.kube.get(SECRETS, ref.name, ref.namespace)
        if secret is None:
            raise ApplicationError(
                f"bootstrap data Secret {ref.namespace}/{ref.name} not found",
                type="BootstrapDataNotFound",
            )
        encoded = (secret.get("data") or {}).get(BOOTSTRAP_DATA_KEY)
        if not encoded:
            raise ApplicationError(
                f"bootstrap data Secret {ref.namespace}/{ref.name} has no {BOOTSTRAP_DATA_KEY!r}",
                type="BootstrapDataInvalid",
                non_retryable=True,
            )
        try:
            return base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise ApplicationError(
                f"bootstrap data Secret {ref.namespace}/{ref.name}: {BOOTSTRAP_DATA_KEY!r} "
                "is not base64",
                type="BootstrapDataInvalid",
                non_retryable=True,
            ) from None

    @activity.defn(name=MachineActivity.OBSERVE)
    def observe(self, input: ObserveMachineInput) -> ObserveMachineResult:
        """Poll the VM until its verdict differs from ``last_reason`` or the window ends."""
        progress: dict[str, Any] = {"step": "observing"}
        with heartbeating(1.0, details=functools.partial(dict, progress)) as beat:
            with cloud_errors():
                machine = self.machines.get_machine(input.spec)
            return self._watch(
                input.spec, machine, input.last_reason, input.window_s, input.poll, progress, beat
            )

    def _watch(
        self,
        spec: MachineSpec,
        machine: Machine | None,
        last_reason: str,
        window_s: float,
        poll: PollSchedule,
        progress: dict[str, Any],
        beat: Heartbeat,
    ) -> ObserveMachineResult:
        """From ``machine`` on, poll until the verdict leaves ``last_reason`` or time is up;
        the phase and the number of polls go into ``progress``, which the caller's heartbeat
        thread repeats (one thread for the whole activity, not one per poll) and sends after
        each poll (``beat``: this thread does not wait for the send)."""
        polls = _previous_count("polls")
        deadline = time.monotonic() + window_s
        delay = poll.initial_s
        while True:
            verdict = capi.classify(machine)
            progress.update(
                polls=polls, phase=machine.phase if machine else "absent", reason=verdict.reason
            )
            beat.now()
            remaining = deadline - time.monotonic()
            if verdict.reason != last_reason or remaining <= 0:
                return ObserveMachineResult(machine=machine, reason=verdict.reason, polls=polls)
            activity.wait_for_cancelled_sync(min(delay, remaining))
            delay = poll.after(delay)
            with cloud_errors():
                machine = self.machines.get_machine(spec)
            polls += 1

    @activity.defn(name=MachineActivity.DELETE)
    def delete(self, input: DeleteMachineInput) -> DeleteMachineResult:
        """Delete the VM and all it was created with; return once the cloud has nothing left."""
        attempts = _previous_count("attempts")
        delay = input.poll.initial_s
        while True:
            # The driver waits for the guest to shut down and the VM to go: longer than the
            # heartbeat timeout, so a side thread heartbeats meanwhile.
            progress = {"attempts": attempts, "gone": False}
            with (
                heartbeating(1.0, details=functools.partial(dict, progress)),
                activity.shield_thread_cancel_exception(),
                cloud_errors(),
            ):
                gone = self.machines.delete_machine(input.spec)
            attempts += 1
            activity.heartbeat({"attempts": attempts, "gone": gone})
            if gone:
                return DeleteMachineResult(attempts=attempts)
            activity.wait_for_cancelled_sync(delay)
            delay = input.poll.after(delay)

    # -- kube ------------------------------------------------------------------------------
    @activity.defn(name=MachineActivity.REPORT)
    def report(self, input: ReportMachineInput) -> bool:
        """Write providerID (and the ID field) and status; ``False`` if the object is gone."""
        with kube_errors():
            return self._write(input) is not None

    def _write(
        self, input: ReportMachineInput, *, resource_version: str = ""
    ) -> InfraObject | None:
        """The writes of :meth:`report`: the object as its status patch answered (typed by
        :meth:`ObjectRef.resource_of`, not checked), ``None`` if it is gone.
        ``resource_version``: the spec patch (there must be one) is made only on that version of
        the object (a conflict raises)."""
        ref = input.object
        infra = ref.resource_of(InfraObject)
        namespace = ref.namespace or None
        guard: dict[str, str] = {"uid": ref.uid} if ref.uid else {}
        spec_patch: dict[str, Any] = {}
        if input.provider_id:
            spec_patch["providerID"] = input.provider_id
        if input.id_field and input.machine_id:
            spec_patch[input.id_field] = input.machine_id
        try:
            # The spec patch (a no-op when unchanged) answers with the object: no extra read.
            current: InfraObject | None
            if spec_patch:
                precondition = {"resourceVersion": resource_version} if resource_version else {}
                current = self.kube.patch(
                    infra,
                    ref.name,
                    {"metadata": {**guard, **precondition}, "spec": spec_patch},
                    namespace,
                )
            else:
                current = self.kube.get(infra, ref.name, namespace)
            if current is None or (ref.uid and current["metadata"].get("uid") != ref.uid):
                activity.logger.info("%s %s is gone; status not written", ref.kind, ref.key)
                return None
            generation = int(current["metadata"].get("generation") or 0) or None
            status: dict[str, Any] = {}
            conditions: Iterable[Mapping[str, Any]] | None = (current.get("status") or {}).get(
                "conditions"
            )
            for condition in input.conditions:
                conditions = set_condition(
                    conditions,
                    type=condition.type,
                    status=condition.status,
                    reason=condition.reason,
                    message=condition.message,
                    observed_generation=generation,
                )
            status["conditions"] = conditions
            if input.addresses is not None:
                status["addresses"] = [a.model_dump() for a in input.addresses]
            if input.ready is not None:
                status["ready"] = input.ready
            if input.provisioned is not None:
                status["initialization"] = {"provisioned": input.provisioned}
            written = self.kube.patch(
                infra,
                ref.name,
                {"metadata": guard, "status": status},
                namespace,
                subresource="status",
            )
        except KubeError as exc:
            if exc.not_found or (exc.conflict and "UID" in str(exc)):
                return None  # gone, or a new object of the same name
            raise
        if input.event is not None:
            event = input.event
            message = f"{event.message} (workflow {activity.info().workflow_id})"
            record_event(
                self.kube,
                ref,
                type=event.type,
                reason=event.reason,
                message=message,
                component=EventSource.MACHINE,
            )
        return written

    @activity.defn(name=MachineActivity.REMOVE_FINALIZER)
    def remove_finalizer(self, input: RemoveFinalizerInput) -> bool:
        """Take the finalizer off (the last step of a deletion); ``False`` if already gone."""
        with kube_errors():
            return remove_finalizer(self.kube, input.object, input.finalizer)

    def all(self) -> list[object]:
        return [self.create, self.observe, self.delete, self.report, self.remove_finalizer]
