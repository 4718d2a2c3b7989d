"""``cloudloop worker`` that stops dead right after the first mutating cloud call of every
activity it has not stopped in before, for the kill-at-every-step tests.

Cloud-neutral: every driver counts each answered request once
(``cloud_api_requests_total{provider,operation,outcome}``, :mod:`cloudloop.cloud.calls`), so the
fault point wraps that counter: after a ``success`` of an operation that does not start with one
of ``STEP_FAULT_READ_ONLY`` (comma-separated prefixes, e.g. ``Describe,Get,List``) and, when
``STEP_FAULT_MUTATING`` names operations (vSphere's), is one of them, inside an
activity whose step (``<workflow id>/<activity id>``, the same across its retries) is not yet in
the file ``STEP_FAULT_SEEN``, it appends the step, the operation and its own PID to that file
and blocks that
activity forever — the cloud has done the work, the step has not reported it — so the test can
SIGKILL the process there. A restarted worker reads the file and passes the steps already
stopped in; the retried step must find what the killed one made. Its workflows' sticky queues
give up after 1 s (not the SDK's 10 s), so a killed worker's workflow tasks move on quickly.
With ``STEP_FAULT_ONLY`` set (comma-separated resource keys), only the steps of those
resources are stopped in (a layout step's key is its input's ``resource.key``, read by an
activity interceptor); the others run through. With ``STEP_FAULT_GO`` set, it imports
everything, then waits until that file exists before it connects and polls: the harness keeps
the next worker warm that way, so a kill costs no start.
Run as ``python -m tests.support.step_fault_worker``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import socket
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import temporalio.worker
from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from cloudloop.cloud.registry import Settings
from cloudloop.metrics import CLOUD_API_REQUESTS
from workers.main import run

_LOCK = threading.Lock()
#: The resource key of the layout step this activity runs ("" for any other activity).
_KEY: contextvars.ContextVar[str] = contextvars.ContextVar("step_fault_key", default="")


class _KeyInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        resource = getattr(input.args[0], "resource", None) if input.args else None
        token = _KEY.set(str(getattr(resource, "key", "")))
        try:
            return await super().execute_activity(input)
        finally:
            _KEY.reset(token)


class _KeyInterceptor(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _KeyInbound(next)


def _step() -> str:
    try:
        info = activity.info()
    except RuntimeError:  # not in an activity (a starter's or a discoverer's call)
        return ""
    return f"{info.workflow_id}/{info.activity_id}"


def stop_after_first_mutation(
    seen: Path,
    read_only: tuple[str, ...],
    mutating: frozenset[str] = frozenset(),
    only: frozenset[str] = frozenset(),
) -> None:
    original = CLOUD_API_REQUESTS.labels

    def labels(*values: str, **named: str) -> Any:
        metric = original(*values, **named)
        operation, outcome = (values[1], values[2]) if len(values) == 3 else ("", "")
        if outcome != "success" or operation.startswith(read_only):
            return metric
        if mutating and operation not in mutating:
            return metric
        step = _step()
        if not step or (only and _KEY.get() not in only):
            return metric
        with _LOCK:
            done = seen.read_text().splitlines() if seen.exists() else []
            if any(line.split(" ", 1)[0] == step for line in done):
                return metric
            with seen.open("a") as out:
                out.write(f"{step} {_KEY.get() or '-'} {operation} {os.getpid()}\n")
        logging.getLogger(__name__).warning("stopping %s after %s", step, operation)
        metric.inc()  # counted as the caller would, then never returns
        threading.Event().wait()
        return metric

    CLOUD_API_REQUESTS.labels = labels  # type: ignore[method-assign,assignment]


def short_sticky_queues(seconds: float = 1.0) -> None:
    """Workers whose sticky queues give up after ``seconds``, with the step-key interceptor."""
    original = temporalio.worker.Worker

    class Worker(original):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("sticky_queue_schedule_to_start_timeout", timedelta(seconds=seconds))
            kwargs["interceptors"] = [*kwargs.get("interceptors", ()), _KeyInterceptor()]
            super().__init__(*args, **kwargs)

    temporalio.worker.Worker = Worker  # type: ignore[misc]


def wait_for(go: Path, port: int) -> None:
    """Until ``go`` exists (the harness's word that this spare takes over), holding the metrics
    ``port`` meanwhile so no other process takes it."""
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", port))
        while not go.exists():
            threading.Event().wait(0.05)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if os.environ.get("STEP_FAULT_GO"):
        wait_for(Path(os.environ["STEP_FAULT_GO"]), int(os.environ["CLOUDLOOP_METRICS_PORT"]))
    short_sticky_queues()
    stop_after_first_mutation(
        Path(os.environ["STEP_FAULT_SEEN"]),
        tuple(p for p in os.environ.get("STEP_FAULT_READ_ONLY", "").split(",") if p),
        frozenset(p for p in os.environ.get("STEP_FAULT_MUTATING", "").split(",") if p),
        frozenset(k for k in os.environ.get("STEP_FAULT_ONLY", "").split(",") if k),
    )
    asyncio.run(run(Settings()))
