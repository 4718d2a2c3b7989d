"""The OpenStack emulator's Keystone, Nova and Neutron, driven only through ``openstacksdk``.

Token and application-credential auth with the catalog, re-authentication after revocation,
microversion shapes, server life cycle and paging, metadata and tags, ports, floating IPs,
router extra routes and allowed address pairs, and the faults the admin API injects.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from keystoneauth1 import exceptions as ksa_exceptions
from openstack import exceptions

from devstack.backends.openstack import APP_CREDENTIAL_SECRET, Sdk, connect, openstack_emulator
from devstack.openstack_emulator import (
    OpenStackEmulatorAdmin,
    OpenStackEmulatorEndpoint,
)
from tests.openstack.support import eventually

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenStackEmulatorEndpoint]:
    with openstack_emulator(tmp_path_factory.mktemp("openstack-core"), max_routes=4) as running:
        yield running


def create_server(conn: Sdk, name: str, **extra: Any) -> Any:
    network = conn.network.find_network("private")
    image = conn.image.find_image("ubuntu-22.04")
    return conn.compute.create_server(
        name=name, flavor_id="2", image_id=image.id, networks=[{"uuid": network.id}], **extra
    )


# -- Keystone -------------------------------------------------------------------------------
def test_a_password_token_carries_the_catalog(
    conn: Sdk, endpoint: OpenStackEmulatorEndpoint
) -> None:
    access = conn.session.auth.get_access(conn.session)
    assert access.project_id == endpoint.project_id
    catalog = {entry["type"]: entry for entry in access.service_catalog.catalog}
    assert {"identity", "compute", "network", "load-balancer", "block-storage", "image"} <= set(
        catalog
    )
    for entry in catalog.values():
        assert {e["interface"] for e in entry["endpoints"]} == {"public", "internal", "admin"}
        assert {e["region_id"] for e in entry["endpoints"]} == {
            endpoint.region,
            endpoint.region_two,
        }
    assert catalog["compute"]["endpoints"][0]["url"].endswith("/v2.1")
    assert catalog["block-storage"]["endpoints"][0]["url"].endswith(f"/v3/{endpoint.project_id}")


def test_an_application_credential_logs_in(
    endpoint: OpenStackEmulatorEndpoint, admin: OpenStackEmulatorAdmin
) -> None:
    seeded = connect(
        endpoint,
        auth_type="v3applicationcredential",
        application_credential_id=endpoint.app_credential_id,
        application_credential_secret=APP_CREDENTIAL_SECRET,
        username=None,
        password=None,
        project_name=None,
        user_domain_name=None,
        project_domain_name=None,
    )
    assert [n.name for n in seeded.network.networks(name="private")] == ["private"]
    access = seeded.session.auth.get_access(seeded.session)
    assert access.project_id == endpoint.project_id

    # One made through the API, by name and user, works the same way.
    owner = connect(endpoint)
    user_id = owner.session.get_user_id()
    made = owner.identity.create_application_credential(user=user_id, name="ccm", secret="s3cret")
    by_name = connect(
        endpoint,
        auth_type="v3applicationcredential",
        application_credential_name="ccm",
        application_credential_secret="s3cret",
        password=None,
        project_name=None,
        project_domain_name=None,
    )
    assert by_name.compute.find_flavor("m1.small") is not None
    assert made.id in {c.id for c in owner.identity.application_credentials(user=user_id)}


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"password": "wrong"}, id="wrong-password"),
        pytest.param({"username": "nobody"}, id="unknown-user"),
        pytest.param({"project_name": "other"}, id="other-project"),
    ],
)
def test_bad_credentials_are_refused(
    endpoint: OpenStackEmulatorEndpoint, admin: OpenStackEmulatorAdmin, overrides: dict[str, str]
) -> None:
    bad = connect(endpoint, **overrides)
    with pytest.raises((exceptions.HttpException, ksa_exceptions.Unauthorized)) as raised:
        list(bad.compute.flavors())
    assert "401" in str(raised.value) or isinstance(raised.value, ksa_exceptions.Unauthorized)


def test_an_unknown_region_has_no_endpoints(
    endpoint: OpenStackEmulatorEndpoint, admin: OpenStackEmulatorAdmin
) -> None:
    elsewhere = connect(endpoint, region_name="RegionX")
    with pytest.raises((exceptions.SDKException, ksa_exceptions.EndpointNotFound)):
        list(elsewhere.compute.flavors())


def test_revoked_tokens_make_the_sdk_log_in_again(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    assert conn.compute.find_flavor("m1.tiny") is not None
    admin.revoke_tokens()
    admin.clear_requests()
    assert conn.compute.find_flavor("m1.tiny") is not None
    counts = admin.request_counts()
    assert counts.get("POST identity /v3/auth/tokens") == 1
    statuses = [r["status"] for r in admin.requests() if r["service"] == "compute"]
    assert 401 in statuses and statuses[-1] == 200


# -- Nova -----------------------------------------------------------------------------------
def test_a_server_builds_stops_starts_and_goes(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    admin.hold("server")  # BUILD however long the GET below takes on a loaded machine
    try:
        server = create_server(conn, "web-1", availability_zone="nova-b", metadata={"role": "web"})
        assert conn.compute.get_server(server.id).status == "BUILD"
    finally:
        admin.release("server")
    server = conn.compute.wait_for_server(server, wait=10, interval=0.05)
    assert server.status == "ACTIVE"
    assert server.availability_zone == "nova-b"
    assert server.flavor.original_name == "m1.small" and server.flavor.vcpus == 1
    [fixed] = server.addresses["private"]
    assert fixed["OS-EXT-IPS:type"] == "fixed" and fixed["addr"].startswith("10.0.0.")
    assert server.metadata == {"role": "web"}

    conn.compute.stop_server(server)
    eventually(lambda: conn.compute.get_server(server.id).status == "SHUTOFF")
    with pytest.raises(exceptions.ConflictException):
        conn.compute.stop_server(server)
    conn.compute.start_server(server)
    eventually(lambda: conn.compute.get_server(server.id).status == "ACTIVE")

    conn.compute.delete_server(server)
    conn.compute.wait_for_delete(server, wait=10, interval=0.05)
    with pytest.raises(exceptions.NotFoundException):
        conn.compute.get_server(server.id)
    assert not list(conn.network.ports(device_id=server.id))


@pytest.mark.parametrize(
    ("microversion", "flavor_keys", "has_tags"),
    [
        pytest.param("2.1", {"id", "links"}, False, id="2.1"),
        pytest.param("2.46", {"id", "links"}, True, id="2.46"),
        pytest.param(
            "2.47",
            {"original_name", "vcpus", "ram", "disk", "ephemeral", "swap", "extra_specs"},
            True,
            id="2.47",
        ),
    ],
)
def test_the_server_shape_follows_the_microversion(
    conn: Sdk,
    admin: OpenStackEmulatorAdmin,
    microversion: str,
    flavor_keys: set[str],
    has_tags: bool,
) -> None:
    [made] = admin.seed_servers(1, prefix="shape")
    response = conn.compute.get(f"/servers/{made['id']}", microversion=microversion)
    assert response.headers["OpenStack-API-Version"] == f"compute {microversion}"
    assert response.headers["X-OpenStack-Nova-API-Version"] == microversion
    body = response.json()["server"]
    assert set(body["flavor"]) == flavor_keys
    assert ("tags" in body) is has_tags


def test_an_unsupported_microversion_is_406(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    response = conn.compute.get("/flavors", microversion="2.999")
    assert response.status_code == 406


def test_the_server_list_pages_like_nova(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    admin.seed_servers(25, prefix="page")
    admin.clear_requests()
    names = [s.name for s in conn.compute.servers(details=True, limit=10)]
    assert sorted(names) == sorted(f"page-{i}" for i in range(25))
    assert len(names) == len(set(names))
    # Three pages of 10, 10 and 5; with a limit the SDK also asks once more after the last.
    assert admin.request_counts()["GET compute /v2.1/servers/detail"] == 4

    # Nova's name filter is a regular expression (cloud-provider-openstack sends ^name$).
    found = [s.name for s in conn.compute.servers(name="^page-1[0-2]$")]
    assert sorted(found) == ["page-10", "page-11", "page-12"]
    with pytest.raises(exceptions.BadRequestException):
        list(conn.compute.servers(limit=5, marker="not-a-server"))


def test_an_unpaged_list_stops_at_max_limit_with_a_next_link(
    conn: Sdk, admin: OpenStackEmulatorAdmin
) -> None:
    admin.seed_servers(1001, prefix="many")
    body = conn.compute.get("/servers/detail", microversion="2.96").json()
    assert len(body["servers"]) == 1000
    [link] = body["servers_links"]
    assert link["rel"] == "next" and "marker=" in link["href"]
    assert len(list(conn.compute.servers())) == 1001


def test_metadata_and_tags(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    [made] = admin.seed_servers(1, prefix="meta")
    server = conn.compute.get_server(made["id"])
    conn.compute.set_server_metadata(server, cluster="c1", role="node")
    assert conn.compute.get_server_metadata(server).metadata == {"cluster": "c1", "role": "node"}
    conn.compute.delete_server_metadata(server, ["role"])
    assert conn.compute.get_server(server.id).metadata == {"cluster": "c1"}
    server.add_tag(conn.compute, "kube")
    server.add_tag(conn.compute, "worker")
    assert sorted(conn.compute.get_server(server.id).tags) == ["kube", "worker"]
    assert [s.id for s in conn.compute.servers(tags="kube,worker")] == [server.id]
    assert not list(conn.compute.servers(tags="absent"))


@pytest.mark.parametrize(
    "metadata",
    [{"cloudloop.io/digest": "x"}, {"": "x"}, {"k": "v" * 256}],
    ids=["slash-in-key", "empty-key", "long-value"],
)
def test_metadata_outside_novas_schema_is_refused(
    conn: Sdk, admin: OpenStackEmulatorAdmin, metadata: dict[str, str]
) -> None:
    """Nova's ``parameter_types.metadata``: keys ``^[a-zA-Z0-9-_:. ]{1,255}$``, values ≤ 255."""
    with pytest.raises(exceptions.BadRequestException, match="field/attribute metadata"):
        create_server(conn, "bad-meta", metadata=metadata)
    [made] = admin.seed_servers(1, prefix="meta-bad")
    server = conn.compute.get_server(made["id"])
    with pytest.raises(exceptions.BadRequestException, match="field/attribute metadata"):
        conn.compute.set_server_metadata(server, **metadata)
    assert conn.compute.get_server(server.id).metadata == {}
    conn.compute.set_server_metadata(server, **{"cloudloop.io:digest": "x"})  # ':' is allowed


