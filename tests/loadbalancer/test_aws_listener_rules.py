"""The TLS, protocol and attribute annotations: parsing, upstream's listener table, attribute
defaults and the plans that turn what the cloud has into what the Service asks for."""

from __future__ import annotations

from typing import Any

import pytest

from cloudloop.cloud import errors
from cloudloop.cloud.aws.loadbalancers import classic_health_check
from cloudloop.cloud.aws.loadbalancers import service_annotations as ann
from cloudloop.cloud.aws.loadbalancers.attributes import (
    CLASSIC_DEFAULTS,
    classic_attribute_changes,
    classic_attributes,
    nlb_attributes,
)
from cloudloop.cloud.aws.loadbalancers.classic import (
    listener_policy_changes,
    proxy_protocol_changes,
)
from cloudloop.cloud.aws.loadbalancers.listeners import (
    classic_listeners,
    nlb_listener_differs,
    nlb_port_mappings,
    plan_classic_listeners,
)
from cloudloop.cloud.aws.loadbalancers.nlb import (
    allocations_of,
    mapping_differences,
    subnet_mappings,
)
from cloudloop.cloud.aws.loadbalancers.parts import Network
from cloudloop.cloud.aws.loadbalancers.service_annotations import parse_annotations, source_ranges
from cloudloop.cloud.models import LoadBalancerPort, LoadBalancerSpec

CERT = "arn:aws:acm:us-east-1:123456789012:certificate/0123abcd-0000-0000-0000-000000000000"


def spec(*ports: tuple[str, int, int] | tuple[str, int, int, str]) -> LoadBalancerSpec:
    return LoadBalancerSpec(
        name="a0123456789abcdef0123456789abcde",
        cluster="prod",
        service="shop/web",
        service_uid="01234567-89ab-cdef-0123-456789abcdef",
        ports=[
            LoadBalancerPort(
                name=p[0], port=p[1], node_port=p[2], protocol=p[3] if len(p) > 3 else "TCP"
            )
            for p in ports
        ]
        or [
            LoadBalancerPort(name="http", port=80, node_port=30080),
            LoadBalancerPort(name="https", port=443, node_port=30443),
        ],
        backend_instance_ids=[],
    )


