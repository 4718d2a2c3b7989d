"""The node manager's machine-template contract ("v2"): a provider's ``template.yaml``.

A provider ships one file: ``version: v2``, ``rolloutFields`` (InstanceClass fields whose change
recreates machines), optional ``providerRolloutFields`` and ``machineDeployment.additionalFields``,
and ``template``, a Go template of its InfraMachineTemplate rendered from five roots
(``instanceClass``, ``provider``, ``zone``, ``nodeGroup.name``, ``cluster{uuid,podSubnet}``).

Rules (Deckhouse's node-controller, ``machinetemplate``):
- Parsing is strict: an unknown key, an empty template, no ``rolloutFields``, a duplicate or
  malformed field path, or a template that does not parse rejects the whole contract.
- The rendered object has ``apiVersion``, ``kind`` and ``spec`` only; ``metadata`` is an error
  (the renderer owns names, labels and the rollout snapshot).
- The template sees its own deep copy of the context, so nothing it does leaks into the snapshot.
- Rollout values compare by value (``50`` is ``50.0``; absent equals ``null``; map key order does
  not matter, list order does); their digest names the template, so a change makes a new one.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from cloudloop.nodegroup.gotemplate import Template, TemplateError

CONTRACT_VERSION = "v2"
_FIELD_PATH = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
_KEYS = {"version", "rolloutFields", "providerRolloutFields", "machineDeployment", "template"}
#: MachineDeployment fields a contract may not set: the renderer owns them.
_OWNED_FIELDS = ("infrastructureRef", "bootstrap", "clusterName")


class ContractError(ValueError):
    """The contract file is invalid, or rendering it failed."""


@dataclass(frozen=True)
class RenderContext:
    """Everything a template sees: the InstanceClass spec, the provider subtree, one zone."""

    instance_class: dict[str, Any]
    zone: str
    node_group: str
    provider: dict[str, Any] = field(default_factory=dict)
    cluster_uuid: str = ""
    pod_subnet: str = ""

    def data(self) -> dict[str, Any]:
        """The template's roots, deep-copied (normalised as JSON, as Go decodes them)."""
        return {
            "instanceClass": json.loads(json.dumps(self.instance_class)),
            "provider": copy.deepcopy(self.provider),
            "zone": self.zone,
            "nodeGroup": {"name": self.node_group},
            "cluster": {"uuid": self.cluster_uuid, "podSubnet": self.pod_subnet},
        }


