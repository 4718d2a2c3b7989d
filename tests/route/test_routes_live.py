"""RouteSync against the real stack: kube-controller-manager assigns pod CIDRs, moto holds the
route table, and the loop creates, replaces and deletes routes and sets NetworkUnavailable."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Event, Node
from cloudloop.kube.informer import Informer
from cloudloop.kube.resources import EVENTS, NODES
from cloudloop.rules import route as rules
from devstack.backends.aws import create_cluster_network, launch_instances
from devstack.kube import CLUSTER_CIDR
from starters.route import RouteSync
from tests.helpers import eventually
from tests.route.support import has_condition, network_condition, pod_cidr_of

pytestmark = pytest.mark.stack

LABEL = "cloudloop-test-routes"
OUTSIDE_CIDR = "192.168.77.0/24"  # outside the cluster CIDR: never touched
STALE_CIDR = "10.244.250.128/25"  # inside it; never a node CIDR (KCM hands out /24s): deleted
MISSING_INSTANCE = "i-0000000000deadbee"


class Cloud:
    """The cluster's network with its route table and a few instances in it."""

    def __init__(self, ec2: Any, cluster: str, instances: int) -> None:
        self.ec2 = ec2
        network = create_cluster_network(ec2, cluster, route_table=True)
        self.table = network.route_table_id
        launched = launch_instances(ec2, instances, SubnetId=network.subnet_ids[0])
        self.instances = [i["InstanceId"] for i in launched]

    def add_route(self, cidr: str, instance_id: str) -> None:
        self.ec2.create_route(
            RouteTableId=self.table, DestinationCidrBlock=cidr, InstanceId=instance_id
        )

    def routes(self) -> dict[str, str]:
        """Destination → target instance ("" for gateway routes such as ``local``)."""
        table = self.ec2.describe_route_tables(RouteTableIds=[self.table])["RouteTables"][0]
        return {
            r["DestinationCidrBlock"]: r.get("InstanceId", "")
            for r in table["Routes"]
            if r.get("DestinationCidrBlock")
        }

    def source_dest_check(self, instance_id: str) -> bool:
        answer = self.ec2.describe_instance_attribute(
            InstanceId=instance_id, Attribute="sourceDestCheck"
        )
        return bool(answer["SourceDestCheck"]["Value"])


def make_node(kube: Kube, name: str, scope: str, instance_id: str) -> None:
    kube.create(
        NODES,
        {
            "metadata": {"name": name, "labels": {LABEL: scope}},
            "spec": {"providerID": f"aws:///us-east-1a/{instance_id}"},
        },
    )


def events_for(kube: Kube, name: str, reason: str) -> list[Event]:
    items = kube.list(EVENTS, "default", fieldSelector=f"involvedObject.name={name}")["items"]
    return [e for e in items if e["reason"] == reason]


def cleanup(kube: Kube, scope: str) -> None:
    for node in kube.list(NODES, labelSelector=f"{LABEL}={scope}")["items"]:
        kube.delete(NODES, node["metadata"]["name"])


@contextlib.asynccontextmanager
async def route_sync(
    kube: Kube, driver: AwsDriver, cluster: str, scope: str, *, period_s: float
) -> AsyncIterator[RouteSync]:
    informer = Informer[Node](kube, NODES, label_selector=f"{LABEL}={scope}")
    sync = RouteSync(
        kube,
        driver.routes,
        driver.instances,
        informer,
        cluster=cluster,
        cluster_cidrs=rules.parse_cluster_cidrs(CLUSTER_CIDR),
        period_s=period_s,
        min_pass_interval_s=0.2,
    )
    task = asyncio.create_task(sync.run())
    try:
        yield sync
        assert not task.done(), "the route loop ended by itself"
    finally:
        sync.stop()
        informer.stop()
        await asyncio.wait_for(task, 10)


