"""The production-shaped Temporal (the server built from its Go module, PostgreSQL persistence
and SQL visibility, ``cloudloop temporal setup`` run against it at start; see
:mod:`devstack.temporal_server`): a load balancer's round trip through ``cloudloop worker`` and
``starter``, found again by a visibility query on the ``Cloudloop*`` attributes; then the server
SIGKILLed as the Services' workflows start and started again on the same databases: all converge,
each ELB created once, and deleting the Services leaves none.

The server is built on demand into the shared tool cache (minutes, once per cache)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

from cloudloop import searchattrs, temporal
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import NODES, SERVICES, Resource
from devstack.aws_front import stats
from devstack.backends.aws import create_cluster_network
from devstack.devmode import stack_settings
from devstack.local import LocalStack
from tests.faults.conftest import own_stack
from tests.faults.rig import Figures, Process, aws, base_env, elbs_of, lb_service, with_ingress
from tests.helpers import eventually

pytestmark = [pytest.mark.stack, pytest.mark.fault]

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODE_COUNT, SERVICE_COUNT = 2, 3
CONVERGE_TIMEOUT = 300.0


@pytest.fixture(scope="module")
def pg_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with own_stack(tmp_path_factory.mktemp("temporal-postgres"), temporal_server="postgres") as s:
        yield s


@pytest.fixture(scope="module")
def scope(pg_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A namespace, nodes on EC2 instances, and a worker and starter for the cluster."""
    stack = pg_stack
    scope = f"pg-{uuid.uuid4().hex[:6]}"
    kube = Kube(api_client(stack.kubeconfig))
    ec2 = aws(stack, "ec2")
    network = create_cluster_network(ec2, scope)
    instances = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=NODE_COUNT,
        MaxCount=NODE_COUNT,
        SubnetId=network.subnet_ids[0],
        SecurityGroupIds=[network.node_group_id],
        Placement={"AvailabilityZone": "us-east-1a"},
    )["Instances"]
    kube.create(NAMESPACES, {"metadata": {"name": scope}})
    for instance in instances:
        kube.create(
            NODES,
            {
                "metadata": {
                    "name": instance["PrivateDnsName"],
                    "labels": {"cloudloop-fault": scope},
                },
                "spec": {"providerID": f"aws:///us-east-1a/{instance['InstanceId']}"},
            },
        )
    env = base_env(stack, scope, scope, CLOUDLOOP_CCM__NODE_SELECTOR=f"cloudloop-fault={scope}")
    logs = tmp_path_factory.mktemp("pg-workers")
    processes = [
        Process("worker", env, logs, name="pg-worker").start(),
        Process("starter", env, logs, name="pg-starter").start(),
    ]
    try:
        yield scope
    finally:
        for process in processes:
            process.stop()


def _services(kube: Kube, scope: str, names: list[str]) -> None:
    for name in names:
        kube.delete(SERVICES, name, scope)


async def test_round_trip_on_postgres(pg_stack: LocalStack, scope: str) -> None:
    stack = pg_stack
    kube = Kube(api_client(stack.kubeconfig))
    client = await temporal.connect(stack_settings(stack, task_queue=scope, cluster=scope).temporal)
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    keyword = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
    assert {k: listed.custom_attributes.get(k) for k in searchattrs.KEYWORDS} == dict.fromkeys(
        searchattrs.KEYWORDS, keyword
    )

    lb_service(kube, scope, "web")
    await eventually(lambda: with_ingress(kube, scope) == 1, timeout=180, what="ingress")

    async def found() -> list[Any]:
        query = f"CloudloopNamespace = '{scope}' AND CloudloopName = 'web'"
        return [w async for w in client.list_workflows(query)]

    deadline = time.monotonic() + 60
    while not await found():  # SQL visibility is written after the workflow's own store
        assert time.monotonic() < deadline, "no workflow found by its search attributes"
        await asyncio.sleep(1)

    _services(kube, scope, ["web"])
    await eventually(
        lambda: not elbs_of(stack, scope), timeout=CONVERGE_TIMEOUT, what="the ELB deleted"
    )


@pytest.mark.timeout(900)
async def test_server_killed_mid_flight_on_postgres(
    pg_stack: LocalStack, scope: str, tmp_path: Path
) -> None:
    stack = pg_stack
    kube = Kube(api_client(stack.kubeconfig))
    names = [f"svc-{i}" for i in range(SERVICE_COUNT)]
    stats(stack.aws_endpoint, reset=True)
    for name in names:
        lb_service(kube, scope, name)
    # Killed as the starter starts their workflows (starts, tasks and activities in flight).
    killed = time.monotonic()
    await asyncio.to_thread(stack.restart_temporal, down_s=3.0, timeout=120.0)
    restarted = time.monotonic()

    await eventually(
        lambda: with_ingress(kube, scope) == SERVICE_COUNT,
        timeout=CONVERGE_TIMEOUT,
        interval=1.0,
        what="every load balancer ensured",
    )
    converged = time.monotonic() - restarted
    elbs = await asyncio.to_thread(elbs_of, stack, scope)
    creates = stats(stack.aws_endpoint)["requests"].get(
        "elasticloadbalancing:CreateLoadBalancer", 0
    )

    _services(kube, scope, names)
    await eventually(
        lambda: not elbs_of(stack, scope),
        timeout=CONVERGE_TIMEOUT,
        interval=1.0,
        what="the ELBs deleted",
    )
    Figures(
        fault="production-shaped Temporal server (PostgreSQL) SIGKILL + restart",
        converge_s=converged,
        duplicates=(len(elbs) - SERVICE_COUNT) + max(0, creates - SERVICE_COUNT),
        extra={"outage_s": round(restarted - killed, 1), "elb_creates": creates},
    ).report()
    assert len(elbs) == SERVICE_COUNT
    assert creates == SERVICE_COUNT
