"""Every step a workflow schedules carries a summary, so the Temporal UI says what it does."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
SCHEDULING = {
    "execute_activity",
    "execute_local_activity",
    "start_activity",
    "execute_child_workflow",
    "start_child_workflow",
}


def calls_without_summary(path: Path) -> list[str]:
    missing = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in SCHEDULING
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "workflow"
            and not any(k.arg in ("summary", "static_summary") for k in node.keywords)
        ):
            missing.append(f"{path.name}:{node.lineno} workflow.{node.func.attr}")
    return missing


@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.py")), ids=lambda p: p.name)
def test_every_scheduled_step_has_a_summary(path: Path) -> None:
    assert calls_without_summary(path) == []
