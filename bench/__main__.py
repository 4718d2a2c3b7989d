"""``python -m bench [MODULE ...]`` (``make bench [MODULES="a b"]``): start the local stack once,
run every benchmark module (or the ones named), print one ``name=value`` line per figure.
Baselines are measured in the same run.

Beside each module's figures: the machine's 1-minute load average when it started and ended
(``load_1m_start_<module>``, ``load_1m_end_<module>``), so runs can be compared, and its wall time
(``bench_module_wall_s_<module>``); the whole run's, stack start included, is ``bench_wall_s``.
Every run also writes its figures, with the git revision, to
``.cloudloop/bench/<UTC time>-<revision>.txt`` (named on stderr), so a before/after is two runs
and a diff.

Rules:
- A module that fails is reported on stderr, counted in ``bench_modules_failed`` and makes the
  exit status 1; the others still run.
- A module name that does not exist is refused (exit 2) before the stack starts."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench import BENCHMARKS, Benchmark
from bench.context import BenchContext
from devstack.kube import ALL_COMPONENTS, KubeOptions
from devstack.local import LocalStack, StackOptions

#: The stack's NodePort range. The modules share one API server and leave their Services behind
#: (lbscale 1,000 with two ports, lbworkers 1,200, the load-balancer rounds ~440): more than the
#: default 30000-32767 holds, so a whole run's last modules met "range is full". No kube-proxy
#: runs, so nothing binds these ports.
NODE_PORTS = "30000-44999"
RESULTS_DIR = Path(__file__).resolve().parents[1] / ".cloudloop" / "bench"


def revision() -> str:
    """The checkout's short revision (``+dirty`` with uncommitted changes), or ``unknown``."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{rev or 'unknown'}{'+dirty' if dirty else ''}"


class Figures:
    """Prints each figure and keeps it for the run's results file."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def emit(self, name: str, value: float) -> None:
        line = f"{name}={value:.4g}"
        self.lines.append(line)
        print(line, flush=True)

    def write(self, started: datetime) -> Path:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = RESULTS_DIR / f"{started:%Y%m%dT%H%M%SZ}-{revision()}.txt"
        path.write_text("\n".join(self.lines) + "\n")
        return path


async def main(selected: list[str]) -> int:
    unknown = unknown_modules(selected, BENCHMARKS)
    if unknown:  # refused before the stack starts: a typo would otherwise run nothing, exit 0
        print(
            f"bench: no module {', '.join(unknown)}; modules: {' '.join(BENCHMARKS)}",
            file=sys.stderr,
        )
        return 2
    figures_out = Figures()
    run_started = datetime.now(UTC)
    try:
        return await _run(selected, figures_out)
    finally:
        if figures_out.lines:
            print(f"figures written to {figures_out.write(run_started)}", file=sys.stderr)


async def _run(selected: list[str], out: Figures) -> int:
    with tempfile.TemporaryDirectory(prefix="cloudloop-bench-") as state:
        started = time.monotonic()
        stack = LocalStack(
            StackOptions(
                state_dir=Path(state),
                kube=(
                    KubeOptions(
                        components=ALL_COMPONENTS,
                        extra_apiserver_args=(f"--service-node-port-range={NODE_PORTS}",),
                    ),
                ),
                autoscaling_ext=True,  # lifecycle actions for the termination benchmarks
            )
        )
        with stack:
            out.emit("stack_start_s", time.monotonic() - started)
            context = await BenchContext.create(stack)
            failed = await run_modules(BENCHMARKS, selected, context, out)
            out.emit("bench_wall_s", time.monotonic() - started)
            return 1 if failed else 0


async def run_modules(
    benchmarks: Mapping[str, Benchmark],
    selected: Sequence[str],
    context: BenchContext,
    out: Figures,
) -> list[str]:
    """Run the ``selected`` modules (all when empty), printing their figures; the names of those
    that failed (each reported on stderr, the others still run; ``bench_modules_failed`` counts
    them)."""
    failed: list[str] = []
    for name, bench in benchmarks.items():
        if selected and name not in selected:
            continue
        out.emit(f"load_1m_start_{name}", os.getloadavg()[0])
        module_started = time.monotonic()
        try:
            figures = await bench(context)
        except Exception as error:  # one module's failure is reported, the others run
            print(f"bench {name} failed: {type(error).__name__}: {error}", file=sys.stderr)
            failed.append(name)
            continue
        finally:
            out.emit(f"load_1m_end_{name}", os.getloadavg()[0])
            out.emit(f"bench_module_wall_s_{name}", time.monotonic() - module_started)
        for figure, value in figures.items():
            out.emit(figure, value)
    out.emit("bench_modules_failed", len(failed))
    if failed:
        print(f"bench: {len(failed)} module(s) failed: {', '.join(failed)}", file=sys.stderr)
    return failed


def unknown_modules(selected: Sequence[str], benchmarks: Mapping[str, Benchmark]) -> list[str]:
    """The names in ``selected`` that are no benchmark module."""
    return [name for name in selected if name not in benchmarks]


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
