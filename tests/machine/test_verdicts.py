"""What a VM's state means for the InfraMachine's conditions (Deckhouse's phase handling)."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ActivityError, ApplicationError, RetryState

from cloudloop.cloud.models import InstanceState, Machine, NodeAddress
from cloudloop.rules import machine as capi
from workflows.machine import MachineFailure

IP = [NodeAddress(type="InternalIP", address="10.66.0.10")]


def vm(state: InstanceState, phase: str, *, ip: bool = True, failed: bool = False) -> Machine:
    return Machine(
        id="m1",
        provider_id="dvp://m1",
        state=state,
        phase=phase,
        addresses=IP if ip else [],
        failed=failed,
        message="BlockDevicesReady: VirtualDisk m1-boot is Provisioning" if not ip else "",
    )


@pytest.mark.parametrize(
    ("machine", "reason", "status"),
    [
        pytest.param(None, capi.REASON_VM_ERROR, "False", id="missing"),
        pytest.param(
            vm(InstanceState.RUNNING, "Running"), capi.REASON_VM_RUNNING, "True", id="running"
        ),
        pytest.param(
            vm(InstanceState.RUNNING, "Running", ip=False),
            capi.REASON_VM_NOT_READY,
            "Unknown",
            id="running-without-ip",
        ),
        pytest.param(
            vm(InstanceState.PENDING, "Pending", ip=False),
            capi.REASON_VM_NOT_READY,
            "Unknown",
            id="pending",
        ),
        pytest.param(
            vm(InstanceState.STOPPED, "Stopped", ip=False),
            capi.REASON_VM_STOPPED,
            "False",
            id="stopped",
        ),
        pytest.param(
            vm(InstanceState.UNKNOWN, "Degraded", ip=False, failed=True),
            capi.REASON_VM_FAILED,
            "False",
            id="degraded",
        ),
    ],
)
def test_classify(machine: Machine | None, reason: str, status: str) -> None:
    verdict = capi.classify(machine)
    assert (verdict.reason, verdict.status) == (reason, status)
    assert verdict.provisioned is (reason == capi.REASON_VM_RUNNING)
    ready, vm_ready = (
        {c.type: c for c in capi.vm_conditions(verdict)}[t] for t in (capi.READY, capi.VM_READY)
    )
    assert vm_ready.reason == reason
    assert ready.status == ("True" if verdict.provisioned else "False")


def test_not_ready_message_names_phase_and_cause() -> None:
    verdict = capi.classify(vm(InstanceState.PENDING, "Pending", ip=False))
    assert verdict.message.startswith("VM is not ready, state is Pending")
    assert "VirtualDisk m1-boot is Provisioning" in verdict.message


def _activity_error(cause: BaseException) -> ActivityError:
    error = ActivityError(
        "activity failed",
        scheduled_event_id=1,
        started_event_id=2,
        identity="test",
        activity_type="machine.create",
        activity_id="1",
        retry_state=RetryState.NON_RETRYABLE_FAILURE,
    )
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("cause", "retryable", "text"),
    [
        pytest.param(
            ApplicationError("no class", type="InvalidRequest", non_retryable=True),
            False,
            "InvalidRequest: no class",
            id="invalid-request",
        ),
        pytest.param(
            ApplicationError("refused", type="CloudUnreachable"),
            True,
            "CloudUnreachable: refused",
            id="unreachable",
        ),
        pytest.param(TimeoutError("heartbeat"), True, "heartbeat", id="timeout"),
    ],
)
def test_failures_keep_kind_and_retryability(
    cause: BaseException, retryable: bool, text: str
) -> None:
    failure = MachineFailure.of(_activity_error(cause), capi.REASON_VM_ERROR, "create")
    assert failure.retryable is retryable
    assert failure.reason == capi.REASON_VM_ERROR
    assert failure.message.startswith("create: ") and text in failure.message
