"""AWS load-balancer annotations and the driver's pure decisions (names, health checks, subnets)."""

from __future__ import annotations

from typing import Any

import pytest

from cloudloop.cloud import errors
from cloudloop.cloud.aws.loadbalancers import (
    check_ports,
    choose_subnets,
    classic_health_check,
    load_balancer_tags,
    nlb_health_check,
    target_group_name,
    target_instance_ids,
)
from cloudloop.cloud.aws.loadbalancers import service_annotations as ann
from cloudloop.cloud.aws.loadbalancers.service_annotations import (
    LoadBalancerKind,
    parse_annotations,
)
from cloudloop.cloud.models import LoadBalancerBackend, LoadBalancerPort, LoadBalancerSpec


def spec(**changes: Any) -> LoadBalancerSpec:
    base = LoadBalancerSpec(
        name="a0123456789abcdef0123456789abcde",
        cluster="prod",
        service="shop/web",
        service_uid="01234567-89ab-cdef-0123-456789abcdef",
        ports=[
            LoadBalancerPort(port=80, node_port=30080),
            LoadBalancerPort(port=443, node_port=30443),
        ],
        backend_instance_ids=["i-1", "i-2"],
    )
    return base.model_copy(update=changes)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, {"kind": LoadBalancerKind.CLASSIC, "internal": False}, id="defaults"),
        pytest.param({ann.TYPE: "nlb"}, {"kind": LoadBalancerKind.NLB}, id="nlb"),
        pytest.param({ann.TYPE: "NLB"}, {"kind": LoadBalancerKind.NLB}, id="nlb-any-case"),
        pytest.param({ann.INTERNAL: "true"}, {"internal": True}, id="internal"),
        pytest.param({ann.INTERNAL: "0.0.0.0/0"}, {"internal": True}, id="internal-legacy-value"),
        pytest.param({ann.INTERNAL: "false"}, {"internal": False}, id="internal-false"),
        pytest.param(
            {ann.ADDITIONAL_RESOURCE_TAGS: " team=web , cost=42,empty= ,bare"},
            {"additional_tags": {"team": "web", "cost": "42", "empty": "", "bare": ""}},
            id="tags",
        ),
        pytest.param(
            {ann.SECURITY_GROUPS: "sg-1, sg-2,sg-1", ann.EXTRA_SECURITY_GROUPS: "sg-3"},
            {"security_groups": ("sg-1", "sg-2"), "extra_security_groups": ("sg-3",)},
            id="security-groups",
        ),
        pytest.param(
            {ann.SUBNETS: "subnet-1, private-a"},
            {"subnets": ("subnet-1", "private-a")},
            id="subnets",
        ),
        pytest.param(
            {ann.TARGET_NODE_LABELS: "pool=a,zone"},
            {"target_node_labels": {"pool": "a", "zone": ""}},
            id="target-node-labels",
        ),
    ],
)
def test_parse_annotations(annotations: dict[str, str], expected: dict[str, object]) -> None:
    options = parse_annotations(annotations)
    for field, value in expected.items():
        assert getattr(options, field) == value


