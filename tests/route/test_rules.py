"""The route controller's decisions: cluster CIDR, ownership, the plan, the Node condition."""

from __future__ import annotations

from typing import Any

import pytest

from cloudloop.cloud.models import Route
from cloudloop.kube.bodies import Node, NodeCondition, NodeSpec
from cloudloop.rules import route as rules

CLUSTER_CIDRS = rules.parse_cluster_cidrs("10.244.0.0/16")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("10.244.0.0/16", ["10.244.0.0/16"], id="ipv4"),
        pytest.param(" 10.244.0.0/16 ", ["10.244.0.0/16"], id="spaces"),
        pytest.param("10.244.1.7/16", ["10.244.0.0/16"], id="host-bits-cleared"),
        pytest.param(
            "10.244.0.0/16,fd00:10:244::/56",
            ["10.244.0.0/16", "fd00:10:244::/56"],
            id="dual-stack",
        ),
    ],
)
def test_parse_cluster_cidrs(text: str, expected: list[str]) -> None:
    assert [str(n) for n in rules.parse_cluster_cidrs(text)] == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param(" , ", id="only-commas"),
        pytest.param("10.244.0.0", id="no-prefix"),
        pytest.param("banana/16", id="not-an-address"),
        pytest.param("10.244.0.0/33", id="prefix-too-long"),
        pytest.param("10.244.0.0/16,10.245.0.0/16", id="two-ipv4"),
        pytest.param("10.1.0.0/16,10.2.0.0/16,fd00::/56", id="three"),
    ],
)
def test_invalid_cluster_cidr_is_refused(text: str) -> None:
    with pytest.raises(rules.ClusterCidrError):
        rules.parse_cluster_cidrs(text)


@pytest.mark.parametrize(
    ("destination", "responsible"),
    [
        pytest.param("10.244.3.0/24", True, id="inside"),
        pytest.param("10.244.0.0/16", True, id="equal"),
        pytest.param("10.0.0.0/8", False, id="wider-than-cluster"),
        pytest.param("192.168.0.0/24", False, id="outside"),
        pytest.param("0.0.0.0/0", False, id="default-route"),
        pytest.param("fd00::/64", False, id="other-family"),
        pytest.param("not-a-cidr", False, id="unparsable"),
    ],
)
def test_is_responsible(destination: str, responsible: bool) -> None:
    assert rules.is_responsible(CLUSTER_CIDRS, destination) is responsible


def target(name: str, instance_id: str, *cidrs: str) -> rules.NodeTarget:
    return rules.NodeTarget(name=name, uid=f"uid-{name}", instance_id=instance_id, pod_cidrs=cidrs)


def route(cidr: str, instance_id: str = "", *, blackhole: bool = False) -> Route:
    return Route(
        name=f"c-{cidr}", destination_cidr=cidr, target_instance_id=instance_id, blackhole=blackhole
    )


def summary(plan: rules.RoutePlan) -> tuple[set[tuple[str, str]], set[str], dict[str, Any]]:
    creates = {(r.destination_cidr, r.target_instance_id) for _, r in plan.create}
    deletes = {r.destination_cidr for r in plan.delete}
    return creates, deletes, plan.routed


@pytest.mark.parametrize(
    ("nodes", "routes", "creates", "deletes", "routed"),
    [
        pytest.param(
            [target("a", "i-a", "10.244.1.0/24")],
            [],
            {("10.244.1.0/24", "i-a")},
            set(),
            {"a": {"10.244.1.0/24": False}},
            id="missing-route-is-created",
        ),
        pytest.param(
            [target("a", "i-a", "10.244.1.0/24")],
            [route("10.244.1.0/24", "i-a")],
            set(),
            set(),
            {"a": {"10.244.1.0/24": True}},
            id="matching-route-is-kept",
        ),
        pytest.param(
            [],
            [route("10.244.9.0/24", "i-gone")],
            set(),
            {"10.244.9.0/24"},
            {},
            id="stale-route-inside-cluster-cidr-is-deleted",
        ),
        pytest.param(
            [],
            [route("192.168.5.0/24", "i-x"), route("172.16.0.0/24", blackhole=True)],
            set(),
            set(),
            {},
            id="routes-outside-cluster-cidr-are-never-touched",
        ),
        pytest.param(
            [target("a", "i-a", "10.244.1.0/24")],
            [route("10.244.1.0/24", blackhole=True), route("10.244.7.0/24", blackhole=True)],
            {("10.244.1.0/24", "i-a")},
            {"10.244.1.0/24", "10.244.7.0/24"},
            {"a": {"10.244.1.0/24": False}},
            id="blackholes-are-deleted-and-replaced",
        ),
        pytest.param(
            [target("a", "i-new", "10.244.1.0/24")],
            [route("10.244.1.0/24", "i-old")],
            {("10.244.1.0/24", "i-new")},
            {"10.244.1.0/24"},
            {"a": {"10.244.1.0/24": False}},
            id="route-to-another-instance-is-replaced",
        ),
        pytest.param(
            [target("a", "", "10.244.1.0/24")],
            [route("10.244.1.0/24", "i-a")],
            set(),
            set(),
            {"a": {"10.244.1.0/24": False}},
            id="node-without-instance-keeps-its-route",
        ),
        pytest.param(
            [target("a", "i-a")],
            [],
            set(),
            set(),
            {},
            id="node-without-pod-cidr-is-skipped",
        ),
        pytest.param(
            [target("a", "i-a", "10.244.1.0/24", "fd00:10:244:1::/64")],
            [route("10.244.1.0/24", "i-a")],
            {("fd00:10:244:1::/64", "i-a")},
            set(),
            {"a": {"10.244.1.0/24": True, "fd00:10:244:1::/64": False}},
            id="dual-stack-node-needs-both",
        ),
        pytest.param(
            [target("a", "i-a", "10.244.1.0/24"), target("b", "i-b", "10.244.1.0/24")],
            [route("10.244.1.0/24", "i-a")],
            set(),
            set(),
            {"a": {"10.244.1.0/24": True}, "b": {"10.244.1.0/24": False}},
            id="duplicate-cidr-first-node-wins",
        ),
    ],
)
def test_plan_routes(
    nodes: list[rules.NodeTarget],
    routes: list[Route],
    creates: set[tuple[str, str]],
    deletes: set[str],
    routed: dict[str, Any],
) -> None:
    cidrs = rules.parse_cluster_cidrs("10.244.0.0/16,fd00:10:244::/56")
    assert summary(rules.plan_routes("c", nodes, routes, cidrs)) == (creates, deletes, routed)