async def test_routes_follow_the_nodes(
    kube: Kube, ec2: Any, settings: Settings, scope: str
) -> None:
    cluster = f"{settings.cluster_name}-{scope}"
    cloud = Cloud(ec2, cluster, instances=4)
    first, second, third, bystander = cloud.instances
    cloud.add_route(OUTSIDE_CIDR, bystander)
    cloud.add_route(STALE_CIDR, bystander)
    names = [f"rt-{scope}-{i}" for i in range(4)]
    try:
        await asyncio.to_thread(make_node, kube, names[0], scope, first)
        await asyncio.to_thread(make_node, kube, names[1], scope, second)
        await asyncio.to_thread(make_node, kube, names[2], scope, MISSING_INSTANCE)
        cidrs: dict[str, str] = {}
        for name in names[:3]:
            cidrs[name] = await eventually(
                functools.partial(pod_cidr_of, kube, name), what=f"pod CIDR of {name}"
            )

        # A long period: everything after the first pass must come from node changes.
        async with route_sync(
            kube, AwsDriver(AWS.section(settings)), cluster, scope, period_s=3600
        ) as sync:

            def first_pass_done() -> dict[str, str] | None:
                routes = cloud.routes()
                expected = {cidrs[names[0]]: first, cidrs[names[1]]: second}
                done = all(routes.get(c) == i for c, i in expected.items())
                return routes if done and STALE_CIDR not in routes else None

            routes = await eventually(first_pass_done, what="routes of the first pass")
            assert routes[OUTSIDE_CIDR] == bystander  # outside the cluster CIDR: kept
            assert cidrs[names[2]] not in routes  # its instance does not exist
            assert not cloud.source_dest_check(first)
            assert not cloud.source_dest_check(second)
            for name in names[:2]:
                assert await eventually(
                    functools.partial(has_condition, kube, name, ("False", "RouteCreated")),
                    what=f"{name} RouteCreated",
                )
            assert await eventually(
                lambda: network_condition(kube, names[2]) == ("True", "NoRouteCreated"),
                what="NoRouteCreated on the node without an instance",
            )
            failures = await eventually(
                lambda: events_for(kube, names[2], "FailedToCreateRoute"),
                what="FailedToCreateRoute event",
            )
            assert failures[0]["type"] == "Warning"
            assert sync.passes >= 1 and sync.failed_passes == 0

            # A new node: the controller-manager assigns its CIDR, the change wakes the loop.
            await asyncio.to_thread(make_node, kube, names[3], scope, third)
            new_cidr = await eventually(lambda: pod_cidr_of(kube, names[3]), what="new pod CIDR")
            await eventually(
                lambda: cloud.routes().get(new_cidr) == third, timeout=45, what="new node's route"
            )
            await eventually(
                lambda: network_condition(kube, names[3]) == ("False", "RouteCreated"),
                what="new node RouteCreated",
            )

            # A deleted node: its route goes, the others stay.
            await asyncio.to_thread(kube.delete, NODES, names[0])
            await eventually(
                lambda: cidrs[names[0]] not in cloud.routes(),
                timeout=45,
                what="deleted node's route removed",
            )
            routes = cloud.routes()
            assert routes[cidrs[names[1]]] == second
            assert routes[new_cidr] == third
            assert routes[OUTSIDE_CIDR] == bystander
    finally:
        await asyncio.to_thread(cleanup, kube, scope)


async def test_unreachable_cloud_deletes_nothing(
    kube: Kube, ec2: Any, settings: Settings, scope: str
) -> None:
    cluster = f"{settings.cluster_name}-{scope}"
    cloud = Cloud(ec2, cluster, instances=2)
    cloud.add_route(STALE_CIDR, cloud.instances[1])
    cloud.add_route(OUTSIDE_CIDR, cloud.instances[1])
    name = f"rt-{scope}-dead"
    dead = AWS.section(settings).model_copy(
        update={"endpoint_url": "http://127.0.0.1:9", "max_attempts": 1, "timeout_s": 1}
    )
    try:
        await asyncio.to_thread(make_node, kube, name, scope, cloud.instances[0])
        await eventually(lambda: pod_cidr_of(kube, name), what="pod CIDR")
        before = cloud.routes()
        async with route_sync(kube, AwsDriver(dead), cluster, scope, period_s=0.2) as sync:
            await eventually(lambda: sync.failed_passes >= 3, what="three failed passes")
            assert sync.passes == 0
        assert cloud.routes() == before  # nothing deleted, nothing created
        assert network_condition(kube, name) is None  # the node is not judged on an error
        assert events_for(kube, name, "FailedToCreateRoute") == []
    finally:
        await asyncio.to_thread(cleanup, kube, scope)
