"""Benchmarks: ``python -m bench`` prints one ``name=value`` line per figure.

Each benchmark is an async function taking a :class:`bench.context.BenchContext` and returning
its figures; add one to :data:`BENCHMARKS` and it runs in the same stack as the others.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.context import BenchContext
from bench.nodes import node_figures
from bench.probe import probe_overhead

BENCHMARKS: dict[str, Callable[[BenchContext], Awaitable[dict[str, float]]]] = {
    "probe": probe_overhead,
    "nodes": node_figures,
}
