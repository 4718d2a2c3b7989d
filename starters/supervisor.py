"""Supervision of the starters' long-lived tasks: restarted with backoff, never silently gone.

Every starter (and every task inside one) runs until the process stops. If one fails, or ends
while nothing asked it to, :class:`Supervisor` logs it, counts it in
``cloudloop_starter_restarts_total{starter}`` and starts it again after a backoff (1 s doubling
to 60 s; reset after a run of a minute). A starter that keeps failing (``crash_loop_after``
failures in a row) fails the process's liveness (``/healthz``), so Kubernetes restarts the pod
as it would a crash-looping upstream controller. :func:`run_parts` is how a starter runs its own
inner tasks: the first one to end ends them all, so the supervisor sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from cloudloop.health import Health
from cloudloop.metrics import STARTER_RESTARTS

log = logging.getLogger(__name__)


class PartEnded(RuntimeError):
    """An inner task of a starter returned although nothing asked it to stop."""


async def run_parts(stopped: asyncio.Event, **parts: Coroutine[Any, Any, object]) -> None:
    """Run ``parts`` side by side until ``stopped`` is set. When one of them fails or returns
    first, cancel the others and raise (its error, or :class:`PartEnded`)."""
    tasks = {asyncio.create_task(coro, name=name): name for name, coro in parts.items()}
    waiter = asyncio.create_task(stopped.wait())
    try:
        done, _ = await asyncio.wait({waiter, *tasks}, return_when=asyncio.FIRST_COMPLETED)
        if waiter in done:
            return
        ended = next(t for t in done if t is not waiter)
        error = ended.exception()
        if error is not None:
            raise error
        raise PartEnded(f"{tasks[ended]} ended")
    finally:
        waiter.cancel()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class Supervisor:
    def __init__(
        self,
        health: Health | None = None,
        *,
        backoff_min_s: float = 1.0,
        backoff_max_s: float = 60.0,
        healthy_run_s: float = 60.0,
        crash_loop_after: int = 5,
    ) -> None:
        self.backoff_min_s = backoff_min_s
        self.backoff_max_s = backoff_max_s
        self.healthy_run_s = healthy_run_s
        self.crash_loop_after = crash_loop_after
        self.failures: dict[str, int] = {}  # failures in a row (reset by a healthy run)
        self.restarts: dict[str, int] = {}
        self._running_since: dict[str, float | None] = {}  # None: waiting to restart
        if health is not None:
            health.add_liveness("starters", self.liveness)

    def liveness(self) -> str | None:
        now = time.monotonic()
        looping = sorted(
            name
            for name, failures in self.failures.items()
            if failures >= self.crash_loop_after
            and (
                (since := self._running_since.get(name)) is None or now - since < self.healthy_run_s
            )
        )
        return f"crash-looping: {', '.join(looping)}" if looping else None

    async def run(
        self, name: str, body: Callable[[], Awaitable[object]], stopped: asyncio.Event
    ) -> None:
        """Run ``body`` until ``stopped``; restart it (with backoff) whenever it ends early."""
        while not stopped.is_set():
            started = time.monotonic()
            self._running_since[name] = started
            try:
                await body()
                if stopped.is_set():
                    return
                log.error("starter %s ended unexpectedly; restarting it", name)
            except asyncio.CancelledError:
                raise
            except Exception:
                if stopped.is_set():
                    return
                log.exception("starter %s failed; restarting it", name)
            if time.monotonic() - started >= self.healthy_run_s:
                self.failures[name] = 0
            failures = self.failures.get(name, 0) + 1
            self.failures[name] = failures
            self.restarts[name] = self.restarts.get(name, 0) + 1
            STARTER_RESTARTS.labels(name).inc()
            self._running_since[name] = None
            delay = min(self.backoff_max_s, self.backoff_min_s * 2.0 ** (failures - 1))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopped.wait(), delay)
