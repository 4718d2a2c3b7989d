"""OpenStack node sync against the emulator: the driver's instances and NodeSync on the real stack.

One paged server list per pass (however many nodes), the embedded flavor as instance type, the
AZ as zone, floating IPs as ExternalIP, by-name misses undecided; NodeSync initializes Nodes,
taints SHUTOFF servers, deletes Nodes only of servers Nova positively lists no more, and deletes
nothing while Nova is down.
"""

from __future__ import annotations

import pytest

from cloudloop.cloud import errors, models
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.openstack.settings import NetworkingSettings
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Event
from cloudloop.kube.resources import EVENTS
from cloudloop.rules import node as rules
from devstack.backends.openstack import connect
from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint
from tests.helpers import eventually
from tests.node.support import (
    cleanup,
    fast_sync,
    get_node,
    make_node,
    node_sync,
    node_when,
    set_ready,
)
from tests.openstack.support import quick_settings

pytestmark = pytest.mark.stack

SERVERS_ROUTE = "GET compute /v2.1/servers/detail"


def server_lists(admin: OpenStackEmulatorAdmin) -> int:
    return admin.request_counts().get(SERVERS_ROUTE, 0)


def test_one_paged_list_answers_any_number_of_ids(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin
) -> None:
    made = admin.seed_servers(5, prefix="node", zones=["nova-b"], flavor="m1.medium")
    ids = [m["id"] for m in made]
    driver.instances.list_instances(ids[:1])  # logs in
    admin.clear_requests()
    listing = driver.instances.list_instances([*ids, "00000000-0000-0000-0000-000000000000"])
    assert set(listing.found) == set(ids)
    assert server_lists(admin) == 1 and sum(admin.request_counts().values()) == 1
    instance = listing.found[ids[0]]
    assert instance.provider_id == f"openstack:///{ids[0]}"
    assert (instance.zone, instance.region, instance.instance_type) == (
        "nova-b",
        "RegionOne",
        "m1.medium",
    )
    assert instance.state is models.InstanceState.RUNNING
    assert [a.type for a in instance.addresses] == ["InternalIP"]


def test_floating_ip_is_external_and_networks_select_internal(
    endpoint: OpenStackEmulatorEndpoint, admin: OpenStackEmulatorAdmin
) -> None:
    [made] = admin.seed_servers(1, prefix="fip")
    sdk = connect(endpoint)
    [port] = sdk.network.ports(device_id=made["id"])
    public = sdk.network.find_network("public")
    fip = sdk.network.create_ip(floating_network_id=public.id, port_id=port.id)
    driver = OpenStackDriver(
        quick_settings(endpoint, networking=NetworkingSettings(internal_network_names=["private"]))
    )
    try:
        instance = driver.instances.list_instances([made["id"]]).found[made["id"]]
        assert [(a.type, a.address) for a in instance.addresses] == [
            ("InternalIP", port.fixed_ips[0]["ip_address"]),
            ("ExternalIP", fip.floating_ip_address),
        ]
    finally:
        driver.close()


def test_by_name_misses_and_duplicates_are_undecided(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin
) -> None:
    admin.seed_servers(2, prefix="dup")  # dup-0, dup-1
    admin.seed_servers(1, prefix="dup", start=1)  # a second dup-1
    admin.clear_requests()
    listing = driver.instances.find_instances_by_name(["dup-0", "dup-1", "nowhere"])
    assert set(listing.found) == {"dup-0"}
    assert sorted(listing.undecided) == ["dup-1", "nowhere"]
    # The Warning says what the cloud answered, not that it did not answer.
    assert listing.why["nowhere"] == "no server is named 'nowhere'"
    assert listing.why["dup-1"].startswith("2 servers are named 'dup-1' (")
    assert server_lists(admin) == 1  # one regex lookup for the batch


@pytest.mark.parametrize(
    ("status", "state"),
    [
        pytest.param("SHUTOFF", models.InstanceState.STOPPED, id="shutoff"),
        pytest.param("DELETED", models.InstanceState.TERMINATED, id="deleted"),
        pytest.param("ERROR", models.InstanceState.UNKNOWN, id="error"),
    ],
)
def test_server_states(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, status: str, state: models.InstanceState
) -> None:
    [made] = admin.seed_servers(1, prefix="state")
    admin.set_server_status(made["id"], status)
    assert driver.instances.list_instances([made["id"]]).found[made["id"]].state is state


@pytest.mark.parametrize("mode", ["refuse", "503"])
def test_nova_down_is_an_error_not_absence(
    driver: OpenStackDriver, admin: OpenStackEmulatorAdmin, mode: str
) -> None:
    [made] = admin.seed_servers(1, prefix="down")
    driver.instances.list_instances([made["id"]])
    admin.service_down("compute", mode)
    try:
        with pytest.raises(errors.CloudUnreachable):
            driver.instances.list_instances([made["id"]])
    finally:
        admin.service_up("compute")
    assert made["id"] in driver.instances.list_instances([made["id"]]).found


# -- NodeSync on the real stack ------------------------------------------------------------
@pytest.fixture
def ccm_settings(os_settings: Settings, scope: str) -> Settings:
    return fast_sync(os_settings, scope, concurrent_node_syncs=4)