@dataclass(frozen=True)
class Contract:
    """A parsed ``template.yaml``."""

    rollout_fields: tuple[str, ...]
    template: Template
    provider_rollout_fields: tuple[str, ...] = ()
    #: ``spec.template.spec`` dot-path → Go template of the value (always written as a string).
    additional_fields: dict[str, Template] = field(default_factory=dict)
    source: str = ""

    @classmethod
    def parse(cls, text: str) -> Contract:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ContractError(f"machine-template contract is not YAML: {exc}") from None
        if not isinstance(doc, dict):
            raise ContractError("machine-template contract must be a mapping")
        if doc.get("version") != CONTRACT_VERSION:
            raise ContractError(
                f"unsupported machine-template contract version {doc.get('version')!r}"
            )
        unknown = sorted(set(doc) - _KEYS)
        if unknown:
            raise ContractError(f"unknown field(s) in machine-template contract: {unknown}")
        source = doc.get("template")
        if not isinstance(source, str) or not source.strip():
            raise ContractError("machine-template contract has an empty template")
        rollout = _field_paths(doc.get("rolloutFields"), "rolloutFields", required=True)
        provider_rollout = _field_paths(
            doc.get("providerRolloutFields"), "providerRolloutFields", required=False
        )
        additional: dict[str, Template] = {}
        deployment = doc.get("machineDeployment") or {}
        if not isinstance(deployment, dict) or set(deployment) - {"additionalFields"}:
            raise ContractError("machineDeployment may only have additionalFields")
        for path, value in (deployment.get("additionalFields") or {}).items():
            if not _FIELD_PATH.match(str(path)):
                raise ContractError(f"machineDeployment.additionalFields[{path}]: malformed path")
            if str(path).split(".", 1)[0] in _OWNED_FIELDS:
                raise ContractError(
                    f"machineDeployment.additionalFields[{path}] belongs to the renderer"
                )
            try:
                additional[str(path)] = Template.parse(str(value))
            except TemplateError as exc:
                raise ContractError(f"machineDeployment.additionalFields[{path}]: {exc}") from None
        try:
            template = Template.parse(source)
        except TemplateError as exc:
            raise ContractError(f"parse machine template: {exc}") from None
        return cls(rollout, template, provider_rollout, additional, text)

    # -- rendering -------------------------------------------------------------------------
    def render(self, context: RenderContext) -> dict[str, Any]:
        """The InfraMachineTemplate (``apiVersion``, ``kind``, ``spec``) for one zone."""
        try:
            text = self.template.render(context.data())
        except TemplateError as exc:
            raise ContractError(f"render machine template: {exc}") from None
        try:
            obj = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ContractError(f"parse rendered machine template: {exc}") from None
        if not isinstance(obj, dict):
            raise ContractError("rendered machine template is not a mapping")
        if "metadata" in obj:
            raise ContractError("rendered machine template must not set metadata")
        for key in ("apiVersion", "kind"):
            if not isinstance(obj.get(key), str) or not obj[key]:
                raise ContractError(f"rendered machine template has no {key}")
        if not isinstance(obj.get("spec"), dict):
            raise ContractError("rendered machine template has no spec")
        return obj

    def machine_deployment_fields(self, context: RenderContext) -> dict[str, str]:
        """``additionalFields`` rendered: dot-path inside ``spec.template.spec`` → value."""
        fields: dict[str, str] = {}
        for path, template in self.additional_fields.items():
            try:
                fields[path] = template.render(context.data())
            except TemplateError as exc:
                raise ContractError(
                    f"render machineDeployment.additionalFields[{path}]: {exc}"
                ) from None
        return fields

    # -- rollout ---------------------------------------------------------------------------
    def rollout_values(self, instance_class: dict[str, Any]) -> dict[str, Any]:
        """The declared fields' values, normalised (absent fields left out, like ``null``)."""
        values: dict[str, Any] = {}
        for path in self.rollout_fields:
            value = _lookup(instance_class, path)
            if value is not None:
                values[path] = _normalise(value)
        return values

    def rollout_digest(self, instance_class: dict[str, Any], zone: str, cluster_uuid: str) -> str:
        """Eight hex digits that change exactly when a rollout field (or the zone) changes."""
        blob = json.dumps(
            [cluster_uuid, zone, self.rollout_values(instance_class)],
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:8]

    def changes(self, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
        """The rollout fields whose values differ, sorted."""
        before, after = self.rollout_values(old), self.rollout_values(new)
        return sorted(p for p in self.rollout_fields if before.get(p) != after.get(p))


def _field_paths(value: Any, key: str, *, required: bool) -> tuple[str, ...]:
    if value is None and not required:
        return ()
    if not isinstance(value, list) or (required and not value):
        raise ContractError(
            f"{key}: the contract must state which InstanceClass fields recreate machines"
        )
    seen: list[str] = []
    for item in value:
        path = str(item)
        if not _FIELD_PATH.match(path):
            raise ContractError(f"{key}: malformed field path {path!r}")
        if path in seen:
            raise ContractError(f"{key}: duplicate field {path!r}")
        seen.append(path)
    return tuple(seen)


def _lookup(obj: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _normalise(value: Any) -> Any:
    """Numbers as floats (``50`` is ``50.0``), maps key-sorted by JSON, lists kept in order."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {str(k): _normalise(v) for k, v in sorted(value.items()) if v is not None}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    return str(value)