def shapes(listeners: list[dict[str, Any]]) -> dict[int, tuple[str, str, bool]]:
    return {
        lst["LoadBalancerPort"]: (
            lst["Protocol"],
            lst["InstanceProtocol"],
            "SSLCertificateId" in lst,
        )
        for lst in listeners
    }


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, {80: ("TCP", "TCP", False), 443: ("TCP", "TCP", False)}, id="plain"),
        pytest.param(
            {ann.SSL_CERT: CERT},
            {80: ("SSL", "TCP", True), 443: ("SSL", "TCP", True)},
            id="cert-all-ports-ssl",
        ),
        pytest.param(
            {ann.SSL_CERT: CERT, ann.SSL_PORTS: "443"},
            {80: ("TCP", "TCP", False), 443: ("SSL", "TCP", True)},
            id="ssl-ports-number",
        ),
        pytest.param(
            {ann.SSL_CERT: CERT, ann.SSL_PORTS: "https", ann.BACKEND_PROTOCOL: "http"},
            {80: ("HTTP", "HTTP", False), 443: ("HTTPS", "HTTP", True)},
            id="ssl-ports-name-http-backend",
        ),
        pytest.param(
            {ann.SSL_CERT: CERT, ann.SSL_PORTS: "*", ann.BACKEND_PROTOCOL: "https"},
            {80: ("HTTPS", "HTTPS", True), 443: ("HTTPS", "HTTPS", True)},
            id="star-https-backend",
        ),
        pytest.param(
            {ann.SSL_CERT: CERT, ann.SSL_PORTS: "443", ann.BACKEND_PROTOCOL: "tcp"},
            {80: ("TCP", "TCP", False), 443: ("SSL", "TCP", True)},
            id="tcp-backend",
        ),
        pytest.param(
            {ann.SSL_CERT: CERT, ann.SSL_PORTS: "443", ann.BACKEND_PROTOCOL: "ssl"},
            {80: ("TCP", "TCP", False), 443: ("SSL", "SSL", True)},
            id="ssl-backend",
        ),
        pytest.param(
            {ann.BACKEND_PROTOCOL: "http"},
            {80: ("HTTP", "HTTP", False), 443: ("HTTP", "HTTP", False)},
            id="http-without-cert",
        ),
        pytest.param(
            {ann.BACKEND_PROTOCOL: "HTTPS"},
            {80: ("TCP", "TCP", False), 443: ("TCP", "TCP", False)},
            id="https-without-cert-is-tcp",
        ),
    ],
)
def test_classic_listeners_follow_upstream(
    annotations: dict[str, str], expected: dict[int, tuple[str, str, bool]]
) -> None:
    options = parse_annotations(annotations)
    assert shapes(classic_listeners(spec(), options.tls)) == expected


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, {80: ("TCP", "TCP"), 443: ("TCP", "TCP"), 53: ("UDP", "UDP")}, id="plain"),
        pytest.param(
            {ann.SSL_CERT: CERT},
            {80: ("TLS", "TCP"), 443: ("TLS", "TCP"), 53: ("UDP", "UDP")},
            id="tls-but-never-udp",
        ),
        pytest.param(
            {ann.SSL_CERT: CERT, ann.SSL_PORTS: "https", ann.BACKEND_PROTOCOL: "ssl"},
            {80: ("TCP", "TCP"), 443: ("TLS", "TLS"), 53: ("UDP", "UDP")},
            id="tls-to-tls-backend",
        ),
    ],
)
def test_nlb_port_mappings(
    annotations: dict[str, str], expected: dict[int, tuple[str, str]]
) -> None:
    options = parse_annotations({ann.TYPE: "nlb", **annotations})
    service = spec(("http", 80, 30080), ("https", 443, 30443), ("dns", 53, 30053, "UDP"))
    mappings = nlb_port_mappings(service, options.tls)
    assert {m.port.port: (m.frontend_protocol, m.traffic_protocol) for m in mappings} == expected


def test_nlb_listener_compares_tls_settings() -> None:
    options = parse_annotations(
        {
            ann.TYPE: "nlb",
            ann.SSL_CERT: CERT,
            ann.SSL_NEGOTIATION_POLICY: "ELBSecurityPolicy-2016-08",
        }
    )
    [mapping] = nlb_port_mappings(spec(("https", 443, 30443)), options.tls)
    listener = {
        "Protocol": "TLS",
        "DefaultActions": [{"TargetGroupArn": "tg"}],
        "Certificates": [{"CertificateArn": CERT}],
        "SslPolicy": "ELBSecurityPolicy-2016-08",
    }
    assert not nlb_listener_differs(listener, mapping, "tg")
    assert nlb_listener_differs({**listener, "SslPolicy": "other"}, mapping, "tg")
    assert nlb_listener_differs({**listener, "Certificates": []}, mapping, "tg")
    assert nlb_listener_differs(listener, mapping, "other-tg")
    no_policy = nlb_port_mappings(
        spec(("https", 443, 30443)), parse_annotations({ann.SSL_CERT: CERT}).tls
    )
    assert not nlb_listener_differs({**listener, "SslPolicy": "AWS-default"}, no_policy[0], "tg")


