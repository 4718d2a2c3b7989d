"""A worker's own rate budget for the cloud calls it makes outside the server's rate limits.

A local activity never becomes an activity task, so the task queue's ``activities_per_second``
(enforced by the Temporal server) does not count it. The volume workflows' local first attempt
takes a token here instead; without one it hands the operation to the heartbeating activity,
which the server's rate limit does count, so a burst is paced as before and only idle capacity
takes the fast path.

Rules:

- One bucket per worker process and queue: ``rate`` tokens a second, at most ``burst`` saved.
  With several worker pods the fast path's rate is at most pods times ``rate`` (the heartbeating
  path stays under the queue's shared limit).
- ``None`` as the rate: unlimited, as the queue setting means.
- Never blocks: :meth:`LocalBudget.take` answers at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class LocalBudget:
    """A token bucket (thread-safe; sync activities run in threads)."""

    def __init__(
        self,
        rate: float | None,
        *,
        burst: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self.burst = max(burst, 1.0)
        self._clock = clock
        self._tokens = self.burst
        self._at = clock()
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Take one token if one is there now."""
        if self.rate is None:
            return True
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True
