"""What the route controller decides, as pure functions on Node dicts and cloud routes.

The rules follow the upstream route controller (``controllers/route/route_controller.go``): the
controller owns only routes inside the cluster CIDR; a node's pod CIDR is routed when a route for
it targets the node's instance; blackholes and routes no node accounts for are deleted; the Node
``NetworkUnavailable`` condition says whether every pod CIDR of the node has its route.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from cloudloop.cloud.models import Route
from cloudloop.kube.bodies import Node, NodeCondition

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

NETWORK_UNAVAILABLE = "NetworkUnavailable"
ROUTE_CREATED = "RouteCreated"
NO_ROUTE_CREATED = "NoRouteCreated"
ROUTE_CREATED_MESSAGE = "RouteController created a route"
NO_ROUTE_CREATED_MESSAGE = "RouteController failed to create a route"
FAILED_TO_CREATE_ROUTE = "FailedToCreateRoute"


class ClusterCidrError(ValueError):
    """``cluster_cidr`` is empty or not one CIDR (or one IPv4 plus one IPv6 for dual-stack)."""


def parse_cluster_cidrs(text: str) -> list[Network]:
    """``--cluster-cidr``: one CIDR, or two comma-separated of different IP families."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise ClusterCidrError("cluster_cidr is empty")
    if len(parts) > 2:
        raise ClusterCidrError(f"cluster_cidr has {len(parts)} CIDRs; at most two are allowed")
    networks: list[Network] = []
    for part in parts:
        if "/" not in part:
            raise ClusterCidrError(f"{part!r} is not a CIDR (no prefix length)")
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError as exc:
            raise ClusterCidrError(f"{part!r} is not a CIDR: {exc}") from exc
    if len(networks) == 2 and networks[0].version == networks[1].version:
        raise ClusterCidrError("a dual-stack cluster_cidr needs one IPv4 and one IPv6 CIDR")
    return networks


def normalize_cidr(cidr: str) -> str:
    """One spelling per network (host bits cleared, IPv6 compressed); unparsable text as is."""
    try:
        return str(ipaddress.ip_network(cidr.strip(), strict=False))
    except ValueError:
        return cidr.strip()


def is_responsible(cluster_cidrs: list[Network], destination_cidr: str) -> bool:
    """The controller owns a route only if its destination lies inside a cluster CIDR."""
    try:
        destination = ipaddress.ip_network(destination_cidr.strip(), strict=False)
    except ValueError:
        return False
    return any(_inside(destination, cidr) for cidr in cluster_cidrs)


def _inside(inner: Network, outer: Network) -> bool:
    if isinstance(inner, ipaddress.IPv4Network) and isinstance(outer, ipaddress.IPv4Network):
        return inner.subnet_of(outer)
    if isinstance(inner, ipaddress.IPv6Network) and isinstance(outer, ipaddress.IPv6Network):
        return inner.subnet_of(outer)
    return False


@dataclass(frozen=True)
class NodeTarget:
    """What routing needs of one Node. ``instance_id`` is empty when it has no usable one."""

    name: str
    uid: str
    instance_id: str
    pod_cidrs: tuple[str, ...]


def pod_cidrs(node: Node) -> tuple[str, ...]:
    """``spec.podCIDRs``, falling back to the older single ``spec.podCIDR``."""
    spec = node.get("spec") or {}
    cidrs = spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
    return tuple(normalize_cidr(str(c)) for c in cidrs)


def route_fingerprint(node: Node) -> tuple[str, str, tuple[str, ...]]:
    """The parts of a Node that routing depends on; a change wakes the route loop."""
    meta = node.get("metadata") or {}
    provider_id = str((node.get("spec") or {}).get("providerID") or "")
    return (str(meta.get("uid", "")), provider_id, pod_cidrs(node))


@dataclass
class RoutePlan:
    """One pass: deletions (run first), creations, and per node which CIDRs are routed now."""

    delete: list[Route] = field(default_factory=list)
    create: list[tuple[NodeTarget, Route]] = field(default_factory=list)
    routed: dict[str, dict[str, bool]] = field(default_factory=dict)


def plan_routes(
    cluster: str,
    nodes: list[NodeTarget],
    routes: list[Route],
    cluster_cidrs: list[Network],
) -> RoutePlan:
    """Decide creations and deletions from one listing of the cloud's routes.

    A route is kept when a node with that pod CIDR targets the route's instance, or when a node
    claims the CIDR but its instance is not known yet (never delete what cannot be judged).
    """
    existing: dict[str, Route] = {}
    for route in routes:
        existing.setdefault(normalize_cidr(route.destination_cidr), route)
    plan = RoutePlan()
    wanted: dict[str, str] = {}  # destination → instance ID ("" = unknown, keep what is there)
    for node in nodes:
        if not node.pod_cidrs:
            continue
        statuses = plan.routed.setdefault(node.name, {})
        for cidr in node.pod_cidrs:
            statuses[cidr] = False
            if cidr in wanted:  # two nodes claim one CIDR: the first one wins
                continue
            wanted[cidr] = node.instance_id
            if not node.instance_id:
                continue
            current = existing.get(cidr)
            if (
                current is not None
                and not current.blackhole
                and current.target_instance_id == node.instance_id
            ):
                statuses[cidr] = True
                continue
            plan.create.append(
                (
                    node,
                    Route(
                        name=f"{cluster}-{cidr}",
                        destination_cidr=cidr,
                        target_instance_id=node.instance_id,
                    ),
                )
            )
    for destination, route in existing.items():
        if not is_responsible(cluster_cidrs, destination):
            continue  # never touch a route outside the cluster CIDR
        claimed_by = wanted.get(destination)
        if route.blackhole:
            plan.delete.append(route)
        elif claimed_by == "":
            continue  # the claiming node's instance is unknown: leave the route alone
        elif claimed_by is None or claimed_by != route.target_instance_id:
            plan.delete.append(route)
    return plan


def all_routed(statuses: dict[str, bool]) -> bool:
    return bool(statuses) and all(statuses.values())


def network_condition_patch(node: Node, routed: bool, *, now: str) -> NodeCondition | None:
    """The ``NetworkUnavailable`` condition to patch, or ``None`` when its status already says so.

    As upstream, only the status is compared, so a reason a CNI plugin set is left alone.
    """
    wanted_status = "False" if routed else "True"
    for condition in (node.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == NETWORK_UNAVAILABLE
            and condition.get("status") == wanted_status
        ):
            return None
    return {
        "type": NETWORK_UNAVAILABLE,
        "status": wanted_status,
        "reason": ROUTE_CREATED if routed else NO_ROUTE_CREATED,
        "message": ROUTE_CREATED_MESSAGE if routed else NO_ROUTE_CREATED_MESSAGE,
        "lastTransitionTime": now,
        "lastHeartbeatTime": now,
    }
