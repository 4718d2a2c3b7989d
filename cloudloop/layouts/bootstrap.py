"""Bootstrap data (dhctl's ``cloudConfig``) for the machines a layout makes.

The operator names files (``cloudloop layout apply --cloud-config [SELECTOR=]FILE``);
:func:`attach` gives each node module's machine resource a ``user_data`` property that names its
file and holds the content's SHA-256 and size; :func:`load` turns that into the bytes
(:class:`UserData`) in the activity that makes the machine. A cloud's resource runtime takes them
with :func:`loaded` (or :func:`data_of`) and, in a plan, the digest with :func:`digest_of`.
Why, and where each cloud places it: docs/decisions/0040-layout-bootstrap-and-converge.md.

Rules:
- The bytes (a bootstrap token, certificates) never enter workflow history: only the file's
  name (on the workers' mount, ``layouts.source_dir``) and its digest and size do.
- A node's file: the selector of its own name, else of its group (``master``, or the static
  node group's name), else the default; a node with none boots without user data. A selector
  that names no node or group is refused when the layout is defined.
- The file is the user data, byte for byte; a file that changed after the layout was defined is
  refused at the create (run the action again), never used.
- A machine is never replaced for other bootstrap data: plan shows it as an immutable
  ``user_data`` field where the cloud keeps what a machine booted with; apply leaves it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

import yaml

from cloudloop.layouts.model import LayoutDef, ModuleDef

#: The selector of every node (``--cloud-config FILE``).
EVERY_NODE = ""
#: The group selector of the master nodes.
MASTERS = "master"
FILE = "$file"
#: The tag, label or annotation key of a machine's bootstrap data digest, where the cloud allows
#: a ``/`` in it (the machine records what it booted with, for plan to compare).
DIGEST_KEY = "cloudloop.io/user-data-sha256"
SELECTOR = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: A bootstrap source read from the cluster (``secret:<namespace>/<name>``, key
#: :data:`CLUSTER_SECRET_KEY`), not from the workers' mount.
IN_CLUSTER = "secret:"
#: Where dhctl's converge reads a node group's bootstrap data: the Secret
#: ``d8-cloud-instance-manager/manual-bootstrap-for-<group>``, key ``cloud-config`` (node-manager
#: keeps it current, its bootstrap token rotated).
CLUSTER_SECRET_NAMESPACE = "d8-cloud-instance-manager"
CLUSTER_SECRET_PREFIX = "manual-bootstrap-for-"
CLUSTER_SECRET_KEY = "cloud-config"


class BootstrapInvalid(ValueError):
    """The bootstrap selection cannot be used (its message names selectors and files only)."""


@dataclass(frozen=True)
class UserData:
    """A machine's bootstrap bytes, read in the activity that makes it."""

    data: bytes
    sha256: str


def parse_option(value: str) -> tuple[str, str]:
    """``SELECTOR=FILE`` or ``FILE`` (every node) as (selector, file)."""
    selector, sep, file = value.partition("=")
    if sep and SELECTOR.match(selector) and file:
        return selector, file
    if not value:
        raise BootstrapInvalid("--cloud-config: empty")
    return EVERY_NODE, value


