"""Each AWS load-balancer annotation against the real stack (kube-apiserver, Temporal, moto): a
valid value shapes the cloud LB as upstream would; then an invalid value gives a Warning Event
naming it and changes nothing in the cloud (compared before and after)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import REGISTRY

from cloudloop.cloud.aws.loadbalancers import service_annotations as ann
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.resources import SERVICES
from tests.helpers import eventually
from tests.loadbalancer.support import AwsWorld, events, ingress, lb_name, make_service

pytestmark = pytest.mark.stack

CLASSIC_POLICY = "ELBSecurityPolicy-TLS-1-2-2017-01"
NLB_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"
UNKNOWN_CERT = "arn:aws:acm:us-east-1:123456789012:certificate/00000000-0000-0000-0000-000000000000"

Check = Callable[[AwsWorld, str, dict[str, Any]], None]


@dataclass
class Case:
    """One annotation: the valid annotations (``{cert}`` is replaced by a real certificate),
    what the cloud must then show, and an invalid change with a word of its Event message."""

    annotations: dict[str, str]
    check: Check
    invalid: dict[str, str | None]
    message: str
    setup: Callable[[AwsWorld], dict[str, str]] = field(default=lambda world: {})


# -- what the cloud shows -------------------------------------------------------------------------
def listeners(world: AwsWorld, name: str) -> dict[int, dict[str, Any]]:
    lb = world.classic(name) or {}
    return {d["Listener"]["LoadBalancerPort"]: d for d in lb.get("ListenerDescriptions", [])}


def shape(description: dict[str, Any]) -> tuple[str, str, str]:
    listener = description["Listener"]
    return listener["Protocol"], listener["InstanceProtocol"], listener.get("SSLCertificateId", "")


def classic_attributes(world: AwsWorld, name: str) -> dict[str, Any]:
    found: dict[str, Any] = world.client("elb").describe_load_balancer_attributes(
        LoadBalancerName=name
    )["LoadBalancerAttributes"]
    return found


def nlb_listeners(world: AwsWorld, name: str) -> dict[int, dict[str, Any]]:
    [nlb] = world.nlbs(name)
    found = world.client("elbv2").describe_listeners(LoadBalancerArn=nlb["LoadBalancerArn"])
    return {lst["Port"]: lst for lst in found["Listeners"]}


def nlb_attributes(world: AwsWorld, name: str) -> dict[str, str]:
    [nlb] = world.nlbs(name)
    found = world.client("elbv2").describe_load_balancer_attributes(
        LoadBalancerArn=nlb["LoadBalancerArn"]
    )
    return {a["Key"]: a["Value"] for a in found["Attributes"]}


def group_attributes(world: AwsWorld, name: str) -> list[dict[str, str]]:
    v2 = world.client("elbv2")
    return [
        {
            a["Key"]: a["Value"]
            for a in v2.describe_target_group_attributes(TargetGroupArn=g["TargetGroupArn"])[
                "Attributes"
            ]
        }
        for g in world.target_groups(name)
    ]


def eips(count: int) -> Callable[[AwsWorld], dict[str, str]]:
    def allocate(world: AwsWorld) -> dict[str, str]:
        ec2 = world.client("ec2")
        ids = [ec2.allocate_address(Domain="vpc")["AllocationId"] for _ in range(count)]
        return {"eips": ",".join(ids), "eip0": ids[0]}

    return allocate


def dualstack(world: AwsWorld) -> dict[str, str]:
    world.enable_ipv6()
    return {}


# -- checks -------------------------------------------------------------------------------------
def check_cert(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    found = listeners(world, name)
    assert {p: shape(d) for p, d in found.items()} == {
        80: ("SSL", "TCP", values["cert"]),
        443: ("SSL", "TCP", values["cert"]),
    }
    lb = world.classic(name) or {}
    assert lb["HealthCheck"]["Target"].startswith("TCP:")


def check_ssl_ports(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    found = {p: shape(d) for p, d in listeners(world, name).items()}
    assert found == {80: ("TCP", "TCP", ""), 443: ("SSL", "TCP", values["cert"])}


def check_negotiation_policy(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    found = listeners(world, name)
    policy = f"k8s-SSLNegotiationPolicy-{CLASSIC_POLICY}"
    assert found[443]["PolicyNames"] == [policy] and found[80]["PolicyNames"] == []
    [described] = world.client("elb").describe_load_balancer_policies(
        LoadBalancerName=name, PolicyNames=[policy]
    )["PolicyDescriptions"]
    assert described["PolicyAttributeDescriptions"] == [
        {"AttributeName": "Reference-Security-Policy", "AttributeValue": CLASSIC_POLICY}
    ]


def check_backend_http(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    found = {p: shape(d) for p, d in listeners(world, name).items()}
    assert found == {80: ("HTTP", "HTTP", ""), 443: ("HTTPS", "HTTP", values["cert"])}


def check_backend_ssl(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    found = {p: shape(d) for p, d in listeners(world, name).items()}
    assert found == {80: ("SSL", "SSL", values["cert"]), 443: ("SSL", "SSL", values["cert"])}
    lb = world.classic(name) or {}
    assert lb["HealthCheck"]["Target"].startswith("SSL:")  # upstream: SSL check for ssl/https


def check_proxy_protocol(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    lb = world.classic(name) or {}
    node_ports = {d["Listener"]["InstancePort"] for d in lb["ListenerDescriptions"]}
    assert {b["InstancePort"]: b["PolicyNames"] for b in lb["BackendServerDescriptions"]} == {
        port: ["k8s-proxyprotocol-enabled"] for port in node_ports
    }


def check_draining(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    assert classic_attributes(world, name)["ConnectionDraining"] == {"Enabled": True, "Timeout": 42}


def check_idle_timeout(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    assert classic_attributes(world, name)["ConnectionSettings"] == {"IdleTimeout": 600}


def check_cross_zone(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    assert classic_attributes(world, name)["CrossZoneLoadBalancing"] == {"Enabled": True}


def check_access_log(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    assert classic_attributes(world, name)["AccessLog"] == {
        "Enabled": True,
        "S3BucketName": "cloudloop-logs",
        "S3BucketPrefix": "web",
        "EmitInterval": 5,
    }


def check_source_ranges(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    client_rules = {(r["FromPort"], r["CidrIpv4"]) for r in world.rules(name)}
    assert client_rules == {
        (80, "10.0.0.0/8"),
        (443, "10.0.0.0/8"),
        (80, "192.168.0.0/16"),
        (443, "192.168.0.0/16"),
    }


def check_nlb_tls(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    found = nlb_listeners(world, name)
    assert found[80]["Protocol"] == "TCP" and not found[80].get("Certificates")
    assert found[443]["Protocol"] == "TLS"
    assert found[443]["Certificates"] == [{"CertificateArn": values["cert"]}]
    assert found[443]["SslPolicy"] == NLB_POLICY
    assert sorted(g["Protocol"] for g in world.target_groups(name)) == ["TCP", "TCP"]


def check_nlb_tls_backend(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    found = nlb_listeners(world, name)
    assert {p: lst["Protocol"] for p, lst in found.items()} == {80: "TLS", 443: "TLS"}
    assert sorted(g["Protocol"] for g in world.target_groups(name)) == ["TLS", "TLS"]


def check_eips(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    [nlb] = world.nlbs(name)
    allocations = [
        address["AllocationId"]
        for zone in nlb["AvailabilityZones"]
        for address in zone["LoadBalancerAddresses"]
    ]
    assert sorted(allocations) == sorted(values["eips"].split(","))


def check_private_addresses(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    [nlb] = world.nlbs(name)
    assert nlb["Scheme"] == "internal"
    assert {
        zone["SubnetId"]: zone["LoadBalancerAddresses"][0]["PrivateIPv4Address"]
        for zone in nlb["AvailabilityZones"]
    } == dict(zip(world.subnet_ids, ["10.0.1.20", "10.0.2.20"], strict=True))


def check_dualstack(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    [nlb] = world.nlbs(name)
    assert nlb["IpAddressType"] == "dualstack"


def check_group_attributes(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    found = group_attributes(world, name)
    assert len(found) == 2
    for attributes in found:
        assert attributes["preserve_client_ip.enabled"] == "false"
        assert attributes["proxy_protocol_v2.enabled"] == "true"


def check_nlb_proxy_protocol(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    for attributes in group_attributes(world, name):
        assert attributes["proxy_protocol_v2.enabled"] == "true"


def check_nlb_cross_zone(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    found = nlb_attributes(world, name)
    assert found["load_balancing.cross_zone.enabled"] == "true"
    assert found["access_logs.s3.enabled"] == "true"
    assert found["access_logs.s3.bucket"] == "cloudloop-logs"


def check_nlb_health_check(world: AwsWorld, name: str, values: dict[str, Any]) -> None:
    for group in world.target_groups(name):
        assert group["HealthCheckProtocol"] == "HTTPS"
        assert group["HealthCheckPath"] == "/ready"
        assert group["HealthCheckPort"] == "8443"


NLB = {ann.TYPE: "nlb"}
ACCESS_LOG_INVALID: list[tuple[str, dict[str, str | None], str]] = [
    ("access-log-enabled", {ann.ACCESS_LOG_ENABLED: "on"}, "not a boolean"),
    ("access-log-emit-interval", {ann.ACCESS_LOG_EMIT_INTERVAL: "15"}, "not 5 or 60"),
    (
        "access-log-s3-bucket-name",
        {ann.ACCESS_LOG_S3_BUCKET_NAME: "Logs_Bucket"},
        "not an S3 bucket name",
    ),
    (
        "access-log-s3-bucket-name-missing",
        {ann.ACCESS_LOG_S3_BUCKET_NAME: None},
        "needs service.beta.kubernetes.io/aws-load-balancer-access-log-s3-bucket-name",
    ),
    (
        "access-log-s3-bucket-prefix",
        {ann.ACCESS_LOG_S3_BUCKET_PREFIX: "AWSLogs/x"},
        "AWSLogs",
    ),
]
CASES = [
    pytest.param(
        Case({ann.SSL_CERT: "{cert}"}, check_cert, {ann.SSL_CERT: UNKNOWN_CERT}, "not found"),
        id="ssl-cert",
    ),
    pytest.param(
        Case(
            {ann.SSL_CERT: "{cert}", ann.SSL_PORTS: "p443"},
            check_ssl_ports,
            {ann.SSL_PORTS: "443,99999"},
            "not a port number",
        ),
        id="ssl-ports",
    ),
    pytest.param(
        Case(
            {
                ann.SSL_CERT: "{cert}",
                ann.SSL_PORTS: "443",
                ann.SSL_NEGOTIATION_POLICY: CLASSIC_POLICY,
            },
            check_negotiation_policy,
            {ann.SSL_NEGOTIATION_POLICY: "ELBSecurityPolicy-1999-01"},
            "ELBSecurityPolicy-1999-01 not found",
        ),
        id="ssl-negotiation-policy",
    ),
    pytest.param(
        Case(
            {ann.SSL_CERT: "{cert}", ann.SSL_PORTS: "443", ann.BACKEND_PROTOCOL: "http"},
            check_backend_http,
            {ann.BACKEND_PROTOCOL: "grpc"},
            "Invalid backend protocol grpc",
        ),
        id="backend-protocol-http",
    ),
    pytest.param(
        Case(
            {ann.SSL_CERT: "{cert}", ann.BACKEND_PROTOCOL: "ssl"},
            check_backend_ssl,
            {ann.BACKEND_PROTOCOL: "h2"},
            "Invalid backend protocol h2",
        ),
        id="backend-protocol-ssl",
    ),
    pytest.param(
        Case({ann.PROXY_PROTOCOL: "*"}, check_proxy_protocol, {ann.PROXY_PROTOCOL: "v2"}, "'*'"),
        id="proxy-protocol",
    ),
    pytest.param(
        Case(
            {ann.CONNECTION_DRAINING_ENABLED: "true", ann.CONNECTION_DRAINING_TIMEOUT: "42"},
            check_draining,
            {ann.CONNECTION_DRAINING_ENABLED: "sometimes"},
            "not a boolean",
        ),
        id="connection-draining-enabled",
    ),
    pytest.param(
        Case(
            {ann.CONNECTION_DRAINING_ENABLED: "true", ann.CONNECTION_DRAINING_TIMEOUT: "42"},
            check_draining,
            {ann.CONNECTION_DRAINING_TIMEOUT: "7200"},
            "outside 1..3600",
        ),
        id="connection-draining-timeout",
    ),
    pytest.param(
        Case(
            {ann.CONNECTION_IDLE_TIMEOUT: "600"},
            check_idle_timeout,
            {ann.CONNECTION_IDLE_TIMEOUT: "forever"},
            "not a number",
        ),
        id="connection-idle-timeout",
    ),
    pytest.param(
        Case(
            {ann.CROSS_ZONE_LOAD_BALANCING_ENABLED: "true"},
            check_cross_zone,
            {ann.CROSS_ZONE_LOAD_BALANCING_ENABLED: "yes"},
            "not a boolean",
        ),
        id="cross-zone-load-balancing-enabled",
    ),
    *(
        pytest.param(
            Case(
                {
                    ann.ACCESS_LOG_ENABLED: "true",
                    ann.ACCESS_LOG_S3_BUCKET_NAME: "cloudloop-logs",
                    ann.ACCESS_LOG_S3_BUCKET_PREFIX: "web",
                    ann.ACCESS_LOG_EMIT_INTERVAL: "5",
                },
                check_access_log,
                invalid,
                message,
            ),
            id=case_id,
        )
        for case_id, invalid, message in ACCESS_LOG_INVALID
    ),
    pytest.param(
        Case(
            {
                **NLB,
                ann.SSL_CERT: "{cert}",
                ann.SSL_PORTS: "443",
                ann.SSL_NEGOTIATION_POLICY: NLB_POLICY,
            },
            check_nlb_tls,
            {ann.SSL_NEGOTIATION_POLICY: "ELBSecurityPolicy-1999-01"},
            "ELBSecurityPolicy-1999-01 not found",
        ),
        id="nlb-ssl-cert-and-policy",
    ),
    pytest.param(
        Case(
            {**NLB, ann.SSL_CERT: "{cert}", ann.BACKEND_PROTOCOL: "ssl"},
            check_nlb_tls_backend,
            {ann.SSL_CERT: "not-an-arn"},
            "not an ACM or IAM certificate ARN",
        ),
        id="nlb-backend-protocol-ssl",
    ),
    pytest.param(
        Case(
            {**NLB, ann.EIP_ALLOCATIONS: "{eips}"},
            check_eips,
            {ann.EIP_ALLOCATIONS: "{eip0}"},
            "Must have same number of EIP AllocationIDs (1) and SubnetIDs (2)",
            setup=eips(2),
        ),
        id="eip-allocations",
    ),
    pytest.param(
        Case(
            {**NLB, ann.EIP_ALLOCATIONS: "{eips}"},
            check_eips,
            {ann.EIP_ALLOCATIONS: "eipalloc-0a, eipalloc-0b"},
            "not found",
            setup=eips(2),
        ),
        id="eip-allocations-unknown",
    ),
    pytest.param(
        Case(
            {**NLB, ann.INTERNAL: "true", ann.PRIVATE_IPV4_ADDRESSES: "10.0.1.20,10.0.2.20"},
            check_private_addresses,
            {ann.PRIVATE_IPV4_ADDRESSES: "10.0.1.20,10.9.9.9"},
            "10.9.9.9 is not in",
        ),
        id="private-ipv4-addresses",
    ),
    pytest.param(
        Case(
            {**NLB, ann.IP_ADDRESS_TYPE: "dualstack"},
            check_dualstack,
            {ann.IP_ADDRESS_TYPE: "ipv6only"},
            "not ipv4 or dualstack",
            setup=dualstack,
        ),
        id="ip-address-type",
    ),
    pytest.param(
        Case(
            {
                **NLB,
                ann.TARGET_GROUP_ATTRIBUTES: (
                    "preserve_client_ip.enabled=false,proxy_protocol_v2.enabled=true"
                ),
            },
            check_group_attributes,
            {ann.TARGET_GROUP_ATTRIBUTES: "stickiness.enabled=true"},
            "not supported by the controller",
        ),
        id="target-group-attributes",
    ),
    pytest.param(
        Case(
            {**NLB, ann.PROXY_PROTOCOL: "*"},
            check_nlb_proxy_protocol,
            {ann.PROXY_PROTOCOL: "true"},
            "'*'",
        ),
        id="nlb-proxy-protocol",
    ),
    pytest.param(
        Case(
            {
                **NLB,
                ann.CROSS_ZONE_LOAD_BALANCING_ENABLED: "true",
                ann.ACCESS_LOG_ENABLED: "true",
                ann.ACCESS_LOG_S3_BUCKET_NAME: "cloudloop-logs",
            },
            check_nlb_cross_zone,
            {ann.CROSS_ZONE_LOAD_BALANCING_ENABLED: "2"},
            "not a boolean",
        ),
        id="nlb-cross-zone-and-access-log",
    ),
    pytest.param(
        Case(
            {
                **NLB,
                ann.HEALTHCHECK_PROTOCOL: "https",
                ann.HEALTHCHECK_PATH: "/ready",
                ann.HEALTHCHECK_PORT: "8443",
            },
            check_nlb_health_check,
            {ann.HEALTHCHECK_PATH: "ready"},
            "must start with '/'",
        ),
        id="nlb-health-check",
    ),
]


def _fill(values: dict[str, str | None], fills: dict[str, str]) -> dict[str, str | None]:
    return {k: v.format(**fills) if v is not None else None for k, v in values.items()}


async def _ensured(kube: Kube, namespace: str, name: str) -> None:
    await eventually(lambda: ingress(kube, namespace, name), what=f"{name} ingress")


async def _delete(kube: Kube, namespace: str, name: str) -> None:
    await asyncio.to_thread(kube.delete, SERVICES, name, namespace)
    await eventually(
        lambda: kube.get(SERVICES, name, namespace) is None, timeout=60, what=f"{name} deleted"
    )


def state(world: AwsWorld, name: str, nlb: bool) -> dict[str, Any]:
    return world.nlb_state(name) if nlb else world.classic_state(name)


@pytest.mark.parametrize("case", CASES)
async def test_annotation(
    kube: Kube, namespace: str, world: AwsWorld, nodes: list[str], running: None, case: Case
) -> None:
    fills = {"cert": world.certificate(), **case.setup(world)}
    annotations = {k: str(v) for k, v in _fill(dict(case.annotations), fills).items()}
    service = await asyncio.to_thread(
        make_service, kube, namespace, "svc", annotations=annotations, ports=(80, 443)
    )
    name = lb_name(service)
    await _ensured(kube, namespace, "svc")
    is_nlb = annotations.get(ann.TYPE) == "nlb"
    case.check(world, name, fills)
    before = state(world, name, is_nlb)

    invalid = _fill(case.invalid, fills)
    await asyncio.to_thread(
        kube.patch, SERVICES, "svc", {"metadata": {"annotations": invalid}}, namespace
    )
    warnings = await eventually(
        lambda: [
            e
            for e in events(kube, namespace, "svc", "SyncLoadBalancerFailed")
            if case.message in e["message"]
        ],
        what=f"a Warning naming {case.message!r}",
    )
    assert warnings[0]["type"] == "Warning"
    assert state(world, name, is_nlb) == before  # nothing half-applied
    await _delete(kube, namespace, "svc")
    assert world.nothing_left(name)


async def test_legacy_source_ranges(
    kube: Kube, namespace: str, world: AwsWorld, nodes: list[str], running: None
) -> None:
    """The deprecated annotation opens the ELB to its ranges; the spec field wins over it; an
    invalid value is refused by the API server itself (the check upstream's helper repeats)."""
    service = await asyncio.to_thread(
        make_service,
        kube,
        namespace,
        "legacy",
        annotations={ann.LEGACY_SOURCE_RANGES: "10.0.0.0/8, 192.168.0.0/16"},
        ports=(80, 443),
    )
    name = lb_name(service)
    await _ensured(kube, namespace, "legacy")
    check_source_ranges(world, name, {})

    await asyncio.to_thread(
        kube.patch,
        SERVICES,
        "legacy",
        {"spec": {"loadBalancerSourceRanges": ["172.16.0.0/12"]}},
        namespace,
    )

    def field_wins() -> bool:
        return {(r["FromPort"], r["CidrIpv4"]) for r in world.rules(name)} == {
            (80, "172.16.0.0/12"),
            (443, "172.16.0.0/12"),
        }

    await eventually(field_wins, what="the spec field's ranges instead of the annotation's")
    await asyncio.to_thread(
        kube.patch,
        SERVICES,
        "legacy",
        {"spec": {"loadBalancerSourceRanges": None}},
        namespace,
        patch_type="merge",
    )
    await eventually(lambda: check_ranges_back(world, name), what="the annotation's ranges again")
    before = world.classic_state(name)
    with pytest.raises(KubeError) as refused:
        await asyncio.to_thread(
            kube.patch,
            SERVICES,
            "legacy",
            {"metadata": {"annotations": {ann.LEGACY_SOURCE_RANGES: "10.0.0.0/33"}}},
            namespace,
        )
    assert refused.value.status == 422
    assert world.classic_state(name) == before
    await _delete(kube, namespace, "legacy")
    assert world.nothing_left(name)


def check_ranges_back(world: AwsWorld, name: str) -> bool:
    try:
        check_source_ranges(world, name, {})
    except AssertionError:
        return False
    return True


def _requests(operation: str) -> float:
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == "cloud_api_requests_total"
        and sample.labels.get("operation") == operation
        and sample.labels.get("outcome") == "success"
    )


