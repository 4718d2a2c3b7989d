"""A throttling storm: the AWS front answers half of all requests ``RequestLimitExceeded`` (EC2)
or ``Throttling`` (ELB) for a minute while 20 Nodes initialize and 10 load balancers are made.
Everything converges once it passes; nothing surfaces as ``InvalidRequest``; no Node is deleted
(every lifecycle lookup the storm refuses keeps the NotReady nodes)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cloudloop import temporal
from cloudloop.cloud import errors
from cloudloop.cloud.aws.base import error_class
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import NODES, SERVICES, ObjectRef, Resource
from cloudloop.messages.loadbalancer import LoadBalancerQuery, LoadBalancerState, workflow_id
from devstack.aws_front import set_limits, stats, throttling_storm
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
from tests.helpers import eventually

pytestmark = [pytest.mark.stack, pytest.mark.fault]

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODE_COUNT, SERVICE_COUNT = 20, 10
STORM_S, SHARE = 60.0, 0.5


@pytest.fixture(scope="module")
def storm_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with own_stack(tmp_path_factory.mktemp("throttling-storm")) as local:
        yield local


@pytest.mark.timeout(900)
@pytest.mark.parametrize("run", RUNS)
async def test_throttling_storm(storm_stack: LocalStack, tmp_path: Path, run: int) -> None:
    scope = f"storm{run}-{uuid.uuid4().hex[:6]}"
    kube = Kube(api_client(storm_stack.kubeconfig))
    ec2 = aws(storm_stack, "ec2")
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
        storm_stack,
        scope,
        scope,
        CLOUDLOOP_CCM__NODE_SELECTOR=f"cloudloop-fault={scope}",
        CLOUDLOOP_CCM__NODE_MONITOR_PERIOD_S="1",  # lifecycle lookups all through the storm
    )
    worker = Process("worker", env, tmp_path).start()
    starter = Process("starter", env, tmp_path).start()
    stats(storm_stack.aws_endpoint, reset=True)
    try:
        started = time.monotonic()
        throttling_storm(storm_stack.aws_endpoint, fraction=SHARE, duration_s=STORM_S)
        with ThreadPoolExecutor(8) as pool:
            futures = [
                *(pool.submit(lb_service, kube, scope, f"svc-{i}") for i in range(SERVICE_COUNT)),
                *(pool.submit(tainted_node, kube, i["PrivateDnsName"], scope) for i in launched),
            ]
            for future in futures:
                future.result()
        await eventually(
            lambda: (
                initialized(kube, scope) == (NODE_COUNT, NODE_COUNT)
                and with_ingress(kube, scope) == SERVICE_COUNT
            ),
            timeout=STORM_S + 300,
            interval=1.0,
            what="everything converged through the storm",
        )
        converged = time.monotonic() - started
        counts = stats(storm_stack.aws_endpoint)
        refused = sum(v for k, v in counts["refused"].items() if "Throttl" in k or "Limit" in k)
        # Errors behind the front that the product reads as InvalidRequest: none. (NotFound and
        # AlreadyExists answers are normal: an LB looked up before it exists, two ensures adding
        # the cluster's shared groups and rules at once.)
        invalid = sum(
            v
            for k, v in counts["errors"].items()
            if error_class(k.rsplit(":", 1)[-1], 400) is errors.InvalidRequest
        )
        throttled = starter.metric("cloud_api_requests_total", {"outcome": "throttled"}) + (
            worker.metric("cloud_api_requests_total", {"outcome": "throttled"})
        )
        client = await temporal.connect(stack_settings(storm_stack).temporal)
        rejected = 0
        for i in range(SERVICE_COUNT):
            service = kube.get(SERVICES, f"svc-{i}", scope)
            assert service is not None
            state: LoadBalancerState = await client.get_workflow_handle(
                workflow_id(ObjectRef.of(SERVICES, service))
            ).query(LoadBalancerQuery.STATE, result_type=LoadBalancerState)
            rejected += state.rejected is not None
        creates = counts["requests"].get("elasticloadbalancing:CreateLoadBalancer", 0) - sum(
            v
            for k, v in counts["refused"].items()
            if k.startswith("elasticloadbalancing:CreateLoadBalancer:")
        )
        elbs = await asyncio.to_thread(elbs_of, storm_stack, scope)
        nodes_left = len(kube.list(NODES, labelSelector=f"cloudloop-fault={scope}")["items"])
        figures = Figures(
            fault="throttling storm (50% for 60 s)",
            converge_s=converged,
            duplicates=max(0, creates - SERVICE_COUNT) + (len(elbs) - len(set(elbs))),
            orphans=max(0, len(elbs) - SERVICE_COUNT),
            deleted_nodes=NODE_COUNT - nodes_left,
            extra={
                "run": run,
                "throttled_answers": refused,
                "throttled_seen_by_product": throttled,
                "invalid_answers": invalid,
                "moto_errors": counts["errors"],
                "rejected_lbs": rejected,
                "elb_creates": creates,
                "converged_during_storm": converged < STORM_S,
            },
        )
        figures.report()
        assert refused > 0 and throttled > 0, "the storm did not reach the product"
        assert invalid == 0 and rejected == 0, "throttling surfaced as InvalidRequest"
        assert figures.deleted_nodes == 0 and figures.duplicates == 0 and figures.orphans == 0
    finally:
        set_limits(storm_stack.aws_endpoint, storm={})
        starter.stop()
        worker.stop()
        for node in kube.list(NODES, labelSelector=f"cloudloop-fault={scope}")["items"]:
            kube.delete(NODES, node["metadata"]["name"])
