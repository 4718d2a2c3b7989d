"""The engine's pure decisions: references, dependency waves, the provider of a document."""

from __future__ import annotations

import pytest

from cloudloop.cloud.registry import PROVIDERS
from cloudloop.layouts.config import DOCUMENTS, KIND_SUFFIX
from cloudloop.layouts.model import ResourceDef, ref
from cloudloop.rules import layout as rules


def r(name: str, **properties: object) -> ResourceDef:
    return ResourceDef(kind="k", name=name, properties=dict(properties))


def test_waves_follow_references_and_depends_on() -> None:
    a, b, c = r("a"), r("b", x=ref("k/a")), r("c", y=[ref("k/b")], z=ref("other/x"))
    d = ResourceDef(kind="k", name="d", depends_on=["k/a"])
    waves = rules.waves([c, b, a, d])
    assert [[x.name for x in w] for w in waves] == [["a"], ["b", "d"], ["c"]]


def test_a_cycle_is_refused() -> None:
    with pytest.raises(ValueError, match="cycle"):
        rules.waves([r("a", x=ref("k/b")), r("b", x=ref("k/a"))])


def test_resolve_replaces_references_and_refuses_unknown_ones() -> None:
    value = {"a": [ref("k/a"), ref("k/a", "ip")], "b": {"c": 1}}
    assert rules.resolve(value, {"k/a": {"id": "i-1", "ip": "10.0.0.1"}}) == {
        "a": ["i-1", "10.0.0.1"],
        "b": {"c": 1},
    }
    with pytest.raises(rules.Unresolved):
        rules.resolve(value, {"k/a": {"id": "i-1"}})
    assert rules.refs_of(value) == {"k/a"}


@pytest.mark.parametrize("kind", sorted(DOCUMENTS))
def test_every_document_names_a_registered_provider(kind: str) -> None:
    assert kind.removesuffix(KIND_SUFFIX).lower() in PROVIDERS