async def _annotate(
    kube: Kube, namespace: str, name: str, annotations: dict[str, str | None]
) -> None:
    await asyncio.to_thread(
        kube.patch, SERVICES, name, {"metadata": {"annotations": annotations}}, namespace
    )


async def test_classic_changes_in_place(
    kube: Kube, namespace: str, world: AwsWorld, nodes: list[str], running: None
) -> None:
    """TLS, protocol and attribute annotations added and changed on a live Service change the
    same ELB: listeners replaced (a certificate alone swapped), never the ELB made again."""
    first, second = world.certificate("one.example"), world.certificate("two.example")
    service = await asyncio.to_thread(make_service, kube, namespace, "live", ports=(80, 443))
    name = lb_name(service)
    await _ensured(kube, namespace, "live")
    created = (world.classic(name) or {})["CreatedTime"]

    def shapes() -> dict[int, tuple[str, str, str]]:
        return {p: shape(d) for p, d in listeners(world, name).items()}

    await _annotate(kube, namespace, "live", {ann.SSL_CERT: first, ann.SSL_PORTS: "443"})
    await eventually(
        lambda: shapes() == {80: ("TCP", "TCP", ""), 443: ("SSL", "TCP", first)},
        what="443 secured",
    )
    deletes = _requests("DeleteLoadBalancerListeners")
    swaps = _requests("SetLoadBalancerListenerSSLCertificate")
    await _annotate(kube, namespace, "live", {ann.SSL_CERT: second})
    await eventually(
        lambda: shapes() == {80: ("TCP", "TCP", ""), 443: ("SSL", "TCP", second)},
        what="the new certificate",
    )
    # the cloud shows the swap before the activity has its answer (and counts it)
    await eventually(
        lambda: _requests("SetLoadBalancerListenerSSLCertificate") >= swaps + 1,
        what="the swap counted",
    )
    assert _requests("SetLoadBalancerListenerSSLCertificate") == swaps + 1
    assert _requests("DeleteLoadBalancerListeners") == deletes
    await _annotate(
        kube, namespace, "live", {ann.BACKEND_PROTOCOL: "http", ann.CONNECTION_IDLE_TIMEOUT: "90"}
    )
    await eventually(
        lambda: shapes() == {80: ("HTTP", "HTTP", ""), 443: ("HTTPS", "HTTP", second)},
        what="HTTP and HTTPS listeners",
    )
    await eventually(
        lambda: classic_attributes(world, name)["ConnectionSettings"] == {"IdleTimeout": 90},
        what="idle timeout",
    )
    await _annotate(kube, namespace, "live", {ann.CONNECTION_IDLE_TIMEOUT: None})
    await eventually(
        lambda: classic_attributes(world, name)["ConnectionSettings"] == {"IdleTimeout": 60},
        what="the default idle timeout back",
    )
    assert (world.classic(name) or {})["CreatedTime"] == created
    assert events(kube, namespace, "live", "SyncLoadBalancerFailed") == []
    await _delete(kube, namespace, "live")
    assert world.nothing_left(name)


