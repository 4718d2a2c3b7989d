"""The Auto Scaling lifecycle actions moto cannot answer, as the AWS front answers them.

moto's server answers ``CompleteLifecycleAction`` and ``RecordLifecycleActionHeartbeat`` with a
500. The AWS front (:mod:`devstack.aws_front`) answers those two itself through
:class:`LifecycleLedger`, as AWS does (a completed action is gone: a second completion or a later
heartbeat gets ``ValidationError: No active Lifecycle Action found``), and records every call with
its token and time.

``GET /_cloudloop/autoscaling/calls`` returns the recorded calls; ``POST
/_cloudloop/autoscaling/faults`` with ``{"action": ..., "count": n, "status": 500}`` makes the
next ``n`` calls of that action fail.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid
from typing import Any

HANDLED = ("CompleteLifecycleAction", "RecordLifecycleActionHeartbeat")
CALLS_PATH = "/_cloudloop/autoscaling/calls"
FAULTS_PATH = "/_cloudloop/autoscaling/faults"
HEALTH_PATH = "/_cloudloop/healthz"
_XMLNS = "http://autoscaling.amazonaws.com/doc/2011-01-01/"


class LifecycleLedger:
    """Completed actions, recorded calls and pending faults (shared by the handler threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []
        self.completed: set[str] = set()
        self.faults: dict[str, list[int]] = {}

    def answer(self, action: str, params: dict[str, str]) -> tuple[int, str, str]:
        """(status, error code or "", message) for one lifecycle call, recorded."""
        token = params.get("LifecycleActionToken", "")
        with self.lock:
            pending = self.faults.get(action) or []
            if pending:
                status, code, message = pending.pop(0), "InternalFailure", "injected fault"
            elif token in self.completed:
                status, code = 400, "ValidationError"
                message = f"No active Lifecycle Action found with token {token}"
            else:
                status, code, message = 200, "", ""
                if action == "CompleteLifecycleAction":
                    self.completed.add(token)
            self.calls.append(
                {
                    "action": action,
                    "token": token,
                    "auto_scaling_group": params.get("AutoScalingGroupName", ""),
                    "hook": params.get("LifecycleHookName", ""),
                    "instance_id": params.get("InstanceId", ""),
                    "result": params.get("LifecycleActionResult", ""),
                    "time": time.time(),
                    "status": status,
                    "error": code,
                }
            )
        return status, code, message


def success_xml(action: str) -> str:
    return (
        f'<{action}Response xmlns="{_XMLNS}"><{action}Result/>'
        f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
        f"</{action}Response>"
    )


def error_xml(status: int, code: str, message: str) -> str:
    kind = "Sender" if status < 500 else "Receiver"
    return (
        f'<ErrorResponse xmlns="{_XMLNS}"><Error><Type>{kind}</Type><Code>{code}</Code>'
        f"<Message>{message}</Message></Error><RequestId>{uuid.uuid4()}</RequestId>"
        "</ErrorResponse>"
    )


# -- test helpers ----------------------------------------------------------------------------
def lifecycle_calls(endpoint: str) -> list[dict[str, Any]]:
    """Every lifecycle call the extension at ``endpoint`` answered, oldest first."""
    with urllib.request.urlopen(endpoint + CALLS_PATH, timeout=5) as response:
        calls: list[dict[str, Any]] = json.loads(response.read())["calls"]
    return calls


def inject_fault(endpoint: str, action: str, *, count: int = 1, status: int = 500) -> None:
    """Make the next ``count`` calls of ``action`` fail with ``status``."""
    request = urllib.request.Request(
        endpoint + FAULTS_PATH,
        data=json.dumps({"action": action, "count": count, "status": status}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5):
        pass
