"""RouteSync passes with a scripted driver: fail closed on listing errors, bounded concurrency,
retries on throttling, Events and the Node condition; and when the loop may start at all."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncGenerator
from typing import Any, cast

import pytest
from temporalio.client import Client

from cloudloop.cloud import errors
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.driver import CloudDriver, Instances
from cloudloop.cloud.models import Route
from cloudloop.cloud.registry import Settings
from cloudloop.kube.bodies import Node, NodeSpec
from cloudloop.kube.informer import Informer, Informers, WatchEvent
from cloudloop.kube.resources import EVENTS, NODES
from cloudloop.rules import route as rules
from cloudloop.settings import CcmSettings
from starters.context import StarterContext
from starters.route import RouteSync
from tests.fakes import MemoryKube
from tests.helpers import eventually


class ScriptedRoutes:
    """A routes capability (and the provider-ID part of an instances one) answering as told."""

    provider = "scripted"

    def __init__(self, routes: list[Route] | None = None) -> None:
        self.table = routes or []
        self.list_error: errors.CloudError | None = None
        self.create_errors: dict[str, list[errors.CloudError]] = {}
        self.created: list[Route] = []
        self.deleted: list[Route] = []
        self.create_delay_s = 0.0
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()

    def instance_id_from_provider_id(self, provider_id: str) -> str:
        if not provider_id.startswith("scripted://"):
            raise errors.InvalidRequest(self.provider, "ParseProviderID", provider_id)
        return provider_id.removeprefix("scripted://")

    def list_routes(self, cluster: str) -> list[Route]:
        if self.list_error is not None:
            raise self.list_error
        return list(self.table)

    def create_route(self, cluster: str, route: Route) -> None:
        with self._lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            if self.create_delay_s:
                threading.Event().wait(self.create_delay_s)
            pending = self.create_errors.get(route.destination_cidr)
            if pending:
                raise pending.pop(0)
            with self._lock:
                self.created.append(route)
        finally:
            with self._lock:
                self.in_flight -= 1

    def delete_route(self, cluster: str, route: Route) -> None:
        self.deleted.append(route)


def node(name: str, cidr: str | None, instance: str | None = None) -> Node:
    spec: NodeSpec = {}
    if cidr:
        spec["podCIDRs"] = [cidr]
    if instance:
        spec["providerID"] = f"scripted://{instance}"
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec, "status": {}}


def route_sync(
    kube: MemoryKube, driver: ScriptedRoutes, nodes: list[Node], **kwargs: Any
) -> RouteSync:
    informer = Informer[Node](kube, NODES)
    for obj in nodes:
        kube.put(NODES, obj)
        informer.store[obj["metadata"]["name"]] = obj
    return RouteSync(
        kube,
        driver,
        cast(Instances, driver),  # only its instance_id_from_provider_id is called
        informer,
        cluster="c",
        cluster_cidrs=rules.parse_cluster_cidrs("10.244.0.0/16"),
        period_s=10,
        **kwargs,
    )


def condition(kube: MemoryKube, name: str) -> tuple[str, str] | None:
    obj = kube.get(NODES, name) or {}
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond["type"] == "NetworkUnavailable":
            return cond["status"], cond["reason"]
    return None


def route(cidr: str, instance: str = "", *, blackhole: bool = False) -> Route:
    return Route(
        name=f"c-{cidr}", destination_cidr=cidr, target_instance_id=instance, blackhole=blackhole
    )


async def test_a_pass_creates_deletes_and_sets_conditions() -> None:
    kube = MemoryKube()
    driver = ScriptedRoutes(
        [
            route("10.244.1.0/24", "i-a"),  # a's route: kept
            route("10.244.9.0/24", "i-gone"),  # stale: deleted
            route("10.244.8.0/24", blackhole=True),  # blackhole: deleted
            route("192.168.0.0/24", "i-x"),  # outside the cluster CIDR: untouched
        ]
    )
    nodes = [
        node("a", "10.244.1.0/24", "i-a"),
        node("b", "10.244.2.0/24", "i-b"),
        node("c", "10.244.3.0/24"),  # no providerID yet
        node("d", None, "i-d"),  # no pod CIDR yet
    ]
    sync = route_sync(kube, driver, nodes)
    plan = await sync.reconcile()
    assert plan is not None
    assert {r.destination_cidr for r in driver.deleted} == {"10.244.9.0/24", "10.244.8.0/24"}
    assert [(r.destination_cidr, r.target_instance_id) for r in driver.created] == [
        ("10.244.2.0/24", "i-b")
    ]
    assert condition(kube, "a") == ("False", "RouteCreated")
    assert condition(kube, "b") == ("False", "RouteCreated")
    assert condition(kube, "c") == ("True", "NoRouteCreated")
    assert condition(kube, "d") is None
    assert sync.passes == 1


async def test_listing_error_changes_nothing() -> None:
    kube = MemoryKube()
    driver = ScriptedRoutes([route("10.244.9.0/24", "i-gone")])
    driver.list_error = errors.CloudUnreachable("scripted", "DescribeRouteTables", "refused")
    sync = route_sync(kube, driver, [node("a", "10.244.1.0/24", "i-a")])
    assert await sync.reconcile() is None
    assert driver.deleted == [] and driver.created == []
    assert kube.writes == []  # no condition, no Event
    assert (sync.passes, sync.failed_passes) == (0, 1)


async def test_failed_creation_leaves_an_event_and_no_route_created() -> None:
    kube = MemoryKube()
    driver = ScriptedRoutes()
    driver.create_errors["10.244.1.0/24"] = [
        errors.NotFound("scripted", "CreateRoute", "no such instance")
    ]
    sync = route_sync(kube, driver, [node("a", "10.244.1.0/24", "i-a")])
    await sync.reconcile()
    assert condition(kube, "a") == ("True", "NoRouteCreated")
    events = kube.list(EVENTS)["items"]
    assert [(e["type"], e["reason"], e["involvedObject"]["name"]) for e in events] == [
        ("Warning", "FailedToCreateRoute", "a")
    ]
    assert "10.244.1.0/24" in events[0]["message"]


async def test_throttled_creation_is_retried() -> None:
    kube = MemoryKube()
    driver = ScriptedRoutes()
    driver.create_errors["10.244.1.0/24"] = [
        errors.CloudThrottled("scripted", "CreateRoute", "slow down") for _ in range(2)
    ]
    sync = route_sync(kube, driver, [node("a", "10.244.1.0/24", "i-a")], retry_base_s=0.0)
    await sync.reconcile()
    assert [r.destination_cidr for r in driver.created] == ["10.244.1.0/24"]
    assert condition(kube, "a") == ("False", "RouteCreated")


async def test_operations_are_bounded() -> None:
    kube = MemoryKube()
    driver = ScriptedRoutes()
    driver.create_delay_s = 0.02
    nodes = [node(f"n{i}", f"10.244.{i}.0/24", f"i-{i}") for i in range(12)]
    sync = route_sync(kube, driver, nodes, max_concurrent=3)
    await sync.reconcile()
    assert len(driver.created) == 12
    assert driver.peak <= 3


async def test_unchanged_condition_is_not_patched() -> None:
    kube = MemoryKube()
    routed = node("a", "10.244.1.0/24", "i-a")
    routed["status"] = {
        "conditions": [{"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"}]
    }
    sync = route_sync(kube, ScriptedRoutes([route("10.244.1.0/24", "i-a")]), [routed])
    await sync.reconcile()
    assert kube.writes == []


async def test_loop_runs_passes_and_stops() -> None:
    kube = MemoryKube()
    driver = ScriptedRoutes()
    sync = route_sync(kube, driver, [node("a", "10.244.1.0/24", "i-a")])
    sync.period_s = 0.01
    sync.informer.synced.set()
    task = asyncio.create_task(sync.run())
    try:
        await eventually(lambda: sync.passes >= 2, timeout=10, interval=0.01, what="two passes")
    finally:
        sync.stop()
        sync.informer.stop()
        await asyncio.wait_for(task, 5)


def context(ccm: CcmSettings, driver: CloudDriver | None = None) -> StarterContext:
    kube = MemoryKube()
    return StarterContext(
        settings=Settings(cluster_name="c", ccm=ccm),
        kube=kube,
        client=cast(Client, None),
        driver=driver or AwsDriver(AwsSettings()),
        informers=Informers(kube),
    )


@pytest.mark.parametrize(
    "cluster_cidr",
    [
        pytest.param("", id="empty"),
        pytest.param("not-a-cidr", id="invalid"),
        pytest.param("10.0.0.0/8,10.1.0.0/16", id="two-ipv4"),
    ],
)
def test_no_route_loop_without_a_valid_cluster_cidr(
    cluster_cidr: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="starters.route"):
        assert RouteSync.from_context(context(CcmSettings(cluster_cidr=cluster_cidr))) is None
    assert any("route controller NOT started" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("ccm", "driver", "starts"),
    [
        pytest.param(CcmSettings(cluster_cidr="10.244.0.0/16"), None, True, id="aws-valid"),
        pytest.param(
            CcmSettings(cluster_cidr="10.244.0.0/16", configure_cloud_routes=False),
            None,
            False,
            id="turned-off",
        ),
        pytest.param(
            CcmSettings(cluster_cidr="10.244.0.0/16"), CloudDriver(), False, id="no-capability"
        ),
    ],
)
def test_route_loop_starts_only_when_wanted(
    ccm: CcmSettings, driver: CloudDriver | None, starts: bool
) -> None:
    sync = RouteSync.from_context(context(ccm, driver))
    assert (sync is not None) is starts
    if sync is not None:
        assert [str(c) for c in sync.cluster_cidrs] == ["10.244.0.0/16"]
        assert sync.period_s == ccm.route_reconciliation_period_s


class QueuedInformer(Informer[Node]):
    """An informer fed by the test: already synced, events from a queue."""

    def __init__(self) -> None:
        super().__init__(MemoryKube(), NODES)
        self.synced.set()
        self.queue: asyncio.Queue[WatchEvent[Node]] = asyncio.Queue()

    async def events(self) -> AsyncGenerator[WatchEvent[Node], None]:
        while True:
            event = await self.queue.get()
            self.store[event.key] = event.object
            yield event


class CountingRouteSync(RouteSync):
    wakes = 0

    def wake(self) -> None:
        self.wakes += 1
        super().wake()


async def test_node_change_wakes_the_loop_and_status_changes_do_not() -> None:
    informer = QueuedInformer()
    driver = ScriptedRoutes()
    sync = CountingRouteSync(
        MemoryKube(),
        driver,
        cast(Instances, driver),
        informer,
        cluster="c",
        cluster_cidrs=rules.parse_cluster_cidrs("10.244.0.0/16"),
        period_s=3600,
        min_pass_interval_s=0.0,
    )
    task = asyncio.create_task(sync.run())
    try:
        await eventually(lambda: sync.passes == 1, timeout=10, interval=0.01, what="first pass")
        informer.queue.put_nowait(WatchEvent("ADDED", node("a", None, "i-a")))
        await eventually(lambda: sync.passes == 2, timeout=10, interval=0.01, what="woken")
        informer.queue.put_nowait(WatchEvent("MODIFIED", node("a", "10.244.1.0/24", "i-a")))
        await eventually(lambda: sync.passes == 3, timeout=10, interval=0.01, what="new CIDR")
        assert [r.destination_cidr for r in driver.created] == ["10.244.1.0/24"]
        status_only = node("a", "10.244.1.0/24", "i-a")
        status_only["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        informer.queue.put_nowait(WatchEvent("MODIFIED", status_only))
        informer.queue.put_nowait(WatchEvent("DELETED", status_only))
        await eventually(lambda: sync.passes == 4, timeout=10, interval=0.01, what="deleted")
        assert sync.wakes == 3  # added, new CIDR, deleted; the status change woke nothing
    finally:
        sync.stop()
        await asyncio.wait_for(task, 5)
