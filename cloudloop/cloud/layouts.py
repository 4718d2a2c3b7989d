"""The layouts part of a provider record: build a layout's definitions, and act on them.

A cloud with layouts sets ``Provider.layouts`` to a factory of a :class:`LayoutPart` (imported
lazily, as drivers are): it turns a validated ``<Provider>ClusterConfiguration`` into
:class:`~cloudloop.layouts.model.LayoutDef` (pure, given the cloud's zones) and opens a
:class:`LayoutResources` session. The engine is the same for every cloud:
docs/decisions/0055-one-layout-engine-for-every-cloud.md.

Rules for a :class:`LayoutResources`:
- ``inspect`` is read-only: the resource found by its name/tags (``None`` when the cloud says it
  does not exist) and its :class:`Drift`. A cloud error is an error, never "absent".
- ``ensure`` finds before it creates, creates with the name/tags in the same call where the cloud
  allows, repairs drift; a repeat with nothing to do makes no mutating call.
- ``delete`` is idempotent: absent is success.
- ``refusals`` (optional, :class:`CheckingResources`) is read-only, one line per refusal; a cloud
  error is an error, never a refusal. ``blockers`` names what must go before a destroy.
- ``adopt`` (optional, :class:`AdoptingPart`/:class:`AdoptingResources`, else NotSupported) finds
  by the Terraform state's ID, makes the resource findable as ``inspect`` finds it and answers as
  ``inspect``; it never creates or deletes, and adopting twice is a no-op.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from cloudloop.layouts import bootstrap
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import LayoutDef, ResourceDef
from cloudloop.layouts.tfstate import StateMapping


@dataclass(frozen=True)
class Drift:
    """One field of a found resource that differs from its definition."""

    field: str
    have: Any = None
    want: Any = None
    #: The cloud cannot change it in place (a subnet's CIDR): reported, never repaired.
    immutable: bool = False
    #: Why it is reported and not acted on, when not "needs replacement".
    note: str = ""


@dataclass
class Found:
    outputs: dict[str, Any]
    drift: list[Drift] = field(default_factory=list)


@dataclass
class Ensured:
    action: Literal["created", "updated", "unchanged"]
    outputs: dict[str, Any]
    drift: list[Drift] = field(default_factory=list)


class LayoutResources(Protocol):
    def layout_zones(self) -> list[str]: ...

    def inspect(self, resource: ResourceDef, properties: dict[str, Any]) -> Found | None: ...

    def ensure(self, resource: ResourceDef, properties: dict[str, Any]) -> Ensured: ...

    def delete(self, resource: ResourceDef, properties: dict[str, Any]) -> bool: ...

    def blockers(self, layout: LayoutDef, found: dict[str, dict[str, Any]]) -> list[str]: ...


class LayoutPart(Protocol):
    """A cloud's layouts. A part whose nodes take the bootstrap data merged into its own
    cloud-init document (:func:`cloudloop.layouts.bootstrap.merged`) also sets
    ``merges_user_data = True``: the data must then be a cloud-config mapping."""

    #: The layouts this cloud builds (``WithoutNAT``...).
    layouts: tuple[str, ...]

    def define(self, config: Any, cluster: ClusterIdentity, zones: list[str]) -> LayoutDef: ...

    def connect(self, config: Any, section: Any) -> LayoutResources: ...


def user_data_drift(booted: str | None, properties: Mapping[str, Any]) -> list[Drift]:
    """A machine that booted with other bootstrap data (digest ``booted``, None: unknown) than
    the definition's: reported, never acted on (:mod:`cloudloop.layouts.bootstrap`)."""
    wanted = bootstrap.digest_of(properties.get("user_data"))
    if not booted or not wanted or booted == wanted:
        return []
    have, want = bootstrap.short(booted), bootstrap.short(wanted)
    note = "kept: a running machine is not replaced for it"
    return [Drift("user_data", have, want, immutable=True, note=note)]


@runtime_checkable
class CheckingResources(Protocol):
    def refusals(self, resource: ResourceDef, properties: dict[str, Any]) -> list[str]: ...


@runtime_checkable
class AdoptingResources(Protocol):
    def adopt(
        self, resource: ResourceDef, properties: dict[str, Any], cloud_id: str
    ) -> Found | None: ...


@runtime_checkable
class AdoptingPart(Protocol):
    #: Terraform resource type → the layout's kind (the state's reader and writer use it).
    state_types: Mapping[str, StateMapping]
