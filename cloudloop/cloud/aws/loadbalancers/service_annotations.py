"""The AWS load-balancer annotations of a Service, parsed and checked before any cloud call.

Names, meanings and defaults follow cloud-provider-aws (``service.beta.kubernetes.io/aws-load-
balancer-*``; ``ip-address-type`` is the AWS Load Balancer Controller's name, which the CCM lacks).
:func:`parse_annotations` raises :class:`~cloudloop.cloud.errors.InvalidRequest` for a value it
cannot use (so nothing in the cloud changes) and :class:`~cloudloop.cloud.errors.NotSupported` for
``type: external`` / ``nlb-ip``, which the AWS Load Balancer Controller handles (upstream's
``ImplementedElsewhere``). Values are read by :mod:`.annotation_values`; checks that need the
cloud (the certificate, the SSL policy, Elastic IPs, one address per subnet) are the driver's,
made before its first write. Departures from upstream, each refusing what AWS would refuse later:
ranges of numbers, unknown ``backend-protocol`` values without a certificate, access logs
without a bucket, ``ssl-ports`` numbers that are no ports. ``backend-protocol`` is read in any
case. Classic-only annotations on an NLB (and NLB-only ones on a Classic ELB) are ignored as
upstream ignores them, except ``target-group-attributes`` (refused on a Classic ELB) and
``extra-security-groups`` (refused on an NLB), which upstream refuses too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from cloudloop.cloud import errors
from cloudloop.cloud.aws.base import NAME
from cloudloop.cloud.aws.loadbalancers.annotation_values import (
    PortSelection,
    bounded_int,
    cidrs,
    go_bool,
    ipv4_addresses,
    items,
    key_values,
    port_selection,
    value_of,
)
from cloudloop.cloud.aws.loadbalancers.annotation_values import invalid as invalid

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
# TLS and protocols
SSL_CERT = PREFIX + "ssl-cert"
SSL_PORTS = PREFIX + "ssl-ports"
SSL_NEGOTIATION_POLICY = PREFIX + "ssl-negotiation-policy"
BACKEND_PROTOCOL = PREFIX + "backend-protocol"
PROXY_PROTOCOL = PREFIX + "proxy-protocol"
# Classic ELB attributes (the last one is also an NLB attribute)
CONNECTION_DRAINING_ENABLED = PREFIX + "connection-draining-enabled"
CONNECTION_DRAINING_TIMEOUT = PREFIX + "connection-draining-timeout"
CONNECTION_IDLE_TIMEOUT = PREFIX + "connection-idle-timeout"
ACCESS_LOG_ENABLED = PREFIX + "access-log-enabled"
ACCESS_LOG_EMIT_INTERVAL = PREFIX + "access-log-emit-interval"
ACCESS_LOG_S3_BUCKET_NAME = PREFIX + "access-log-s3-bucket-name"
ACCESS_LOG_S3_BUCKET_PREFIX = PREFIX + "access-log-s3-bucket-prefix"
CROSS_ZONE_LOAD_BALANCING_ENABLED = PREFIX + "cross-zone-load-balancing-enabled"
# NLB
EIP_ALLOCATIONS = PREFIX + "eip-allocations"
PRIVATE_IPV4_ADDRESSES = PREFIX + "private-ipv4-addresses"
IP_ADDRESS_TYPE = PREFIX + "ip-address-type"
TARGET_GROUP_ATTRIBUTES = PREFIX + "target-group-attributes"
#: The deprecated source-range annotation (``spec.loadBalancerSourceRanges`` wins when set).
LEGACY_SOURCE_RANGES = "service.beta.kubernetes.io/load-balancer-source-ranges"

#: ``type`` values another controller (the AWS Load Balancer Controller) acts on.
HANDLED_ELSEWHERE = frozenset({"external", "nlb-ip"})
#: Tag keys (or prefixes) that carry the cluster and Service identity; annotations cannot set them.
RESERVED_TAG_PREFIXES = ("kubernetes.io/cluster/", "kubernetes.io/service-name", "cloudloop.io/")
TRAFFIC_PORT = "traffic-port"
#: ``backend-protocol`` → the Classic listener's front-end protocol when it carries a certificate.
SECURE_FRONTEND = {"https": "HTTPS", "http": "HTTPS", "ssl": "SSL", "tcp": "SSL"}
#: Target-group attributes upstream lets the annotation set.
PRESERVE_CLIENT_IP = "preserve_client_ip.enabled"
PROXY_PROTOCOL_V2 = "proxy_protocol_v2.enabled"
TARGET_GROUP_ATTRIBUTE_KEYS = (PRESERVE_CLIENT_IP, PROXY_PROTOCOL_V2)
#: What the ELB API answers for a Classic ELB created without attributes (upstream's defaults).
DEFAULT_IDLE_TIMEOUT_S = 60

_SECURITY_GROUP_ID = re.compile(r"^sg-[0-9a-zA-Z]+$")
_ALLOCATION_ID = re.compile(r"^eipalloc-[0-9a-f]+$")
_CERTIFICATE_ARN = re.compile(r"^arn:aws[a-z-]*:(acm|iam):[^:]*:[0-9]*:[^\s]+$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


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
class TlsOptions:
    """``ssl-cert``, ``ssl-ports`` (``None``: every port), ``ssl-negotiation-policy`` and
    ``backend-protocol`` (lower case; ``None`` when absent)."""

    certificate: str | None = None
    ports: PortSelection | None = None
    negotiation_policy: str | None = None
    backend_protocol: str | None = None

    def secures(self, name: str, number: int) -> bool:
        """Whether the port ``name``/``number`` gets a TLS listener with the certificate."""
        return self.certificate is not None and (
            self.ports is None or self.ports.selects(name, number)
        )


@dataclass(frozen=True)
class AccessLogOptions:
    enabled: bool = False
    emit_interval_min: int | None = None
    bucket: str = ""
    prefix: str = ""


@dataclass(frozen=True)
class ClassicAttributeOptions:
    """The Classic ELB's connection attributes; unset annotations mean upstream's defaults
    (draining off, 60 s idle timeout), so removing an annotation puts the default back."""

    connection_draining: bool = False
    connection_draining_timeout_s: int | None = None
    idle_timeout_s: int = DEFAULT_IDLE_TIMEOUT_S


@dataclass(frozen=True)
class NlbOptions:
    eip_allocations: tuple[str, ...] = ()
    private_ipv4_addresses: tuple[str, ...] = ()
    ip_address_type: str = "ipv4"
    #: Attributes to set on every target group (``target-group-attributes`` and
    #: ``proxy-protocol``); attributes not named keep their value, as upstream.
    target_group_attributes: dict[str, str] = field(default_factory=dict)


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
    tls: TlsOptions = TlsOptions()
    proxy_protocol: bool = False
    access_log: AccessLogOptions = AccessLogOptions()
    #: ``cross-zone-load-balancing-enabled``: a Classic ELB attribute, an NLB attribute.
    cross_zone: bool = False
    classic: ClassicAttributeOptions = ClassicAttributeOptions()
    nlb: NlbOptions = NlbOptions()

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with ``labels`` may be a target (``target-node-labels``)."""
        return all(labels.get(k) == v for k, v in self.target_node_labels.items())


