"""Temporal client and worker factory, and the one start / signal-with-start helper.

The client uses the pydantic converter and an optional metrics runtime; workers shut down
gracefully. :func:`signal_with_start` is how every starter starts or signals a workflow:
deterministic ID, conflict policy ``USE_EXISTING`` (a repeated event or a second replica joins the
running workflow), a reuse policy per workflow kind, search attributes, and
``cloudloop_workflows_started_total`` counted only when a run was really started (the SDK's
private ``_start_workflow_response`` is read here and nowhere else).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import Client, TLSConfig, WorkflowHandle
from temporalio.common import (
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

from cloudloop.metrics import WORKFLOWS_STARTED
from cloudloop.settings import TemporalSettings

log = logging.getLogger(__name__)


def new_runtime(metrics_bind: str | None) -> Runtime:
    """A Temporal SDK runtime exporting its metrics on ``metrics_bind`` (host:port), if given."""
    if not metrics_bind:
        return Runtime(telemetry=TelemetryConfig())
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=metrics_bind)))


def _tls(settings: TemporalSettings) -> TLSConfig | bool:
    tls = settings.tls
    if not tls.enabled:
        return False

    def read(path: Any) -> bytes | None:
        return path.read_bytes() if path is not None and path.exists() else None

    return TLSConfig(
        server_root_ca_cert=read(tls.ca_file),
        client_cert=read(tls.cert_file),
        client_private_key=read(tls.key_file),
    )


async def connect(settings: TemporalSettings, *, runtime: Runtime | None = None) -> Client:
    api_key = settings.api_key_file.read_text().strip() if settings.api_key_file else None
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        data_converter=pydantic_data_converter,
        runtime=runtime,
        tls=_tls(settings),
        api_key=api_key,
    )


def make_worker(
    client: Client,
    task_queue: str,
    *,
    workflows: Sequence[type],
    activities: Sequence[Callable[..., Any]],
    graceful_shutdown_s: float = 30.0,
    max_concurrent_activities: int = 100,
) -> Worker:
    """A worker whose sync activities run in a thread pool sized to the activity slots."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(workflows),
        activities=list(activities),
        activity_executor=ThreadPoolExecutor(
            max_workers=max_concurrent_activities, thread_name_prefix="activity"
        ),
        max_concurrent_activities=max_concurrent_activities,
        graceful_shutdown_timeout=timedelta(seconds=graceful_shutdown_s),
    )


def stop_on_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGTERM or SIGINT (Kubernetes pod termination, Ctrl-C)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


@dataclass(frozen=True)
class Start:
    """What :func:`signal_with_start` came to: the workflow's handle, and whether this call
    started the run (``False``: it joined, or signalled, one already running)."""

    handle: WorkflowHandle[Any, Any]
    started: bool


async def signal_with_start(
    client: Client,
    run: Callable[..., Any],
    arg: Any,
    *,
    kind: str,
    id: str,
    task_queue: str,
    search_attributes: TypedSearchAttributes,
    signal: str | None = None,
    signal_args: Sequence[Any] = (),
    reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
) -> Start | None:
    """Start the workflow ``id`` (or join the running one) and deliver ``signal``, if any.

    ``None`` when the reuse policy refuses a new run (a run of that ID completed); ``kind``
    labels ``cloudloop_workflows_started_total``. RPC errors propagate (callers retry).
    """
    extra: dict[str, Any] = {}
    if signal is not None:
        extra = {"start_signal": signal, "start_signal_args": list(signal_args)}
    try:
        handle: WorkflowHandle[Any, Any] = await client.start_workflow(
            run,
            arg,
            id=id,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=reuse_policy,
            search_attributes=search_attributes,
            **extra,
        )
    except WorkflowAlreadyStartedError:
        log.debug("workflow %s: a completed run blocks a new one", id)
        return None
    started = _started(handle)
    if started:
        WORKFLOWS_STARTED.labels(kind).inc()
        log.info("started workflow %s", id)
    return Start(handle=handle, started=started)


def _started(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the start call began a new run; the SDK keeps that in a private field (every
    start and signal-with-start response has ``started``), read here only."""
    response = getattr(handle, "_start_workflow_response", None)
    return bool(getattr(response, "started", True))
