"""CPU seconds of the whole local stack: this process and every process it started.

On a machine with few cores a wall-clock figure of a burst is bounded by the CPU the burst
costs, so the scale benchmarks print the stack's CPU seconds beside their walls: the workflow
path's extra CPU (Temporal server, workers, status writes) is what its wall ratio is made of.

Rules: read from ``/proc`` (Linux); the benchmark process and its descendants, user + system
time, processes that ended meanwhile not counted. A Python process started as ``python -m
MODULE`` is named by its module's last part (``moto_ext``: moto; ``aws_front``: the AWS front;
``cli``: a ``cloudloop`` process), so moto's share of a burst is its own figure.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, str, float] | None:
    """(parent PID, command, user + system seconds) of ``pid``, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    command = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[1]), command, (int(fields[11]) + int(fields[12])) / _TICKS


def _module_name(pid: str, command: str) -> str:
    """``command``, or for ``python -m a.b`` the module's last part (``b``)."""
    if not command.startswith("python"):
        return command
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return command
    for flag, module in itertools.pairwise(args):
        if flag == b"-m" and module:
            return module.decode(errors="replace").rpartition(".")[2]
    return command


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0 when it is gone)."""
    stat = _stat(str(pid))
    return stat[2] if stat else 0.0


def stack_cpu_by_command() -> dict[str, float]:
    """CPU seconds used so far by this process and its descendants, summed per command name."""
    stats = {int(p): stat for p in os.listdir("/proc") if p.isdigit() and (stat := _stat(p))}
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    totals: dict[str, float] = {}
    pending = [os.getpid()]
    while pending:
        current = pending.pop()
        if current in stats:
            _, command, seconds = stats[current]
            command = "bench" if current == os.getpid() else _module_name(str(current), command)
            totals[command] = totals.get(command, 0.0) + seconds
        pending.extend(children.get(current) or ())
    return totals


def cpu_spent(before: dict[str, float], after: dict[str, float]) -> str:
    """``command=seconds`` pairs of what each command used between two readings, largest first."""
    spent = {c: after[c] - before.get(c, 0.0) for c in after}
    return " ".join(f"{c}={s:.2f}" for c, s in sorted(spent.items(), key=lambda i: -i[1]) if s)
