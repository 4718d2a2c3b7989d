"""NetworkPolicy as the API defines it, to ask the rendered chart who may connect to whom.

The install stack has no CNI (nothing enforces a NetworkPolicy there), so the chart's network
boundary is proved on the policies themselves: :func:`allowed` decides a connection the way
``networking.k8s.io/v1`` specifies it. A pod is isolated for a direction when a policy of its
namespace selects it with that policy type; an isolated pod accepts (or opens) a connection only
when some selecting policy's rule matches the peer and the port. A connection between two pods
needs the source's egress and the destination's ingress; a host-network pod is out of reach of
both (what the API leaves undefined is treated as not enforced), and traffic from the pod's own
node (the kubelet's probes) is always allowed.

Rules: label selectors with ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists,
DoesNotExist); an empty selector selects everything, a missing one (in a peer) nothing of its
kind; ``ipBlock`` applies to addresses outside the cluster's pods (as CNIs do); named ports
resolve against the destination pod's container ports.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Endpoint:
    """One end of a connection: a pod (namespace, labels, named ports) or an address."""

    namespace: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    namespace_labels: dict[str, str] = field(default_factory=dict)
    ip: str = ""
    #: Named container ports of a pod (``metrics`` -> 9464).
    ports: dict[str, int] = field(default_factory=dict)
    host_network: bool = False
    #: The pod's own node (the kubelet).
    node: bool = False

    @property
    def is_pod(self) -> bool:
        return bool(self.namespace)

    def namespace_labels_or_default(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels}


def pod(
    namespace: str, labels: dict[str, str] | None = None, *, ip: str = "10.244.1.10", **kw: Any
) -> Endpoint:
    return Endpoint(namespace=namespace, labels=dict(labels or {}), ip=ip, **kw)


def address(ip: str) -> Endpoint:
    return Endpoint(ip=ip)


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Whether a label selector (``{}``: everything) selects ``labels``."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def _peer_matches(peer: dict[str, Any], policy_namespace: str, other: Endpoint) -> bool:
    if "ipBlock" in peer:
        if other.is_pod and not other.host_network:
            return False
        block = peer["ipBlock"]
        ip = ipaddress.ip_address(other.ip)
        if ip not in ipaddress.ip_network(block["cidr"]):
            return False
        return not any(ip in ipaddress.ip_network(e) for e in block.get("except") or [])
    if not other.is_pod or other.host_network:
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], other.namespace_labels_or_default()):
            return False
    elif other.namespace != policy_namespace:
        return False
    return selects(peer.get("podSelector", {}), other.labels)


def _port_matches(
    rule_ports: list[dict[str, Any]] | None, port: int, protocol: str, destination: Endpoint
) -> bool:
    if not rule_ports:
        return True
    for entry in rule_ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        wanted = entry.get("port")
        if wanted is None:
            return True
        if isinstance(wanted, str):
            wanted = destination.ports.get(wanted)
            if wanted is None:
                continue
        if wanted <= port <= int(entry.get("endPort", wanted)):
            return True
    return False


def _direction_allows(
    policies: list[dict[str, Any]],
    subject: Endpoint,
    other: Endpoint,
    direction: str,
    port: int,
    protocol: str,
    destination: Endpoint,
) -> bool:
    selecting = [
        p
        for p in policies
        if p["kind"] == "NetworkPolicy"
        and p["metadata"]["namespace"] == subject.namespace
        and selects(p["spec"].get("podSelector", {}), subject.labels)
        and direction in (p["spec"].get("policyTypes") or ["Ingress"])
    ]
    if not selecting:
        return True  # not isolated
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    for policy in selecting:
        for rule in policy["spec"].get(key) or []:
            peers = rule.get(peers_key)
            peer_ok = not peers or any(
                _peer_matches(p, policy["metadata"]["namespace"], other) for p in peers
            )
            if peer_ok and _port_matches(rule.get("ports"), port, protocol, destination):
                return True
    return False


def allowed(
    policies: list[dict[str, Any]],
    source: Endpoint,
    destination: Endpoint,
    port: int,
    protocol: str = "TCP",
) -> bool:
    """Whether ``source`` may open a connection to ``destination``'s ``port``."""
    if source.node:
        return True
    if (
        source.is_pod
        and not source.host_network
        and not _direction_allows(
            policies, source, destination, "Egress", port, protocol, destination
        )
    ):
        return False
    if destination.is_pod and not destination.host_network:
        return _direction_allows(
            policies, destination, source, "Ingress", port, protocol, destination
        )
    return True


def template_endpoint(workload: dict[str, Any], ip: str = "10.244.2.20") -> Endpoint:
    """The pod a rendered workload's template makes (labels, named ports, host network)."""
    template = workload["spec"]["template"]
    spec = template["spec"]
    ports = {
        p["name"]: int(p["containerPort"])
        for c in spec["containers"]
        for p in c.get("ports") or []
        if "name" in p
    }
    return Endpoint(
        namespace=workload["metadata"]["namespace"],
        labels=dict(template["metadata"].get("labels") or {}),
        ip=ip,
        ports=ports,
        host_network=bool(spec.get("hostNetwork")),
    )
