"""Liveness and readiness checks of a process, served on ``/healthz`` and ``/readyz``.

A check is a named callable returning ``None`` when all is well, else a short reason. Liveness
(``/healthz``) fails only for what a restart cures: a long-lived task crash-looping, the leader
election thread gone, a leader whose Lease was not renewed in time. Readiness (``/readyz``) also
fails while the process is starting or its view of the cluster is stale (an informer that has
not heard from the API server for too long). Checks run on every probe; they must be cheap and
never block (they read state other threads keep).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

Check = Callable[[], str | None]


class Health:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._liveness: dict[str, Check] = {}
        self._readiness: dict[str, Check] = {}
        self._started = threading.Event()

    def add_liveness(self, name: str, check: Check) -> None:
        """Fails ``/healthz`` (and so ``/readyz``) while ``check`` reports a reason."""
        with self._lock:
            self._liveness[name] = check

    def add_readiness(self, name: str, check: Check) -> None:
        """Fails ``/readyz`` only."""
        with self._lock:
            self._readiness[name] = check

    def remove(self, name: str) -> None:
        with self._lock:
            self._liveness.pop(name, None)
            self._readiness.pop(name, None)

    def set_started(self) -> None:
        """The process finished starting (readiness may pass from now on)."""
        self._started.set()

    def live(self) -> list[str]:
        """The reasons liveness fails (empty: alive)."""
        with self._lock:
            checks = list(self._liveness.items())
        return _run(checks)

    def ready(self) -> list[str]:
        """The reasons readiness fails (empty: ready)."""
        with self._lock:
            checks = list(self._readiness.items())
        reasons = [] if self._started.is_set() else ["starting: not ready yet"]
        return reasons + self.live() + _run(checks)


def _run(checks: list[tuple[str, Check]]) -> list[str]:
    reasons: list[str] = []
    for name, check in checks:
        try:
            reason = check()
        except Exception as exc:  # a broken check fails itself, not the probe
            reason = f"check failed: {type(exc).__name__}: {exc}"
        if reason:
            reasons.append(f"{name}: {reason}")
    return reasons