def test_created_routes_are_named_like_upstream_aws() -> None:
    plan = rules.plan_routes("prod", [target("a", "i-a", "10.244.1.0/24")], [], CLUSTER_CIDRS)
    assert plan.create[0][1].name == "prod-10.244.1.0/24"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"podCIDRs": ["10.244.1.0/24"]}, ("10.244.1.0/24",), id="pod-cidrs"),
        pytest.param({"podCIDR": "10.244.2.0/24"}, ("10.244.2.0/24",), id="legacy-pod-cidr"),
        pytest.param({}, (), id="none"),
        pytest.param(
            {"podCIDRs": ["fd00:0010:0244:0001::/64"]}, ("fd00:10:244:1::/64",), id="ipv6-normal"
        ),
    ],
)
def test_pod_cidrs(spec: NodeSpec, expected: tuple[str, ...]) -> None:
    assert rules.pod_cidrs({"spec": spec}) == expected


def node_with(condition: NodeCondition | None) -> Node:
    return {"metadata": {"name": "n"}, "status": {"conditions": [condition] if condition else []}}


@pytest.mark.parametrize(
    ("condition", "routed", "expected"),
    [
        pytest.param(None, True, ("False", "RouteCreated"), id="none-yet-routed"),
        pytest.param(None, False, ("True", "NoRouteCreated"), id="none-yet-unrouted"),
        pytest.param(
            {"type": "NetworkUnavailable", "status": "True", "reason": "NoRouteCreated"},
            True,
            ("False", "RouteCreated"),
            id="now-routed",
        ),
        pytest.param(
            {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"},
            True,
            None,
            id="unchanged-skipped",
        ),
        pytest.param(
            {"type": "NetworkUnavailable", "status": "True", "reason": "NoRouteCreated"},
            False,
            None,
            id="unchanged-unrouted-skipped",
        ),
        pytest.param(
            {"type": "NetworkUnavailable", "status": "False", "reason": "CalicoIsUp"},
            True,
            None,
            id="cni-reason-left-alone",
        ),
    ],
)
def test_network_condition_patch(
    condition: NodeCondition | None, routed: bool, expected: tuple[str, str] | None
) -> None:
    patch = rules.network_condition_patch(node_with(condition), routed, now="2026-01-01T00:00:00Z")
    if expected is None:
        assert patch is None
    else:
        assert patch is not None
        assert (patch["status"], patch["reason"]) == expected
        assert patch["type"] == "NetworkUnavailable"
        assert patch["message"] == (
            "RouteController created a route" if routed else rules.NO_ROUTE_CREATED_MESSAGE
        )


def test_fingerprint_ignores_status_changes() -> None:
    node: Node = {
        "metadata": {"name": "n", "uid": "u"},
        "spec": {"providerID": "aws:///z/i-1", "podCIDRs": ["10.244.1.0/24"]},
    }
    patched: Node = {**node, "status": {"conditions": [{"type": "NetworkUnavailable"}]}}
    assert rules.route_fingerprint(node) == rules.route_fingerprint(patched)
    moved: Node = {**node, "spec": {**node["spec"], "podCIDRs": ["10.244.2.0/24"]}}
    assert rules.route_fingerprint(node) != rules.route_fingerprint(moved)
