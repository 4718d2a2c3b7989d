"""What the service (load-balancer) controller decides about Services and Nodes, as pure functions.

The rules follow the upstream service controller (``controllers/service``): a Service wants a
load balancer when ``type: LoadBalancer`` and no ``spec.loadBalancerClass``; it needs cleanup when
it carries the cleanup finalizer and is being deleted or no longer wants one. The LB node set
drops nodes that are being deleted, labelled ``node.kubernetes.io/exclude-from-external-load-
balancers`` (true or unparsable) or tainted ``ToBeDeletedByClusterAutoscaler``; readiness is not
a filter. Nodes without ``spec.providerID`` cannot be mapped to an instance and are skipped.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from cloudloop.cloud.models import LoadBalancerPort
from cloudloop.kube.bodies import Node, Service
from cloudloop.messages.loadbalancer import (
    LB_FINALIZER,
    DesiredLoadBalancer,
    LoadBalancerNode,
    NodeSetRef,
)

EXCLUDE_FROM_LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"
#: Annotations that say nothing about the load balancer (and can be large).
IGNORED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})

_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_go_bool(value: str) -> bool | None:
    """Go's ``strconv.ParseBool``; ``None`` when the value does not parse."""
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    return None


# -- Services -------------------------------------------------------------------------------
def wants_load_balancer(service: Service) -> bool:
    spec = service.get("spec") or {}
    return spec.get("type") == "LoadBalancer" and spec.get("loadBalancerClass") is None


def is_deleting(obj: Service | Node) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def has_finalizer(service: Service) -> bool:
    return LB_FINALIZER in ((service.get("metadata") or {}).get("finalizers") or [])


def needs_cleanup(service: Service) -> bool:
    return has_finalizer(service) and (is_deleting(service) or not wants_load_balancer(service))


#: How an ingress entry keeps its ``ipMode`` in the strings the workflow compares:
#: ``203.0.113.7`` or ``203.0.113.7 ipMode=Proxy``.
IP_MODE_SEPARATOR = " ipMode="


def ingress_entry(address: str, ip_mode: str = "") -> str:
    """One ``status.loadBalancer.ingress`` entry as the workflow keeps it."""
    return f"{address}{IP_MODE_SEPARATOR}{ip_mode}" if ip_mode else address


def ingress_fields(entry: str, *, hostname: bool) -> dict[str, str]:
    """The ingress entry's API fields (``hostname`` or ``ip``, and ``ipMode`` with an IP)."""
    address, _, ip_mode = entry.partition(IP_MODE_SEPARATOR)
    if hostname:
        return {"hostname": address}
    return {"ip": address, "ipMode": ip_mode} if ip_mode else {"ip": address}


def ingress_hostnames(service: Service) -> list[str]:
    """``status.loadBalancer.ingress`` as strings (hostname, else IP with its ``ipMode``)."""
    ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [
        str(i.get("hostname") or "")
        or ingress_entry(str(i.get("ip") or ""), str(i.get("ipMode") or ""))
        for i in ingress
    ]


def service_annotations(service: Service) -> dict[str, str]:
    """The Service's annotations as strings, without the ones that never concern an LB."""
    annotations = (service.get("metadata") or {}).get("annotations") or {}
    return {k: str(v) for k, v in annotations.items() if k not in IGNORED_ANNOTATIONS}


def desired_load_balancer(
    service: Service,
    nodes: list[LoadBalancerNode],
    *,
    annotations: dict[str, str] | None = None,
    node_set: NodeSetRef | None = None,
) -> DesiredLoadBalancer:
    """The desired state; ``annotations`` the cloud reads (default: all but the ignored ones);
    the node set inline (``nodes``) or by reference (``node_set``)."""
    spec = service.get("spec") or {}
    if annotations is None:
        annotations = service_annotations(service)
    return DesiredLoadBalancer(
        ports=[
            LoadBalancerPort(
                name=str(p.get("name") or ""),
                protocol=str(p.get("protocol") or "TCP"),
                port=int(p["port"]),
                node_port=int(p.get("nodePort") or 0),
            )
            for p in spec.get("ports") or []
        ],
        annotations=annotations,
        source_ranges=sorted(spec.get("loadBalancerSourceRanges") or []),
        external_traffic_policy=str(spec.get("externalTrafficPolicy") or "Cluster"),
        health_check_node_port=int(spec.get("healthCheckNodePort") or 0),
        load_balancer_ip=str(spec.get("loadBalancerIP") or ""),
        nodes=nodes,
        node_set=node_set,
    )


# -- Nodes ----------------------------------------------------------------------------------
def excluded_from_load_balancers(node: Node) -> bool:
    if is_deleting(node):
        return True
    labels = (node.get("metadata") or {}).get("labels") or {}
    if (
        EXCLUDE_FROM_LB_LABEL in labels
        and parse_go_bool(labels[EXCLUDE_FROM_LB_LABEL]) is not False
    ):
        return True
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t.get("key") == TO_BE_DELETED_TAINT for t in taints)


def load_balancer_node(
    node: Node, label_keys: Collection[str] | None = None
) -> LoadBalancerNode | None:
    """The node as an LB backend, or None when excluded or without providerID; with only the
    labels ``label_keys`` names (all of them when ``None``)."""
    provider_id = str((node.get("spec") or {}).get("providerID") or "")
    if not provider_id or excluded_from_load_balancers(node):
        return None
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    if label_keys is not None:
        labels = {k: str(labels[k]) for k in sorted(label_keys) if k in labels}
    return LoadBalancerNode(name=str(meta["name"]), provider_id=provider_id, labels=dict(labels))


def load_balancer_nodes(
    nodes: Iterable[Node], label_keys: Collection[str] | None = None
) -> list[LoadBalancerNode]:
    """The LB node set, sorted by name (so equal sets compare equal), labels as above."""
    found = (load_balancer_node(node, label_keys) for node in nodes)
    return sorted((n for n in found if n is not None), key=lambda n: n.name)