def test_plan_classic_listeners() -> None:
    current = [
        {
            "Listener": {
                "Protocol": "TCP",
                "LoadBalancerPort": 80,
                "InstanceProtocol": "TCP",
                "InstancePort": 30080,
            }
        },
        {
            "Listener": {
                "Protocol": "SSL",
                "LoadBalancerPort": 443,
                "InstanceProtocol": "TCP",
                "InstancePort": 30443,
                "SSLCertificateId": "arn:aws:acm:us-east-1:1:certificate/old",
            }
        },
        {
            "Listener": {
                "Protocol": "TCP",
                "LoadBalancerPort": 8080,
                "InstanceProtocol": "TCP",
                "InstancePort": 30808,
            }
        },
    ]
    wanted = [
        {
            "Protocol": "HTTP",
            "LoadBalancerPort": 80,
            "InstanceProtocol": "HTTP",
            "InstancePort": 30080,
        },
        {
            "Protocol": "SSL",
            "LoadBalancerPort": 443,
            "InstanceProtocol": "TCP",
            "InstancePort": 30443,
            "SSLCertificateId": CERT,
        },
        {
            "Protocol": "TCP",
            "LoadBalancerPort": 9090,
            "InstanceProtocol": "TCP",
            "InstancePort": 30909,
        },
    ]
    plan = plan_classic_listeners(current, wanted)
    assert plan.delete == [80, 8080]
    assert [lst["LoadBalancerPort"] for lst in plan.create] == [80, 9090]
    assert plan.certificates == {443: CERT}
    assert plan_classic_listeners([{"Listener": w} for w in wanted], wanted).empty


def test_proxy_protocol_and_listener_policies() -> None:
    listeners = classic_listeners(
        spec(), parse_annotations({ann.SSL_CERT: CERT, ann.SSL_PORTS: "443"}).tls
    )
    described = {
        "BackendServerDescriptions": [
            {"InstancePort": 30080, "PolicyNames": ["k8s-proxyprotocol-enabled"]},
            {"InstancePort": 31999, "PolicyNames": ["k8s-proxyprotocol-enabled"]},
        ],
        "ListenerDescriptions": [
            {
                "Listener": listeners[1],
                "PolicyNames": ["k8s-SSLNegotiationPolicy-ELBSecurityPolicy-2016-08"],
            }
        ],
    }
    assert proxy_protocol_changes(described, listeners, True) == {
        30443: ["k8s-proxyprotocol-enabled"],
        31999: [],
    }
    assert proxy_protocol_changes(described, listeners, False) == {30080: [], 31999: []}
    assert listener_policy_changes(described, listeners, "ELBSecurityPolicy-2016-08") == []
    assert listener_policy_changes(described, listeners, "ELBSecurityPolicy-2016-08", {443}) == [
        443
    ]
    assert listener_policy_changes(described, listeners, "ELBSecurityPolicy-TLS-1-2-2017-01") == [
        443
    ]
    assert listener_policy_changes(described, listeners, None) == []


@pytest.mark.parametrize(
    ("annotations", "target"),
    [
        pytest.param({}, "TCP:30080", id="tcp"),
        pytest.param({ann.BACKEND_PROTOCOL: "https"}, "SSL:30080", id="https-backend-ssl-check"),
        pytest.param({ann.BACKEND_PROTOCOL: "ssl"}, "SSL:30080", id="ssl-backend-ssl-check"),
        pytest.param({ann.BACKEND_PROTOCOL: "http"}, "TCP:30080", id="http-backend-tcp-check"),
        pytest.param(
            {ann.BACKEND_PROTOCOL: "https", ann.HEALTHCHECK_PROTOCOL: "HTTPS"},
            "HTTPS:30080/",
            id="annotation-wins",
        ),
    ],
)
def test_classic_health_check_follows_backend_protocol(
    annotations: dict[str, str], target: str
) -> None:
    options = parse_annotations(annotations)
    check = classic_health_check(spec(), options.health_check, options.tls.backend_protocol)
    assert check["Target"] == target


