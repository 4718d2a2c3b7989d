"""The OpenStack driver's Octavia load balancers against the emulator (through openstacksdk).

Upstream's names and tags, one fully populated create, a second ensure that writes nothing,
the ``loadbalancer.openstack.org/*`` annotations, adoption of an OCCM-made LB, an LB in ERROR
replaced, members following the nodes, listeners following the ports, the floating IP made,
kept or released, and invalid annotations refused before any write.
"""

from __future__ import annotations

from typing import Any

import pytest

from cloudloop.cloud import errors, models
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.openstack.loadbalancers import FIP_DESCRIPTION_PREFIX, identity_tag
from cloudloop.cloud.openstack.settings import LoadBalancerSettings
from devstack.backends.openstack import connect
from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint
from tests.openstack.support import quick_settings

pytestmark = pytest.mark.stack

P = "loadbalancer.openstack.org/"
UID = "6f1c2a3b-0000-4000-8000-00000000abcd"
NAME = "a" + UID.replace("-", "")[:31]
UPSTREAM = "kube_service_c1_shop_web"


def lb_spec(
    servers: list[dict[str, str]], annotations: dict[str, str] | None = None, **extra: Any
) -> models.LoadBalancerSpec:
    values: dict[str, Any] = {
        "name": NAME,
        "cluster": "c1",
        "service": "shop/web",
        "service_uid": UID,
        "ports": [
            models.LoadBalancerPort(name="http", port=80, node_port=30080),
            models.LoadBalancerPort(name="https", port=443, node_port=30443),
        ],
        "backend_instance_ids": [s["id"] for s in servers],
        "backends": [
            models.LoadBalancerBackend(
                node_name=s["name"], instance_id=s["id"], labels={"pool": "a"}
            )
            for s in servers
        ],
        "annotations": annotations or {},
    }
    values.update(extra)
    return models.LoadBalancerSpec(**values)


def writes(admin: OpenStackEmulatorAdmin) -> dict[str, int]:
    return {k: v for k, v in admin.request_counts().items() if not k.startswith("GET ")}


def world(admin: OpenStackEmulatorAdmin) -> dict[str, list[dict[str, Any]]]:
    state = admin.state()
    return {
        k: state[k]
        for k in ("loadbalancers", "listeners", "pools", "members", "healthmonitors", "floatingips")
    }


@pytest.fixture
def servers(admin: OpenStackEmulatorAdmin) -> list[dict[str, str]]:
    return admin.seed_servers(3, prefix="lbnode")


def test_ensure_makes_the_lb_as_upstream_in_one_create(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, servers: list[dict[str, str]]
) -> None:
    driver.discovery.zones()  # logs in
    admin.clear_requests()
    status = driver.load_balancers.ensure_load_balancer(
        lb_spec(servers, {P + "enable-health-monitor": "true"})
    )
    assert writes(admin) == {
        "POST load-balancer /v2.0/lbaas/loadbalancers": 1,
        "POST network /v2.0/floatingips": 1,
    }
    w = world(admin)
    [lb] = w["loadbalancers"]
    assert lb["name"] == UPSTREAM
    assert lb["description"] == "Kubernetes external service shop/web from cluster c1"
    assert set(lb["tags"]) == {UPSTREAM, identity_tag(NAME)}
    assert lb["provisioning_status"] == "ACTIVE"
    assert sorted(x["name"] for x in w["listeners"]) == [
        f"listener_0_{UPSTREAM}",
        f"listener_1_{UPSTREAM}",
    ]
    assert all(x["tags"] == [UPSTREAM] for x in w["listeners"])
    assert sorted(x["name"] for x in w["pools"]) == [f"pool_0_{UPSTREAM}", f"pool_1_{UPSTREAM}"]
    assert len(w["members"]) == 6 and {m["name"] for m in w["members"]} == {
        s["name"] for s in servers
    }
    assert {m["protocol_port"] for m in w["members"]} == {30080, 30443}
    assert sorted(m["type"] for m in w["healthmonitors"]) == ["TCP", "TCP"]
    [fip] = w["floatingips"]
    assert fip["port_id"] == lb["vip_port_id"]
    assert fip["description"] == f"{FIP_DESCRIPTION_PREFIX} shop/web from cluster c1"
    assert status.ip == fip["floating_ip_address"] and not status.hostname

    admin.clear_requests()
    again = driver.load_balancers.ensure_load_balancer(
        lb_spec(servers, {P + "enable-health-monitor": "true"})
    )
    assert again == status and writes(admin) == {}