def test_flavors_and_zones(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    small = conn.compute.find_flavor("m1.small")
    assert (small.vcpus, small.ram, small.disk) == (1, 2048, 20)
    zones = [z.name for z in conn.compute.availability_zones()]
    assert zones == ["nova", "nova-b"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param({"flavor_id": "nope"}, "Flavor", id="unknown-flavor"),
        pytest.param({"availability_zone": "mars"}, "availability zone", id="unknown-zone"),
    ],
)
def test_bad_server_requests_are_400(
    conn: Sdk, admin: OpenStackEmulatorAdmin, body: dict[str, str], message: str
) -> None:
    network = conn.network.find_network("private")
    image = conn.image.find_image("ubuntu-22.04")
    args: dict[str, Any] = {
        "name": "bad",
        "flavor_id": "2",
        "image_id": image.id,
        "networks": [{"uuid": network.id}],
    }
    args.update(body)
    with pytest.raises(exceptions.BadRequestException, match=message):
        conn.compute.create_server(**args)


# -- Neutron --------------------------------------------------------------------------------
def test_ports_carry_the_server_and_filter_by_fixed_ip(
    conn: Sdk, admin: OpenStackEmulatorAdmin
) -> None:
    [made] = admin.seed_servers(1, prefix="port")
    [port] = conn.network.ports(device_id=made["id"])
    assert port.status == "ACTIVE" and port.device_owner.startswith("compute:")
    address = port.fixed_ips[0]["ip_address"]
    found = list(conn.network.ports(fixed_ips=[f"ip_address={address}"]))
    assert [p.id for p in found] == [port.id]