def test_classic_attributes_defaults_and_changes() -> None:
    defaults = classic_attributes(parse_annotations({}))
    assert classic_attribute_changes(CLASSIC_DEFAULTS, defaults) == []
    wanted = classic_attributes(
        parse_annotations(
            {
                ann.ACCESS_LOG_ENABLED: "true",
                ann.ACCESS_LOG_S3_BUCKET_NAME: "logs",
                ann.ACCESS_LOG_S3_BUCKET_PREFIX: "web",
                ann.ACCESS_LOG_EMIT_INTERVAL: "5",
                ann.CONNECTION_DRAINING_ENABLED: "true",
                ann.CONNECTION_DRAINING_TIMEOUT: "30",
                ann.CONNECTION_IDLE_TIMEOUT: "120",
                ann.CROSS_ZONE_LOAD_BALANCING_ENABLED: "true",
            }
        )
    )
    assert wanted == {
        "CrossZoneLoadBalancing": {"Enabled": True},
        "AccessLog": {
            "Enabled": True,
            "S3BucketName": "logs",
            "S3BucketPrefix": "web",
            "EmitInterval": 5,
        },
        "ConnectionDraining": {"Enabled": True, "Timeout": 30},
        "ConnectionSettings": {"IdleTimeout": 120},
    }
    assert sorted(classic_attribute_changes(CLASSIC_DEFAULTS, wanted)) == sorted(
        [
            "CrossZoneLoadBalancing.Enabled",
            "AccessLog.Enabled",
            "AccessLog.S3BucketName",
            "AccessLog.S3BucketPrefix",
            "AccessLog.EmitInterval",
            "ConnectionDraining.Enabled",
            "ConnectionDraining.Timeout",
            "ConnectionSettings.IdleTimeout",
        ]
    )
    # A feature switched off: its other settings do not count.
    assert classic_attribute_changes({**wanted, "AccessLog": {"Enabled": False}}, defaults) == [
        "CrossZoneLoadBalancing.Enabled",
        "ConnectionDraining.Enabled",
        "ConnectionSettings.IdleTimeout",
    ]


def test_nlb_attributes() -> None:
    assert nlb_attributes(parse_annotations({ann.TYPE: "nlb"})) == {
        "load_balancing.cross_zone.enabled": "false",
        "access_logs.s3.enabled": "false",
    }
    options = parse_annotations(
        {
            ann.TYPE: "nlb",
            ann.CROSS_ZONE_LOAD_BALANCING_ENABLED: "1",
            ann.ACCESS_LOG_ENABLED: "true",
            ann.ACCESS_LOG_S3_BUCKET_NAME: "logs",
        }
    )
    assert nlb_attributes(options) == {
        "load_balancing.cross_zone.enabled": "true",
        "access_logs.s3.enabled": "true",
        "access_logs.s3.bucket": "logs",
        "access_logs.s3.prefix": "",
    }