def parse_annotations(
    annotations: Mapping[str, str], protocols: tuple[str, ...] = ()
) -> AwsLoadBalancerOptions:
    """Every supported ``aws-load-balancer-*`` annotation, checked; see the module docstring.

    ``protocols`` are the Service's port protocols (``preserve_client_ip.enabled=false`` is
    refused with UDP ports, as upstream).
    """
    raw_type = annotations.get(TYPE, "").strip().lower()
    if raw_type in HANDLED_ELSEWHERE:
        raise errors.NotSupported(NAME, f"load balancers of type {raw_type!r} (handled elsewhere)")
    if raw_type not in ("", LoadBalancerKind.NLB):
        raise invalid(f"{TYPE}: unknown type {raw_type!r} (use nlb, or omit it for a Classic ELB)")
    kind = LoadBalancerKind.NLB if raw_type == LoadBalancerKind.NLB else LoadBalancerKind.CLASSIC
    internal_value = annotations.get(INTERNAL, "").strip()
    if kind is LoadBalancerKind.NLB and EXTRA_SECURITY_GROUPS in annotations:
        raise invalid(
            f"BYO extra security group annotation {EXTRA_SECURITY_GROUPS!r} is not supported by NLB"
        )
    if kind is LoadBalancerKind.CLASSIC and TARGET_GROUP_ATTRIBUTES in annotations:
        raise invalid("target group attributes annotation is only supported for NLB")
    internal = bool(internal_value) and internal_value.lower() != "false"
    proxy_protocol = _proxy_protocol(annotations)
    return AwsLoadBalancerOptions(
        kind=kind,
        # As upstream: any value but "false" (e.g. the legacy "0.0.0.0/0") means internal.
        internal=internal,
        health_check=_health_check(annotations, kind),
        additional_tags=_tags(annotations.get(ADDITIONAL_RESOURCE_TAGS, "")),
        security_groups=_security_groups(annotations, SECURITY_GROUPS),
        extra_security_groups=_security_groups(annotations, EXTRA_SECURITY_GROUPS),
        subnets=tuple(items(annotations.get(SUBNETS, ""))),
        target_node_labels=key_values(TARGET_NODE_LABELS, annotations.get(TARGET_NODE_LABELS, "")),
        tls=_tls(annotations),
        proxy_protocol=proxy_protocol,
        access_log=_access_log(annotations),
        cross_zone=go_bool(
            CROSS_ZONE_LOAD_BALANCING_ENABLED,
            value_of(annotations, CROSS_ZONE_LOAD_BALANCING_ENABLED),
            False,
        ),
        classic=_classic_attributes(annotations),
        nlb=(
            _nlb(annotations, internal, proxy_protocol, protocols)
            if kind is LoadBalancerKind.NLB
            else NlbOptions()
        ),
    )


