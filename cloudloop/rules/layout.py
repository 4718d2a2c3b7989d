"""Layout engine decisions, pure: references, dependency order, plan summaries.

- :func:`resolve` replaces every ``{"$ref": key, "output": o}`` in a value by that output;
  an output not known yet raises :class:`Unresolved` (a plan then says "create").
- :func:`resolve_known` resolves what is known and leaves ``None`` for what is not (the lookups an
  apply makes before its first create read only the properties they can know).
- :func:`refs_of` lists the keys a value refers to; :func:`needs` = ``depends_on`` and refs.
- :func:`waves` orders a module's resources: each wave needs only earlier waves; the reverse of
  :func:`waves` is the destroy order (a resource goes only after everything that needs it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cloudloop.layouts.model import REF, ResourceDef


class Unresolved(LookupError):
    """A reference to an output that is not known (its resource does not exist yet)."""


def resolve(value: Any, outputs: Mapping[str, Mapping[str, Any]]) -> Any:
    if isinstance(value, dict):
        if REF in value:
            key, output = str(value[REF]), str(value.get("output", "id"))
            found = outputs.get(key)
            if found is None or found.get(output) in (None, ""):
                raise Unresolved(f"{key}.{output}")
            return found[output]
        return {k: resolve(v, outputs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, outputs) for v in value]
    return value


def resolve_known(value: Any, outputs: Mapping[str, Mapping[str, Any]]) -> Any:
    """:func:`resolve`, with ``None`` for each reference whose output is not known."""
    if isinstance(value, dict):
        if REF in value:
            found = outputs.get(str(value[REF])) or {}
            output = found.get(str(value.get("output", "id")))
            return None if output in (None, "") else output
        return {k: resolve_known(v, outputs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_known(v, outputs) for v in value]
    return value


def refs_of(value: Any) -> set[str]:
    if isinstance(value, dict):
        if REF in value:
            return {str(value[REF])}
        return set().union(*(refs_of(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(refs_of(v) for v in value)) if value else set()
    return set()


def needs(resource: ResourceDef) -> set[str]:
    return set(resource.depends_on) | refs_of(resource.properties)


def waves(resources: Iterable[ResourceDef]) -> list[list[ResourceDef]]:
    """Resources in dependency waves (definition order inside a wave); references to keys
    outside ``resources`` (another module's) count as met."""
    pending = list(resources)
    local = {r.key for r in pending}
    done: set[str] = set()
    result: list[list[ResourceDef]] = []
    while pending:
        wave = [r for r in pending if (needs(r) & local) <= done]
        if not wave:
            cycle = ", ".join(r.key for r in pending)
            raise ValueError(f"dependency cycle among {cycle}")
        result.append(wave)
        done |= {r.key for r in wave}
        pending = [r for r in pending if r.key not in done]
    return result


def subset(outputs: Mapping[str, Mapping[str, Any]], keys: Iterable[str]) -> dict[str, Any]:
    """The outputs of ``keys`` that are known (what one step's input carries)."""
    return {k: dict(outputs[k]) for k in keys if k in outputs}
