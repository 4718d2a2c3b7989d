"""The vSphere driver's instances against vcsim, and NodeSync with it on the real stack:
lookups by UUID (both byte orders), DNS name, IP; zones from tags at every ancestor level; one
inventory read and one tag listing per pass; session re-established; a vCenter outage deletes
no Node."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY
from pydantic import SecretStr

from cloudloop.cloud import errors
from cloudloop.cloud.registry import Settings
from cloudloop.cloud.vsphere import PROVIDER as VSPHERE
from cloudloop.cloud.vsphere.driver import VsphereDriver
from cloudloop.cloud.vsphere.mapping import swap_uuid_bytes
from cloudloop.cloud.vsphere.settings import VsphereSettings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import EVENTS
from cloudloop.rules import node as rules
from devstack.backends import emulator_only
from devstack.backends.vsphere import vsphere_settings
from devstack.vcsim import VcsimEndpoint, VcsimOptions
from devstack.vcsim_inventory import (
    Inventory,
    NodeVm,
    Tags,
    ZoneLayout,
    clone_node_vm,
    connect,
    disconnect,
    find,
    seed,
    tagging_client,
)
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

pytestmark = pytest.mark.stack

UNKNOWN_UUID = "00000000-0000-0000-0000-000000000000"


@pytest.fixture
def driver(vcsim: VcsimEndpoint) -> Iterator[VsphereDriver]:
    made = VsphereDriver(vsphere_settings(vcsim, timeout_s=5))
    try:
        yield made
    finally:
        made.close()


def calls() -> dict[str, float]:
    counted: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name != "cloud_api_requests":
            continue
        for sample in metric.samples:
            if sample.name.endswith("_total") and sample.labels.get("provider") == "vsphere":
                op = sample.labels["operation"]
                counted[op] = counted.get(op, 0.0) + sample.value
    return counted


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def test_list_instances_by_uuid(seeded: Inventory, driver: VsphereDriver) -> None:
    a, b = seeded.vms["node-a"], seeded.vms["node-b"]
    listing = driver.instances.list_instances([a.uuid, swap_uuid_bytes(b.uuid), UNKNOWN_UUID])
    assert set(listing.found) == {a.uuid, swap_uuid_bytes(b.uuid)}
    node_a = listing.found[a.uuid]
    assert node_a.provider_id == f"vsphere://{a.uuid}"
    assert node_a.instance_type == "vsphere-vm.cpu-2.mem-4gb.os-ubuntu"
    assert (node_a.region, node_a.zone) == ("region-a", "zone-a")
    assert listing.found[swap_uuid_bytes(b.uuid)].zone == "zone-b"
    assert [(x.type, x.address) for x in node_a.addresses] == [
        ("Hostname", "node-a"),
        ("InternalIP", "10.0.1.10"),
        ("ExternalIP", "10.0.1.10"),
    ]
    assert node_a.state.value == "running"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("node-a", "node-a", id="dns-name"),
        pytest.param("10.0.2.10", "node-b", id="ip"),
        pytest.param("no-such-node", None, id="miss-is-undecided"),
    ],
)
def test_find_by_name(
    seeded: Inventory, driver: VsphereDriver, name: str, expected: str | None
) -> None:
    listing = driver.instances.find_instances_by_name([name])
    if expected is None:
        assert listing.found == {} and listing.undecided == [name]
        assert listing.why[name] == (
            f"no VM matches {name!r} by guest host name, IP address or VM name"
        )
    else:
        assert listing.found[name].id == seeded.vms[expected].uuid


def test_by_name_reuses_a_young_read_that_answers_every_name(
    seeded: Inventory, driver: VsphereDriver, vcsim: VcsimEndpoint
) -> None:
    """An init burst reads vCenter once; a VM the cached read does not know costs one fresh
    read at once (its node does not wait for the cache to age)."""
    assert driver.instances.find_instances_by_name(["node-a"]).requests == 2
    again = driver.instances.find_instances_by_name(["node-a", "10.0.2.10"])
    assert again.requests == 0 and set(again.found) == {"node-a", "10.0.2.10"}
    si = connect(vcsim)
    try:
        late = clone_node_vm(si, NodeVm("node-late", "10.0.1.77", cluster="DC0_C0"))
    finally:
        disconnect(si)
    fresh = driver.instances.find_instances_by_name(["node-a", "node-late"])
    assert fresh.requests == 2 and fresh.found["node-late"].id == late.uuid
    assert fresh.found["node-late"].zone == "zone-a"
    miss = driver.instances.find_instances_by_name(["no-such-node"])
    assert miss.requests == 2 and miss.undecided == ["no-such-node"]


def test_one_read_and_one_tag_listing_per_pass(seeded: Inventory, driver: VsphereDriver) -> None:
    ids = [vm.uuid for vm in seeded.vms.values()]
    driver.instances.list_instances(ids)  # warm: login, container view, tag names
    before = calls()
    listing = driver.instances.list_instances(ids)
    assert delta(before, calls()) == {"RetrieveProperties": 1.0, "ListAttachedObjects": 1.0}
    assert listing.requests == 2


def test_session_is_reestablished(seeded: Inventory, driver: VsphereDriver) -> None:
    ids = [seeded.vms["node-a"].uuid]
    driver.instances.list_instances(ids)
    driver.session._si.content.sessionManager.Logout()  # the session ends on the vCenter side
    assert set(driver.instances.list_instances(ids).found) == set(ids)


def test_wrong_password_is_auth_failed(vcsim: VcsimEndpoint) -> None:
    bad = VsphereDriver(
        vsphere_settings(vcsim, timeout_s=5).model_copy(update={"username": "intruder"})
    )
    with pytest.raises(errors.CloudAuthFailed):
        bad.instances.list_instances([UNKNOWN_UUID])


@pytest.mark.parametrize("level", ["datacenter", "cluster", "host", "vm"])
def test_zone_from_tags_at_every_level(seeded: Inventory, vcsim: VcsimEndpoint, level: str) -> None:
    """A fresh zone category per level: the tag on that level alone gives node-a its zone."""
    category = f"zone-at-{level}"
    path = {
        "datacenter": "DC0",
        "cluster": "DC0/host/DC0_C0",
        "host": "DC0/host/DC0_C0/DC0_C0_H0",
        "vm": "DC0/vm/node-a",
    }[level]
    si = connect(vcsim)
    client = tagging_client(vcsim)
    try:
        Tags(client).attach(category, f"z-{level}", [find(si, path)])
    finally:
        client.logout()
        disconnect(si)
    scoped = VsphereDriver(vsphere_settings(vcsim, timeout_s=5, zone_tag_category=category))
    try:
        uuid = seeded.vms["node-a"].uuid
        instance = scoped.instances.list_instances([uuid]).found[uuid]
        assert (instance.region, instance.zone) == ("region-a", f"z-{level}")
    finally:
        scoped.close()


def test_a_zone_tag_on_the_cluster_wins_over_the_hosts_as_upstream(
    seeded: Inventory, vcsim: VcsimEndpoint
) -> None:
    """The CPI walks host → cluster → datacenter and a tag met higher replaces the one below
    until both region and zone are known: with the region on the datacenter, a zone tag on the
    host and another on its cluster give the cluster's."""
    category = "zone-precedence"
    si = connect(vcsim)
    client = tagging_client(vcsim)
    try:
        tags = Tags(client)
        tags.attach(category, "z-host", [find(si, "DC0/host/DC0_C0/DC0_C0_H0")])
        tags.attach(category, "z-cluster", [find(si, "DC0/host/DC0_C0")])
    finally:
        client.logout()
        disconnect(si)
    scoped = VsphereDriver(vsphere_settings(vcsim, timeout_s=5, zone_tag_category=category))
    try:
        uuid = seeded.vms["node-a"].uuid
        instance = scoped.instances.list_instances([uuid]).found[uuid]
        assert (instance.region, instance.zone) == ("region-a", "z-cluster")
        assert instance.init_error == ""
    finally:
        scoped.close()


