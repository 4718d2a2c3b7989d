"""OpenStack routes: router extra routes plus allowed address pairs, the driver and RouteSync.

The driver against the emulator (a route per pod CIDR to the node's InternalIP, the pod CIDR in
the port's allowed address pairs, blackholes for nexthops no server holds, removal of both, the
unwind when the port update fails), then RouteSync on the real stack: the controller-manager
assigns pod CIDRs, the loop routes them and sets ``NetworkUnavailable``, stale routes inside
the cluster CIDR go, others stay, and a Neutron outage deletes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cloudloop.cloud import errors, models
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Node
from cloudloop.kube.informer import Informer
from cloudloop.kube.resources import NODES
from cloudloop.rules import route as rules
from devstack.backends.openstack import connect
from devstack.kube import CLUSTER_CIDR
from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint
from starters.route import RouteSync
from tests.helpers import eventually
from tests.route.support import has_condition, network_condition, pod_cidr_of

pytestmark = pytest.mark.stack

LABEL = "cloudloop-test-routes"
OUTSIDE_CIDR = "192.168.77.0/24"
STALE_CIDR = "10.244.250.128/25"


def router(admin: OpenStackEmulatorAdmin, endpoint: OpenStackEmulatorEndpoint) -> dict[str, Any]:
    return next(r for r in admin.rows("routers") if r["id"] == endpoint.seed.router_id)


def routes(admin: OpenStackEmulatorAdmin, endpoint: OpenStackEmulatorEndpoint) -> dict[str, str]:
    return {r["destination"]: r["nexthop"] for r in router(admin, endpoint)["routes"]}


def port_of(admin: OpenStackEmulatorAdmin, server_id: str) -> dict[str, Any]:
    return next(p for p in admin.rows("ports") if p["device_id"] == server_id)


def pairs(admin: OpenStackEmulatorAdmin, server_id: str) -> list[str]:
    return [p["ip_address"] for p in port_of(admin, server_id)["allowed_address_pairs"]]


def paired(admin: OpenStackEmulatorAdmin, server_id: str, cidr: str) -> bool:
    return pairs(admin, server_id) == [cidr]


def address(admin: OpenStackEmulatorAdmin, server_id: str) -> str:
    return str(port_of(admin, server_id)["fixed_ips"][0]["ip_address"])


def test_create_list_and_delete(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, endpoint: OpenStackEmulatorEndpoint
) -> None:
    a, b = (s["id"] for s in admin.seed_servers(2, prefix="rt"))
    first = models.Route(name="x", destination_cidr="10.244.1.0/24", target_instance_id=a)
    driver.routes.create_route("c", first)
    driver.routes.create_route("c", first)  # again: nothing doubles
    assert routes(admin, endpoint) == {"10.244.1.0/24": address(admin, a)}
    assert pairs(admin, a) == ["10.244.1.0/24"]
    driver.routes.create_route(
        "c", models.Route(name="y", destination_cidr="10.244.2.0/24", target_instance_id=b)
    )
    listed = {r.destination_cidr: r for r in driver.routes.list_routes("c")}
    assert listed["10.244.1.0/24"].target_instance_id == a
    assert listed["10.244.2.0/24"].target_instance_id == b and not listed["10.244.2.0/24"].blackhole

    sdk = connect(endpoint)
    sdk.network.add_extra_routes_to_router(
        endpoint.seed.router_id,
        body={"router": {"routes": [{"destination": "10.244.9.0/24", "nexthop": "10.0.200.9"}]}},
    )
    assert {r.destination_cidr: r.blackhole for r in driver.routes.list_routes("c")}[
        "10.244.9.0/24"
    ]

    driver.routes.delete_route("c", first)
    assert "10.244.1.0/24" not in routes(admin, endpoint) and pairs(admin, a) == []
    driver.routes.delete_route("c", first)  # absent: not an error
    driver.routes.delete_route(
        "c", models.Route(name="z", destination_cidr="10.244.9.0/24", blackhole=True)
    )
    assert set(routes(admin, endpoint)) == {"10.244.2.0/24"}


def test_two_nexthops_on_two_servers_have_no_single_target(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, endpoint: OpenStackEmulatorEndpoint
) -> None:
    a, b = (s["id"] for s in admin.seed_servers(2, prefix="two"))
    sdk = connect(endpoint)
    both = [{"destination": "10.244.3.0/24", "nexthop": address(admin, s)} for s in (a, b)]
    sdk.network.add_extra_routes_to_router(
        endpoint.seed.router_id, body={"router": {"routes": both}}
    )
    [route] = driver.routes.list_routes("c")
    assert route.target_instance_id == "" and not route.blackhole


def test_a_failed_port_update_removes_the_route_again(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, endpoint: OpenStackEmulatorEndpoint
) -> None:
    [made] = admin.seed_servers(1, prefix="unwind")
    admin.inject("network", 500, method="PUT", route=r"/v2.0/ports/\{id\}$")
    with pytest.raises(errors.CloudError):
        driver.routes.create_route(
            "c",
            models.Route(name="u", destination_cidr="10.244.4.0/24", target_instance_id=made["id"]),
        )
    assert routes(admin, endpoint) == {}


async def test_without_a_router_the_route_loop_turns_itself_off(
    kube: Kube, endpoint: OpenStackEmulatorEndpoint, admin: OpenStackEmulatorAdmin
) -> None:
    """No ``[Route] router-id`` (upstream ``Routes()`` false): NotSupported, and RouteSync stops."""
    from tests.openstack.support import quick_settings

    no_router = OpenStackDriver(quick_settings(endpoint, router=False))
    try:
        with pytest.raises(errors.NotSupported):
            no_router.routes.list_routes("c")
        scope = uuid.uuid4().hex[:10]
        async with route_sync(kube, no_router, scope) as sync:
            await eventually(lambda: sync._stopped.is_set(), what="the loop stopped")
            assert sync.passes == 0 and sync.failed_passes == 0
    finally:
        no_router.close()


# -- RouteSync on the real stack ---------------------------------------------------------------
@contextlib.asynccontextmanager
async def route_sync(kube: Kube, driver: OpenStackDriver, scope: str) -> AsyncIterator[RouteSync]:
    informer = Informer[Node](kube, NODES, label_selector=f"{LABEL}={scope}")
    sync = RouteSync(
        kube,
        driver.routes,
        driver.instances,
        informer,
        cluster="c",
        cluster_cidrs=rules.parse_cluster_cidrs(CLUSTER_CIDR),
        period_s=1.0,
        min_pass_interval_s=0.2,
    )
    task = asyncio.create_task(sync.run())
    try:
        yield sync
    finally:
        sync.stop()
        informer.stop()
        await asyncio.wait_for(task, 10)


def make_node(kube: Kube, name: str, scope: str, server_id: str) -> None:
    kube.create(
        NODES,
        {
            "metadata": {"name": name, "labels": {LABEL: scope}},
            "spec": {"providerID": f"openstack:///{server_id}"},
        },
    )


def cleanup(kube: Kube, scope: str) -> None:
    for node in kube.list(NODES, labelSelector=f"{LABEL}={scope}")["items"]:
        kube.delete(NODES, node["metadata"]["name"])


async def test_route_sync_routes_the_pod_cidrs(
    kube: Kube,
    driver: OpenStackDriver,
    admin: OpenStackEmulatorAdmin,
    endpoint: OpenStackEmulatorEndpoint,
) -> None:
    scope = uuid.uuid4().hex[:10]
    servers = admin.seed_servers(3, prefix=f"rs-{scope}")
    sdk = connect(endpoint)
    bystander = address(admin, servers[2]["id"])
    sdk.network.add_extra_routes_to_router(
        endpoint.seed.router_id,
        body={
            "router": {
                "routes": [
                    {"destination": OUTSIDE_CIDR, "nexthop": bystander},
                    {"destination": STALE_CIDR, "nexthop": bystander},
                ]
            }
        },
    )
    names = [s["name"] for s in servers[:2]]
    try:
        for server in servers[:2]:
            await asyncio.to_thread(make_node, kube, server["name"], scope, server["id"])
        cidrs = {
            name: await eventually(
                functools.partial(pod_cidr_of, kube, name), what=f"pod CIDR of {name}"
            )
            for name in names
        }
        async with route_sync(kube, driver, scope) as sync:
            expected = {cidrs[s["name"]]: address(admin, s["id"]) for s in servers[:2]}

            def routed() -> dict[str, str] | None:
                now = routes(admin, endpoint)
                return (
                    now
                    if all(now.get(c) == h for c, h in expected.items()) and STALE_CIDR not in now
                    else None
                )

            now = await eventually(routed, what="the pod CIDRs routed")
            assert now[OUTSIDE_CIDR] == bystander  # outside the cluster CIDR: never touched
            for server in servers[:2]:
                # The port's address pair is written after the router's route (as upstream's
                # CreateRoute does): wait for it rather than read it once.
                assert await eventually(
                    functools.partial(paired, admin, server["id"], cidrs[server["name"]]),
                    what=f"the address pair on {server['name']}'s port",
                )
                assert await eventually(
                    functools.partial(
                        has_condition, kube, server["name"], ("False", "RouteCreated")
                    ),
                    what="RouteCreated",
                )

            admin.service_down("network")  # Neutron down: no pass may change anything
            passes = sync.failed_passes
            await asyncio.to_thread(kube.delete, NODES, names[0])
            await eventually(
                lambda: sync.failed_passes >= passes + 2, what="passes during the outage"
            )
            admin.service_up("network")
            await eventually(
                lambda: cidrs[names[0]] not in routes(admin, endpoint), what="route removed"
            )
            await eventually(  # the pair goes right after the route
                lambda: pairs(admin, servers[0]["id"]) == [], what="allowed address pair removed"
            )
            assert routes(admin, endpoint)[cidrs[names[1]]] == address(admin, servers[1]["id"])
            assert network_condition(kube, names[1]) == ("False", "RouteCreated")
    finally:
        admin.service_up("network")
        await asyncio.to_thread(cleanup, kube, scope)
