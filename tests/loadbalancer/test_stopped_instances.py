"""A stopped instance never breaks a load balancer: only running instances are registered
(as cloud-provider-aws), and a registered instance that stops stays registered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.loadbalancers import service_annotations as ann
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import NODES
from cloudloop.rules.loadbalancer import EXCLUDE_FROM_LB_LABEL
from devstack.local import LocalStack
from tests.helpers import eventually
from tests.loadbalancer.support import (
    AwsWorld,
    delete_nodes,
    ingress,
    lb_name,
    lb_settings,
    make_nodes,
    make_service,
    new_scope,
    service_starter,
)
from workers.main import build_worker

pytestmark = pytest.mark.stack


@pytest.fixture
def scope() -> str:
    return new_scope()


@pytest.fixture
def lb_config(settings: Settings, scope: str) -> Settings:
    return lb_settings(settings, scope)


@pytest.fixture
def world(stack: LocalStack, lb_config: Settings) -> AwsWorld:
    return AwsWorld.create(stack.moto_endpoint, lb_config.cluster_name)


@pytest.fixture
def nodes(kube: Kube, world: AwsWorld, scope: str) -> Iterator[list[str]]:
    yield make_nodes(kube, world, scope)
    delete_nodes(kube, scope)


@pytest.fixture
async def running(
    kube: Kube, client: Client, lb_config: Settings, namespace: str, nodes: list[str]
) -> AsyncIterator[None]:
    worker = build_worker(client, lb_config, driver=AwsDriver(AWS.section(lb_config)), kube=kube)
    async with worker, service_starter(kube, client, lb_config, namespace):
        yield


def registered(world: AwsWorld, name: str, nlb: bool) -> list[str]:
    if not nlb:
        lb = world.classic(name) or {}
        return sorted(i["InstanceId"] for i in lb.get("Instances", []))
    groups = world.target_groups(name)
    if not groups:
        return []
    health = world.client("elbv2").describe_target_health(
        TargetGroupArn=groups[0]["TargetGroupArn"]
    )
    return sorted(d["Target"]["Id"] for d in health["TargetHealthDescriptions"])


@pytest.mark.parametrize("nlb", [pytest.param(False, id="classic"), pytest.param(True, id="nlb")])
async def test_only_running_instances_are_registered_and_stopped_ones_kept(
    kube: Kube,
    namespace: str,
    world: AwsWorld,
    nodes: list[str],
    running: None,
    nlb: bool,
) -> None:
    ec2 = world.client("ec2")
    first, second, stopped = world.instance_ids
    ec2.stop_instances(InstanceIds=[stopped])
    annotations = {ann.TYPE: "nlb"} if nlb else {}
    service = await asyncio.to_thread(make_service, kube, namespace, "web", annotations=annotations)
    name = lb_name(service)
    await eventually(lambda: ingress(kube, namespace, "web"), timeout=60, what="ingress")
    assert registered(world, name, nlb) == sorted([first, second])

    # A registered instance stops and the node set changes: it stays, the excluded one goes.
    ec2.stop_instances(InstanceIds=[second])
    await asyncio.to_thread(
        kube.patch, NODES, nodes[0], {"metadata": {"labels": {EXCLUDE_FROM_LB_LABEL: "true"}}}
    )
    await eventually(
        lambda: registered(world, name, nlb) == [second],
        timeout=60,
        what="the excluded instance deregistered, the stopped one kept",
    )