async def test_nlb_changes_in_place(
    kube: Kube, namespace: str, world: AwsWorld, nodes: list[str], running: None
) -> None:
    """On a live NLB a certificate modifies the listener, ``backend-protocol: ssl`` replaces the
    target group (as upstream), ``dualstack`` is set in place, and Elastic IPs added later are
    not applied (fixed at creation, as upstream): the NLB is never made again."""
    world.enable_ipv6()
    cert = world.certificate()
    service = await asyncio.to_thread(
        make_service, kube, namespace, "nlive", annotations={ann.TYPE: "nlb"}, ports=(80, 443)
    )
    name = lb_name(service)
    await _ensured(kube, namespace, "nlive")
    [nlb] = world.nlbs(name)
    arns = {p: lst["ListenerArn"] for p, lst in nlb_listeners(world, name).items()}
    groups = {g["TargetGroupArn"] for g in world.target_groups(name)}

    await _annotate(kube, namespace, "nlive", {ann.SSL_CERT: cert, ann.SSL_PORTS: "443"})
    await eventually(
        lambda: nlb_listeners(world, name)[443]["Protocol"] == "TLS", what="a TLS listener"
    )
    assert {p: lst["ListenerArn"] for p, lst in nlb_listeners(world, name).items()} == arns
    assert {g["TargetGroupArn"] for g in world.target_groups(name)} == groups

    await _annotate(kube, namespace, "nlive", {ann.BACKEND_PROTOCOL: "ssl"})
    await eventually(
        lambda: sorted(g["Protocol"] for g in world.target_groups(name)) == ["TCP", "TLS"],
        what="a TLS target group for 443",
    )
    now = {g["TargetGroupArn"] for g in world.target_groups(name)}
    assert len(now & groups) == 1 and len(now) == 2  # 80's kept, 443's replaced
    assert {p: lst["ListenerArn"] for p, lst in nlb_listeners(world, name).items()} == arns

    await _annotate(kube, namespace, "nlive", {ann.IP_ADDRESS_TYPE: "dualstack"})
    await eventually(lambda: world.nlbs(name)[0]["IpAddressType"] == "dualstack", what="dualstack")
    allocations = eips(2)(world)["eips"]
    await _annotate(kube, namespace, "nlive", {ann.EIP_ALLOCATIONS: allocations})
    await asyncio.sleep(3)
    [after] = world.nlbs(name)
    assert after["LoadBalancerArn"] == nlb["LoadBalancerArn"]
    assert all(not z["LoadBalancerAddresses"] for z in after["AvailabilityZones"])
    assert events(kube, namespace, "nlive", "SyncLoadBalancerFailed") == []
    await _delete(kube, namespace, "nlive")
    assert world.nothing_left(name)
