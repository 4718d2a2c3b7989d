"""Heartbeats for blocking activities: a side thread heartbeats while the activity works.

A sync activity that waits on a cloud SDK cannot heartbeat between its own steps; with
:func:`heartbeating` the server still hears from it every few seconds, so a worker that dies
mid-call is noticed after the activity's ``heartbeat_timeout`` instead of its whole
``start_to_close_timeout``, and the retry runs on another worker. Every blocking driver wait
(a VM shutting down, a disk being cloned, a load balancer being made) runs inside it; the side
thread repeats the activity's last progress (``details``), so a retry still finds it.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import Any

from temporalio import activity


@contextlib.contextmanager
def heartbeating(
    interval_s: float = 2.0, *, details: Callable[[], Any] | None = None
) -> Iterator[None]:
    """Heartbeat every ``interval_s`` from a side thread until the block ends, with
    ``details()`` (the activity's progress) when given."""
    if activity.info().is_local:  # the SDK keeps a local activity's workflow task alive
        yield
        return
    done = threading.Event()
    context = contextvars.copy_context()  # carries the activity context to the thread

    def beat() -> None:
        while not done.wait(interval_s):
            with contextlib.suppress(Exception):  # e.g. the worker is shutting down
                if details is None:
                    activity.heartbeat()
                else:
                    activity.heartbeat(details())

    thread = threading.Thread(target=context.run, args=(beat,), daemon=True, name="heartbeat")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=interval_s)
