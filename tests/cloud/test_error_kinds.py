"""Error kinds are one enum: each driver error class's kind is a member; workflows compare them."""

from __future__ import annotations

import re
from pathlib import Path

from cloudloop.cloud.errors import KINDS
from cloudloop.messages.errors import ErrorKind

ROOT = Path(__file__).resolve().parents[2]


def test_every_error_class_kind_is_a_member() -> None:
    assert all(isinstance(kind, ErrorKind) and cls.kind is kind for kind, cls in KINDS.items())
    assert set(KINDS) == set(ErrorKind) - {ErrorKind.CONFLICT}


def test_workflows_and_messages_name_no_kind_as_a_string() -> None:
    kinds = "|".join(k.value for k in ErrorKind)
    literal = re.compile(rf"""["']({kinds})["']""")
    files = [
        *sorted((ROOT / "workflows").glob("*.py")),
        *sorted((ROOT / "cloudloop/messages").glob("*.py")),
    ]
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in files
        if path.name != "errors.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert found == []


def test_activities_raise_no_kind_as_a_string() -> None:
    kinds = "|".join(k.value for k in ErrorKind)
    literal = re.compile(rf"""type=["']({kinds})["']""")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "activities").glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert found == []
