"""Activity timeouts every workflow shares.

Rule: an activity either heartbeats (its heartbeat timeout finds a dead worker) or is one short
call bounded by :data:`SINGLE_CALL_TIMEOUT`, so a worker that dies holding it costs at most that
much before the attempt is retried on another worker.
"""

from __future__ import annotations

from datetime import timedelta

#: One cloud or kube call that does not heartbeat (a lookup, an Event, a status patch).
SINGLE_CALL_TIMEOUT = timedelta(seconds=15)
