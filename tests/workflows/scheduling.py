"""The calls a workflow module makes to schedule work, read from its source.

Rules:
- A call is ``workflow.<name>(...)`` with ``<name>`` one of the given names; the source is parsed,
  never imported, so a check over it needs no worker.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"


def workflow_calls(tree: ast.AST, names: set[str]) -> Iterator[ast.Call]:
    """Every ``workflow.<name>(...)`` call in ``tree`` with ``<name>`` in ``names``."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in names
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "workflow"
        ):
            yield node
