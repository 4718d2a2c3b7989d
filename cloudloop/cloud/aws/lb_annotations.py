"""The AWS load-balancer annotations of a Service, parsed and checked before any cloud call.

Names and meanings follow cloud-provider-aws (``service.beta.kubernetes.io/aws-load-balancer-*``).
:func:`parse_annotations` raises :class:`~cloudloop.cloud.errors.InvalidRequest` for a value it
cannot use (so nothing in the cloud changes) and :class:`~cloudloop.cloud.errors.NotSupported` for
``type: external`` / ``nlb-ip``, which the AWS Load Balancer Controller handles (upstream's
``ImplementedElsewhere``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from cloudloop.cloud import errors
from cloudloop.cloud.aws.base import NAME

PREFIX = "service.beta.kubernetes.io/aws-load-balancer-"
TYPE = PREFIX + "type"
INTERNAL = PREFIX + "internal"
ADDITIONAL_RESOURCE_TAGS = PREFIX + "additional-resource-tags"
SECURITY_GROUPS = PREFIX + "security-groups"
EXTRA_SECURITY_GROUPS = PREFIX + "extra-security-groups"
SUBNETS = PREFIX + "subnets"
TARGET_NODE_LABELS = PREFIX + "target-node-labels"
HEALTHCHECK_PROTOCOL = PREFIX + "healthcheck-protocol"
HEALTHCHECK_PORT = PREFIX + "healthcheck-port"
HEALTHCHECK_PATH = PREFIX + "healthcheck-path"
HEALTHCHECK_INTERVAL = PREFIX + "healthcheck-interval"
HEALTHCHECK_TIMEOUT = PREFIX + "healthcheck-timeout"
HEALTHCHECK_HEALTHY_THRESHOLD = PREFIX + "healthcheck-healthy-threshold"
HEALTHCHECK_UNHEALTHY_THRESHOLD = PREFIX + "healthcheck-unhealthy-threshold"

#: ``type`` values another controller (the AWS Load Balancer Controller) acts on.
HANDLED_ELSEWHERE = frozenset({"external", "nlb-ip"})
#: Tag keys (or prefixes) that carry the cluster and Service identity; annotations cannot set them.
RESERVED_TAG_PREFIXES = ("kubernetes.io/cluster/", "kubernetes.io/service-name", "cloudloop.io/")
TRAFFIC_PORT = "traffic-port"

_SECURITY_GROUP_ID = re.compile(r"^sg-[0-9a-zA-Z]+$")
_OPERATION = "ParseServiceAnnotations"


class LoadBalancerKind(StrEnum):
    CLASSIC = "classic"
    NLB = "nlb"


@dataclass(frozen=True)
class HealthCheckOptions:
    """Health-check annotations as given; ``None`` means "the load balancer type's default"."""

    protocol: str | None = None
    port: str | None = None  # "traffic-port" or a number
    path: str | None = None
    interval_s: int | None = None
    timeout_s: int | None = None
    healthy_threshold: int | None = None
    unhealthy_threshold: int | None = None


@dataclass(frozen=True)
class AwsLoadBalancerOptions:
    kind: LoadBalancerKind = LoadBalancerKind.CLASSIC
    internal: bool = False
    health_check: HealthCheckOptions = HealthCheckOptions()
    additional_tags: dict[str, str] = field(default_factory=dict)
    security_groups: tuple[str, ...] = ()
    extra_security_groups: tuple[str, ...] = ()
    subnets: tuple[str, ...] = ()
    target_node_labels: dict[str, str] = field(default_factory=dict)

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with ``labels`` may be a target (``target-node-labels``)."""
        return all(labels.get(k) == v for k, v in self.target_node_labels.items())


