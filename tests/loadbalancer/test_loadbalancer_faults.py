"""Load-balancer fault tests against the real stack: the worker process SIGKILLed in the middle of
an ensure and of a delete converges after a restart with exactly the resources it should have
(adopted, not duplicated; none after a delete), and a Service deleted while its LB is still being
created ends with no LB and no finalizer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.loadbalancers import service_annotations as ann
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import SERVICES, ObjectRef
from cloudloop.messages.loadbalancer import LoadBalancerQuery, LoadBalancerState, workflow_id
from devstack.local import LocalStack
from tests.helpers import eventually, eventually_async
from tests.loadbalancer.support import (
    AwsWorld,
    ingress,
    lb_name,
    make_service,
    service_starter,
)
from tests.support.workers import WorkerProcess, Workers, aws_process_env
from workers.main import build_worker

pytestmark = [pytest.mark.stack, pytest.mark.fault]

#: A killed worker's activity is retried after its heartbeat timeout (10 s), and its cached
#: workflow moves on after the sticky-queue timeout (10 s); this leaves room for both and more.
RECOVERY_S = 120

WorkerFactory = Callable[..., tuple[WorkerProcess, Path]]


@pytest.fixture
def start_worker(
    lb_config: Settings, stack: LocalStack, tmp_path: Path, workers: Workers
) -> WorkerFactory:
    """Start ``cloudloop worker`` processes (not waited for); ``fault_at`` makes one block at
    that AWS call, writing the marker it returns when it gets there."""
    env = aws_process_env(lb_config, stack, tmp_path)

    def start(fault_at: str | None = None) -> tuple[WorkerProcess, Path]:
        marker = tmp_path / f"fault-{len(workers.started)}"
        if not fault_at:
            return workers.start(env, wait=False), marker
        faulty = {**env, "LB_FAULT_AT": fault_at, "LB_FAULT_MARKER": str(marker)}
        return workers.start(faulty, module="tests.loadbalancer.fault_worker", wait=False), marker

    return start


def service_gone(kube: Kube, namespace: str, name: str) -> bool:
    return kube.get(SERVICES, name, namespace) is None


def rule_keys(world: AwsWorld, name: str) -> list[tuple[Any, ...]]:
    return sorted(
        (
            r["GroupId"],
            r["IpProtocol"],
            r.get("FromPort"),
            r.get("CidrIpv4", ""),
            (r.get("ReferencedGroupInfo") or {}).get("GroupId", ""),
        )
        for r in world.rules(name)
    )


@pytest.mark.parametrize(
    ("annotations", "fault_at"),
    [
        pytest.param({}, "after-call.elastic-load-balancing.CreateLoadBalancer", id="classic"),
        pytest.param(
            {ann.TYPE: "nlb"},
            "after-call.elastic-load-balancing-v2.CreateTargetGroup",
            id="nlb",
        ),
    ],
)
async def test_worker_killed_mid_ensure_converges(
    kube: Kube,
    client: Client,
    lb_config: Settings,
    namespace: str,
    world: AwsWorld,
    nodes: list[str],
    start_worker: WorkerFactory,
    annotations: dict[str, str],
    fault_at: str,
) -> None:
    faulty, marker = start_worker(fault_at)
    async with service_starter(kube, client, lb_config, namespace):
        service = await asyncio.to_thread(
            make_service, kube, namespace, "web", annotations=annotations, ports=(80, 443)
        )
        name = lb_name(service)
        await eventually(marker.exists, timeout=60, what=f"the worker blocked at {fault_at}")
        faulty.kill()  # SIGKILL: no graceful shutdown, the activity dies mid-call
        start_worker()
        hostnames = await eventually(
            lambda: ingress(kube, namespace, "web"), timeout=RECOVERY_S, what="ingress set"
        )

        if annotations:
            [nlb] = world.nlbs(name)  # exactly one, the one the killed attempt created
            assert hostnames == [nlb["DNSName"]]
            groups = world.target_groups(name)
            assert len(groups) == 2  # the orphan of the killed attempt was adopted
            v2 = world.client("elbv2")
            listeners = v2.describe_listeners(LoadBalancerArn=nlb["LoadBalancerArn"])["Listeners"]
            assert len(listeners) == 2
            for group in groups:
                health = v2.describe_target_health(TargetGroupArn=group["TargetGroupArn"])
                assert len(health["TargetHealthDescriptions"]) == len(world.instance_ids)
            assert world.classic(name) is None
            expected_rules = 2  # one node-port rule per port on the node group
        else:
            elb = world.classic(name)  # asserts there is at most one
            assert elb is not None and not world.nlbs(name)
            assert len(elb["Instances"]) == len(world.instance_ids)
            assert len(world.own_groups(name)) == 1
            assert len(world.node_group_ingress()) == 1  # the shared backend rule, once
            expected_rules = 2  # the two listener ports on the ELB's own group
        keys = rule_keys(world, name)
        assert len(keys) == len(set(keys)) == expected_rules, keys

        await asyncio.to_thread(kube.delete, SERVICES, "web", namespace)
        await eventually(
            lambda: service_gone(kube, namespace, "web"), timeout=RECOVERY_S, what="deleted"
        )
        assert world.nothing_left(name)


@pytest.mark.parametrize(
    ("annotations", "fault_at"),
    [
        pytest.param({}, "after-call.elastic-load-balancing.DeleteLoadBalancer", id="classic"),
        pytest.param(
            {ann.TYPE: "nlb"},
            "after-call.elastic-load-balancing-v2.DeleteLoadBalancer",
            id="nlb",
        ),
    ],
)
async def test_worker_killed_mid_delete_converges(
    kube: Kube,
    client: Client,
    lb_config: Settings,
    namespace: str,
    world: AwsWorld,
    nodes: list[str],
    start_worker: WorkerFactory,
    annotations: dict[str, str],
    fault_at: str,
) -> None:
    faulty, marker = start_worker(fault_at)
    async with service_starter(kube, client, lb_config, namespace):
        service = await asyncio.to_thread(
            make_service, kube, namespace, "web", annotations=annotations, ports=(80, 443)
        )
        name = lb_name(service)
        await eventually(lambda: ingress(kube, namespace, "web"), timeout=60, what="ingress set")
        assert world.rules(name)

        await asyncio.to_thread(kube.delete, SERVICES, "web", namespace)
        await eventually(marker.exists, timeout=60, what=f"the worker blocked at {fault_at}")
        faulty.kill()  # SIGKILL: no graceful shutdown, the activity dies mid-call
        # Killed between deleting the LB and the rest: rules (and groups) are still there.
        assert world.rules(name)
        assert kube.get(SERVICES, "web", namespace) is not None  # the finalizer holds it
        start_worker()
        await eventually(
            lambda: service_gone(kube, namespace, "web"), timeout=RECOVERY_S, what="deleted"
        )
        assert world.nothing_left(name)
        assert world.node_rules_besides_backend() == []


async def test_service_deleted_while_its_lb_is_created(
    kube: Kube,
    client: Client,
    lb_config: Settings,
    namespace: str,
    world: AwsWorld,
    nodes: list[str],
) -> None:
    driver = AwsDriver(AWS.section(lb_config))
    reached, release = threading.Event(), threading.Event()

    def hold(**_: Any) -> None:
        reached.set()
        release.wait(60)

    driver.session.client("elb").meta.events.register(
        "before-call.elastic-load-balancing.CreateLoadBalancer", hold
    )
    worker = build_worker(client, lb_config, driver=driver, kube=kube)
    try:
        async with worker, service_starter(kube, client, lb_config, namespace):
            service = await asyncio.to_thread(make_service, kube, namespace, "web")
            name = lb_name(service)
            await eventually(reached.is_set, what="CreateLoadBalancer under way")
            await asyncio.to_thread(kube.delete, SERVICES, "web", namespace)
            handle = client.get_workflow_handle(workflow_id(ObjectRef.of(SERVICES, service)))

            async def teardown_requested() -> bool:
                state: LoadBalancerState = await handle.query(
                    LoadBalancerQuery.STATE, result_type=LoadBalancerState
                )
                return state.tear_down

            await eventually_async(teardown_requested, what="tear_down sent mid-create")
            release.set()
            await eventually(
                lambda: service_gone(kube, namespace, "web"), timeout=60, what="Service deleted"
            )
            assert world.nothing_left(name)
            assert world.node_rules_besides_backend() == []
    finally:
        release.set()
