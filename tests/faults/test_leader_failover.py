"""The leading starter SIGKILLed during a burst: the other replica takes the Lease within the
lease duration and finishes the work, with no duplicate workflow or load balancer."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cloudloop import temporal
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import NODES, Resource
from devstack.aws_front import stats
from devstack.backends.aws import create_cluster_network
from devstack.devmode import stack_settings
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
from tests.helpers import eventually, eventually_async

pytestmark = [pytest.mark.stack, pytest.mark.fault]

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
NODE_COUNT, SERVICE_COUNT = 30, 30
LEASE_DURATION_S, RETRY_PERIOD_S = 15, 2  # the defaults (upstream's too)


@pytest.fixture(scope="module")
def leader_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with own_stack(tmp_path_factory.mktemp("leader-failover")) as local:
        yield local


def holder(kube: Kube, name: str) -> str:
    lease = kube.get(LEASES, name, "default") or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("run", RUNS)
async def test_leader_killed_during_a_burst(
    leader_stack: LocalStack, tmp_path: Path, run: int
) -> None:
    scope = f"lead{run}-{uuid.uuid4().hex[:6]}"
    kube = Kube(api_client(leader_stack.kubeconfig))
    ec2 = aws(leader_stack, "ec2")
    network = create_cluster_network(ec2, scope)
    launched = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=NODE_COUNT,
        MaxCount=NODE_COUNT,
        SubnetId=network.subnet_ids[0],
        SecurityGroupIds=[network.node_group_id],
    )["Instances"]
    kube.create(NAMESPACES, {"metadata": {"name": scope}})
    env = base_env(
        leader_stack, scope, scope, CLOUDLOOP_CCM__NODE_SELECTOR=f"cloudloop-fault={scope}"
    )
    lease = env["CLOUDLOOP_LEADER_ELECTION__NAME"]
    worker = Process("worker", env, tmp_path).start()
    replicas = {
        identity: Process(
            "starter",
            {**env, "CLOUDLOOP_LEADER_ELECTION__IDENTITY": identity},
            tmp_path,
            name=f"starter-{identity}",
        ).start()
        for identity in ("replica-a", "replica-b")
    }
    stats(leader_stack.aws_endpoint, reset=True)
    try:
        first = await eventually(lambda: holder(kube, lease), what="a leader")
        with ThreadPoolExecutor(8) as pool:
            futures = [
                *(pool.submit(lb_service, kube, scope, f"svc-{i}") for i in range(SERVICE_COUNT)),
                *(pool.submit(tainted_node, kube, i["PrivateDnsName"], scope) for i in launched),
            ]
            for future in futures:
                future.result()
        await eventually(
            lambda: initialized(kube, scope)[1] >= 1 or with_ingress(kube, scope) >= 1,
            interval=0.05,
            what="the burst under way",
        )
        before = initialized(kube, scope)[1], with_ingress(kube, scope)
        killed = time.monotonic()
        await asyncio.to_thread(replicas[first].kill, restart=False)  # its pod is gone
        second = await eventually(
            lambda: (h := holder(kube, lease)) != first and h,
            timeout=LEASE_DURATION_S * 3,
            interval=0.2,
            what="the other replica leading",
        )
        took_over = time.monotonic() - killed
        await eventually(
            lambda: (
                initialized(kube, scope) == (NODE_COUNT, NODE_COUNT)
                and with_ingress(kube, scope) == SERVICE_COUNT
            ),
            timeout=300,
            interval=1.0,
            what="the burst finished by the new leader",
        )
        converged = time.monotonic() - killed
        client = await temporal.connect(stack_settings(leader_stack).temporal)
        query = f"CloudloopCluster='{scope}' AND CloudloopKind='Service'"

        async def listed() -> list[str] | None:
            ids = [wf.id async for wf in client.list_workflows(query)]
            return ids if len(ids) >= SERVICE_COUNT else None

        workflow_ids = await eventually_async(listed, timeout=60, what="LB workflows listed")
        creates = stats(leader_stack.aws_endpoint)["requests"].get(
            "elasticloadbalancing:CreateLoadBalancer", 0
        )
        elbs = await asyncio.to_thread(elbs_of, leader_stack, scope)
        nodes_left = len(kube.list(NODES, labelSelector=f"cloudloop-fault={scope}")["items"])
        figures = Figures(
            fault="leader starter SIGKILL during a burst",
            converge_s=converged,
            duplicates=(len(workflow_ids) - len(set(workflow_ids)))
            + (len(workflow_ids) - SERVICE_COUNT)
            + max(0, creates - SERVICE_COUNT),
            orphans=max(0, len(elbs) - SERVICE_COUNT),
            deleted_nodes=NODE_COUNT - nodes_left,
            extra={
                "run": run,
                "takeover_s": round(took_over, 1),
                "lease_duration_s": LEASE_DURATION_S,
                "before_kill": {"initialized": before[0], "ingresses": before[1]},
                "elb_creates": creates,
                "workflow_runs": len(workflow_ids),
            },
        )
        figures.report()
        assert second in replicas and second != first
        assert took_over <= LEASE_DURATION_S + 2 * RETRY_PERIOD_S + 2
        assert figures.duplicates == 0 and figures.orphans == 0 and figures.deleted_nodes == 0
    finally:
        for process in (*replicas.values(), worker):
            process.stop()
        for node in kube.list(NODES, labelSelector=f"cloudloop-fault={scope}")["items"]:
            kube.delete(NODES, node["metadata"]["name"])
