"""The benchmark runner: a failing module fails the run, the others still print their figures."""

from __future__ import annotations

import asyncio
import http.client
from typing import cast

import pytest

from bench import BENCHMARKS
from bench.__main__ import Figures, main, run_modules
from bench.context import BenchContext

CONTEXT = cast(BenchContext, None)  # the modules below take none of it


async def fine(context: BenchContext) -> dict[str, float]:
    return {"fine_figure": 1.0}


async def crashing(context: BenchContext) -> dict[str, float]:
    raise http.client.RemoteDisconnected("Remote end closed connection without response")


def test_a_failing_module_is_reported_counted_and_the_others_still_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = Figures()
    modules = {"before": fine, "scale": crashing, "after": fine}
    failed = asyncio.run(run_modules(modules, [], CONTEXT, out))
    assert failed == ["scale"]
    printed = capsys.readouterr()
    assert "bench scale failed: RemoteDisconnected" in printed.err
    assert printed.out.count("fine_figure=1") == 2  # before and after the crash
    assert "bench_modules_failed=1" in out.lines


def test_only_the_selected_modules_run() -> None:
    out = Figures()
    failed = asyncio.run(run_modules({"a": fine, "b": crashing}, ["a"], CONTEXT, out))
    assert failed == [] and "bench_modules_failed=0" in out.lines


def test_an_unknown_module_is_refused_before_the_stack_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert asyncio.run(main(["no-such-module"])) == 2
    err = capsys.readouterr().err
    assert "no module no-such-module" in err and next(iter(BENCHMARKS)) in err