@pytest.mark.parametrize(
    ("annotations", "check"),
    [
        pytest.param(
            {"service.beta.kubernetes.io/openstack-internal-load-balancer": "true"},
            lambda w, status: (
                not w["floatingips"] and status.ip == w["loadbalancers"][0]["vip_address"]
            ),
            id="internal",
        ),
        pytest.param(
            {P + "proxy-protocol": "v2"},
            lambda w, status: {p["protocol"] for p in w["pools"]} == {"PROXYV2"},
            id="proxy-protocol",
        ),
        pytest.param(
            {
                P + "timeout-client-data": "1000",
                P + "timeout-member-connect": "200",
                P + "connection-limit": "50",
            },
            lambda w, status: all(
                (x["timeout_client_data"], x["timeout_member_connect"], x["connection_limit"])
                == (1000, 200, 50)
                for x in w["listeners"]
            ),
            id="timeouts",
        ),
        pytest.param(
            {P + "lb-method": "LEAST_CONNECTIONS"},
            lambda w, status: {p["lb_algorithm"] for p in w["pools"]} == {"LEAST_CONNECTIONS"},
            id="lb-method",
        ),
        pytest.param(
            {P + "x-forwarded-for": "true"},
            lambda w, status: (
                {x["protocol"] for x in w["listeners"]} == {"HTTP"}
                and all(x["insert_headers"] == {"X-Forwarded-For": "true"} for x in w["listeners"])
            ),
            id="x-forwarded-for",
        ),
        pytest.param(
            {P + "availability-zone": "nova-b", P + "flavor-id": "__FLAVOR__"},
            lambda w, status: (
                w["loadbalancers"][0]["availability_zone"] == "nova-b"
                and w["loadbalancers"][0]["flavor_id"]
            ),
            id="flavor-and-zone",
        ),
        pytest.param(
            {P + "hostname": "web.example.com"},
            lambda w, status: status.hostname == "web.example.com" and not status.ip,
            id="hostname",
        ),
    ],
)
def test_annotations(
    driver: OpenStackDriver,
    admin: OpenStackEmulatorAdmin,
    endpoint: OpenStackEmulatorEndpoint,
    servers: list[dict[str, str]],
    annotations: dict[str, str],
    check: Any,
) -> None:
    if annotations.get(P + "flavor-id") == "__FLAVOR__":
        flavor = next(iter(connect(endpoint).load_balancer.flavors()))
        annotations = {**annotations, P + "flavor-id": flavor.id}
    status = driver.load_balancers.ensure_load_balancer(lb_spec(servers, annotations))
    assert check(world(admin), status)


def test_source_ranges_become_allowed_cidrs(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, servers: list[dict[str, str]]
) -> None:
    driver.load_balancers.ensure_load_balancer(
        lb_spec(servers, source_ranges=["192.0.2.0/24", "198.51.100.7/32"])
    )
    assert all(
        x["allowed_cidrs"] == ["192.0.2.0/24", "198.51.100.7/32"] for x in world(admin)["listeners"]
    )


def test_a_subnet_annotation_places_the_vip(
    driver: OpenStackDriver,
    admin: OpenStackEmulatorAdmin,
    endpoint: OpenStackEmulatorEndpoint,
    servers: list[dict[str, str]],
) -> None:
    sdk = connect(endpoint)
    network = sdk.network.create_network(name="lb-net")
    subnet = sdk.network.create_subnet(network_id=network.id, cidr="10.50.0.0/24", ip_version=4)
    sdk.network.add_interface_to_router(sdk.network.find_router("router1"), subnet_id=subnet.id)
    driver.load_balancers.ensure_load_balancer(lb_spec(servers, {P + "subnet-id": subnet.id}))
    [lb] = world(admin)["loadbalancers"]
    assert lb["vip_subnet_id"] == subnet.id and lb["vip_address"].startswith("10.50.0.")
    # Members stay on the nodes' addresses; the VIP subnet is the member subnet by default.
    assert {m["subnet_id"] for m in world(admin)["members"]} == {subnet.id}


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        pytest.param({P + "keep-floatingip": "yes"}, "true or false", id="bad-bool"),
        pytest.param(
            {P + "proxy-protocol": "true", P + "x-forwarded-for": "true"}, "together", id="conflict"
        ),
        pytest.param(
            {P + "load-balancer-id": "0b7c0000-0000-4000-8000-000000000000"},
            "does not exist",
            id="unknown-load-balancer-id",
        ),
    ],
)
def test_invalid_annotations_write_nothing(
    driver: OpenStackDriver,
    admin: OpenStackEmulatorAdmin,
    servers: list[dict[str, str]],
    annotations: dict[str, str],
    message: str,
) -> None:
    driver.discovery.zones()
    admin.clear_requests()
    with pytest.raises(errors.InvalidRequest, match=message):
        driver.load_balancers.ensure_load_balancer(lb_spec(servers, annotations))
    assert writes(admin) == {}


