"""Every step a workflow schedules carries a summary, so the Temporal UI says what it does."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.workflows.scheduling import WORKFLOWS, workflow_calls

SCHEDULING = {
    "execute_activity",
    "execute_local_activity",
    "start_activity",
    "execute_child_workflow",
    "start_child_workflow",
}


def calls_without_summary(path: Path) -> list[str]:
    return [
        f"{path.name}:{call.lineno} {ast.unparse(call.func)}"
        for call in workflow_calls(ast.parse(path.read_text()), SCHEDULING)
        if not any(k.arg in ("summary", "static_summary") for k in call.keywords)
    ]


@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.py")), ids=lambda p: p.name)
def test_every_scheduled_step_has_a_summary(path: Path) -> None:
    assert calls_without_summary(path) == []
