"""The dead-worker rule over every workflow, read from the source (no server, milliseconds).

Rule (:mod:`workflows.timeouts`, issue 30): every activity a workflow schedules on the task queue
either heartbeats with a heartbeat timeout of at most :data:`DEAD_WORKER_BOUND`, or is one short
call whose ``start_to_close_timeout`` is at most that bound — so a worker SIGKILLed while it holds
the activity costs at most 15 s before another worker retries it. Local activities run inside
the workflow task of the worker that holds them (a dead worker's task times out and moves with
them), so they are not checked.

Each ``workflow.execute_activity``/``start_activity`` call in ``workflows/`` is parsed; a timeout
is a ``timedelta(...)`` of literals, a module constant (or one imported from
:mod:`workflows.timeouts`), a ``min(...)`` of those, or a field of the workflow's input model
(``timings.heartbeat_timeout_s``, ``options.activity_heartbeat_timeout_s``: its default is
checked, and the settings a starter fills it from). A call this test cannot read fails it: the
rule must stay checkable.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from cloudloop.messages.layout import LayoutTimings
from cloudloop.messages.machine import MachineTimings
from cloudloop.messages.termination import DrainOptions
from cloudloop.settings import NthSettings
from tests.workflows.scheduling import WORKFLOWS, workflow_calls
from workflows.timeouts import SINGLE_CALL_TIMEOUT

DEAD_WORKER_BOUND = timedelta(seconds=15)
SCHEDULING = {"execute_activity", "start_activity"}
#: ``<name>.<field>`` timeouts read from a workflow's input: the defaults that bound them.
INPUT_FIELDS: dict[str, list[float]] = {
    "heartbeat_timeout_s": [
        MachineTimings().heartbeat_timeout_s,
        LayoutTimings().heartbeat_timeout_s,
    ],
    "activity_heartbeat_timeout_s": [
        DrainOptions().activity_heartbeat_timeout_s,
        NthSettings().activity_heartbeat_timeout_s,
    ],
}
#: Fields that are never a dead-worker bound (a whole operation's deadline).
UNBOUNDED_FIELDS = {"step_timeout_s", "observe_window_s", "drain_round_s", "timeout_s"}


class Unreadable(Exception):
    """A timeout expression this test cannot evaluate."""


class _Module:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.tree = ast.parse(path.read_text(), filename=str(path))
        self.constants: dict[str, ast.expr] = {}
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    self.constants[target.id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.value is not None:
                    self.constants[node.target.id] = node.value
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions[node.name] = node

    def seconds(self, expr: ast.expr) -> float | None:
        """The timeout's bound in seconds; ``None`` for an unbounded one (a deadline that is
        not meant to find a dead worker)."""
        if isinstance(expr, ast.Name):
            if expr.id == "SINGLE_CALL_TIMEOUT":
                return SINGLE_CALL_TIMEOUT.total_seconds()
            if expr.id in self.constants:
                return self.seconds(self.constants[expr.id])
            raise Unreadable(expr.id)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
            if expr.func.id == "timedelta":
                return self._timedelta(expr)
            if expr.func.id == "min":
                bounds = [self.seconds(arg) for arg in expr.args]
                known = [b for b in bounds if b is not None]
                return min(known) if known else None
        if isinstance(expr, ast.Attribute) and expr.attr in INPUT_FIELDS:
            return max(INPUT_FIELDS[expr.attr])
        raise Unreadable(ast.unparse(expr))

    def _timedelta(self, call: ast.Call) -> float | None:
        units = {"seconds": 1.0, "minutes": 60.0, "hours": 3600.0}
        total = 0.0
        for keyword in call.keywords:
            if keyword.arg not in units:
                raise Unreadable(ast.unparse(call))
            value = keyword.value
            if isinstance(value, ast.Constant) and isinstance(value.value, int | float):
                total += float(value.value) * units[keyword.arg]
            elif isinstance(value, ast.Attribute) and value.attr in INPUT_FIELDS:
                total += max(INPUT_FIELDS[value.attr]) * units[keyword.arg]
            elif any(
                isinstance(n, ast.Attribute) and n.attr in UNBOUNDED_FIELDS for n in ast.walk(value)
            ):
                return None
            else:
                raise Unreadable(ast.unparse(call))
        return total

    def options(self, call: ast.Call) -> dict[str, ast.expr]:
        """The call's keyword arguments, ``**helper(...)`` expanded from the helper's returned
        dict literal."""
        found: dict[str, ast.expr] = {}
        for keyword in call.keywords:
            if keyword.arg is not None:
                found[keyword.arg] = keyword.value
                continue
            spread = keyword.value
            if not (
                isinstance(spread, ast.Call)
                and isinstance(spread.func, ast.Name)
                and spread.func.id in self.functions
            ):
                raise Unreadable(ast.unparse(spread))
            returned = [
                n.value
                for n in ast.walk(self.functions[spread.func.id])
                if isinstance(n, ast.Return) and isinstance(n.value, ast.Dict)
            ]
            if len(returned) != 1:
                raise Unreadable(ast.unparse(spread))
            for key, value in zip(returned[0].keys, returned[0].values, strict=True):
                if not isinstance(key, ast.Constant) or not isinstance(key.value, str):
                    raise Unreadable(ast.unparse(spread))
                found[key.value] = value
        return found


def _activity_calls() -> Iterator[tuple[str, _Module, ast.Call]]:
    for path in sorted(WORKFLOWS.glob("*.py")):
        module = _Module(path)
        for node in workflow_calls(module.tree, SCHEDULING):
            yield f"{path.name}:{node.lineno}", module, node


CALLS = list(_activity_calls())


def test_every_workflow_module_was_read() -> None:
    assert len(CALLS) >= 25, [where for where, _, _ in CALLS]
    assert {where.split(":")[0] for where, _, _ in CALLS} >= {
        "layout.py",
        "loadbalancer.py",
        "machine.py",
        "probe.py",
        "termination.py",
        "volume.py",
    }


@pytest.mark.parametrize(("where", "module", "call"), CALLS, ids=[c[0] for c in CALLS])
def test_a_dead_worker_costs_at_most_15_s(where: str, module: _Module, call: ast.Call) -> None:
    options = module.options(call)
    bound = DEAD_WORKER_BOUND.total_seconds()
    if "heartbeat_timeout" in options:
        heartbeat = module.seconds(options["heartbeat_timeout"])
        assert heartbeat is not None and heartbeat <= bound, (
            f"{where}: heartbeat timeout {heartbeat}s > {bound}s"
        )
        return
    assert "start_to_close_timeout" in options, f"{where}: no start-to-close timeout"
    start_to_close = module.seconds(options["start_to_close_timeout"])
    assert start_to_close is not None and start_to_close <= bound, (
        f"{where}: no heartbeat and start-to-close {start_to_close}s > {bound}s "
        "(a dead worker holds it that long)"
    )
