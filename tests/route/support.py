"""What the route stack tests share: a Node's pod CIDR and NetworkUnavailable condition."""

from __future__ import annotations

from typing import cast

from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Node
from cloudloop.kube.resources import NODES
from cloudloop.rules import route as rules


def pod_cidr_of(kube: Kube, name: str) -> str | None:
    node = cast(Node, kube.get(NODES, name) or {})
    cidrs = rules.pod_cidrs(node)
    return cidrs[0] if cidrs else None


def network_condition(kube: Kube, name: str) -> tuple[str, str] | None:
    node = kube.get(NODES, name) or {}
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition["type"] == rules.NETWORK_UNAVAILABLE:
            return condition["status"], condition["reason"]
    return None


def has_condition(kube: Kube, name: str, expected: tuple[str, str]) -> bool:
    return network_condition(kube, name) == expected
