"""Upstream Terraform state (v4 JSON) read for adoption, and written back in the same shape.

:func:`parse_state` reads one of dhctl's state documents into :class:`StateResource` records;
:func:`map_state` assigns each record to a resource key of the layout through the provider's
table (a :class:`StateMapping` per Terraform type, the layout part's ``state_types``);
:func:`render_state` writes the IDs an apply found back as a v4 document the same reader takes.
Where the states are, and the matching: docs/decisions/0056-adoption-matches-terraform-state.md.

Rules:
- Records keep *only* the identity attributes the table names — never ``user_data``, keys or other
  secrets — so they may enter a workflow input. Managed resources only (``data`` is lookups).
- Matching is per record within its scope, in passes until nothing changes: a reference from
  another mapped record, else the one candidate left, else the name, else the ``match`` attributes.
- A record left ambiguous, of a type not in the table, or of a read-only resource is reported,
  never guessed.
- One Terraform type may hold several kinds (``kubernetes_manifest``): one entry per kind, chosen
  by :func:`resolve`; the record keeps the key it was placed by.
- Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from cloudloop.layouts.model import REF, LayoutDef, ResourceDef

#: ``scope`` of the cluster (base-infrastructure) state.
BASE_SCOPE = "base"
CLUSTER_STATE_SECRET = ("d8-system", "d8-cluster-terraform-state")
CLUSTER_STATE_KEY = "cluster-tf-state.json"
NODE_STATE_PREFIX = "d8-node-terraform-state-"
NODE_STATE_KEY = "node-tf-state.json"
NODE_GROUP_SETTINGS_KEY = "node-group-settings.json"
NODE_GROUP_LABEL = "node.deckhouse.io/node-group"
NODE_NAME_LABEL = "node.deckhouse.io/node-name"
STATE_LABEL = "node.deckhouse.io/terraform-state"


@dataclass(frozen=True)
class StateMapping:
    """How one Terraform resource type maps onto a layout resource kind."""

    #: The layout's kind (``aws.subnet``); empty = the type is part of another resource
    #: (``aws_eip_association`` is the EIP's ``instance_id``): skipped, not reported.
    kind: str
    #: Attributes that may hold the layout's name for it.
    names: tuple[str, ...] = ("tags.Name",)
    #: (Terraform attribute, layout property) pairs naming the same thing (``subnet_id``).
    match: tuple[tuple[str, str], ...] = ()
    #: The attribute holding the ID the provider's ``adopt`` takes.
    id: str = "id"
    #: Several records make one resource (security group rules → the group's rule set).
    many: bool = False
    #: The Terraform type when the table's key is not it (one type, several kinds).
    tf_type: str = ""
    #: Attribute paths (the first present decides) whose value must be ``select_value``.
    select: tuple[str, ...] = ()
    select_value: str = ""
    #: A pattern cut from the end of both names before they are compared (``-[0-9a-f]{6}``:
    #: a hash of parameters that the layout and the state may have computed differently).
    strip: str = ""
    #: ``render_state`` writes the found object's name (its ``name`` output), not the
    #: definition's: a name computed with a hash the found object may not share.
    found_name: bool = False

    def stem(self, name: str) -> str:
        return re.sub(self.strip + "$", "", name) if self.strip else name

    def attributes(self) -> set[str]:
        return {*self.names, *(a for a, _ in self.match), self.id, *self.select}

    def selects(self, attributes: Mapping[str, Any]) -> bool:
        if not self.select:
            return True
        values = [attribute(attributes, path) for path in self.select]
        return next((v for v in values if v not in (None, "")), None) == self.select_value


StateTypes = Mapping[str, StateMapping]


class StateResource(BaseModel):
    """One managed resource instance of a Terraform state, identity attributes only."""

    #: ``base``, a node's name, or ``""`` (any module).
    scope: str = ""
    address: str
    type: str
    id: str = ""
    #: Flattened (``tags.Name``, ``route.0.gateway_id``) identity attributes, non-empty only.
    attributes: dict[str, Any] = Field(default_factory=dict)
    #: The table's key that placed it when that is not ``type`` (see :func:`resolve`).
    mapping: str = ""

    @property
    def table_key(self) -> str:
        return self.mapping or self.type


class StateMap(BaseModel):
    """What adoption will take over: resource key → cloud ID, and what it could not place."""

    ids: dict[str, str] = Field(default_factory=dict)
    #: Key → the Terraform addresses mapped onto it.
    addresses: dict[str, list[str]] = Field(default_factory=dict)
    #: ``address: why`` of every record not mapped.
    unmapped: list[str] = Field(default_factory=list)


class InvalidState(ValueError):
    """Not a Terraform v4 state document."""


def attribute(value: Any, path: str) -> Any:
    """``path`` (dots; list indexes as numbers) inside ``value``; ``None`` when absent."""
    for part in path.split("."):
        if isinstance(value, Mapping):
            value = value.get(part)
        elif (
            isinstance(value, list) and part.isascii() and part.isdigit() and int(part) < len(value)
        ):
            value = value[int(part)]
        else:
            return None
    return value


def resolve(
    types: StateTypes, tf_type: str, attributes: Mapping[str, Any]
) -> tuple[str, StateMapping] | None:
    """The table's entry for a record of ``tf_type`` with ``attributes``: the type's own entry,
    else the one entry for that type whose ``select`` holds."""
    own = types.get(tf_type)
    if own is not None and not own.tf_type:
        return tf_type, own
    for key, mapping in types.items():
        if mapping.tf_type == tf_type and mapping.selects(attributes):
            return key, mapping
    return None


def _address(resource: Mapping[str, Any], instance: Mapping[str, Any]) -> str:
    head = f"{resource['module']}." if resource.get("module") else ""
    index = instance.get("index_key")
    suffix = "" if index is None else f"[{json.dumps(index)}]"
    return f"{head}{resource.get('type')}.{resource.get('name')}{suffix}"


def parse_state(
    document: str | Mapping[str, Any], scope: str, types: StateTypes
) -> list[StateResource]:
    """The managed resources of a v4 state document, identity attributes only."""
    try:
        state = json.loads(document) if isinstance(document, str) else document
    except json.JSONDecodeError as exc:
        raise InvalidState(f"not JSON: {exc}") from None
    if not isinstance(state, Mapping) or not isinstance(state.get("resources", []), list):
        raise InvalidState("no resources list")
    if state.get("version") not in (4, None):
        raise InvalidState(f"state version {state.get('version')} (4 is read)")
    records: list[StateResource] = []
    for resource in state.get("resources", []):
        if not isinstance(resource, Mapping) or resource.get("mode", "managed") != "managed":
            continue
        kind = str(resource.get("type", ""))
        for instance in resource.get("instances", []):
            attrs = instance.get("attributes") or {}
            resolved = resolve(types, kind, attrs)
            key, mapping = resolved if resolved else (kind, None)
            wanted = mapping.attributes() if mapping else {"id"}
            if "index_key" in wanted and instance.get("index_key") is not None:
                # the ``for_each`` key (a zone) names which of several it is
                attrs = {**attrs, "index_key": instance["index_key"]}
            kept = {a: attribute(attrs, a) for a in sorted(wanted)}
            kept = {a: v for a, v in kept.items() if v not in (None, "", [], {})}
            records.append(
                StateResource(
                    scope=scope,
                    address=_address(resource, instance),
                    type=kind,
                    id=str(attribute(attrs, mapping.id if mapping else "id") or ""),
                    attributes=kept,
                    mapping="" if key == kind else key,
                )
            )
    return records


def _known(value: Any, ids: Mapping[str, str]) -> Any:
    """A property with references replaced by adopted IDs; ``None`` if one is not known."""
    if isinstance(value, dict) and REF in value:
        if value.get("output", "id") not in ("id", "name"):
            return None
        return ids.get(str(value[REF]))
    return value


def _property(resource: ResourceDef, path: str, ids: Mapping[str, str]) -> Any:
    head, _, rest = path.partition(".")
    value = _known(resource.properties.get(head), ids)
    for part in rest.split(".") if rest else []:
        value = _known(attribute(value, part), ids)
    return value


def map_state(layout: LayoutDef, records: Sequence[StateResource], types: StateTypes) -> StateMap:
    """Each record's resource key in ``layout`` (see the module docstring for the rules)."""
    result = StateMap()
    scopes: dict[str, list[ResourceDef]] = {"": []}
    for module in layout.modules:
        scope = BASE_SCOPE if module.module == "base-infrastructure" else module.node_name
        scopes[scope] = list(module.resources)
        scopes[""] += module.resources
    pending: list[StateResource] = []
    for record in records:
        mapping = types.get(record.table_key)
        if mapping is None:
            result.unmapped.append(f"{record.address}: type {record.type} is not in the layout")
        elif record.scope not in scopes:
            result.unmapped.append(f"{record.address}: no module for {record.scope!r}")
        elif mapping.kind and not record.id:
            result.unmapped.append(f"{record.address}: no {mapping.id}")
        elif mapping.kind:
            pending.append(record)
    implied: dict[str, str] = {}  # key → ID another record refers to
    taken: dict[str, str] = {}  # key → the ID of the record mapped onto it
    progress = True
    while pending and progress:
        progress = False
        for record in list(pending):
            mapping = types[record.table_key]
            chosen = _choose(record, mapping, scopes[record.scope], taken, implied)
            if chosen is None:
                continue
            pending.remove(record)
            progress = True
            key = chosen.key
            taken[key] = record.id
            result.ids[key] = record.id
            result.addresses.setdefault(key, []).append(record.address)
            for attr, prop in mapping.match:
                ref = attribute(chosen.properties, prop)
                value = record.attributes.get(attr)
                if (
                    isinstance(ref, dict)
                    and REF in ref
                    and value
                    and ref.get("output", "id") == "id"
                ):
                    implied.setdefault(str(ref[REF]), str(value))
    for record in pending:
        mapping = types[record.table_key]
        left = [r.key for r in _candidates(record, mapping, scopes[record.scope], taken)]
        result.unmapped.append(
            f"{record.address}: ambiguous among {', '.join(left)}"
            if left
            else f"{record.address}: no {mapping.kind} of the layout left for it"
        )
    return result