def property_value(file: str, data: bytes) -> dict[str, Any]:
    """The ``user_data`` property of a machine booting with ``data`` read from ``file``."""
    return {FILE: file, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def file_for(selection: Mapping[str, str], module: ModuleDef) -> str | None:
    """The file the module's node boots with (see the rules), if any."""
    for selector in (module.node_name, module.group):
        if selector and selector in selection:
            return selection[selector]
    return selection.get(EVERY_NODE)


def cluster_source(group: str) -> str:
    """The in-cluster source of a node group's bootstrap data."""
    return f"{IN_CLUSTER}{CLUSTER_SECRET_NAMESPACE}/{CLUSTER_SECRET_PREFIX}{group}"


def in_cluster(file: str) -> tuple[str, str] | None:
    """``(namespace, name)`` of an in-cluster source; None for a file on the mount."""
    if not file.startswith(IN_CLUSTER):
        return None
    namespace, _, name = file.removeprefix(IN_CLUSTER).partition("/")
    return namespace, name


def with_cluster_sources(
    layout: LayoutDef, selection: Mapping[str, str], exists: Callable[[str], bool]
) -> dict[str, str]:
    """``selection`` plus, for each node group it does not name, the group's in-cluster source
    when ``exists`` says the cluster has it (a group without one keeps the default file, or
    none)."""
    chosen = dict(selection)
    for group in sorted({m.group for m in layout.modules if m.node_name and m.group}):
        if group not in chosen and exists(cluster_source(group)):
            chosen[group] = cluster_source(group)
    return chosen


def attach(
    layout: LayoutDef,
    selection: Mapping[str, str],
    read: Callable[[str], bytes],
    check: Callable[[bytes], str | None] | None = None,
) -> LayoutDef:
    """``layout`` with each node machine's ``user_data`` property set from ``selection``
    (selector → file); ``read`` returns a file's bytes (or raises, naming the file); ``check``
    (the cloud's) says why some bytes cannot be used."""
    if not selection:
        return layout
    nodes = [m for m in layout.modules if m.node_name]
    known = {m.node_name for m in nodes} | {m.group for m in nodes if m.group} | {MASTERS}
    unknown = sorted(s for s in selection if s != EVERY_NODE and s not in known)
    if unknown:
        raise BootstrapInvalid(
            f"--cloud-config: no node or node group named {', '.join(unknown)} "
            f"(known: {', '.join(sorted(known))})"
        )
    digests: dict[str, dict[str, Any]] = {}
    modules = []
    for module in layout.modules:
        file = file_for(selection, module) if module.node_name else None
        if file is None:
            modules.append(module)
            continue
        if not module.machine:
            raise BootstrapInvalid(
                f"--cloud-config: {layout.provider} layouts do not take bootstrap data yet"
            )
        if file not in digests:
            data = read(file)
            problem = "is empty" if not data else check(data) if check is not None else None
            if problem:
                raise BootstrapInvalid(f"--cloud-config: {file} {problem}")
            digests[file] = property_value(file, data)
        resources = [
            r.model_copy(update={"properties": {**r.properties, "user_data": digests[file]}})
            if r.key == module.machine
            else r
            for r in module.resources
        ]
        modules.append(module.model_copy(update={"resources": resources}))
    return layout.model_copy(update={"modules": modules})


def is_reference(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(value, Mapping) and FILE in value


def load(properties: dict[str, Any], read: Callable[[str], bytes]) -> dict[str, Any]:
    """``properties`` with a ``user_data`` reference replaced by its :class:`UserData`;
    :class:`BootstrapInvalid` when the file is no longer what the layout was defined with."""
    value = properties.get("user_data")
    if not is_reference(value):
        return properties
    file, digest = str(value[FILE]), str(value["sha256"])
    data = read(file)
    if hashlib.sha256(data).hexdigest() != digest:
        raise BootstrapInvalid(
            f"--cloud-config: {file} changed after the layout was defined; run the action again"
        )
    return {**properties, "user_data": UserData(data=data, sha256=digest)}


def digest_of(value: Any) -> str | None:
    """The SHA-256 of a ``user_data`` property (a reference or loaded), or None."""
    if isinstance(value, UserData):
        return value.sha256
    if is_reference(value):
        return str(value["sha256"])
    return None


def size_of(value: Any) -> int:
    if isinstance(value, UserData):
        return len(value.data)
    if is_reference(value):
        return int(value.get("bytes") or 0)
    return 0


def loaded(value: Any) -> UserData | None:
    """A loaded ``user_data`` property (bytes and digest); None when the machine has none."""
    if value is None or isinstance(value, UserData):
        return value
    raise BootstrapInvalid("user_data is not loaded (only the step that makes a machine reads it)")


def data_of(value: Any) -> bytes | None:
    """The bytes of a loaded ``user_data`` property; None when the machine has none."""
    user_data = loaded(value)
    return user_data.data if user_data is not None else None


def merge_problem(data: bytes) -> str | None:
    """Why ``data`` cannot be merged into a cloud's own cloud-init document (None: it can)."""
    try:
        document = yaml.safe_load(data.decode())
    except (UnicodeDecodeError, yaml.YAMLError):
        return "is not a cloud-config YAML document (this cloud merges it into its own)"
    if document is not None and not isinstance(document, dict):
        return "is not a cloud-config mapping (this cloud merges it into its own)"
    return None


def merged(base: str, data: bytes | None) -> str:
    """``base`` (a ``#cloud-config`` document) with ``data``'s top-level keys over its own, as
    upstream's ``yamlencode(merge(base, yamldecode(cloudConfig)))`` (zVirt, DVP)."""
    if not data:
        return base
    problem = merge_problem(data)
    if problem:
        raise BootstrapInvalid(f"the bootstrap data {problem}")
    document = {**(yaml.safe_load(base) or {}), **(yaml.safe_load(data.decode()) or {})}
    return "#cloud-config\n" + yaml.safe_dump(document, sort_keys=False)


def short(digest: str | None) -> str | None:
    """How plan shows a digest."""
    return f"sha256:{digest[:12]}" if digest else None