@pytest.mark.parametrize(
    ("annotations", "field", "value"),
    [
        pytest.param(
            {ann.SSL_PORTS: "443, https"}, "tls.ports.numbers", frozenset({443}), id="ssl-ports"
        ),
        pytest.param({ann.SSL_PORTS: "*"}, "tls.ports", None, id="ssl-ports-star"),
        pytest.param(
            {ann.BACKEND_PROTOCOL: "HTTP"}, "tls.backend_protocol", "http", id="backend-any-case"
        ),
        pytest.param({ann.PROXY_PROTOCOL: "*"}, "proxy_protocol", True, id="proxy-protocol"),
        pytest.param(
            {ann.CONNECTION_DRAINING_ENABLED: "T"},
            "classic.connection_draining",
            True,
            id="go-bool",
        ),
        pytest.param(
            {ann.CONNECTION_IDLE_TIMEOUT: "3600"}, "classic.idle_timeout_s", 3600, id="idle"
        ),
        pytest.param(
            {ann.CROSS_ZONE_LOAD_BALANCING_ENABLED: "false"}, "cross_zone", False, id="cross-zone"
        ),
        pytest.param(
            {ann.TYPE: "nlb", ann.EIP_ALLOCATIONS: "eipalloc-0a, eipalloc-0b"},
            "nlb.eip_allocations",
            ("eipalloc-0a", "eipalloc-0b"),
            id="eips",
        ),
        pytest.param(
            {
                ann.TYPE: "nlb",
                ann.INTERNAL: "true",
                ann.PRIVATE_IPV4_ADDRESSES: "10.0.1.10,10.0.2.10",
            },
            "nlb.private_ipv4_addresses",
            ("10.0.1.10", "10.0.2.10"),
            id="private-addresses",
        ),
        pytest.param(
            {ann.TYPE: "nlb", ann.IP_ADDRESS_TYPE: "DualStack"},
            "nlb.ip_address_type",
            "dualstack",
            id="dualstack",
        ),
        pytest.param(
            {ann.TYPE: "nlb", ann.TARGET_GROUP_ATTRIBUTES: "preserve_client_ip.enabled=false"},
            "nlb.target_group_attributes",
            {"preserve_client_ip.enabled": "false"},
            id="tg-attributes",
        ),
        pytest.param(
            {ann.TYPE: "nlb", ann.PROXY_PROTOCOL: "*"},
            "nlb.target_group_attributes",
            {"proxy_protocol_v2.enabled": "true"},
            id="nlb-proxy-protocol-is-a-tg-attribute",
        ),
        pytest.param(
            {ann.EIP_ALLOCATIONS: "eipalloc-0a"},
            "nlb.eip_allocations",
            (),
            id="eips-ignored-on-classic",
        ),
    ],
)
def test_parse_new_annotations(annotations: dict[str, str], field: str, value: object) -> None:
    found: Any = parse_annotations(annotations)
    for part in field.split("."):
        found = getattr(found, part)
    assert found == value


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        pytest.param(
            {ann.SSL_CERT: "my-cert"}, "not an ACM or IAM certificate ARN", id="cert-not-arn"
        ),
        pytest.param({ann.SSL_PORTS: "443,70000"}, "not a port number", id="ssl-port-range"),
        pytest.param({ann.SSL_PORTS: "443,*"}, "cannot be listed", id="ssl-port-star-mixed"),
        pytest.param(
            {ann.SSL_NEGOTIATION_POLICY: "bad policy"}, "not a policy name", id="policy-name"
        ),
        pytest.param({ann.BACKEND_PROTOCOL: "grpc"}, "Invalid backend protocol grpc", id="backend"),
        pytest.param(
            {ann.PROXY_PROTOCOL: "true"}, "the only value supported currently is '*'", id="proxy"
        ),
        pytest.param({ann.ACCESS_LOG_ENABLED: "yes"}, "not a boolean", id="access-log-bool"),
        pytest.param({ann.ACCESS_LOG_ENABLED: "true"}, "needs", id="access-log-no-bucket"),
        pytest.param({ann.ACCESS_LOG_EMIT_INTERVAL: "10"}, "not 5 or 60", id="emit-interval"),
        pytest.param(
            {ann.ACCESS_LOG_EMIT_INTERVAL: "soon"}, "not a number", id="emit-interval-nan"
        ),
        pytest.param(
            {ann.ACCESS_LOG_S3_BUCKET_NAME: "My_Bucket"}, "not an S3 bucket name", id="bucket"
        ),
        pytest.param({ann.ACCESS_LOG_S3_BUCKET_PREFIX: "/logs"}, "may not start with", id="prefix"),
        pytest.param({ann.CONNECTION_DRAINING_ENABLED: "on"}, "not a boolean", id="draining-bool"),
        pytest.param(
            {ann.CONNECTION_DRAINING_TIMEOUT: "0"}, "outside 1..3600", id="draining-timeout"
        ),
        pytest.param({ann.CONNECTION_IDLE_TIMEOUT: "4001"}, "outside 1..4000", id="idle-timeout"),
        pytest.param(
            {ann.CROSS_ZONE_LOAD_BALANCING_ENABLED: "yes"}, "not a boolean", id="cross-zone"
        ),
        pytest.param(
            {ann.TYPE: "nlb", ann.EIP_ALLOCATIONS: "eip-1"}, "not an allocation ID", id="eip-syntax"
        ),
        pytest.param(
            {ann.TYPE: "nlb", ann.EIP_ALLOCATIONS: "eipalloc-1,eipalloc-1"},
            "listed twice",
            id="eip-twice",
        ),
        pytest.param(
            {ann.TYPE: "nlb", ann.INTERNAL: "true", ann.EIP_ALLOCATIONS: "eipalloc-1"},
            "internet-facing",
            id="eip-internal",
        ),
        pytest.param(
            {ann.TYPE: "nlb", ann.PRIVATE_IPV4_ADDRESSES: "10.0.1.10"},
            "need an internal NLB",
            id="private-public",
        ),
        pytest.param(
            {ann.TYPE: "nlb", ann.INTERNAL: "true", ann.PRIVATE_IPV4_ADDRESSES: "10.0.1.300"},
            "not an IPv4 address",
            id="private-syntax",
        ),
        pytest.param(
            {ann.TYPE: "nlb", ann.IP_ADDRESS_TYPE: "ipv6"}, "not ipv4 or dualstack", id="ip-type"
        ),
        pytest.param(
            {ann.TARGET_GROUP_ATTRIBUTES: "proxy_protocol_v2.enabled=true"},
            "only supported for NLB",
            id="tg-classic",
        ),
        pytest.param(
            {
                ann.TYPE: "nlb",
                ann.TARGET_GROUP_ATTRIBUTES: "deregistration_delay.timeout_seconds=5",
            },
            "not supported by the controller",
            id="tg-unknown",
        ),
        pytest.param(
            {ann.TYPE: "nlb", ann.TARGET_GROUP_ATTRIBUTES: "proxy_protocol_v2.enabled=yes"},
            "invalid attribute value",
            id="tg-value",
        ),
        pytest.param(
            {ann.TYPE: "nlb", ann.TARGET_GROUP_ATTRIBUTES: "proxy_protocol_v2.enabled="},
            "value is empty",
            id="tg-empty",
        ),
        pytest.param(
            {
                ann.TYPE: "nlb",
                ann.TARGET_GROUP_ATTRIBUTES: (
                    "proxy_protocol_v2.enabled=true,proxy_protocol_v2.enabled=false"
                ),
            },
            "set twice",
            id="tg-twice",
        ),
        pytest.param(
            {
                ann.TYPE: "nlb",
                ann.PROXY_PROTOCOL: "*",
                ann.TARGET_GROUP_ATTRIBUTES: "proxy_protocol_v2.enabled=false",
            },
            "contradicts",
            id="proxy-contradiction",
        ),
        pytest.param(
            {ann.TYPE: "nlb", ann.EXTRA_SECURITY_GROUPS: "sg-1"},
            "not supported by NLB",
            id="nlb-extra-sg",
        ),
    ],
)
def test_invalid_new_annotations(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(errors.InvalidRequest) as err:
        parse_annotations(annotations)
    assert message in str(err.value)


def test_udp_ports_keep_client_ip() -> None:
    annotations = {ann.TYPE: "nlb", ann.TARGET_GROUP_ATTRIBUTES: "preserve_client_ip.enabled=false"}
    with pytest.raises(errors.InvalidRequest, match="can't be disabled for UDP"):
        parse_annotations(annotations, ("TCP", "UDP"))


@pytest.mark.parametrize(
    ("spec_ranges", "annotation", "expected"),
    [
        pytest.param([], None, [], id="anywhere"),
        pytest.param(
            [], " 10.0.0.0/8, 192.168.1.7/24 ", ["10.0.0.0/8", "192.168.1.0/24"], id="legacy"
        ),
        pytest.param(["172.16.0.0/12"], "10.0.0.0/8", ["172.16.0.0/12"], id="field-wins"),
        pytest.param([], "2001:db8::/32", ["2001:db8::/32"], id="ipv6"),
    ],
)
def test_source_ranges(spec_ranges: list[str], annotation: str | None, expected: list[str]) -> None:
    annotations = {} if annotation is None else {ann.LEGACY_SOURCE_RANGES: annotation}
    assert source_ranges(spec_ranges, annotations) == expected


@pytest.mark.parametrize("value", ["10.0.0.0/33", "10.0.0.1", "everyone"])
def test_invalid_legacy_source_ranges(value: str) -> None:
    with pytest.raises(errors.InvalidRequest, match="load-balancer-source-ranges"):
        source_ranges([], {ann.LEGACY_SOURCE_RANGES: value})


def _network(*cidrs: str, ipv6: bool = False) -> Network:
    ids = [f"subnet-{i}" for i in range(len(cidrs))]
    return Network(
        vpc_id="vpc-1",
        subnet_ids=ids,
        cidrs=sorted(cidrs),
        subnet_cidrs=dict(zip(ids, cidrs, strict=True)),
        ipv6_subnets=frozenset(ids if ipv6 else ()),
    )


def test_subnet_mappings_pair_addresses_with_subnets() -> None:
    network = _network("10.0.1.0/24", "10.0.2.0/24")
    eips = parse_annotations({ann.TYPE: "nlb", ann.EIP_ALLOCATIONS: "eipalloc-0b,eipalloc-0a"})
    assert subnet_mappings(network, eips) == [
        {"SubnetId": "subnet-0", "AllocationId": "eipalloc-0b"},
        {"SubnetId": "subnet-1", "AllocationId": "eipalloc-0a"},
    ]
    private = parse_annotations(
        {ann.TYPE: "nlb", ann.INTERNAL: "true", ann.PRIVATE_IPV4_ADDRESSES: "10.0.1.5,10.0.2.5"}
    )
    assert [m["PrivateIPv4Address"] for m in subnet_mappings(network, private)] == [
        "10.0.1.5",
        "10.0.2.5",
    ]
    assert subnet_mappings(network, parse_annotations({ann.TYPE: "nlb"})) == [
        {"SubnetId": "subnet-0"},
        {"SubnetId": "subnet-1"},
    ]


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        pytest.param(
            {ann.EIP_ALLOCATIONS: "eipalloc-0a"},
            "Must have same number of EIP AllocationIDs (1) and SubnetIDs (2)",
            id="one-eip-two-subnets",
        ),
        pytest.param(
            {ann.INTERNAL: "true", ann.PRIVATE_IPV4_ADDRESSES: "10.0.1.5"},
            "Must have same number of Private IPv4Addresses (1) and SubnetIDs (2)",
            id="one-address-two-subnets",
        ),
        pytest.param(
            {ann.INTERNAL: "true", ann.PRIVATE_IPV4_ADDRESSES: "10.0.2.5,10.0.1.5"},
            "10.0.2.5 is not in subnet-0",
            id="address-in-the-other-subnet",
        ),
        pytest.param(
            {ann.IP_ADDRESS_TYPE: "dualstack"}, "needs IPv6 CIDRs", id="dualstack-v4-only"
        ),
    ],
)
def test_subnet_mappings_refuse(annotations: dict[str, str], message: str) -> None:
    options = parse_annotations({ann.TYPE: "nlb", **annotations})
    with pytest.raises(errors.InvalidRequest) as err:
        subnet_mappings(_network("10.0.1.0/24", "10.0.2.0/24"), options)
    assert message in str(err.value)


def test_mapping_differences_name_what_is_fixed_at_creation() -> None:
    existing = {
        "AvailabilityZones": [
            {"SubnetId": "subnet-0", "LoadBalancerAddresses": [{"AllocationId": "eipalloc-0a"}]},
            {"SubnetId": "subnet-1", "LoadBalancerAddresses": [{"AllocationId": "eipalloc-0b"}]},
        ]
    }
    same = [
        {"SubnetId": "subnet-0", "AllocationId": "eipalloc-0a"},
        {"SubnetId": "subnet-1", "AllocationId": "eipalloc-0b"},
    ]
    assert mapping_differences(existing, same) == []
    swapped = [
        {"SubnetId": "subnet-0", "AllocationId": "eipalloc-0b"},
        {"SubnetId": "subnet-1", "AllocationId": "eipalloc-0a"},
    ]
    assert len(mapping_differences(existing, swapped)) == 2
    assert allocations_of(existing) == {"eipalloc-0a", "eipalloc-0b"}
    assert "subnets" in mapping_differences(existing, [{"SubnetId": "subnet-9"}])[0]
