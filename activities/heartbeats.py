"""Heartbeats for blocking activities: a side thread heartbeats while the activity works.

A sync activity that waits on a cloud SDK cannot heartbeat between its own steps; with
:func:`heartbeating` the server still hears from it every few seconds, so a worker that dies
mid-call is noticed after the activity's ``heartbeat_timeout`` instead of its whole
``start_to_close_timeout``, and the retry runs on another worker. Every blocking driver wait
(a VM shutting down, a disk being cloned, a load balancer being made) runs inside it; the side
thread repeats the activity's last progress (``details``), so a retry still finds it.

A sync activity's own ``activity.heartbeat`` blocks its thread until the worker's event loop
has taken the details (the SDK waits on the loop: milliseconds on a busy worker, on the
activity's way each time). :meth:`Heartbeat.now` instead wakes the side thread to send the
progress at once, and the activity goes on.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import Any

from temporalio import activity


class Heartbeat:
    """The side thread of :func:`heartbeating`, as the activity sees it."""

    def __init__(self) -> None:
        self._wake = threading.Event()
        self._done = False

    def now(self) -> None:
        """Have the side thread send the progress now (without waiting for it)."""
        self._wake.set()


@contextlib.contextmanager
def heartbeating(
    interval_s: float = 2.0, *, details: Callable[[], Any] | None = None
) -> Iterator[Heartbeat]:
    """Heartbeat every ``interval_s`` from a side thread until the block ends, with
    ``details()`` (the activity's progress) when given; :meth:`Heartbeat.now` sends at once."""
    beat = Heartbeat()
    if activity.info().is_local:  # the SDK keeps a local activity's workflow task alive
        yield beat
        return
    context = contextvars.copy_context()  # carries the activity context to the thread

    def run() -> None:
        while True:
            beat._wake.wait(interval_s)
            beat._wake.clear()
            if beat._done:
                return
            with contextlib.suppress(Exception):  # e.g. the worker is shutting down
                if details is None:
                    activity.heartbeat()
                else:
                    activity.heartbeat(details())

    thread = threading.Thread(target=context.run, args=(run,), daemon=True, name="heartbeat")
    thread.start()
    try:
        yield beat
    finally:
        beat._done = True
        beat._wake.set()
        thread.join(timeout=interval_s)
