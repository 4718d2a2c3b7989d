"""Temporal client and worker factory: pydantic converter, metrics runtime, graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from temporalio.client import Client, TLSConfig
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

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
