"""Layout definitions as data: resources, their names, tags, order and outputs.

A layout is the ordered :class:`ResourceDef` lists of its module instances (upstream's
``base-infrastructure`` once, ``master-node`` per replica, ``static-node`` per node group entry
and index) plus output templates. A provider's layout part builds one from a validated
``<Provider>ClusterConfiguration``; the provider-neutral workflows apply it (one activity per
resource, dependencies as order), plan it (a read-only diff) and destroy it (the same
definitions in reverse).

Identity: a resource's ``key`` is ``<kind>/<name>``, unique in the layout; the cloud object is
found by that name (and tags) before anything is created, so a retried or repeated step adopts
its work. A property may refer to another resource's output with :func:`ref` (``{"$ref": key,
"output": "id"}``); the engine resolves it from the outputs of finished resources
(:mod:`cloudloop.rules.layout`). Nothing in a definition is secret: credentials are read by the
activities from the :class:`ConfigSource`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

REF = "$ref"
ModuleKind = Literal["base-infrastructure", "master-node", "static-node"]


def resource_key(kind: str, name: str) -> str:
    """The key of the resource ``kind``/``name`` in a layout (:attr:`ResourceDef.key`)."""
    return f"{kind}/{name}"


def ref(key: str, output: str = "id") -> dict[str, str]:
    """A reference to ``output`` of the resource ``key`` (resolved when the step runs)."""
    return {REF: key, "output": output}


class ResourceDef(BaseModel):
    """One cloud resource the layout owns (or, ``read_only``, only looks up)."""

    kind: str
    name: str
    tags: dict[str, str] = Field(default_factory=dict)
    #: Keys of the resources that must exist first (and be deleted after this one).
    depends_on: list[str] = Field(default_factory=list)
    #: The desired state; values may hold :func:`ref` references.
    properties: dict[str, Any] = Field(default_factory=dict)
    #: What the step returns for later references (``id`` always).
    outputs: list[str] = Field(default_factory=lambda: ["id"])
    #: A data lookup (an existing VPC, an external network): never created, changed or deleted.
    read_only: bool = False

    @property
    def key(self) -> str:
        return resource_key(self.kind, self.name)


class ModuleDef(BaseModel):
    """One module instance: ``base``, ``master-<i>`` or ``static-<ng>-<i>``."""

    id: str
    module: ModuleKind
    resources: list[ResourceDef] = Field(default_factory=list)
    #: Output name → template (may hold references), e.g. ``master_ip_address_for_ssh``.
    outputs: dict[str, Any] = Field(default_factory=dict)
    #: For node modules: the node's name (``<prefix>-master-0``).
    node_name: str = ""
    #: For node modules: ``master``, or the static node group's name (bootstrap selectors).
    group: str = ""
    #: For node modules: the key of the resource that boots the node (its ``user_data``
    #: property takes the bootstrap data, :mod:`cloudloop.layouts.bootstrap`).
    machine: str = ""


class LayoutDef(BaseModel):
    provider: str
    layout: str
    prefix: str
    uuid: str
    modules: list[ModuleDef]
    #: ``cloud_discovery_data`` template (the base module's output, upstream shape).
    discovery: dict[str, Any] = Field(default_factory=dict)

    def module(self, module_id: str) -> ModuleDef:
        return next(m for m in self.modules if m.id == module_id)


class ConfigSource(BaseModel):
    """Where the activities read the configuration (with its credentials) from: a file on the
    workers' host (in a cluster, a Secret mounted into the worker at that path). Only this
    reference enters workflow history."""

    file: str
    #: Bootstrap data files by node selector (:mod:`cloudloop.layouts.bootstrap`), read under
    #: the same mount; only their names enter history.
    cloud_config: dict[str, str] = Field(default_factory=dict)

    def describe(self) -> str:
        return self.file


class LayoutError(ValueError):
    """The document asks for something this layout cannot build."""


class ModuleBuilder(Protocol):
    """A cloud's builder of module instances (``static(g, i)``: entry ``g`` of ``nodeGroups``)."""

    def base(self) -> ModuleDef: ...

    def master(self, index: int) -> ModuleDef: ...

    def static(self, group: int, index: int) -> ModuleDef: ...

    def discovery(self) -> dict[str, Any]: ...


def assemble(
    provider: str,
    config: Any,
    prefix: str,
    uuid: str,
    builder: Callable[[], ModuleBuilder],
    *,
    layouts: Sequence[str],
) -> LayoutDef:
    """The layout of ``config`` (a ``<Provider>ClusterConfiguration``): the base, a
    ``master-node`` per replica and a ``static-node`` per node group entry and index, in that
    order; :class:`LayoutError` for a layout not in ``layouts`` (before ``builder`` runs)."""
    if config.layout not in layouts:
        raise LayoutError(f"layout {config.layout} is not supported (use {' or '.join(layouts)})")
    build = builder()
    modules = [build.base()]
    modules += [build.master(i) for i in range(config.masterNodeGroup.replicas)]
    for g, group in enumerate(config.nodeGroups):
        modules += [build.static(g, i) for i in range(group.replicas)]
    return LayoutDef(
        provider=provider,
        layout=config.layout,
        prefix=prefix,
        uuid=uuid,
        modules=modules,
        discovery=build.discovery(),
    )