def source_ranges(spec_ranges: list[str], annotations: Mapping[str, str]) -> list[str]:
    """Upstream ``GetLoadBalancerSourceRanges``: ``spec.loadBalancerSourceRanges`` when set,
    else the deprecated ``load-balancer-source-ranges`` annotation; empty means anywhere."""
    if spec_ranges:
        return cidrs("spec.loadBalancerSourceRanges", [r.strip() for r in spec_ranges])
    legacy = value_of(annotations, LEGACY_SOURCE_RANGES)
    if legacy is None:
        return []
    return cidrs(LEGACY_SOURCE_RANGES, [r.strip() for r in legacy.split(",")])


def _tags(value: str) -> dict[str, str]:
    tags = key_values(ADDITIONAL_RESOURCE_TAGS, value)
    for key, val in tags.items():
        if key.lower().startswith("aws:"):
            raise invalid(f"{ADDITIONAL_RESOURCE_TAGS}: tag keys may not start with 'aws:' ({key})")
        if any(key.startswith(prefix) for prefix in RESERVED_TAG_PREFIXES):
            raise invalid(f"{ADDITIONAL_RESOURCE_TAGS}: {key!r} is set by the controller")
        if len(key) > 128 or len(val) > 256:
            raise invalid(f"{ADDITIONAL_RESOURCE_TAGS}: tag {key!r} is too long")
    return tags


def _security_groups(annotations: Mapping[str, str], annotation: str) -> tuple[str, ...]:
    groups = items(annotations.get(annotation, ""))
    for group in groups:
        if not _SECURITY_GROUP_ID.match(group):
            raise invalid(f"{annotation}: {group!r} is not a security group ID (sg-...)")
    return tuple(dict.fromkeys(groups))


def _int(annotations: Mapping[str, str], annotation: str, low: int, high: int) -> int | None:
    return bounded_int(annotation, value_of(annotations, annotation), low, high)


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


def _tls(annotations: Mapping[str, str]) -> TlsOptions:
    certificate = value_of(annotations, SSL_CERT)
    if certificate is not None and not _CERTIFICATE_ARN.match(certificate):
        raise invalid(
            f"{SSL_CERT}: {certificate!r} is not an ACM or IAM certificate ARN "
            "(arn:aws:acm:<region>:<account>:certificate/<id>)"
        )
    backend = value_of(annotations, BACKEND_PROTOCOL)
    if backend is not None:
        backend = backend.lower()
        if backend not in SECURE_FRONTEND:
            raise invalid(
                f"Invalid backend protocol {backend} in {BACKEND_PROTOCOL} "
                f"(use one of {', '.join(SECURE_FRONTEND)})"
            )
    policy = value_of(annotations, SSL_NEGOTIATION_POLICY)
    if policy is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,255}", policy):
        raise invalid(f"{SSL_NEGOTIATION_POLICY}: {policy!r} is not a policy name")
    return TlsOptions(
        certificate=certificate,
        ports=port_selection(SSL_PORTS, value_of(annotations, SSL_PORTS)),
        negotiation_policy=policy,
        backend_protocol=backend,
    )


def _proxy_protocol(annotations: Mapping[str, str]) -> bool:
    value = annotations.get(PROXY_PROTOCOL, "")
    if value == "":
        return False
    if value != "*":
        raise invalid(
            f"annotation {PROXY_PROTOCOL!r}={value!r} detected, but the only value supported "
            "currently is '*'"
        )
    return True