def _candidates(
    record: StateResource, mapping: StateMapping, scope: list[ResourceDef], taken: Mapping[str, str]
) -> list[ResourceDef]:
    return [
        r
        for r in scope
        if r.kind == mapping.kind
        and not r.read_only
        and (r.key not in taken or (mapping.many and taken[r.key] == record.id))
    ]


def _choose(
    record: StateResource,
    mapping: StateMapping,
    scope: list[ResourceDef],
    taken: Mapping[str, str],
    implied: Mapping[str, str],
) -> ResourceDef | None:
    candidates = _candidates(record, mapping, scope, taken)
    by_id = [r for r in candidates if implied.get(r.key) == record.id]
    if len(by_id) == 1:
        return by_id[0]
    # a candidate another record says has a different ID is not this one
    candidates = [r for r in candidates if implied.get(r.key) in (None, record.id)]
    if len(candidates) == 1:
        return candidates[0]
    names = {
        mapping.stem(str(record.attributes[n])) for n in mapping.names if n in record.attributes
    }
    named = [r for r in candidates if mapping.stem(r.name) in names]
    if len(named) == 1:
        return named[0]
    ids = {**implied, **taken}
    consistent = []
    for r in candidates:
        pairs = [(record.attributes.get(a), _property(r, p, ids)) for a, p in mapping.match]
        compared = [(have, want) for have, want in pairs if have not in (None, "") and want]
        if compared and all(have == want for have, want in compared):
            consistent.append(r)
    return consistent[0] if len(consistent) == 1 else None