def test_an_lb_occm_made_is_adopted(
    driver: OpenStackDriver,
    admin: OpenStackEmulatorAdmin,
    endpoint: OpenStackEmulatorEndpoint,
    servers: list[dict[str, str]],
) -> None:
    sdk = connect(endpoint)
    subnet = sdk.network.find_subnet("private-subnet")
    made = sdk.load_balancer.create_load_balancer(
        name=UPSTREAM,
        vip_subnet_id=subnet.id,
        tags=[UPSTREAM],
        listeners=[
            {
                "name": f"listener_0_{UPSTREAM}",
                "protocol": "TCP",
                "protocol_port": 80,
                "tags": [UPSTREAM],
                "default_pool": {
                    "name": f"pool_0_{UPSTREAM}",
                    "protocol": "TCP",
                    "lb_algorithm": "ROUND_ROBIN",
                },
            }
        ],
    )
    sdk.load_balancer.wait_for_load_balancer(made.id, wait=10, interval=0.05)
    driver.load_balancers.ensure_load_balancer(lb_spec(servers))
    w = world(admin)
    [lb] = w["loadbalancers"]
    assert lb["id"] == made.id and identity_tag(NAME) in lb["tags"]
    assert len(w["listeners"]) == 2 and len(w["pools"]) == 2 and len(w["members"]) == 6
    assert driver.load_balancers.get_load_balancer(NAME) is not None


def test_the_lb_id_is_written_back_and_proxy_protocol_sets_ip_mode(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, servers: list[dict[str, str]]
) -> None:
    status = driver.load_balancers.ensure_load_balancer(
        lb_spec(servers, {P + "proxy-protocol": "true"})
    )
    [lb] = world(admin)["loadbalancers"]
    assert status.annotations == {P + "load-balancer-id": lb["id"]}
    assert status.ip and status.ip_mode == "Proxy"
    # With the ID written back, the next ensure (the Service now carries it) changes nothing.
    admin.clear_requests()
    again = lb_spec(servers, {P + "proxy-protocol": "true", P + "load-balancer-id": lb["id"]})
    assert driver.load_balancers.ensure_load_balancer(again) == status
    assert writes(admin) == {}
    plain = driver.load_balancers.ensure_load_balancer(lb_spec(servers))
    assert plain.ip_mode == ""


def test_load_balancer_ip_takes_the_pre_allocated_floating_ip(
    driver: OpenStackDriver,
    admin: OpenStackEmulatorAdmin,
    endpoint: OpenStackEmulatorEndpoint,
    servers: list[dict[str, str]],
) -> None:
    sdk = connect(endpoint)
    external = next(n for n in sdk.network.networks() if n.is_router_external)
    mine = sdk.network.create_ip(floating_network_id=external.id)
    driver.discovery.zones()  # logs in
    admin.clear_requests()
    with pytest.raises(errors.InvalidRequest, match="not a floating IP"):
        driver.load_balancers.ensure_load_balancer(
            lb_spec(servers, load_balancer_ip="198.51.100.250")
        )
    assert writes(admin) == {}  # refused before any write
    status = driver.load_balancers.ensure_load_balancer(
        lb_spec(servers, load_balancer_ip=mine.floating_ip_address)
    )
    assert status.ip == mine.floating_ip_address
    [lb] = world(admin)["loadbalancers"]
    fips = world(admin)["floatingips"]
    assert [(f["floating_ip_address"], f["port_id"]) for f in fips] == [
        (mine.floating_ip_address, lb["vip_port_id"])
    ]
    driver.load_balancers.delete_load_balancer(NAME)
    # The user's floating IP stays, detached, when the LB goes.
    assert [(f["id"], f["port_id"]) for f in world(admin)["floatingips"]] == [(mine.id, None)]


