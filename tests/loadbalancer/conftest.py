"""Fixtures of the load-balancer stack tests: one test's moto slice, its Nodes, and a worker plus
a ServiceStarter scoped to its namespace and Nodes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from devstack.local import LocalStack
from tests.loadbalancer.support import (
    AwsWorld,
    delete_nodes,
    lb_settings,
    make_nodes,
    service_starter,
)
from workers.main import build_worker


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
    driver = AwsDriver(AWS.section(lb_config))
    worker = build_worker(client, lb_config, driver=driver, kube=kube)
    async with worker, service_starter(kube, client, lb_config, namespace, driver=driver):
        yield
