"""What the cloud node controllers decide about a Node, as pure functions on Node bodies
(:class:`~cloudloop.kube.bodies.Node`: the API's dicts, typed).

The rules follow the upstream cloud-provider controllers: which nodes need initialization, the
labels and addresses initialization writes, address ordering with ``provided-node-ip``, and the
lifecycle verdict (delete only on a positive "does not exist", taint stopped instances).
"""

from __future__ import annotations

import re
from enum import StrEnum

from cloudloop.cloud.models import Instance, NodeAddress
from cloudloop.kube.bodies import Node, NodeSpec, Taint

UNINITIALIZED_TAINT = "node.cloudprovider.kubernetes.io/uninitialized"
SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown"
PROVIDED_NODE_IP = "alpha.kubernetes.io/provided-node-ip"

ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
_RESERVED_LABEL = re.compile(r"(^|\.)(kubernetes|k8s)\.io/")


class InitError(ValueError):
    """The node cannot be initialized yet (the taint stays, the node is retried)."""


def taints(node: Node) -> list[Taint]:
    return list(node.get("spec", {}).get("taints") or [])


def has_taint(node: Node, key: str) -> bool:
    return any(t.get("key") == key for t in taints(node))


def needs_init(node: Node) -> bool:
    return not node.get("metadata", {}).get("deletionTimestamp") and has_taint(
        node, UNINITIALIZED_TAINT
    )


def provider_id(node: Node) -> str:
    return str(node.get("spec", {}).get("providerID") or "")


def ready_status(node: Node) -> str:
    """``True``, ``False`` or ``Unknown`` (no Ready condition yet counts as Unknown)."""
    for condition in node.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status", "Unknown"))
    return "Unknown"


def node_labels(
    instance: Instance, current: dict[str, str], additional: dict[str, str] | None = None
) -> dict[str, str]:
    """Labels to add: GA and beta zone/region/instance-type; existing labels are never touched."""
    wanted: dict[str, str] = {}
    for keys, value in (
        (ZONE_LABELS, instance.zone),
        (REGION_LABELS, instance.region),
        (INSTANCE_TYPE_LABELS, instance.instance_type),
    ):
        if value:
            wanted.update(dict.fromkeys(keys, value))
    for key, value in (additional or {}).items():
        if not _RESERVED_LABEL.search(key):
            wanted[key] = value
    return {k: v for k, v in wanted.items() if k not in current}


def node_addresses(node: Node, cloud: list[NodeAddress]) -> list[dict[str, str]]:
    """The node's addresses from the cloud's, with the upstream rules.

    - ``alpha.kubernetes.io/provided-node-ip`` must be one of the cloud's addresses (else
      :class:`InitError`); matching addresses come first and are the only ones of their type;
    - the kubelet's ``Hostname`` is kept when the cloud reports none.
    """
    addresses = [{"type": a.type, "address": a.address} for a in cloud]
    provided = node.get("metadata", {}).get("annotations", {}).get(PROVIDED_NODE_IP, "")
    if provided:
        ips = [ip.strip() for ip in provided.split(",") if ip.strip()]
        matching = [a for ip in ips for a in addresses if a["address"] == ip]
        if len(matching) < len(ips):
            raise InitError(f"provided node IP {provided} is not an address of the instance")
        matched_types = {a["type"] for a in matching}
        addresses = matching + [a for a in addresses if a["type"] not in matched_types]
    if not any(a["type"] == "Hostname" for a in addresses):
        for existing in node.get("status", {}).get("addresses") or []:
            if existing.get("type") == "Hostname":
                addresses.append({"type": "Hostname", "address": existing["address"]})
                break
    return addresses


def addresses_changed(node: Node, addresses: list[dict[str, str]]) -> bool:
    current = [
        (a.get("type"), a.get("address")) for a in node.get("status", {}).get("addresses") or []
    ]
    return current != [(a["type"], a["address"]) for a in addresses]


def initialized_spec(node: Node, instance: Instance) -> NodeSpec:
    """The node's spec with the providerID set (only if empty) and the uninitialized taint gone."""
    spec = node.get("spec", {}).copy()
    if not spec.get("providerID"):
        spec["providerID"] = instance.provider_id
    spec["taints"] = [t for t in taints(node) if t.get("key") != UNINITIALIZED_TAINT]
    return spec


class Verdict(StrEnum):
    KEEP = "keep"
    DELETE = "delete"
    TAINT_SHUTDOWN = "taint-shutdown"
    UNTAINT_SHUTDOWN = "untaint-shutdown"


def lifecycle_verdict(node: Node, instance: Instance | None, *, looked_up: bool) -> Verdict:
    """What the lifecycle pass does with a node.

    ``looked_up`` is True only when the cloud answered without error for this node; then
    ``instance is None`` means the cloud positively reported it missing.
    """
    ready = ready_status(node)
    if ready == "True":
        return Verdict.UNTAINT_SHUTDOWN if has_taint(node, SHUTDOWN_TAINT) else Verdict.KEEP
    if not looked_up:
        return Verdict.KEEP  # fail closed
    if instance is None or instance.gone:
        return Verdict.DELETE
    if instance.shut_down and not has_taint(node, SHUTDOWN_TAINT):
        return Verdict.TAINT_SHUTDOWN
    return Verdict.KEEP