def test_a_load_balancer_given_by_id_is_used_and_released(
    driver: OpenStackDriver,
    admin: OpenStackEmulatorAdmin,
    endpoint: OpenStackEmulatorEndpoint,
    servers: list[dict[str, str]],
) -> None:
    sdk = connect(endpoint)
    subnet = sdk.network.find_subnet("private-subnet")
    given = sdk.load_balancer.create_load_balancer(
        name="made-by-hand", vip_subnet_id=subnet.id, tags=["team-a"]
    )
    sdk.load_balancer.wait_for_load_balancer(given.id, wait=10, interval=0.05)
    status = driver.load_balancers.ensure_load_balancer(
        lb_spec(servers, {P + "load-balancer-id": given.id})
    )
    w = world(admin)
    [lb] = w["loadbalancers"]
    assert lb["id"] == given.id and {"team-a", UPSTREAM, identity_tag(NAME)} <= set(lb["tags"])
    assert len(w["listeners"]) == 2 and status.annotations[P + "load-balancer-id"] == given.id
    driver.load_balancers.delete_load_balancer(NAME)
    w = world(admin)
    [kept] = w["loadbalancers"]
    assert kept["id"] == given.id and kept["tags"] == ["team-a"]
    assert w["listeners"] == [] and w["pools"] == [] and w["floatingips"] == []


def test_another_services_load_balancer_is_not_shared(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, servers: list[dict[str, str]]
) -> None:
    other = lb_spec(servers, service="shop/api", service_uid="7f1c2a3b-0000-4000-8000-00000000abcd")
    other = other.model_copy(update={"name": "a7f1c2a3b0000400080000000000abcd"})
    driver.load_balancers.ensure_load_balancer(other)
    [taken] = world(admin)["loadbalancers"]
    driver.discovery.zones()  # logs in
    admin.clear_requests()
    with pytest.raises(errors.InvalidRequest, match="sharing one load balancer"):
        driver.load_balancers.ensure_load_balancer(
            lb_spec(servers, {P + "load-balancer-id": taken["id"]})
        )
    assert writes(admin) == {}


def test_an_lb_in_error_is_replaced(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, servers: list[dict[str, str]]
) -> None:
    driver.load_balancers.ensure_load_balancer(lb_spec(servers))
    [old] = world(admin)["loadbalancers"]
    admin.set_loadbalancer_status(old["id"], "ERROR")
    status = driver.load_balancers.ensure_load_balancer(lb_spec(servers))
    w = world(admin)
    [new] = w["loadbalancers"]
    assert new["id"] != old["id"] and new["provisioning_status"] == "ACTIVE"
    assert len(w["listeners"]) == 2 and len(w["floatingips"]) == 1
    assert status.ip == w["floatingips"][0]["floating_ip_address"]


def test_a_create_ending_in_error_is_deleted_and_retried(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, servers: list[dict[str, str]]
) -> None:
    admin.fail_next("loadbalancer")
    with pytest.raises(errors.CloudError, match="ERROR") as raised:
        driver.load_balancers.ensure_load_balancer(lb_spec(servers))
    assert raised.value.retryable
    assert world(admin)["loadbalancers"] == []
    driver.load_balancers.ensure_load_balancer(lb_spec(servers))
    assert len(world(admin)["loadbalancers"]) == 1


def test_members_follow_the_nodes_in_one_batch(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, servers: list[dict[str, str]]
) -> None:
    driver.load_balancers.ensure_load_balancer(lb_spec(servers))
    more = servers[1:] + admin.seed_servers(1, prefix="lbnode", start=3)
    admin.clear_requests()
    driver.load_balancers.update_load_balancer_backends(lb_spec(more))
    assert writes(admin) == {"PUT load-balancer /v2.0/lbaas/pools/{id}/members": 2}
    assert {m["name"] for m in world(admin)["members"]} == {s["name"] for s in more}
    selected = lb_spec(more, {P + "node-selector": "pool=b"})
    driver.load_balancers.update_load_balancer_backends(selected)
    assert world(admin)["members"] == []


