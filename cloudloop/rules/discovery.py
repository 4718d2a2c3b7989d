"""What the cloud data discoverer writes, as pure functions (Deckhouse ``go_lib/cloud-data``).

- the discovery document (Secret ``d8-cloud-provider-discovery-data``, key
  ``discovery-data.json``): the Terraform output from ``d8-provider-cluster-configuration``
  with its apiVersion, kind and fields kept and the live data merged in (OpenStack: its own
  kind), valid against Deckhouse's schema of its kind (the provider record's
  ``discovery_schemas``);
- the ``InstanceTypesCatalog`` items (Kubernetes quantities);
- the cloud conditions (ConfigMap ``d8-cloud-provider-conditions``, key ``conditions``);
- the orphaned disks: disks tagged for the cluster that no PersistentVolume references.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from cloudloop.cloud.errors import CloudAuthFailed, CloudError, NotSupported
from cloudloop.cloud.models import DiscoveryData, Disk, InstanceType, Zone

DISCOVERY_SECRET = "d8-cloud-provider-discovery-data"
DISCOVERY_KEY = "discovery-data.json"
PROVIDER_CONFIGURATION_SECRET = "d8-provider-cluster-configuration"
PROVIDER_DISCOVERY_KEY = "cloud-provider-discovery-data.json"
CONDITIONS_CONFIGMAP = "d8-cloud-provider-conditions"
CONDITIONS_KEY = "conditions"
CATALOG_NAME = "for-cluster-autoscaler"
DEFAULT_API_VERSION = "deckhouse.io/v1"

CONDITION_CREDENTIALS = "cloud-credentials-valid"
CONDITION_API = "cloud-api-reachable"
CONDITION_ZONES = "zones-available"


class IncompleteDiscovery(ValueError):
    """The cloud answered, but with too little to write over a good document."""


class CloudCondition(BaseModel):
    """One entry of the conditions ConfigMap: ``{name, message, ok}``."""

    name: str
    message: str
    ok: bool


def catalog_items(instance_types: Iterable[InstanceType]) -> list[dict[str, str]]:
    """``InstanceTypesCatalog.instanceTypes``: name with cpu, memory, rootDisk as quantities."""
    return [
        {
            "name": t.name,
            "cpu": str(t.cpu),
            "memory": f"{t.memory_mib}Mi",
            "rootDisk": f"{t.root_disk_gib}Gi" if t.root_disk_gib else "0",
        }
        for t in sorted(instance_types, key=lambda t: t.name)
    ]


def available_zones(zones: Iterable[Zone]) -> list[str]:
    return sorted({z.name for z in zones if z.state == "available"})


def parse_provider_document(raw: str | None) -> dict[str, Any] | None:
    """The Terraform discovery data, or ``None`` when absent; invalid JSON raises ValueError."""
    if raw is None or not raw.strip():
        return None
    document = json.loads(raw)
    if not isinstance(document, dict):
        raise ValueError("cloud-provider-discovery-data.json is not a JSON object")
    return document


def discovery_document(base: Mapping[str, Any] | None, data: DiscoveryData) -> dict[str, Any]:
    """Merge live data into the Terraform document (its apiVersion, kind and fields are kept),
    or, for a discoverer's own kind (``merge_base`` false), a new document with the keys of
    ``from_base`` taken from it; a base of a kind an earlier cloudloop wrote (``legacy_kinds``)
    takes the current kind. Instance types go to the catalog only, as upstream's."""
    zones = available_zones(data.zones)
    if not zones:
        raise IncompleteDiscovery("the cloud reported no available zone")
    document: dict[str, Any] = dict(base or {}) if data.merge_base else {}
    dropped = data.legacy_kinds.get(str(document.get("kind") or ""))
    if dropped is not None:
        document["kind"] = data.kind
        for key in dropped:
            document.pop(key, None)
    if not document.get("apiVersion"):
        document["apiVersion"] = data.api_version or DEFAULT_API_VERSION
    if not document.get("kind"):
        document["kind"] = data.kind
    document.update(data.extra)
    for key, path in data.from_base.items():
        found = _dig(base or {}, path)
        if found not in (None, ""):
            document[key] = found
    if data.publish_zones:
        document["zones"] = zones
    return document


def _dig(document: Mapping[str, Any], path: str) -> Any:
    value: Any = document
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def encode_document(document: Mapping[str, Any]) -> str:
    """Stable JSON (sorted keys), so an unchanged document is an unchanged Secret."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def cloud_conditions(
    failures: Mapping[str, CloudError | None], zones: list[Zone] | None
) -> list[CloudCondition]:
    """Conditions from one pass's cloud answers: credentials, reachability, zones.

    ``failures`` maps each request type to its error (``None``: it succeeded); a
    :class:`NotSupported` is not a failure. ``zones`` is ``None`` when they could not be listed.
    """
    errors = [e for e in failures.values() if e is not None and not isinstance(e, NotSupported)]
    auth = next((e for e in errors if isinstance(e, CloudAuthFailed)), None)
    other = next((e for e in errors if not isinstance(e, CloudAuthFailed)), None)
    conditions = [
        CloudCondition(
            name=CONDITION_CREDENTIALS,
            ok=auth is None,
            message=f"credentials rejected: {auth}" if auth else "credentials accepted",
        ),
        CloudCondition(
            name=CONDITION_API,
            ok=other is None and auth is None,
            message=(
                f"cloud API request failed: {other or auth}"
                if other or auth
                else "cloud API answered"
            ),
        ),
    ]
    if zones is None:
        conditions.append(
            CloudCondition(name=CONDITION_ZONES, ok=False, message="zones could not be listed")
        )
    else:
        names = available_zones(zones)
        conditions.append(
            CloudCondition(
                name=CONDITION_ZONES,
                ok=bool(names),
                message=(
                    f"{len(names)} zones available: {', '.join(names)}"
                    if names
                    else "no available zone"
                ),
            )
        )
    return conditions


def encode_conditions(conditions: Iterable[CloudCondition]) -> str:
    return json.dumps([c.model_dump() for c in conditions], separators=(",", ":"))


def referenced_volumes(
    persistent_volumes: Iterable[Mapping[str, Any]],
) -> tuple[set[str], set[str]]:
    """Volume IDs (CSI ``volumeHandle``, in-tree ``awsElasticBlockStore.volumeID``) and PV names."""
    ids: set[str] = set()
    names: set[str] = set()
    for pv in persistent_volumes:
        names.add(str((pv.get("metadata") or {}).get("name", "")))
        spec = pv.get("spec") or {}
        handle = (spec.get("csi") or {}).get("volumeHandle")
        if handle:
            ids.add(str(handle))
        in_tree = (spec.get("awsElasticBlockStore") or {}).get("volumeID")
        if in_tree:
            ids.add(str(in_tree).rstrip("/").rsplit("/", 1)[-1])  # aws://<zone>/<vol-id>
    names.discard("")
    return ids, names


def orphaned_disks(
    disks: Iterable[Disk], persistent_volumes: Iterable[Mapping[str, Any]]
) -> list[Disk]:
    """Disks no PersistentVolume references, by volume ID or by a PV of the disk's name."""
    ids, names = referenced_volumes(persistent_volumes)
    return [d for d in disks if d.id not in ids and not (d.name and d.name in names)]