def _access_log(annotations: Mapping[str, str]) -> AccessLogOptions:
    enabled = go_bool(ACCESS_LOG_ENABLED, value_of(annotations, ACCESS_LOG_ENABLED), False)
    interval = _int(annotations, ACCESS_LOG_EMIT_INTERVAL, 5, 60)
    if interval is not None and interval not in (5, 60):
        raise invalid(f"{ACCESS_LOG_EMIT_INTERVAL}: {interval} is not 5 or 60 (minutes)")
    bucket = value_of(annotations, ACCESS_LOG_S3_BUCKET_NAME) or ""
    if bucket and (not _BUCKET.match(bucket) or ".." in bucket):
        raise invalid(f"{ACCESS_LOG_S3_BUCKET_NAME}: {bucket!r} is not an S3 bucket name")
    prefix = value_of(annotations, ACCESS_LOG_S3_BUCKET_PREFIX) or ""
    if prefix.startswith("/") or "AWSLogs" in prefix:
        raise invalid(
            f"{ACCESS_LOG_S3_BUCKET_PREFIX}: {prefix!r} may not start with '/' or contain AWSLogs"
        )
    if enabled and not bucket:
        raise invalid(f"{ACCESS_LOG_ENABLED}=true needs {ACCESS_LOG_S3_BUCKET_NAME}")
    return AccessLogOptions(
        enabled=enabled, emit_interval_min=interval, bucket=bucket, prefix=prefix
    )


def _classic_attributes(annotations: Mapping[str, str]) -> ClassicAttributeOptions:
    return ClassicAttributeOptions(
        connection_draining=go_bool(
            CONNECTION_DRAINING_ENABLED, value_of(annotations, CONNECTION_DRAINING_ENABLED), False
        ),
        connection_draining_timeout_s=_int(annotations, CONNECTION_DRAINING_TIMEOUT, 1, 3600),
        idle_timeout_s=_int(annotations, CONNECTION_IDLE_TIMEOUT, 1, 4000)
        or DEFAULT_IDLE_TIMEOUT_S,
    )


def _nlb(
    annotations: Mapping[str, str], internal: bool, proxy_protocol: bool, protocols: tuple[str, ...]
) -> NlbOptions:
    allocations = tuple(items(annotations.get(EIP_ALLOCATIONS, "")))
    for allocation in allocations:
        if not _ALLOCATION_ID.match(allocation):
            raise invalid(
                f"{EIP_ALLOCATIONS}: {allocation!r} is not an allocation ID (eipalloc-...)"
            )
    if len(set(allocations)) != len(allocations):
        raise invalid(f"{EIP_ALLOCATIONS}: an allocation is listed twice")
    if allocations and internal:
        raise invalid(f"{EIP_ALLOCATIONS}: Elastic IPs need an internet-facing NLB ({INTERNAL})")
    addresses = ipv4_addresses(
        PRIVATE_IPV4_ADDRESSES, value_of(annotations, PRIVATE_IPV4_ADDRESSES)
    )
    if addresses and not internal:
        raise invalid(
            f"{PRIVATE_IPV4_ADDRESSES}: private addresses need an internal NLB ({INTERNAL})"
        )
    ip_type = (value_of(annotations, IP_ADDRESS_TYPE) or "ipv4").lower()
    if ip_type not in ("ipv4", "dualstack"):
        raise invalid(f"{IP_ADDRESS_TYPE}: {ip_type!r} is not ipv4 or dualstack")
    attributes = _target_group_attributes(annotations, protocols)
    if proxy_protocol:
        if attributes.get(PROXY_PROTOCOL_V2) == "false":
            raise invalid(
                f"{PROXY_PROTOCOL}='*' contradicts {PROXY_PROTOCOL_V2}=false in "
                f"{TARGET_GROUP_ATTRIBUTES}"
            )
        attributes[PROXY_PROTOCOL_V2] = "true"
    return NlbOptions(
        eip_allocations=allocations,
        private_ipv4_addresses=addresses,
        ip_address_type=ip_type,
        target_group_attributes=attributes,
    )


def _target_group_attributes(
    annotations: Mapping[str, str], protocols: tuple[str, ...]
) -> dict[str, str]:
    """Upstream ``validateServiceAnnotationTargetGroupAttributes``, duplicates included."""
    prefix = "error validating target group attributes"
    found: dict[str, str] = {}
    for item in items(annotations.get(TARGET_GROUP_ATTRIBUTES, "")):
        key, _, value = (part.strip() for part in item.partition("="))
        if key in found:
            raise invalid(f"{prefix}: {key!r} is set twice in the annotation")
        if not value:
            raise invalid(f"{prefix}: attribute value is empty for {key!r}")
        if key not in TARGET_GROUP_ATTRIBUTE_KEYS:
            raise invalid(
                f"{prefix}: the attribute {key!r} is not supported by the controller or is invalid"
            )
        if value not in ("true", "false"):
            raise invalid(f"{prefix}: invalid attribute value for {key!r}: {value}")
        if key == PRESERVE_CLIENT_IP and value == "false" and "UDP" in protocols:
            raise invalid(f"{prefix}: client IP preservation can't be disabled for UDP ports")
        found[key] = value
    return found
