"""The starters' work queue: keys to reconcile, deduplicated, retried with per-key backoff.

Shaped like client-go's rate-limited work queue: a key is queued at most once, handed to one
worker at a time (a key added while it is being processed is processed again after it), and a
failed key comes back after an exponential per-key delay that resets on success.

Rules:
- **Identity.** Keys are strings naming a Kubernetes object (``namespace/name`` or a prefixed
  form); a reconcile reads the object's current state from an informer store, never from the
  event that queued it, so a burst of events for one key costs one reconcile.
- **Crash behaviour.** The queue lives in memory: after a restart the informers' initial list
  queues every key again, which is why reconciles are idempotent. A reconcile that raises is
  retried (``backoff_min_s`` doubling up to ``backoff_max_s``); it never stops the workers.
- **Metrics** (upstream's workqueue names): ``workqueue_depth{name}``,
  ``workqueue_adds_total{name}``, ``workqueue_retries_total{name}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

from cloudloop.metrics import WORKQUEUE_ADDS, WORKQUEUE_DEPTH, WORKQUEUE_RETRIES

log = logging.getLogger(__name__)

Reconcile = Callable[[str], Awaitable[object]]


class WorkQueue:
    """An asyncio work queue; use from one event loop."""

    def __init__(self, name: str, *, backoff_min_s: float = 0.5, backoff_max_s: float = 60.0):
        self.name = name
        self.backoff_min_s = backoff_min_s
        self.backoff_max_s = backoff_max_s
        self._ready: deque[str] = deque()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._waiting: dict[str, tuple[float, asyncio.TimerHandle]] = {}  # key → (due, timer)
        self._failures: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._shut_down = False

    # -- adding ----------------------------------------------------------------------------
    def add(self, key: str) -> None:
        """Queue ``key`` now (once); while it is processed, process it again afterwards."""
        if self._shut_down:
            return
        self._cancel_wait(key)
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._ready.append(key)
        WORKQUEUE_ADDS.labels(self.name).inc()
        WORKQUEUE_DEPTH.labels(self.name).set(len(self._ready))
        self._wake.set()

    def add_after(self, key: str, delay_s: float) -> None:
        """Queue ``key`` in ``delay_s`` seconds (an earlier wait for it wins)."""
        if self._shut_down:
            return
        if delay_s <= 0:
            self.add(key)
            return
        due = time.monotonic() + delay_s
        current = self._waiting.get(key)
        if current is not None and current[0] <= due:
            return
        self._cancel_wait(key)
        timer = asyncio.get_running_loop().call_later(delay_s, self._due, key)
        self._waiting[key] = (due, timer)

    def retry(self, key: str) -> float:
        """Queue ``key`` again after its next backoff delay; that delay."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        delay = min(self.backoff_max_s, self.backoff_min_s * 2.0 ** (failures - 1))
        WORKQUEUE_RETRIES.labels(self.name).inc()
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """``key`` succeeded: its next failure starts from the shortest delay again."""
        self._failures.pop(key, None)

    def discard(self, key: str) -> None:
        """Stop tracking ``key``: no pending retry, no backoff (a queued entry still runs)."""
        self._cancel_wait(key)
        self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        """Consecutive failures of ``key`` (0 after a success)."""
        return self._failures.get(key, 0)

    def tracked(self, key: str) -> bool:
        """Whether ``key`` is queued, being processed or waiting for a retry."""
        return key in self._queued or key in self._processing or key in self._waiting

    def __len__(self) -> int:
        return len(self._ready)

    def _due(self, key: str) -> None:
        self._waiting.pop(key, None)
        self.add(key)

    def _cancel_wait(self, key: str) -> None:
        waiting = self._waiting.pop(key, None)
        if waiting is not None:
            waiting[1].cancel()

    # -- taking ----------------------------------------------------------------------------
    async def get(self) -> str:
        """The next key; it is being processed until :meth:`done`."""
        while not self._ready:
            self._wake.clear()
            await self._wake.wait()
        return self._take()

    async def get_batch(self, *, window_s: float, max_wait_s: float) -> list[str]:
        """Every ready key, after waiting while more keep arriving (each quiet ``window_s``
        ends the wait, ``max_wait_s`` at most): one batched cloud call for a burst."""
        await self.get_ready()
        deadline = time.monotonic() + max_wait_s
        seen = len(self._ready)
        while time.monotonic() < deadline:
            await asyncio.sleep(window_s)
            if len(self._ready) == seen:
                break
            seen = len(self._ready)
        keys: list[str] = []
        while self._ready:
            keys.append(self._take())
        return keys

    async def get_ready(self) -> None:
        """Wait until a key is ready (without taking it)."""
        while not self._ready:
            self._wake.clear()
            await self._wake.wait()

    def _take(self) -> str:
        key = self._ready.popleft()
        self._queued.discard(key)
        self._processing.add(key)
        WORKQUEUE_DEPTH.labels(self.name).set(len(self._ready))
        return key

    def done(self, key: str) -> None:
        """Processing of ``key`` ended; a change meanwhile queues it again."""
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def shut_down(self) -> None:
        """Drop pending retries and accept no more keys."""
        self._shut_down = True
        for key in list(self._waiting):
            self._cancel_wait(key)

    # -- workers ---------------------------------------------------------------------------
    async def run(
        self,
        reconcile: Reconcile,
        *,
        workers: int = 1,
        before: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        """Run ``workers`` workers (after ``before``, e.g. informers synced) until cancelled:
        each takes a key, reconciles it, and forgets it on success or retries it on failure."""
        if before is not None:
            await before()
        tasks = [asyncio.create_task(self._work(reconcile)) for _ in range(max(1, workers))]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _work(self, reconcile: Reconcile) -> None:
        while True:
            key = await self.get()
            try:
                await reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad key never stops the workers
                delay = self.retry(key)
                log.exception("%s %s: reconcile failed; retrying in %.1fs", self.name, key, delay)
            else:
                self.forget(key)
            finally:
                self.done(key)