def invalid(message: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(NAME, _OPERATION, message)


def parse_annotations(annotations: Mapping[str, str]) -> AwsLoadBalancerOptions:
    """Every supported ``aws-load-balancer-*`` annotation, checked; see the module docstring."""
    raw_type = annotations.get(TYPE, "").strip().lower()
    if raw_type in HANDLED_ELSEWHERE:
        raise errors.NotSupported(NAME, f"load balancers of type {raw_type!r} (handled elsewhere)")
    if raw_type not in ("", LoadBalancerKind.NLB):
        raise invalid(f"{TYPE}: unknown type {raw_type!r} (use nlb, or omit it for a Classic ELB)")
    kind = LoadBalancerKind.NLB if raw_type == LoadBalancerKind.NLB else LoadBalancerKind.CLASSIC
    internal_value = annotations.get(INTERNAL, "").strip()
    return AwsLoadBalancerOptions(
        kind=kind,
        # As upstream: any value but "false" (e.g. the legacy "0.0.0.0/0") means internal.
        internal=bool(internal_value) and internal_value.lower() != "false",
        health_check=_health_check(annotations, kind),
        additional_tags=_tags(annotations.get(ADDITIONAL_RESOURCE_TAGS, "")),
        security_groups=_security_groups(annotations, SECURITY_GROUPS),
        extra_security_groups=_security_groups(annotations, EXTRA_SECURITY_GROUPS),
        subnets=tuple(_items(annotations.get(SUBNETS, ""))),
        target_node_labels=_key_values(TARGET_NODE_LABELS, annotations.get(TARGET_NODE_LABELS, "")),
    )


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _key_values(annotation: str, value: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` (a bare ``k`` means an empty value), as cloud-provider-aws reads it."""
    found: dict[str, str] = {}
    for item in _items(value):
        key, _, val = item.partition("=")
        key, val = key.strip(), val.strip()
        if not key:
            raise invalid(f"{annotation}: {item!r} has no key")
        found[key] = val
    return found


def _tags(value: str) -> dict[str, str]:
    tags = _key_values(ADDITIONAL_RESOURCE_TAGS, value)
    for key, val in tags.items():
        if key.lower().startswith("aws:"):
            raise invalid(f"{ADDITIONAL_RESOURCE_TAGS}: tag keys may not start with 'aws:' ({key})")
        if any(key.startswith(prefix) for prefix in RESERVED_TAG_PREFIXES):
            raise invalid(f"{ADDITIONAL_RESOURCE_TAGS}: {key!r} is set by the controller")
        if len(key) > 128 or len(val) > 256:
            raise invalid(f"{ADDITIONAL_RESOURCE_TAGS}: tag {key!r} is too long")
    return tags


def _security_groups(annotations: Mapping[str, str], annotation: str) -> tuple[str, ...]:
    groups = _items(annotations.get(annotation, ""))
    for group in groups:
        if not _SECURITY_GROUP_ID.match(group):
            raise invalid(f"{annotation}: {group!r} is not a security group ID (sg-...)")
    return tuple(dict.fromkeys(groups))


def _int(annotations: Mapping[str, str], annotation: str, low: int, high: int) -> int | None:
    value = annotations.get(annotation, "").strip()
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        raise invalid(f"{annotation}: {value!r} is not a number") from None
    if not low <= number <= high:
        raise invalid(f"{annotation}: {number} is outside {low}..{high}")
    return number


def _health_check(annotations: Mapping[str, str], kind: LoadBalancerKind) -> HealthCheckOptions:
    allowed = (
        ("TCP", "HTTP", "HTTPS", "SSL")
        if kind is LoadBalancerKind.CLASSIC
        else ("TCP", "HTTP", "HTTPS")
    )
    protocol = annotations.get(HEALTHCHECK_PROTOCOL, "").strip().upper() or None
    if protocol is not None and protocol not in allowed:
        raise invalid(f"{HEALTHCHECK_PROTOCOL}: {protocol!r} is not one of {', '.join(allowed)}")
    port = annotations.get(HEALTHCHECK_PORT, "").strip() or None
    if port is not None and port != TRAFFIC_PORT:
        _int(annotations, HEALTHCHECK_PORT, 1, 65535)
    path = annotations.get(HEALTHCHECK_PATH, "").strip() or None
    if path is not None and not path.startswith("/"):
        raise invalid(f"{HEALTHCHECK_PATH}: {path!r} must start with '/'")
    interval = _int(annotations, HEALTHCHECK_INTERVAL, 5, 300)
    timeout = _int(annotations, HEALTHCHECK_TIMEOUT, 2, 120)
    if interval is not None and timeout is not None and timeout >= interval:
        raise invalid(
            f"{HEALTHCHECK_TIMEOUT}: {timeout}s must be shorter than the interval ({interval}s)"
        )
    return HealthCheckOptions(
        protocol=protocol,
        port=port,
        path=path,
        interval_s=interval,
        timeout_s=timeout,
        healthy_threshold=_int(annotations, HEALTHCHECK_HEALTHY_THRESHOLD, 2, 10),
        unhealthy_threshold=_int(annotations, HEALTHCHECK_UNHEALTHY_THRESHOLD, 2, 10),
    )