def _put(document: dict[str, Any], path: str, value: Any) -> None:
    *heads, last = path.split(".")
    for head in heads:
        document = document.setdefault(head, {})
    document[last] = value


def render_state(
    resources: Sequence[tuple[ResourceDef, Mapping[str, Any]]],
    types: StateTypes,
    *,
    lineage: str = "",
    serial: int = 1,
) -> dict[str, Any]:
    """A v4 state document listing ``resources`` (definition, found outputs) under the first
    Terraform type of each kind, with the ID and the name attributes the reader matches on."""
    by_kind: dict[str, tuple[str, StateMapping]] = {}
    for tf_type, mapping in types.items():
        if mapping.kind and not mapping.many:
            by_kind.setdefault(mapping.kind, (tf_type, mapping))
    entries: list[dict[str, Any]] = []
    for resource, outputs in resources:
        if resource.read_only or resource.kind not in by_kind or not outputs.get("id"):
            continue
        key, mapping = by_kind[resource.kind]
        tf_type = mapping.tf_type or key
        attributes: dict[str, Any] = {"id": str(outputs["id"])}
        if mapping.id != "id":
            _put(attributes, mapping.id, str(outputs["id"]))
        for name_attr in mapping.names:
            name = outputs.get("name") if mapping.found_name else None
            if name_attr.startswith("tags."):  # a map: the rest of the path is one key
                attributes.setdefault("tags", {})[name_attr.removeprefix("tags.")] = resource.name
            else:
                _put(attributes, name_attr, name or resource.name)
        if mapping.select:
            _put(attributes, mapping.select[0], mapping.select_value)
        entries.append(
            {
                "mode": "managed",
                "type": tf_type,
                "name": resource.name,
                "provider": "cloudloop",
                "instances": [{"schema_version": 0, "attributes": attributes}],
            }
        )
    return {
        "version": 4,
        "terraform_version": "cloudloop",
        "serial": serial,
        "lineage": lineage,
        "outputs": {},
        "resources": entries,
    }
