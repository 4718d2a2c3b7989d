"""``python -m bench`` (``make bench``): start the local stack once, run every benchmark module,
print one ``name=value`` line per figure. Baselines are measured in the same run.

A module that fails is reported on stderr (and in the exit status); the others still run."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from bench import BENCHMARKS
from bench.context import BenchContext
from devstack.kube import ALL_COMPONENTS, KubeOptions
from devstack.local import LocalStack, StackOptions


async def main(selected: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="cloudloop-bench-") as state:
        started = time.monotonic()
        stack = LocalStack(
            StackOptions(
                state_dir=Path(state),
                kube=(KubeOptions(components=ALL_COMPONENTS),),
                autoscaling_ext=True,  # lifecycle actions for the termination benchmarks
            )
        )
        with stack:
            print(f"stack_start_s={time.monotonic() - started:.2f}", flush=True)
            context = await BenchContext.create(stack)
            failed: list[str] = []
            for name, bench in BENCHMARKS.items():
                if selected and name not in selected:
                    continue
                try:
                    figures = await bench(context)
                except Exception as error:  # one module's failure is reported, the others run
                    print(f"bench {name} failed: {type(error).__name__}: {error}", file=sys.stderr)
                    failed.append(name)
                    continue
                for figure, value in figures.items():
                    print(f"{figure}={value:.4g}", flush=True)
            return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
