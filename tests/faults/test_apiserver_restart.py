"""kube-apiserver SIGKILLed and restarted on the same etcd during an init burst of 50 Nodes and 20
load-balancer ensures: every Node is initialized and every LB ensured once, by the same starter
and worker processes (no restart of theirs), nothing deleted, duplicated or left behind."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import NODES, SERVICES, Resource
from devstack.aws_front import stats
from devstack.backends.aws import create_cluster_network
from devstack.local import LocalStack
from tests.faults.conftest import own_stack
from tests.faults.rig import (
    RUNS,
    Figures,
    Process,
    aws,
    base_env,
    elbs_of,
    initialized,
    lb_service,
    tainted_node,
    with_ingress,
)
from tests.helpers import eventually

pytestmark = [pytest.mark.stack, pytest.mark.fault]

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODE_COUNT, SERVICE_COUNT = 50, 20
CONVERGE_TIMEOUT = 300.0


@pytest.fixture(scope="module")
def api_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with own_stack(tmp_path_factory.mktemp("apiserver-restart")) as local:
        yield local


@pytest.mark.timeout(900)
@pytest.mark.parametrize("run", RUNS)
async def test_apiserver_killed_during_an_init_burst(
    api_stack: LocalStack, tmp_path: Path, run: int
) -> None:
    scope = f"api{run}-{uuid.uuid4().hex[:6]}"
    kube = Kube(api_client(api_stack.kubeconfig), timeout_s=10)
    ec2 = aws(api_stack, "ec2")
    network = create_cluster_network(ec2, scope)
    launched = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=NODE_COUNT,
        MaxCount=NODE_COUNT,
        SubnetId=network.subnet_ids[0],
        SecurityGroupIds=[network.node_group_id],
    )["Instances"]
    names = [i["PrivateDnsName"] for i in launched]
    kube.create(NAMESPACES, {"metadata": {"name": scope}})
    env = base_env(
        api_stack,
        scope,
        scope,
        CLOUDLOOP_CCM__NODE_SELECTOR=f"cloudloop-fault={scope}",
        # A Lease long enough to ride out the restart: the same process must recover by itself.
        CLOUDLOOP_LEADER_ELECTION__LEASE_DURATION_S="60",
        CLOUDLOOP_LEADER_ELECTION__RENEW_DEADLINE_S="45",
    )
    worker = Process("worker", env, tmp_path).start()
    starter = Process("starter", {**env, "CLOUDLOOP_LEADER_ELECTION__IDENTITY": scope}, tmp_path)
    starter.start()
    stats(api_stack.aws_endpoint, reset=True)
    plane = api_stack.clusters["main"]
    try:
        with ThreadPoolExecutor(8) as pool:
            creating = [
                *(pool.submit(lb_service, kube, scope, f"svc-{i}") for i in range(SERVICE_COUNT)),
                *(pool.submit(tainted_node, kube, name, scope) for name in names),
            ]
            for future in creating:
                future.result()
        await eventually(
            lambda: initialized(kube, scope)[1] >= 1, interval=0.05, what="the burst under way"
        )
        before = initialized(kube, scope)[1], with_ingress(kube, scope)
        killed = time.monotonic()
        await asyncio.to_thread(plane.kill, "kube-apiserver")
        await asyncio.sleep(2)
        await asyncio.to_thread(plane.restart, "kube-apiserver")
        restarted = time.monotonic()

        await eventually(
            lambda: (
                initialized(kube, scope) == (NODE_COUNT, NODE_COUNT)
                and with_ingress(kube, scope) == SERVICE_COUNT
            ),
            timeout=CONVERGE_TIMEOUT,
            interval=1.0,
            what=f"{NODE_COUNT} nodes initialized and {SERVICE_COUNT} ingresses",
        )
        converged = time.monotonic()
        creates = stats(api_stack.aws_endpoint)["requests"].get(
            "elasticloadbalancing:CreateLoadBalancer", 0
        )
        elbs = await asyncio.to_thread(elbs_of, api_stack, scope)
        nodes_left = len(kube.list(NODES, labelSelector=f"cloudloop-fault={scope}")["items"])
        assert starter.get("/healthz")[0] == 200, starter.get("/healthz")
        assert worker.get("/healthz")[0] == 200
        restarts = starter.metric("cloudloop_starter_restarts_total")
        exits = len(starter.exits) + len(worker.exits)

        # Teardown through the product: every LB goes, nothing is left behind.
        for i in range(SERVICE_COUNT):
            await asyncio.to_thread(kube.delete, SERVICES, f"svc-{i}", scope)
        await eventually(
            lambda: not elbs_of(api_stack, scope) and not kube.list(SERVICES, scope)["items"],
            timeout=CONVERGE_TIMEOUT,
            interval=1.0,
            what="every load balancer deleted",
        )
        groups = aws(api_stack, "ec2").describe_security_groups(
            Filters=[
                {"Name": "group-name", "Values": ["k8s-elb-*"]},
                {"Name": "vpc-id", "Values": [network.vpc_id]},
            ]
        )["SecurityGroups"]
        figures = Figures(
            fault="kube-apiserver SIGKILL + restart during init burst",
            converge_s=converged - restarted,
            duplicates=(len(elbs) - len(set(elbs))) + max(0, creates - SERVICE_COUNT),
            orphans=len(groups),
            deleted_nodes=NODE_COUNT - nodes_left,
            extra={
                "run": run,
                "outage_s": round_s(restarted - killed),
                "before_kill": {"initialized": before[0], "ingresses": before[1]},
                "elb_creates": creates,
                "starter_task_restarts": restarts,
                "process_exits": exits,
            },
        )
        figures.report()
        assert len(set(elbs)) == len(elbs) == SERVICE_COUNT
        assert creates == SERVICE_COUNT, "a load balancer was created twice"
        assert figures.deleted_nodes == 0 and figures.orphans == 0
        assert exits == 0, "the processes had to be restarted to recover"
    finally:
        starter.stop()
        worker.stop()
        for node in kube.list(NODES, labelSelector=f"cloudloop-fault={scope}")["items"]:
            kube.delete(NODES, node["metadata"]["name"])


def round_s(value: float) -> float:
    return round(value, 1)
