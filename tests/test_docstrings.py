"""Every product module has a docstring, and a short one (README: contributing rules).

A module's docstring is its summary and its "Rules:"; investigations go to ``docs/decisions/``,
measured figures to ``bench/README.md``. Reads the sources only: no import, no stack.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("cloudloop", "workflows", "activities", "starters", "workers")
#: Lines of a module docstring, its summary and Rules together.
MAX_LINES = 20

MODULES = sorted(path for package in PRODUCT for path in (ROOT / package).rglob("*.py"))


def _docstring(path: Path) -> str | None:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), str(path)))


def test_the_product_modules_are_found() -> None:
    assert len(MODULES) > 100


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(ROOT)))
def test_a_module_docstring_is_a_summary_and_its_rules(path: Path) -> None:
    doc = _docstring(path)
    assert doc, "no module docstring"
    lines = len(doc.splitlines())
    assert lines <= MAX_LINES, (
        f"{lines} lines: keep the summary and Rules; investigations go to docs/decisions/, "
        "figures to bench/README.md"
    )
