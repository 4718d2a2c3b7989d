"""The OpenStack driver's pure parts: server mapping, providerIDs, annotations, error classes."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from keystoneauth1 import exceptions as ksa_exc
from openstack import exceptions as sdk_exc

from cloudloop.cloud import errors, models
from cloudloop.cloud.openstack.base import next_link, translate
from cloudloop.cloud.openstack.lb_options import (
    listener_protocol,
    monitor_spec,
    node_matches,
    parse_options,
    pool_protocol,
)
from cloudloop.cloud.openstack.servers import (
    name_regex,
    sanitize_zone,
    server_addresses,
    server_id_from_provider_id,
    to_instance,
)
from cloudloop.cloud.openstack.settings import (
    LoadBalancerClassSettings,
    LoadBalancerSettings,
    NetworkingSettings,
)


def server(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "0b1c",
        "name": "node-1",
        "status": "ACTIVE",
        "OS-EXT-AZ:availability_zone": "nova",
        "flavor": {"original_name": "m1.small"},
        "addresses": {
            "private": [
                {"addr": "10.0.0.5", "OS-EXT-IPS:type": "fixed"},
                {"addr": "fd00::5", "OS-EXT-IPS:type": "fixed"},
                {"addr": "172.24.4.9", "OS-EXT-IPS:type": "floating"},
            ],
            "storage": [{"addr": "192.168.9.5", "OS-EXT-IPS:type": "fixed"}],
            "public": [{"addr": "203.0.113.5", "OS-EXT-IPS:type": "fixed"}],
        },
        "metadata": {},
    }
    body.update(extra)
    return body


def pairs(addresses: list[models.NodeAddress]) -> list[tuple[str, str]]:
    return [(a.type, a.address) for a in addresses]


@pytest.mark.parametrize(
    ("networking", "expected"),
    [
        pytest.param(
            NetworkingSettings(),
            [
                ("InternalIP", "10.0.0.5"),
                ("InternalIP", "fd00::5"),
                ("ExternalIP", "172.24.4.9"),
                ("InternalIP", "203.0.113.5"),
                ("InternalIP", "192.168.9.5"),
            ],
            id="defaults",
        ),
        pytest.param(
            NetworkingSettings(
                public_network_names=["public"],
                internal_network_names=["private"],
                ipv6_support_disabled=True,
            ),
            [
                ("InternalIP", "10.0.0.5"),
                ("ExternalIP", "172.24.4.9"),
                ("ExternalIP", "203.0.113.5"),
            ],
            id="internal-public-no-ipv6",
        ),
        pytest.param(
            NetworkingSettings(address_sort_order=["192.168.0.0/16", "203.0.113.0/24"]),
            [
                ("InternalIP", "192.168.9.5"),
                ("InternalIP", "203.0.113.5"),
                ("InternalIP", "10.0.0.5"),
                ("InternalIP", "fd00::5"),
                ("ExternalIP", "172.24.4.9"),
            ],
            id="sort-order",
        ),
    ],
)
def test_addresses_follow_upstream(
    networking: NetworkingSettings, expected: list[tuple[str, str]]
) -> None:
    assert pairs(server_addresses(server(), networking)) == expected


def test_access_ips_and_hostname() -> None:
    body = server(addresses={}, accessIPv4="198.51.100.1", metadata={"hostname": "n1.example"})
    assert pairs(server_addresses(body, NetworkingSettings())) == [
        ("ExternalIP", "198.51.100.1"),
        ("Hostname", "n1.example"),
    ]


@pytest.mark.parametrize(
    ("status", "state"),
    [
        pytest.param("ACTIVE", models.InstanceState.RUNNING, id="active"),
        pytest.param("SHUTOFF", models.InstanceState.STOPPED, id="shutoff"),
        pytest.param("DELETED", models.InstanceState.TERMINATED, id="deleted"),
        pytest.param("SOFT_DELETED", models.InstanceState.TERMINATED, id="soft-deleted"),
        pytest.param("BUILD", models.InstanceState.PENDING, id="build"),
        pytest.param("ERROR", models.InstanceState.UNKNOWN, id="error"),
        pytest.param("PAUSED", models.InstanceState.UNKNOWN, id="paused-not-shut-down"),
    ],
)
def test_states(status: str, state: models.InstanceState) -> None:
    instance = to_instance(
        server(status=status), region="R", regional=False, networking=NetworkingSettings()
    )
    assert instance.state is state
    assert instance.shut_down is (status == "SHUTOFF")


def test_instance_fields_and_regional_provider_ids() -> None:
    instance = to_instance(server(), region="R1", regional=False, networking=NetworkingSettings())
    assert (instance.provider_id, instance.zone, instance.region, instance.instance_type) == (
        "openstack:///0b1c",
        "nova",
        "R1",
        "m1.small",
    )
    regional = to_instance(
        server(flavor={"id": "42"}),
        region="R1",
        regional=True,
        networking=NetworkingSettings(),
        flavor_names={"42": "big"},
    )
    assert regional.provider_id == "openstack://R1/0b1c" and regional.instance_type == "big"


@pytest.mark.parametrize(
    ("provider_id", "region", "expected"),
    [
        pytest.param("openstack:///abc", "R", "abc", id="plain"),
        pytest.param("openstack://R/abc", "R", "abc", id="regional"),
        pytest.param("abc", "R", "abc", id="bare-id"),
        pytest.param("openstack://other/abc", "R", None, id="other-region"),
        pytest.param("aws:///us-east-1a/i-1", "R", None, id="other-cloud"),
        pytest.param("openstack://", "R", None, id="no-id"),
    ],
)
def test_provider_ids(provider_id: str, region: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(errors.InvalidRequest):
            server_id_from_provider_id(provider_id, region)
    else:
        assert server_id_from_provider_id(provider_id, region) == expected


@pytest.mark.parametrize(
    ("zone", "expected"),
    [
        pytest.param("nova", "nova", id="plain"),
        pytest.param("zone a/b", "zone-a-b", id="runs"),
        pytest.param("-.zone_", "zone", id="trim"),
        pytest.param("z" * 70, "z" * 63, id="long"),
    ],
)
def test_zone_sanitised(zone: str, expected: str) -> None:
    assert sanitize_zone(zone) == expected


def test_name_regex_is_exact() -> None:
    import re

    pattern = re.compile(name_regex(["node-1", "a.b"]))
    assert pattern.search("node-1") and pattern.search("a.b")
    assert not pattern.search("node-10") and not pattern.search("axb")


# -- annotations ------------------------------------------------------------------------------
def spec(annotations: dict[str, str], **extra: Any) -> models.LoadBalancerSpec:
    values: dict[str, Any] = {
        "name": "a" + "1" * 31,
        "cluster": "c",
        "service": "ns/web",
        "service_uid": "u",
        "ports": [models.LoadBalancerPort(port=80, node_port=30080)],
        "backend_instance_ids": [],
        "annotations": annotations,
    }
    values.update(extra)
    return models.LoadBalancerSpec(**values)


P = "loadbalancer.openstack.org/"


def test_annotations_override_the_class_and_config() -> None:
    config = LoadBalancerSettings(
        subnet_id="cfg-sub",
        floating_network_id="cfg-fip",
        classes={"gold": LoadBalancerClassSettings(subnet_id="class-sub")},
        create_monitor=True,
    )
    assert parse_options(spec({}), config).subnet_id == "cfg-sub"
    assert parse_options(spec({P + "class": "gold"}), config).subnet_id == "class-sub"
    chosen = parse_options(spec({P + "class": "gold", P + "subnet-id": "ann-sub"}), config)
    assert chosen.subnet_id == "ann-sub" and chosen.floating_network_id == "cfg-fip"
    assert chosen.monitor.enabled
    assert not parse_options(spec({P + "enable-health-monitor": "false"}), config).monitor.enabled


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        pytest.param({P + "keep-floatingip": "yes"}, "true or false", id="bool"),
        pytest.param({P + "connection-limit": "many"}, "integer", id="int"),
        pytest.param({P + "timeout-client-data": "-1"}, "outside", id="range"),
        pytest.param({P + "proxy-protocol": "v3"}, "proxy-protocol", id="proxy"),
        pytest.param(
            {P + "proxy-protocol": "true", P + "x-forwarded-for": "true"}, "together", id="conflict"
        ),
        pytest.param({P + "lb-method": "RANDOM"}, "lb-method", id="method"),
        pytest.param({P + "class": "nope"}, "LoadBalancerClass", id="class"),
        pytest.param(
            {
                P + "health-monitor-delay": "1",
                P + "health-monitor-timeout": "5",
                P + "enable-health-monitor": "true",
            },
            "longer",
            id="monitor",
        ),
    ],
)
def test_bad_annotations_are_invalid(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(errors.InvalidRequest, match=message):
        parse_options(spec(annotations), LoadBalancerSettings())


@pytest.mark.parametrize(
    ("annotations", "listener", "pool"),
    [
        pytest.param({}, "TCP", "TCP", id="tcp"),
        pytest.param({P + "proxy-protocol": "true"}, "TCP", "PROXY", id="proxy"),
        pytest.param({P + "proxy-protocol": "v2"}, "TCP", "PROXYV2", id="proxy-v2"),
        pytest.param({P + "x-forwarded-for": "true"}, "HTTP", "HTTP", id="xff"),
        pytest.param(
            {P + "default-tls-container-ref": "https://barbican/c"},
            "TERMINATED_HTTPS",
            "HTTP",
            id="tls",
        ),
    ],
)
def test_protocols(annotations: dict[str, str], listener: str, pool: str) -> None:
    options = parse_options(spec(annotations), LoadBalancerSettings())
    port = models.LoadBalancerPort(port=80, node_port=30080)
    assert listener_protocol(port, options) == listener
    assert pool_protocol(listener, options) == pool


def test_monitors() -> None:
    on = {P + "enable-health-monitor": "true"}
    options = parse_options(spec(on), LoadBalancerSettings())
    assert monitor_spec(spec(on), "TCP", options) == {
        "delay": 5,
        "timeout": 3,
        "max_retries": 1,
        "max_retries_down": 3,
        "type": "TCP",
    }
    assert monitor_spec(spec(on), "UDP", options)["type"] == "UDP-CONNECT"  # type: ignore[index]
    local = spec(on, external_traffic_policy="Local", health_check_node_port=32000)
    http = monitor_spec(local, "TCP", options)
    assert http is not None and (http["type"], http["url_path"]) == ("HTTP", "/healthz")
    assert monitor_spec(spec({}), "TCP", parse_options(spec({}), LoadBalancerSettings())) is None


def test_node_selector() -> None:
    assert node_matches({"role": "lb", "zone": "a"}, {"role": "lb"})
    assert node_matches({"role": "lb"}, {"role": ""})
    assert not node_matches({"role": "web"}, {"role": "lb"})
    options = parse_options(spec({P + "node-selector": "role=lb, edge"}), LoadBalancerSettings())
    assert options.node_selector == {"role": "lb", "edge": ""}


# -- errors -----------------------------------------------------------------------------------
class Response:
    def __init__(self, status: int) -> None:
        self.status_code = status
        self.headers: dict[str, str] = {}
        self.text = ""

    def json(self) -> dict[str, str]:
        return {}


def http(status: int) -> sdk_exc.HttpException:
    return sdk_exc.HttpException(message=f"HTTP {status}", response=Response(status))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        pytest.param(http(404), errors.NotFound, id="404"),
        pytest.param(http(401), errors.CloudAuthFailed, id="401"),
        pytest.param(http(403), errors.CloudAuthFailed, id="403"),
        pytest.param(http(413), errors.ResourceExhausted, id="413-quota"),
        pytest.param(http(429), errors.CloudThrottled, id="429"),
        pytest.param(http(400), errors.InvalidRequest, id="400"),
        pytest.param(http(409), errors.CloudError, id="409-immutable-retryable"),
        pytest.param(http(503), errors.CloudUnreachable, id="503"),
        pytest.param(http(500), errors.CloudError, id="500"),
        pytest.param(ksa_exc.ConnectFailure("refused"), errors.CloudUnreachable, id="refused"),
        pytest.param(ksa_exc.ConnectTimeout("slow"), errors.CloudUnreachable, id="timeout"),
        pytest.param(
            ksa_exc.EndpointNotFound("no region"), errors.InvalidRequest, id="no-endpoint"
        ),
        pytest.param(ksa_exc.Unauthorized("bad password"), errors.CloudAuthFailed, id="ksa-401"),
        pytest.param(requests.ConnectionError("reset"), errors.CloudUnreachable, id="requests"),
        pytest.param(ValueError("bug"), errors.CloudError, id="other"),
    ],
)
def test_translate(exc: Exception, kind: type[errors.CloudError]) -> None:
    translated = translate("Op", exc)
    assert type(translated) is kind
    assert translated.provider == "openstack"


@pytest.mark.parametrize(
    "exc",
    [
        pytest.param(
            sdk_exc.ServiceDisabledException(
                "Service 'compute' is disabled because its configuration could not be loaded. "
                "The service is not present in the service catalog: public endpoint for "
                "compute service in RegionX region not found"
            ),
            id="sdk-service-disabled",
        ),
        pytest.param(
            ksa_exc.EndpointNotFound("public endpoint for compute service in RegionX region"),
            id="ksa-endpoint-not-found",
        ),
        pytest.param(sdk_exc.EndpointNotFound("compute"), id="sdk-endpoint-not-found"),
        pytest.param(ksa_exc.EmptyCatalog("The service catalog is empty."), id="empty-catalog"),
    ],
)
def test_a_catalog_miss_is_an_invalid_request_naming_the_region(exc: Exception) -> None:
    translated = translate("ListServers", exc, region="RegionX", interface="public")
    assert type(translated) is errors.InvalidRequest
    assert "region 'RegionX'" in str(translated) and "public endpoint" in str(translated)
    if "compute service" in str(exc) or "Service 'compute'" in str(exc):
        assert "service 'compute'" in str(translated)


def test_next_link_styles() -> None:
    assert next_link({"servers_links": [{"rel": "next", "href": "h1"}]}, "servers") == "h1"
    assert next_link({"links": [{"rel": "next", "href": "h2"}]}, "volumes") == "h2"
    assert next_link({"next": "/v2/images?marker=x"}, "images") == "/v2/images?marker=x"
    assert next_link({"servers": []}, "servers") is None
