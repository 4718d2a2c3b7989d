"""Go ``text/template`` with sprig functions, the subset Deckhouse's machine-template sandbox uses.

A provider's ``template.yaml`` (the node manager's "v2" contract) is a Go template. Deckhouse's
node-controller renders it in Go; ``cloudloop nodegroup render`` renders the same file here, so
one file is the only source of a provider's machine template.

Rules:
- Semantics are Go's where a template can see them: ``{{-``/``-}}`` trimming, ``if``/``else
  if``/``with``/``range``/variables, pipelines (the piped value is the last argument), Go
  truthiness, ``missingkey=error`` (an absent key is an error, never an empty value), values
  printed as ``fmt`` prints them (``4`` for a whole float, ``<nil>``).
- The function set is the sandbox's: sprig without clock, randomness, crypto, environment, and no
  ``include``/``tpl``/``lookup``; an unknown function is a parse error, so it never renders.
- Pure (no I/O); errors are :class:`TemplateError` naming the action.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml


class TemplateError(Exception):
    """The template does not parse, or rendering it failed (a missing key, ``fail``...)."""


class _Missing:
    """Go's ``<no value>`` (never printed: ``missingkey=error`` stops first)."""


# -- values as Go sees them -------------------------------------------------------------------
def truthy(value: Any) -> bool:
    """Go's ``if``: false, 0, nil and empty strings, lists and maps are false."""
    if value is None or isinstance(value, _Missing):
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str | list | tuple | dict):
        return len(value) > 0
    return True


def go_format(value: Any) -> str:
    """``fmt.Sprint`` of a JSON value."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + " ".join(go_format(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_format(value[k])}" for k in sorted(value)) + "]"
    return str(value)


def _go_quote(text: str) -> str:
    """Go's ``%q`` for the strings a template quotes (JSON escaping is a close match)."""
    return json.dumps(text, ensure_ascii=False)


def _to_int(value: Any) -> int:
    """sprig ``int``: numbers truncate, strings parse (``0`` when they do not)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value)) if "." in value else int(value, 0)
        except ValueError:
            return 0
    return 0


def _to_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _fail(message: Any) -> Any:
    raise TemplateError(str(message))


def _required(message: Any, value: Any) -> Any:
    if value is None or (isinstance(value, str) and value == ""):
        raise TemplateError(str(message))
    return value


def _default(default: Any, *given: Any) -> Any:
    return given[0] if given and truthy(given[0]) else default


def _get(mapping: Any, key: Any) -> Any:
    return mapping.get(key, "") if isinstance(mapping, dict) else ""


def _has_key(mapping: Any, key: Any) -> bool:
    return isinstance(mapping, dict) and key in mapping


def _dict(*pairs: Any) -> dict[str, Any]:
    return {
        str(pairs[i]): pairs[i + 1] if i + 1 < len(pairs) else "" for i in range(0, len(pairs), 2)
    }


def _go_div(a: int, b: int) -> int:
    """Go's integer ``/``: truncated toward zero (division by zero fails the render)."""
    if b == 0:
        raise TemplateError("integer divide by zero")
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _trunc(length: Any, text: Any) -> str:
    n, s = _to_int(length), go_format(text)
    return s[:n] if n >= 0 else s[n:]


