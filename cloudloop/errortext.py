"""Error texts that name the file and the field, never a value: validation and YAML errors.

pydantic's ``str(ValidationError)`` prints every offending ``input_value`` and PyYAML's errors
quote the line they stopped at; either can carry a password, a key or a config value into a
workflow history, an Event, a condition or a log. :func:`field_problems` renders a
``ValidationError`` as field path + what is wrong (pydantic's message where its template holds
only the schema's limits, its kind otherwise), :func:`yaml_problem` a YAML error as its line,
column and problem with every quoted part dropped.

Rules:
- Nothing of the input enters a text: a message whose template takes something of the input
  (``{error}``, ``{tag}``, ...) is cut before it; a validator's own message (``value_error``) is
  kept only when no string of the input appears in it — so a validator must not quote its value.
- Field paths are the model's (aliases, list indexes, map keys); a key is a name, not a value.
- This module is a leaf (pydantic, PyYAML and the standard library), so settings, documents,
  drivers and activities all use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

#: Placeholders of pydantic's message templates that carry something of the input.
_INPUT_PLACEHOLDERS = ("{error}", "{tag}", "{encoding_error}", "{tz_actual}", "{class}")
#: Kinds whose message is ours (a validator's): kept only when it quotes nothing of the input.
_OWN_MESSAGES = ("value_error", "assertion_error")
#: Short words for the commonest kinds.
_WORDS = {"extra_forbidden": "unknown field", "missing": "required"}
#: Input strings shorter than this are too common to tell a quoted value from a word.
_MIN_QUOTED = 4
_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|`[^`\n]*`")


class FieldProblem(BaseModel):
    """One refused field: where (``masterNodeGroup.replicas``) and what, without its value."""

    path: str
    message: str
    kind: str = ""

    def __str__(self) -> str:
        return f"{self.path or '<document>'}: {self.message}"


def field_path(loc: Sequence[int | str]) -> str:
    """``("nodeGroups", 0, "name")`` → ``nodeGroups[0].name`` (pydantic's inner steps dropped)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not part.startswith(("function-", "constrained-")):
            out += f".{part}" if out else str(part)
    return out


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """Every string (and number, as text) in ``value``; a map's keys are names, not values."""
    if depth > 20:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield value.decode(errors="replace")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield str(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _strings(item, depth + 1)
    elif value is not None:
        secret = getattr(value, "get_secret_value", None)
        if callable(secret):
            yield from _strings(secret(), depth + 1)


def quotes_input(message: str, value: Any) -> bool:
    """Whether ``message`` holds a string of ``value`` (of at least four characters) or, for a
    shorter one, that string in quotes."""
    for text in _strings(value):
        text = text.strip()
        if not text:
            continue
        if len(text) >= _MIN_QUOTED and text in message:
            return True
        if any(f"{q}{text}{q}" in message for q in ("'", '"', "`")):
            return True
    return False


def _cut(template: str) -> str:
    """The template before its first input placeholder, as a phrase."""
    index = min((template.find(p) for p in _INPUT_PLACEHOLDERS if p in template), default=-1)
    head = template if index < 0 else template[:index]
    return head.rstrip(" ,:;'\"`") or "invalid value"


def _message(error: Mapping[str, Any]) -> str:
    kind = str(error.get("type", ""))
    if kind in _WORDS:
        return _WORDS[kind]
    message = str(error.get("msg", ""))
    if kind in _OWN_MESSAGES:
        own = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        if own and not quotes_input(own, error.get("input")):
            return own
        return "invalid value"
    template = _template(kind)
    if template is None:  # a custom kind: its template may say anything
        return f"invalid ({kind})" if kind else "invalid value"
    if any(p in template for p in _INPUT_PLACEHOLDERS):
        return _cut(template)
    if quotes_input(message, error.get("input")):  # belt and braces
        return _cut(re.sub(r"\{\w+\}", "{error}", template))
    return message


_TEMPLATES: dict[str, str] | None = None


def _template(kind: str) -> str | None:
    global _TEMPLATES
    if _TEMPLATES is None:
        from pydantic_core._pydantic_core import list_all_errors

        _TEMPLATES = {e["type"]: e["message_template_python"] for e in list_all_errors()}
    return _TEMPLATES.get(kind)


def field_problems(exc: ValidationError, *, prefix: str = "") -> list[FieldProblem]:
    """Every error of ``exc`` as field path + message, without the input; ``prefix`` (``spec``)
    goes before each path."""
    problems = []
    for error in exc.errors():
        path = field_path(error["loc"])
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        problems.append(FieldProblem(path=path, message=_message(error), kind=error["type"]))
    return problems


def describe_validation(exc: ValidationError, *, prefix: str = "", whole: str = "") -> str:
    """:func:`field_problems` as one line (``a.b: required; c: unknown field``); ``whole``
    names an error of the object itself (``<document>`` when empty)."""
    return "; ".join(
        f"{p.path or whole or '<document>'}: {p.message}"
        for p in field_problems(exc, prefix=prefix)
    )


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error as ``not YAML (line 3, column 7: found character that cannot start any
    token)``: the position and the problem with every quoted part dropped, never the line."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = str(getattr(exc, "problem", "") or "")
    problem = " ".join(_QUOTED.sub("", problem).split())
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    detail = ": ".join(p for p in (where, problem) if p)
    return f"not YAML ({detail})" if detail else "not YAML"
