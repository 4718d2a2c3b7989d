"""Heartbeats for blocking activities: a side thread heartbeats while the activity works.

A sync activity that waits on a cloud SDK cannot heartbeat between its own steps; with
:func:`heartbeating` the server still hears from it every few seconds, so a worker that dies
mid-call is noticed after the activity's ``heartbeat_timeout`` instead of its whole
``start_to_close_timeout``, and the retry runs on another worker.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator

from temporalio import activity


@contextlib.contextmanager
def heartbeating(interval_s: float = 2.0) -> Iterator[None]:
    """Heartbeat every ``interval_s`` from a side thread until the block ends."""
    if activity.info().is_local:  # the SDK keeps a local activity's workflow task alive
        yield
        return
    done = threading.Event()
    context = contextvars.copy_context()  # carries the activity context to the thread

    def beat() -> None:
        while not done.wait(interval_s):
            with contextlib.suppress(Exception):  # e.g. the worker is shutting down
                activity.heartbeat()

    thread = threading.Thread(target=context.run, args=(beat,), daemon=True, name="heartbeat")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=interval_s)