def _index(container: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(container, dict):
            container = container.get(key)
        elif isinstance(container, list | tuple) and isinstance(key, int):
            if not 0 <= key < len(container):
                raise TemplateError(f"index out of range: {key}")
            container = container[key]
        else:
            raise TemplateError(f"cannot index {go_format(container)} with {go_format(key)}")
    return container


def _compare(op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def compare(a: Any, b: Any) -> bool:
        if isinstance(a, int | float) and isinstance(b, int | float):
            return op(float(a), float(b))
        return op(a, b)

    return compare


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=True).rstrip("\n")


def _printf(fmt: Any, *args: Any) -> str:
    """``printf`` for the verbs templates use: ``%s``, ``%v``, ``%d``, ``%q``, ``%%``."""
    values = iter(args)

    def verb(match: re.Match[str]) -> str:
        v = match.group(1)
        if v == "%":
            return "%"
        value = next(values, None)
        if v == "d":
            return str(_to_int(value))
        if v == "q":
            return _go_quote(go_format(value))
        return go_format(value)

    return re.sub(r"%([svdq%])", verb, str(fmt))


#: The sandbox's functions (sprig's deterministic, secret-free part plus Go's builtins).
FUNCTIONS: dict[str, Callable[..., Any]] = {
    # Go builtins
    "and": lambda *a: next((v for v in a if not truthy(v)), a[-1] if a else None),
    "or": lambda *a: next((v for v in a if truthy(v)), a[-1] if a else None),
    "not": lambda v: not truthy(v),
    "len": lambda v: len(v),
    "index": _index,
    "print": lambda *a: "".join(go_format(v) for v in a),
    "println": lambda *a: " ".join(go_format(v) for v in a) + "\n",
    "printf": _printf,
    "eq": lambda a, *b: any(_compare(lambda x, y: x == y)(a, v) for v in b),
    "ne": _compare(lambda a, b: a != b),
    "lt": _compare(lambda a, b: a < b),
    "le": _compare(lambda a, b: a <= b),
    "gt": _compare(lambda a, b: a > b),
    "ge": _compare(lambda a, b: a >= b),
    # sprig: conversion and defaults
    "quote": lambda *a: " ".join(_go_quote(go_format(v)) for v in a if v is not None),
    "squote": lambda *a: " ".join(f"'{go_format(v)}'" for v in a if v is not None),
    "int": _to_int,
    "int64": _to_int,
    "float64": _to_float,
    "toString": go_format,
    "default": _default,
    "empty": lambda v: not truthy(v),
    "coalesce": lambda *a: next((v for v in a if truthy(v)), None),
    "ternary": lambda yes, no, cond: yes if truthy(cond) else no,
    "required": _required,
    "fail": _fail,
    "kindIs": lambda kind, v: _kind(v) == kind,
    "kindOf": lambda v: _kind(v),
    # sprig: dicts and lists
    "get": _get,
    "hasKey": _has_key,
    "dict": _dict,
    "list": lambda *a: list(a),
    "keys": lambda *ds: sorted(k for d in ds for k in d),
    "has": lambda item, items: item in (items or []),
    "join": lambda sep, items: str(sep).join(go_format(v) for v in items or []),
    "append": lambda items, item: [*(items or []), item],
    "concat": lambda *lists: [v for items in lists for v in items or []],
    "uniq": lambda items: list(dict.fromkeys(items or [])),
    "first": lambda items: items[0] if items else None,
    "last": lambda items: items[-1] if items else None,
    # sprig: strings
    "lower": lambda s: go_format(s).lower(),
    "upper": lambda s: go_format(s).upper(),
    "trim": lambda s: go_format(s).strip(),
    "trimAll": lambda chars, s: go_format(s).strip(str(chars)),
    "trimSuffix": lambda suffix, s: go_format(s).removesuffix(str(suffix)),
    "trimPrefix": lambda prefix, s: go_format(s).removeprefix(str(prefix)),
    "replace": lambda old, new, s: go_format(s).replace(str(old), str(new)),
    "contains": lambda sub, s: str(sub) in go_format(s),
    "hasPrefix": lambda prefix, s: go_format(s).startswith(str(prefix)),
    "hasSuffix": lambda suffix, s: go_format(s).endswith(str(suffix)),
    "trunc": _trunc,
    "regexReplaceAll": lambda rx, s, repl: re.sub(str(rx), str(repl), go_format(s)),
    "regexMatch": lambda rx, s: re.search(str(rx), go_format(s)) is not None,
    "split": lambda sep, s: {f"_{i}": p for i, p in enumerate(go_format(s).split(str(sep)))},
    "splitList": lambda sep, s: go_format(s).split(str(sep)),
    "nindent": lambda n, s: "\n" + _indent(_to_int(n), s),
    "indent": lambda n, s: _indent(_to_int(n), s),
    # sprig: integer math (int64 as sprig's; ``div`` truncates as Go's ``/``)
    "add": lambda *a: sum(_to_int(v) for v in a),
    "sub": lambda a, b: _to_int(a) - _to_int(b),
    "mul": lambda *a: math.prod(_to_int(v) for v in a),
    "div": lambda a, b: _go_div(_to_int(a), _to_int(b)),
    "mod": lambda a, b: _to_int(a) - _go_div(_to_int(a), _to_int(b)) * _to_int(b),
    "max": lambda *a: max(_to_int(v) for v in a),
    "min": lambda *a: min(_to_int(v) for v in a),
    # sprig: encodings and digests (deterministic)
    "b64enc": lambda s: base64.b64encode(go_format(s).encode()).decode(),
    "b64dec": lambda s: base64.b64decode(go_format(s)).decode(),
    "sha256sum": lambda s: hashlib.sha256(go_format(s).encode()).hexdigest(),
    "toJson": lambda v: json.dumps(v, separators=(",", ":"), sort_keys=True),
    "fromJson": lambda s: json.loads(str(s)),
    "toYaml": _to_yaml,
    "fromYaml": lambda s: yaml.safe_load(str(s)) or {},
}


def _indent(n: int, text: Any) -> str:
    pad = " " * n
    return "\n".join(pad + line for line in go_format(text).split("\n"))


def _kind(value: Any) -> str:
    if value is None:
        return "invalid"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "slice"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


# -- lexing -----------------------------------------------------------------------------------
_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<raw>`[^`]*`)
  | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
  | (?P<declare>:=)
  | (?P<assign>=)
  | (?P<punct>[()|,])
  | (?P<variable>\$[A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)
  | (?P<field>(?:\.[A-Za-z0-9_]+)+|\.)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    spaced: bool  # whitespace came right before it


def _tokens(action: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos, spaced = 0, True
    while pos < len(action):
        match = _TOKEN.match(action, pos)
        if match is None:
            raise TemplateError(f"unexpected {action[pos : pos + 10]!r} in {{{{{action}}}}}")
        kind = match.lastgroup or ""
        if kind == "ws":
            spaced = True
        else:
            tokens.append(_Token(kind, match.group(), spaced))
            spaced = False
        pos = match.end()
    return tokens


# -- the tree ---------------------------------------------------------------------------------
@dataclass
class _Term:
    kind: str  # literal | field | variable | call | pipeline
    value: Any = None
    path: tuple[str, ...] = ()
    args: list[_Term] = field(default_factory=list)
    pipeline: _Pipeline | None = None


@dataclass
class _Command:
    terms: list[_Term]


@dataclass
class _Pipeline:
    commands: list[_Command]
    declare: list[str] = field(default_factory=list)
    assign: bool = False  # ``$x = ...`` (not ``:=``)


@dataclass
class _Node:
    kind: str  # text | action | if | range | with
    text: str = ""
    pipeline: _Pipeline | None = None
    body: list[_Node] = field(default_factory=list)
    orelse: list[_Node] = field(default_factory=list)


class _Parser:
    def __init__(self, tokens: list[_Token], action: str) -> None:
        self.tokens, self.pos, self.action = tokens, 0, action

    def error(self, message: str) -> TemplateError:
        return TemplateError(f"{message} in {{{{{self.action}}}}}")

    def peek(self) -> _Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> _Token:
        token = self.peek()
        if token is None:
            raise self.error("unexpected end")
        self.pos += 1
        return token

    def pipeline(self, *, stop: str | None = None) -> _Pipeline:
        declare: list[str] = []
        assign = False
        # ``$x :=``, ``$k, $v :=`` or ``$x =``
        save = self.pos
        names: list[str] = []
        while (token := self.peek()) is not None and token.kind == "variable":
            names.append(self.take().text)
            nxt = self.peek()
            if nxt is not None and nxt.text == ",":
                self.take()
                continue
            break
        nxt = self.peek()
        if names and nxt is not None and nxt.kind in ("declare", "assign"):
            self.take()
            declare, assign = names, nxt.kind == "assign"
        else:
            self.pos = save
        commands = [self.command(stop)]
        while (token := self.peek()) is not None and token.text == "|":
            self.take()
            commands.append(self.command(stop))
        return _Pipeline(commands, declare, assign)

    def command(self, stop: str | None) -> _Command:
        terms: list[_Term] = []
        while (token := self.peek()) is not None and token.text not in ("|", ")", stop):
            terms.append(self.term())
        if not terms:
            raise self.error("missing value for command")
        return _Command(terms)

    def term(self) -> _Term:
        token = self.take()
        term: _Term
        if token.kind == "string":
            term = _Term("literal", json.loads(token.text))
        elif token.kind == "raw":
            term = _Term("literal", token.text[1:-1])
        elif token.kind == "number":
            number = float(token.text)
            term = _Term("literal", int(number) if re.fullmatch(r"-?\d+", token.text) else number)
        elif token.kind == "field":
            term = _Term("field", path=tuple(p for p in token.text.split(".") if p))
        elif token.kind == "variable":
            name, *path = token.text.split(".")
            term = _Term("variable", name, tuple(path))
        elif token.kind == "ident":
            if token.text in ("true", "false"):
                term = _Term("literal", token.text == "true")
            elif token.text == "nil":
                term = _Term("literal", None)
            elif token.text not in FUNCTIONS:
                raise self.error(f'function "{token.text}" not defined')
            else:
                term = _Term("call", token.text)
        elif token.text == "(":
            inner = self.pipeline(stop=")")
            if self.take().text != ")":
                raise self.error("unclosed (")
            term = _Term("pipeline", pipeline=inner)
        else:
            raise self.error(f"unexpected {token.text!r}")
        nxt = self.peek()
        if nxt is not None and nxt.kind == "field" and not nxt.spaced and term.kind == "pipeline":
            self.take()
            term.path = tuple(p for p in nxt.text.split(".") if p)
        return term


_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.DOTALL)
_KEYWORD = re.compile(r"^(if|else|end|range|with|define|template|block)\b\s*(.*)$", re.DOTALL)


def _scan(text: str) -> Iterator[tuple[str, str]]:
    """("text", chunk) and ("action", body) in order, with ``{{-``/``-}}`` trimming applied."""
    pos = 0
    pending_trim = False
    for match in _ACTION.finditer(text):
        chunk = text[pos : match.start()]
        if pending_trim:
            chunk = chunk.lstrip(" \t\r\n")
        if match.group(1):
            chunk = chunk.rstrip(" \t\r\n")
        if chunk:
            yield "text", chunk
        yield "action", match.group(2).strip()
        pending_trim = bool(match.group(3))
        pos = match.end()
    chunk = text[pos:]
    if pending_trim:
        chunk = chunk.lstrip(" \t\r\n")
    if chunk:
        yield "text", chunk


def parse(text: str) -> list[_Node]:
    """The template's tree; :class:`TemplateError` when it does not parse."""
    root: list[_Node] = []
    stack: list[tuple[_Node | None, list[_Node]]] = [(None, root)]
    # each open block: (node, the list its children go to); ``else if`` opens a nested ``if``
    chains: list[int] = []  # how many implicit ``if`` nodes each open block closes with it
    for kind, body in _scan(text):
        target = stack[-1][1]
        if kind == "text":
            target.append(_Node("text", text=body))
            continue
        if body.startswith("/*"):
            continue
        keyword = _KEYWORD.match(body)
        if keyword is None:
            target.append(_Node("action", pipeline=_pipeline(body)))
            continue
        word, rest = keyword.groups()
        if word in ("if", "range", "with"):
            node = _Node(word, pipeline=_pipeline(rest))
            target.append(node)
            stack.append((node, node.body))
            chains.append(0)
        elif word == "else":
            if len(stack) == 1:
                raise TemplateError("{{else}} outside a block")
            block = stack[-1][0]
            assert block is not None
            stack[-1] = (block, block.orelse)
            nested = _KEYWORD.match(rest) if rest else None
            if nested is not None and nested.group(1) in ("if", "with"):
                inner = _Node(nested.group(1), pipeline=_pipeline(nested.group(2)))
                block.orelse.append(inner)
                stack.append((inner, inner.body))
                chains[-1] += 1
            elif rest:
                raise TemplateError(f"unexpected {{{{else {rest}}}}}")
        elif word == "end":
            if len(stack) == 1:
                raise TemplateError("unexpected {{end}}")
            for _ in range(chains.pop() + 1):
                stack.pop()
        else:
            raise TemplateError(f"{{{{{word}}}}} is not allowed in the sandbox")
    if len(stack) != 1:
        raise TemplateError(f"unclosed {{{{{stack[-1][0].kind if stack[-1][0] else '?'}}}}}")
    return root


def _pipeline(action: str) -> _Pipeline:
    parser = _Parser(_tokens(action), action)
    pipeline = parser.pipeline()
    if parser.peek() is not None:
        raise parser.error(f"unexpected {parser.peek().text!r}")  # type: ignore[union-attr]
    return pipeline


# -- execution --------------------------------------------------------------------------------
class _State:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.scopes: list[dict[str, Any]] = [{"$": root}]

    def lookup(self, name: str) -> Any:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise TemplateError(f"undefined variable {name}")

    def set(self, name: str, value: Any, *, declare: bool) -> None:
        if declare:
            self.scopes[-1][name] = value
            return
        for scope in reversed(self.scopes):
            if name in scope:
                scope[name] = value
                return
        raise TemplateError(f"undefined variable {name}")


def _walk(value: Any, path: tuple[str, ...], where: str) -> Any:
    for i, key in enumerate(path):
        if isinstance(value, dict):
            if key not in value:
                shown = ".".join(path[: i + 1])
                raise TemplateError(f"map has no entry for key {key!r} (at {where}.{shown})")
            value = value[key]
        else:
            shown = ".".join(path[: i + 1])
            raise TemplateError(f"nil pointer evaluating {where}.{shown}")
    return value


def _eval_term(term: _Term, dot: Any, state: _State, args: list[Any] | None = None) -> Any:
    if term.kind == "literal":
        return term.value
    if term.kind == "field":
        return _walk(dot, term.path, "")
    if term.kind == "variable":
        return _walk(state.lookup(str(term.value)), term.path, str(term.value))
    if term.kind == "pipeline":
        assert term.pipeline is not None
        return _walk(_eval_pipeline(term.pipeline, dot, state), term.path, "(...)")
    function = FUNCTIONS[str(term.value)]
    try:
        return function(*(args or []))
    except TemplateError:
        raise
    except Exception as exc:
        raise TemplateError(f"error calling {term.value}: {exc}") from None


def _eval_command(command: _Command, dot: Any, state: _State, piped: list[Any]) -> Any:
    head, *rest = command.terms
    if head.kind == "call":
        args = [_eval_term(t, dot, state, []) for t in rest] + piped
        return _eval_term(head, dot, state, args)
    if rest or piped:
        raise TemplateError("can't give argument to non-function")
    return _eval_term(head, dot, state)


def _eval_pipeline(pipeline: _Pipeline, dot: Any, state: _State) -> Any:
    value: Any = None
    for index, command in enumerate(pipeline.commands):
        value = _eval_command(command, dot, state, [value] if index else [])
    for name in pipeline.declare[-1:]:
        state.set(name, value, declare=not pipeline.assign)
    return value


def _execute(nodes: list[_Node], dot: Any, state: _State, out: list[str]) -> None:
    for node in nodes:
        if node.kind == "text":
            out.append(node.text)
            continue
        assert node.pipeline is not None
        if node.kind == "action":
            value = _eval_pipeline(node.pipeline, dot, state)
            if not node.pipeline.declare:
                out.append(go_format(value))
            continue
        state.scopes.append({})
        try:
            if node.kind == "range":
                _range(node, dot, state, out)
                continue
            value = _eval_pipeline(node.pipeline, dot, state)
            branch = node.body if truthy(value) else node.orelse
            _execute(branch, value if node.kind == "with" and truthy(value) else dot, state, out)
        finally:
            state.scopes.pop()


def _range(node: _Node, dot: Any, state: _State, out: list[str]) -> None:
    assert node.pipeline is not None
    names = node.pipeline.declare
    bare = _Pipeline(node.pipeline.commands)
    items = _eval_pipeline(bare, dot, state)
    if isinstance(items, dict):
        pairs: list[tuple[Any, Any]] = [(k, items[k]) for k in sorted(items)]
    elif isinstance(items, list | tuple):
        pairs = list(enumerate(items))
    elif isinstance(items, int) and not isinstance(items, bool):
        pairs = [(i, i) for i in range(items)]
    elif items is None:
        pairs = []
    else:
        raise TemplateError(f"range can't iterate over {go_format(items)}")
    if not pairs:
        _execute(node.orelse, dot, state, out)
        return
    for key, value in pairs:
        if len(names) == 1:
            state.scopes[-1][names[0]] = value
        elif len(names) == 2:
            state.scopes[-1][names[0]], state.scopes[-1][names[1]] = key, value
        _execute(node.body, value, state, out)


@dataclass(frozen=True)
class Template:
    """A parsed template; :meth:`render` may run many times with different data."""

    source: str
    tree: list[_Node]

    @classmethod
    def parse(cls, source: str) -> Template:
        return cls(source, parse(source))

    def render(self, data: Any) -> str:
        out: list[str] = []
        _execute(self.tree, data, _State(data), out)
        return "".join(out)