def node_driver(settings: Settings) -> OpenStackDriver:
    from cloudloop.cloud.openstack import PROVIDER

    return OpenStackDriver(PROVIDER.section(settings))


async def test_node_sync_initializes_nodes_named_like_servers(
    kube: Kube, ccm_settings: Settings, admin: OpenStackEmulatorAdmin, scope: str
) -> None:
    made = admin.seed_servers(3, prefix=f"init-{scope}", flavor="m1.large")
    driver = node_driver(ccm_settings)
    try:
        for server in made:
            make_node(kube, server["name"], scope)
        async with node_sync(kube, ccm_settings, driver):
            for server in made:
                node = await eventually(
                    node_when(kube, server["name"], lambda n: not rules.needs_init(n)),
                    what=f"{server['name']} initialized",
                )
                assert node["spec"]["providerID"] == f"openstack:///{server['id']}"
                labels = node["metadata"]["labels"]
                assert labels["node.kubernetes.io/instance-type"] == "m1.large"
                assert labels["topology.kubernetes.io/region"] == "RegionOne"
                assert labels["topology.kubernetes.io/zone"] in ("nova", "nova-b")
                assert any(a["type"] == "InternalIP" for a in node["status"]["addresses"])
    finally:
        cleanup(kube, scope)
        driver.close()


async def test_a_node_named_like_no_server_is_warned_with_what_was_found(
    kube: Kube, ccm_settings: Settings, admin: OpenStackEmulatorAdmin, scope: str
) -> None:
    """Nova answered (no server, or two, by that name): the Warning says so, never that the
    cloud did not answer; the Node stays uninitialized."""
    admin.seed_servers(1, prefix=f"twin-{scope}")
    admin.seed_servers(1, prefix=f"twin-{scope}")  # a second server of the same name
    driver = node_driver(ccm_settings)
    expected = {
        f"nowhere-{scope}": f"no server is named 'nowhere-{scope}'",
        f"twin-{scope}-0": f"2 servers are named 'twin-{scope}-0' (",
    }
    try:
        for name in expected:
            make_node(kube, name, scope)
        async with node_sync(kube, ccm_settings, driver):
            for name, text in expected.items():

                def warned(name: str = name) -> list[Event]:
                    items = kube.list(
                        EVENTS, "default", fieldSelector=f"involvedObject.name={name}"
                    )
                    return [e for e in items["items"] if e["reason"] == "FailedToInitializeNode"]

                [event] = await eventually(warned, what=f"FailedToInitializeNode on {name}")
                assert text in str(event["message"]), event["message"]
                assert "did not answer" not in str(event["message"])
                node = get_node(kube, name)
                assert node is not None and rules.needs_init(node)
    finally:
        cleanup(kube, scope)
        driver.close()


async def test_lifecycle_taints_shutoff_deletes_gone_and_fails_closed(
    kube: Kube, ccm_settings: Settings, admin: OpenStackEmulatorAdmin, scope: str
) -> None:
    made = {s["name"]: s for s in admin.seed_servers(3, prefix=f"life-{scope}")}
    names = sorted(made)
    driver = node_driver(ccm_settings)
    try:
        for name in names:
            make_node(
                kube, name, scope, tainted=False, provider_id=f"openstack:///{made[name]['id']}"
            )
            set_ready(kube, name, "False")
        stopped, gone, kept = names
        admin.set_server_status(stopped, "SHUTOFF")
        async with node_sync(kube, ccm_settings, driver) as sync:
            await eventually(
                node_when(kube, stopped, lambda n: rules.has_taint(n, rules.SHUTDOWN_TAINT)),
                what="the SHUTOFF server's node tainted",
            )
            admin.service_down("compute")  # Nova down: nothing may be deleted meanwhile
            admin.set_server_status(made[gone]["id"], "DELETED")  # Nova lists it as DELETED
            passes = sync.passes
            await eventually(lambda: sync.passes >= passes + 4, what="passes while Nova is down")
            assert get_node(kube, gone) is not None
            admin.service_up("compute")
            await eventually(
                lambda: get_node(kube, gone) is None, what="the gone server's node deleted"
            )
            assert get_node(kube, kept) is not None and get_node(kube, stopped) is not None
    finally:
        admin.service_up("compute")
        cleanup(kube, scope)
        driver.close()


async def test_a_server_deleted_through_nova_takes_its_node(
    kube: Kube,
    ccm_settings: Settings,
    admin: OpenStackEmulatorAdmin,
    endpoint: OpenStackEmulatorEndpoint,
    scope: str,
) -> None:
    [made] = admin.seed_servers(1, prefix=f"del-{scope}")
    driver = node_driver(ccm_settings)
    try:
        make_node(
            kube, made["name"], scope, tainted=False, provider_id=f"openstack:///{made['id']}"
        )
        set_ready(kube, made["name"], "False")
        async with node_sync(kube, ccm_settings, driver):
            sdk = connect(endpoint)
            sdk.compute.delete_server(made["id"])
            await eventually(lambda: get_node(kube, made["name"]) is None, what="node deleted")
    finally:
        cleanup(kube, scope)
        driver.close()
