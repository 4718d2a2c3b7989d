"""``python -m bench`` (``make bench``): start the local stack once, run every benchmark module,
print one ``name=value`` line per figure. Baselines are measured in the same run."""

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


async def main(selected: list[str]) -> None:
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
            for name, bench in BENCHMARKS.items():
                if selected and name not in selected:
                    continue
                for figure, value in (await bench(context)).items():
                    print(f"{figure}={value:.4g}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