def test_a_floating_ip_needs_a_router_and_shows_on_the_server(
    conn: Sdk, admin: OpenStackEmulatorAdmin
) -> None:
    [made] = admin.seed_servers(1, prefix="fip")
    [port] = conn.network.ports(device_id=made["id"])
    public = conn.network.find_network("public")
    fip = conn.network.create_ip(floating_network_id=public.id, port_id=port.id, description="test")
    assert fip.status == "ACTIVE" and fip.fixed_ip_address == port.fixed_ips[0]["ip_address"]
    addresses = conn.compute.get_server(made["id"]).addresses["private"]
    assert {a["OS-EXT-IPS:type"] for a in addresses} == {"fixed", "floating"}
    assert [f.id for f in conn.network.ips(port_id=port.id)] == [fip.id]
    conn.network.update_ip(fip, port_id=None)
    assert conn.network.get_ip(fip.id).status == "DOWN"

    isolated = conn.network.create_network(name="isolated")
    subnet = conn.network.create_subnet(
        network_id=isolated.id, cidr="192.168.77.0/24", ip_version=4
    )
    lonely = conn.network.create_port(network_id=isolated.id)
    with pytest.raises(exceptions.NotFoundException, match="not reachable"):
        conn.network.create_ip(floating_network_id=public.id, port_id=lonely.id)
    assert subnet.gateway_ip == "192.168.77.1"