def test_listeners_follow_the_ports(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, servers: list[dict[str, str]]
) -> None:
    driver.load_balancers.ensure_load_balancer(lb_spec(servers))
    spec = lb_spec(
        servers,
        ports=[
            models.LoadBalancerPort(port=80, node_port=30080),
            models.LoadBalancerPort(port=53, node_port=30053, protocol="UDP"),
        ],
    )
    driver.load_balancers.ensure_load_balancer(spec)
    w = world(admin)
    assert sorted((x["protocol"], x["protocol_port"]) for x in w["listeners"]) == [
        ("TCP", 80),
        ("UDP", 53),
    ]
    assert sorted(p["protocol"] for p in w["pools"]) == ["TCP", "UDP"]
    assert {m["protocol_port"] for m in w["members"]} == {30080, 30053}
    assert len(w["loadbalancers"]) == 1


@pytest.mark.parametrize("keep", [False, True], ids=["released", "kept"])
def test_delete_cascades_and_handles_the_floating_ip(
    driver: OpenStackDriver,
    admin: OpenStackEmulatorAdmin,
    servers: list[dict[str, str]],
    keep: bool,
) -> None:
    annotations = {P + "keep-floatingip": "true"} if keep else {}
    status = driver.load_balancers.ensure_load_balancer(lb_spec(servers, annotations))
    admin.clear_requests()
    driver.load_balancers.delete_load_balancer(NAME)
    assert [k for k in writes(admin) if "DELETE load-balancer" in k] == [
        "DELETE load-balancer /v2.0/lbaas/loadbalancers/{id}"
    ]
    w = world(admin)
    assert not any(
        w[k] for k in ("loadbalancers", "listeners", "pools", "members", "healthmonitors")
    )
    fips = w["floatingips"]
    if keep:
        assert [f["floating_ip_address"] for f in fips] == [status.ip] and fips[0][
            "port_id"
        ] is None
    else:
        assert fips == []
    assert driver.load_balancers.get_load_balancer(NAME) is None
    driver.load_balancers.delete_load_balancer(NAME)  # nothing left: not an error


def test_serial_api_calls_make_the_children_one_by_one(
    endpoint: OpenStackEmulatorEndpoint,
    admin: OpenStackEmulatorAdmin,
    servers: list[dict[str, str]],
) -> None:
    serial = OpenStackDriver(
        quick_settings(
            endpoint,
            load_balancer=LoadBalancerSettings(
                provider_requires_serial_api_calls=True, create_monitor=True
            ),
        )
    )
    try:
        serial.discovery.zones()
        admin.clear_requests()
        serial.load_balancers.ensure_load_balancer(lb_spec(servers))
        counts = writes(admin)
        assert counts["POST load-balancer /v2.0/lbaas/listeners"] == 2
        assert counts["POST load-balancer /v2.0/lbaas/pools"] == 2
        assert counts["POST load-balancer /v2.0/lbaas/pools/{id}/members"] == 6
        assert counts["POST load-balancer /v2.0/lbaas/healthmonitors"] == 2
        assert len(world(admin)["members"]) == 6
    finally:
        serial.close()


def test_a_disabled_lb_section_leaves_services_alone(
    endpoint: OpenStackEmulatorEndpoint,
    admin: OpenStackEmulatorAdmin,
    servers: list[dict[str, str]],
) -> None:
    """``[LoadBalancer] enabled = false`` (upstream ``LoadBalancer()`` false): ensure answers
    NotSupported (the workflow's "handled elsewhere"), lookups find nothing, delete is a no-op."""
    off = OpenStackDriver(
        quick_settings(endpoint, load_balancer=LoadBalancerSettings(enabled=False))
    )
    try:
        with pytest.raises(errors.NotSupported):
            off.load_balancers.ensure_load_balancer(lb_spec(servers))
        with pytest.raises(errors.NotSupported):
            off.load_balancers.update_load_balancer_backends(lb_spec(servers))
        assert off.load_balancers.get_load_balancer(NAME) is None
        off.load_balancers.delete_load_balancer(NAME)
        assert world(admin)["loadbalancers"] == []
    finally:
        off.close()
