"""CPU seconds of the whole local stack: this process and every process it started.

On a machine with few cores a wall-clock figure of a burst is bounded by the CPU the burst
costs, so the scale benchmarks print the stack's CPU seconds beside their walls: the workflow
path's extra CPU (Temporal server, workers, status writes) is what its wall ratio is made of.

Rules: read from ``/proc`` (Linux); the benchmark process and its descendants, user + system
time, processes that ended meanwhile not counted.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent PID, user + system seconds) of ``pid``, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS


def stack_cpu_seconds() -> float:
    """User + system CPU seconds used so far by this process and all its descendants."""
    stats = {int(p): stat for p in os.listdir("/proc") if p.isdigit() and (stat := _stat(p))}
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, pending = 0.0, [os.getpid()]
    while pending:
        current = pending.pop()
        if current in stats:
            total += stats[current][1]
        pending.extend(children.get(current) or ())
    return total