def test_novas_floating_ip_proxy_below_2_36(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    """What gophercloud's ``compute/v2/extensions/floatingips`` sends (Terraform's
    ``openstack_compute_floatingip_v2`` and ``_associate_v2``), as Nova serves it below 2.36
    (the actions below 2.44), on Neutron's floating IPs."""
    [made] = admin.seed_servers(1, prefix="nova-fip")
    [port] = conn.network.ports(device_id=made["id"])
    old = {"microversion": "2.1"}
    made_fip = conn.compute.post("/os-floating-ips", json={"pool": "public"}, **old)
    assert made_fip.status_code == 200, made_fip.text
    fip = made_fip.json()["floating_ip"]
    assert fip["pool"] == "public" and fip["instance_id"] is None and fip["fixed_ip"] is None
    assert conn.network.get_ip(fip["id"]).floating_ip_address == fip["ip"]  # Neutron's own
    assert fip["id"] in [
        f["id"] for f in conn.compute.get("/os-floating-ips", **old).json()["floating_ips"]
    ]
    assert {"name": "public"} in conn.compute.get("/os-floating-ip-pools", **old).json()[
        "floating_ip_pools"
    ]

    action = f"/servers/{made['id']}/action"
    added = conn.compute.post(action, json={"addFloatingIp": {"address": fip["ip"]}}, **old)
    assert added.status_code == 202, added.text
    shown = conn.compute.get(f"/os-floating-ips/{fip['id']}", **old).json()["floating_ip"]
    assert shown["instance_id"] == made["id"]
    assert shown["fixed_ip"] == port.fixed_ips[0]["ip_address"]
    assert conn.network.get_ip(fip["id"]).port_id == port.id
    kinds = {a["OS-EXT-IPS:type"] for a in conn.compute.get_server(made["id"]).addresses["private"]}
    assert kinds == {"fixed", "floating"}

    removed = conn.compute.post(action, json={"removeFloatingIp": {"address": fip["ip"]}}, **old)
    assert removed.status_code == 202, removed.text
    assert conn.network.get_ip(fip["id"]).port_id is None
    again = conn.compute.post(action, json={"removeFloatingIp": {"address": fip["ip"]}}, **old)
    assert again.status_code == 409
    assert conn.compute.delete(f"/os-floating-ips/{fip['id']}", **old).status_code == 202
    assert conn.compute.get(f"/os-floating-ips/{fip['id']}", **old).status_code == 404
    assert conn.network.find_ip(fip["id"]) is None

    # gone from 2.36 (the proxy APIs) and 2.44 (the actions), as in Nova
    assert conn.compute.get("/os-floating-ips", microversion="2.36").status_code == 404
    late = conn.compute.post(
        action, json={"addFloatingIp": {"address": "1.2.3.4"}}, microversion="2.44"
    )
    assert late.status_code == 400


def test_router_extra_routes(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    router = conn.network.find_router("router1")
    hop = "10.0.0.50"  # inside PRIVATE_CIDR, which router1 is connected to
    route = {"destination": "10.244.1.0/24", "nexthop": hop}
    updated = conn.network.add_extra_routes_to_router(router, body={"router": {"routes": [route]}})
    assert updated.routes == [route]
    again = conn.network.add_extra_routes_to_router(router, body={"router": {"routes": [route]}})
    assert again.routes == [route]  # an existing pair is accepted, not doubled
    second = {"destination": "10.244.1.0/24", "nexthop": hop.replace("50", "51")}
    both = conn.network.add_extra_routes_to_router(router, body={"router": {"routes": [second]}})
    assert both.routes == [route, second]  # several nexthops per destination
    left = conn.network.remove_extra_routes_from_router(
        router, body={"router": {"routes": [route, {"destination": "10.9.9.0/24", "nexthop": hop}]}}
    )
    assert left.routes == [second]

    with pytest.raises(exceptions.BadRequestException, match="nexthop is not connected"):
        conn.network.add_extra_routes_to_router(
            router,
            body={"router": {"routes": [{"destination": "10.244.2.0/24", "nexthop": "192.0.2.1"}]}},
        )
    many = [{"destination": f"10.245.{i}.0/24", "nexthop": hop} for i in range(4)]
    with pytest.raises(exceptions.BadRequestException, match="exceeds the maximum 4"):
        conn.network.add_extra_routes_to_router(router, body={"router": {"routes": many}})
    extensions = {e.alias for e in conn.network.extensions()}
    assert {"extraroute", "extraroute-atomic", "allowed-address-pairs"} <= extensions


def test_allowed_address_pairs_need_port_security(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    [made] = admin.seed_servers(1, prefix="pairs")
    [port] = conn.network.ports(device_id=made["id"])
    updated = conn.network.update_port(
        port, allowed_address_pairs=[{"ip_address": "10.244.3.0/24"}]
    )
    assert updated.allowed_address_pairs == [
        {"ip_address": "10.244.3.0/24", "mac_address": port.mac_address}
    ]
    network = conn.network.find_network("private")
    open_port = conn.network.create_port(network_id=network.id, port_security_enabled=False)
    with pytest.raises(exceptions.ConflictException, match="Port Security must be enabled"):
        conn.network.update_port(open_port, allowed_address_pairs=[{"ip_address": "10.244.4.0/24"}])


def test_security_group_rules(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    group = conn.network.create_security_group(name="lb-sg")
    rule = {
        "security_group_id": group.id,
        "direction": "ingress",
        "protocol": "tcp",
        "port_range_min": 30000,
        "port_range_max": 30000,
        "remote_ip_prefix": "0.0.0.0/0",
    }
    conn.network.create_security_group_rule(**rule)
    with pytest.raises(exceptions.ConflictException):
        conn.network.create_security_group_rule(**rule)
    rules = conn.network.get_security_group(group.id).security_group_rules
    assert {r["direction"] for r in rules} == {"ingress", "egress"}


def test_network_lists_page_with_links(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    for index in range(5):
        conn.network.create_network(name=f"paged-{index}")
    admin.clear_requests()
    names = [n.name for n in conn.network.networks(limit=2)]
    assert {f"paged-{i}" for i in range(5)} <= set(names)
    assert admin.request_counts()["GET network /v2.0/networks"] >= 4


# -- faults and counting ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mode", "error"),
    [
        pytest.param("refuse", ksa_exceptions.ConnectFailure, id="refused"),
        pytest.param("503", exceptions.HttpException, id="proxy-503"),
        pytest.param("500", exceptions.HttpException, id="500"),
    ],
)
def test_a_service_down_leaves_the_others_up(
    conn: Sdk, admin: OpenStackEmulatorAdmin, mode: str, error: type[Exception]
) -> None:
    assert conn.compute.find_flavor("m1.small") is not None
    admin.service_down("compute", mode)
    try:
        with pytest.raises(error):
            conn.compute.get_flavor("2")
        assert conn.network.find_network("private") is not None
    finally:
        admin.service_up("compute")
    assert conn.compute.get_flavor("2").name == "m1.small"


def test_injected_faults_hit_the_next_matching_requests(
    conn: Sdk, admin: OpenStackEmulatorAdmin
) -> None:
    admin.inject("network", 500, method="GET", route="/v2.0/routers", count=2)
    for _ in range(2):
        with pytest.raises(exceptions.HttpException) as raised:
            conn.network.get_router(conn.network.find_router("router1").id)
        assert raised.value.status_code == 500
    assert conn.network.find_router("router1") is not None
    admin.inject("compute", 429, count=1, retry_after_s=0)
    response = conn.compute.get("/flavors", raise_exc=False, retriable_status_codes=[])
    assert response.status_code == 429


def test_requests_are_counted_by_route(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    [made] = admin.seed_servers(1, prefix="count")
    conn.compute.get_server(made["id"])  # logs in and discovers the versions first
    admin.clear_requests()
    conn.compute.get_server(made["id"])
    conn.compute.get_server(made["id"])
    counts = admin.request_counts()
    assert counts == {"GET compute /v2.1/servers/{id}": 2}


def test_forced_server_states(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    [made] = admin.seed_servers(1, prefix="forced")
    for status in ("SHUTOFF", "ERROR", "DELETED", "ACTIVE"):
        admin.set_server_status(made["name"], status)
        assert conn.compute.get_server(made["id"]).status == status


def test_state_shows_the_seed(
    admin: OpenStackEmulatorAdmin, endpoint: OpenStackEmulatorEndpoint
) -> None:
    state = admin.state()
    assert state["seed"]["project_id"] == endpoint.project_id
    assert {n["name"] for n in state["networks"]} == {"public", "private"}


def test_key_pairs_by_name(conn: Sdk, admin: OpenStackEmulatorAdmin) -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHf0sKGoGm2JrFGhTiFqcXcxp8HT1i6kQk2bIsOfpBTX x@y"
    made = conn.compute.create_keypair(name="layout-key", public_key=key)
    assert made.name == "layout-key"
    assert conn.compute.get_keypair("layout-key").public_key == key
    with pytest.raises(exceptions.ConflictException, match="already exists"):
        conn.compute.create_keypair(name="layout-key", public_key=key)
    with pytest.raises(exceptions.BadRequestException, match="Keypair data is invalid"):
        conn.compute.create_keypair(name="other-key", public_key="not a key")
    conn.compute.delete_keypair("layout-key")
    with pytest.raises(exceptions.NotFoundException, match="Keypair layout-key not found"):
        conn.compute.get_keypair("layout-key")
    with pytest.raises(exceptions.NotFoundException):
        conn.compute.delete_keypair("layout-key", ignore_missing=False)


def test_overlapping_subnets_and_router_interfaces_are_400(
    conn: Sdk, admin: OpenStackEmulatorAdmin
) -> None:
    network = conn.network.create_network(name="overlaps")
    conn.network.create_subnet(network_id=network.id, cidr="10.60.0.0/24", ip_version=4)
    with pytest.raises(exceptions.BadRequestException, match="overlaps with another subnet"):
        conn.network.create_subnet(network_id=network.id, cidr="10.60.0.128/25", ip_version=4)
    # another network may hold the same CIDR, but one router cannot join both
    clash = conn.network.create_network(name="clash")
    inner = conn.network.create_subnet(network_id=clash.id, cidr="10.0.5.0/24", ip_version=4)
    router = conn.network.find_router("router1")
    with pytest.raises(exceptions.BadRequestException, match=r"overlaps with cidr 10\.0\.0\.0/16"):
        conn.network.add_interface_to_router(router, subnet_id=inner.id)
    bare = conn.network.create_subnet(
        network_id=conn.network.create_network(name="bare").id,
        cidr="10.70.0.0/24",
        ip_version=4,
        gateway_ip=None,
    )
    with pytest.raises(exceptions.BadRequestException, match="does not have a gateway IP"):
        conn.network.add_interface_to_router(router, subnet_id=bare.id)