def test_health_check_annotations() -> None:
    options = parse_annotations(
        {
            ann.HEALTHCHECK_PROTOCOL: "http",
            ann.HEALTHCHECK_PORT: "8080",
            ann.HEALTHCHECK_PATH: "/ready",
            ann.HEALTHCHECK_INTERVAL: "15",
            ann.HEALTHCHECK_TIMEOUT: "4",
            ann.HEALTHCHECK_HEALTHY_THRESHOLD: "3",
            ann.HEALTHCHECK_UNHEALTHY_THRESHOLD: "5",
        }
    )
    assert classic_health_check(spec(), options.health_check) == {
        "Target": "HTTP:8080/ready",
        "Interval": 15,
        "Timeout": 4,
        "HealthyThreshold": 3,
        "UnhealthyThreshold": 5,
    }


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        pytest.param({ann.TYPE: "alb"}, "unknown type", id="unknown-type"),
        pytest.param({ann.HEALTHCHECK_INTERVAL: "often"}, "not a number", id="interval-nan"),
        pytest.param({ann.HEALTHCHECK_INTERVAL: "1"}, "outside", id="interval-too-short"),
        pytest.param({ann.HEALTHCHECK_TIMEOUT: "500"}, "outside", id="timeout-too-long"),
        pytest.param(
            {ann.HEALTHCHECK_INTERVAL: "10", ann.HEALTHCHECK_TIMEOUT: "10"},
            "shorter than the interval",
            id="timeout-not-below-interval",
        ),
        pytest.param({ann.HEALTHCHECK_HEALTHY_THRESHOLD: "11"}, "outside", id="threshold"),
        pytest.param({ann.HEALTHCHECK_PROTOCOL: "udp"}, "not one of", id="hc-protocol"),
        pytest.param(
            {ann.TYPE: "nlb", ann.HEALTHCHECK_PROTOCOL: "ssl"}, "not one of", id="nlb-hc-ssl"
        ),
        pytest.param({ann.HEALTHCHECK_PORT: "70000"}, "outside", id="hc-port"),
        pytest.param({ann.HEALTHCHECK_PATH: "healthz"}, "must start with", id="hc-path"),
        pytest.param({ann.SECURITY_GROUPS: "web-sg"}, "not a security group", id="sg-name"),
        pytest.param({ann.EXTRA_SECURITY_GROUPS: "sg-1,x"}, "not a security group", id="extra-sg"),
        pytest.param({ann.ADDITIONAL_RESOURCE_TAGS: "=v"}, "has no key", id="tag-no-key"),
        pytest.param({ann.ADDITIONAL_RESOURCE_TAGS: "aws:x=1"}, "aws:", id="tag-aws-prefix"),
        pytest.param(
            {ann.ADDITIONAL_RESOURCE_TAGS: "kubernetes.io/cluster/other=owned"},
            "set by the controller",
            id="tag-reserved",
        ),
        pytest.param({ann.TARGET_NODE_LABELS: "=a"}, "has no key", id="labels-no-key"),
    ],
)
def test_invalid_annotations(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(errors.InvalidRequest) as err:
        parse_annotations(annotations)
    assert message in str(err.value)
    assert not err.value.retryable


@pytest.mark.parametrize(
    "value", [pytest.param("external", id="external"), pytest.param("nlb-ip", id="nlb-ip")]
)
def test_handled_elsewhere(value: str) -> None:
    with pytest.raises(errors.NotSupported):
        parse_annotations({ann.TYPE: value})


@pytest.mark.parametrize(
    ("changes", "target"),
    [
        pytest.param({}, "TCP:30080", id="tcp-first-node-port"),
        pytest.param(
            {"external_traffic_policy": "Local", "health_check_node_port": 32000},
            "HTTP:32000/healthz",
            id="local-traffic",
        ),
    ],
)
def test_classic_health_check_defaults(changes: dict[str, Any], target: str) -> None:
    check = classic_health_check(spec(**changes), parse_annotations({}).health_check)
    assert check["Target"] == target
    assert (check["Interval"], check["Timeout"]) == (10, 5)


def test_classic_health_check_rejects_default_timeout_above_interval() -> None:
    options = parse_annotations({ann.HEALTHCHECK_INTERVAL: "5"})  # default timeout is 5
    with pytest.raises(errors.InvalidRequest):
        classic_health_check(spec(), options.health_check)


def test_nlb_health_check() -> None:
    tcp = nlb_health_check(spec(), parse_annotations({ann.TYPE: "nlb"}).health_check)
    assert tcp["HealthCheckProtocol"] == "TCP" and tcp["HealthCheckPort"] == "traffic-port"
    assert "HealthCheckPath" not in tcp
    local = nlb_health_check(
        spec(external_traffic_policy="Local", health_check_node_port=32000),
        parse_annotations({ann.TYPE: "nlb"}).health_check,
    )
    assert (local["HealthCheckProtocol"], local["HealthCheckPort"], local["HealthCheckPath"]) == (
        "HTTP",
        "32000",
        "/healthz",
    )


def test_target_group_names_are_short_stable_and_per_port() -> None:
    web = spec()
    names = [target_group_name(web, port) for port in web.ports]
    assert names == [target_group_name(web, port) for port in web.ports]
    assert len(set(names)) == 2
    assert all(len(n) <= 32 and n.startswith("k8s-shop-web-") for n in names)
    moved = LoadBalancerPort(port=80, node_port=31000)
    assert target_group_name(web, moved) not in names
    long = spec(service="a-very-long-namespace/with.dots_and_more")
    assert len(target_group_name(long, web.ports[0])) <= 32


@pytest.mark.parametrize(
    ("kind", "protocol", "node_port", "ok"),
    [
        pytest.param(LoadBalancerKind.CLASSIC, "TCP", 30080, True, id="classic-tcp"),
        pytest.param(LoadBalancerKind.CLASSIC, "UDP", 30080, False, id="classic-udp"),
        pytest.param(LoadBalancerKind.NLB, "UDP", 30080, True, id="nlb-udp"),
        pytest.param(LoadBalancerKind.NLB, "SCTP", 30080, False, id="nlb-sctp"),
        pytest.param(LoadBalancerKind.NLB, "TCP", 0, False, id="no-node-port"),
    ],
)
def test_check_ports(kind: LoadBalancerKind, protocol: str, node_port: int, ok: bool) -> None:
    service = spec(ports=[LoadBalancerPort(port=53, protocol=protocol, node_port=node_port)])
    if ok:
        check_ports(service, kind)
    else:
        with pytest.raises(errors.InvalidRequest):
            check_ports(service, kind)


def test_tags_carry_identity_over_annotation_extras() -> None:
    tags = load_balancer_tags(spec(), parse_annotations({ann.ADDITIONAL_RESOURCE_TAGS: "team=a"}))
    assert tags == {
        "team": "a",
        "kubernetes.io/cluster/prod": "owned",
        "kubernetes.io/service-name": "shop/web",
        "cloudloop.io/service-uid": "01234567-89ab-cdef-0123-456789abcdef",
        "cloudloop.io/load-balancer": "a0123456789abcdef0123456789abcde",
    }


def test_target_node_labels_select_backends() -> None:
    service = spec(
        backends=[
            LoadBalancerBackend(node_name="n1", instance_id="i-1", labels={"pool": "a"}),
            LoadBalancerBackend(node_name="n2", instance_id="i-2", labels={"pool": "b"}),
        ]
    )
    assert target_instance_ids(service, parse_annotations({})) == ["i-1", "i-2"]
    selected = parse_annotations({ann.TARGET_NODE_LABELS: "pool=a"})
    assert target_instance_ids(service, selected) == ["i-1"]


def _subnet(subnet_id: str, zone: str, *tags: str) -> dict[str, Any]:
    return {
        "SubnetId": subnet_id,
        "AvailabilityZone": zone,
        "Tags": [{"Key": "kubernetes.io/cluster/prod", "Value": "owned"}]
        + [{"Key": t, "Value": "1"} for t in tags],
    }


@pytest.mark.parametrize(
    ("internal", "expected"),
    [
        pytest.param(False, ["subnet-b", "subnet-c"], id="public-prefers-elb-role"),
        pytest.param(True, ["subnet-a", "subnet-c"], id="internal-prefers-internal-role"),
    ],
)
def test_choose_subnets(internal: bool, expected: list[str]) -> None:
    subnets = [
        _subnet("subnet-a", "z1", "kubernetes.io/role/internal-elb"),
        _subnet("subnet-b", "z1", "kubernetes.io/role/elb"),
        _subnet("subnet-c", "z2"),
        {"SubnetId": "subnet-d", "AvailabilityZone": "z3", "Tags": []},  # another cluster's
    ]
    chosen = choose_subnets(subnets, "prod", internal=internal)
    assert [s["SubnetId"] for s in chosen] == expected