def test_a_vcenter_that_accepts_and_never_answers_times_out(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A half-open vCenter (accepts, never answers): the login's version probe and the login
    are bounded by ``timeout_s``, so the call fails as unreachable instead of hanging (and, the
    login holding only its own lock, the driver's other calls never wait behind it)."""
    import socket
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    try:
        hanging = VsphereDriver(
            VsphereSettings(
                server=f"127.0.0.1:{port}",
                username="u",
                password=SecretStr("p"),
                insecure=True,
                timeout_s=1,
            )
        )
        started = time.monotonic()
        with pytest.raises(errors.CloudUnreachable):
            hanging.instances.list_instances([UNKNOWN_UUID])
        assert time.monotonic() - started < 10
        hanging.close()
    finally:
        listener.close()


# -- NodeSync on the real stack -----------------------------------------------------------------
@pytest.fixture
def vsphere_ccm(settings: Settings, vcsim: VcsimEndpoint, scope: str) -> Settings:
    return fast_sync(settings, scope).model_copy(
        update={"provider": "vsphere", "vsphere": vsphere_settings(vcsim, timeout_s=5)}
    )


async def test_node_sync_initializes_with_zone_labels(
    seeded: Inventory, kube: Kube, vsphere_ccm: Settings, scope: str
) -> None:
    """Nodes named after the guests' DNS names (kubelet on vSphere sets no providerID)."""
    driver = VsphereDriver(VSPHERE.section(vsphere_ccm))
    try:
        for name in ("node-a", "node-b"):
            make_node(kube, name, scope)
        async with node_sync(kube, vsphere_ccm, driver):
            for name, zone in (("node-a", "zone-a"), ("node-b", "zone-b")):
                node = await eventually(
                    node_when(kube, name, lambda n: not rules.needs_init(n)),
                    what=f"{name} initialized",
                )
                labels = node["metadata"]["labels"]
                assert labels["topology.kubernetes.io/zone"] == zone
                assert labels["failure-domain.beta.kubernetes.io/zone"] == zone
                assert labels["topology.kubernetes.io/region"] == "region-a"
                assert labels["failure-domain.beta.kubernetes.io/region"] == "region-a"
                assert labels["node.kubernetes.io/instance-type"] == (
                    "vsphere-vm.cpu-2.mem-4gb.os-ubuntu"
                )
                assert node["spec"]["providerID"] == seeded.vms[name].provider_id
                assert {"type": "InternalIP", "address": seeded.vms[name].ip} in node["status"][
                    "addresses"
                ]
    finally:
        cleanup(kube, scope)
        driver.close()


async def test_a_zone_tag_made_late_is_seen_and_none_keeps_the_node_uninitialized(
    seeded: Inventory, kube: Kube, vsphere_ccm: Settings, vcsim: VcsimEndpoint, scope: str
) -> None:
    """With zone categories configured, a VM no tag places fails the zone lookup: its Node stays
    uninitialized with a Warning saying so (upstream), and is not labelled zoneless forever.
    The zone tag made a moment later is seen at once, not after the tag-name cache ages."""
    category = f"late-zone-{scope}"
    section = VSPHERE.section(vsphere_ccm).model_copy(update={"zone_tag_category": category})
    settings = vsphere_ccm.model_copy(update={"vsphere": section})
    driver = VsphereDriver(section)
    try:
        make_node(kube, "node-a", scope)
        async with node_sync(kube, settings, driver):

            def warned() -> list[str]:
                found = kube.list(EVENTS, "default", fieldSelector="involvedObject.name=node-a")
                return [
                    e["message"]
                    for e in found["items"]
                    if e["reason"] == "FailedToInitializeNode" and category in e["message"]
                ]

            [message] = await eventually(warned, what="the zone lookup failing")
            assert "zone category" in message
            node = get_node(kube, "node-a")
            assert node is not None and rules.needs_init(node)
            si = connect(vcsim)
            client = tagging_client(vcsim)
            try:
                Tags(client).attach(category, "zone-late", [find(si, "DC0/host/DC0_C0")])
            finally:
                client.logout()
                disconnect(si)
            initialized = await eventually(
                node_when(kube, "node-a", lambda n: not rules.needs_init(n)),
                timeout=60,
                what="node-a initialized once the tag exists",
            )
            labels = initialized["metadata"]["labels"]
            assert labels["topology.kubernetes.io/zone"] == "zone-late"
    finally:
        cleanup(kube, scope)
        driver.close()


async def test_vcenter_outage_deletes_no_node(
    kube: Kube, settings: Settings, scope: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A destroyed VM's NotReady node goes; while vCenter is down, no NotReady node does."""
    with emulator_only(tmp_path_factory.mktemp("vcsim-outage"), vcsim=VcsimOptions()) as local:
        assert local.vcsim is not None
        try:
            inventory = seed(
                local.vcsim,
                [NodeVm("out-a", "10.0.3.10"), NodeVm("out-b", "10.0.3.11", power_on=False)],
                ZoneLayout(),
            )
            ccm = settings.ccm.model_copy(
                update={"node_selector": f"cloudloop-test={scope}", "node_monitor_period_s": 0.3}
            )
            sync_settings = settings.model_copy(update={"ccm": ccm})
            driver = VsphereDriver(vsphere_settings(local.vcsim, timeout_s=5))
            names = {}
            for key, vm in inventory.vms.items():
                names[key] = f"{key}-{scope}"
                make_node(kube, names[key], scope, tainted=False, provider_id=vm.provider_id)
                set_ready(kube, names[key], "False")
            si = connect(local.vcsim)
            try:  # out-b is powered off: destroy it, its node must go
                from devstack.vcsim_inventory import wait_task

                wait_task(si, find(si, "DC0/vm/out-b").Destroy_Task())
            finally:
                disconnect(si)
            async with node_sync(kube, sync_settings, driver) as sync:
                await eventually(
                    lambda: get_node(kube, names["out-b"]) is None,
                    what="the gone VM's node deleted",
                )
                assert local.vcsim_process is not None
                local.vcsim_process.stop()  # vCenter down
                passes = sync.passes
                await eventually(lambda: sync.passes >= passes + 5, what="passes during the outage")
                assert get_node(kube, names["out-a"]) is not None  # fail closed
            driver.close()
        finally:
            cleanup(kube, scope)
