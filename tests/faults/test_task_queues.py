"""A task queue per domain: a drain that holds every activity slot of the drain queue does not
hold up a load balancer, and each workflow runs on its domain's queue."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import SERVICES, ObjectRef
from cloudloop.messages.loadbalancer import workflow_id as lb_workflow_id
from cloudloop.settings import Domain, TaskQueueSettings
from devstack.backends.aws import NthCloud, spot_itn
from devstack.local import LocalStack
from starters.context import StarterContext
from starters.loadbalancer import ServiceStarter
from starters.termination import QueueProcessor
from tests.helpers import eventually, eventually_async
from tests.loadbalancer.support import AwsWorld, ingress, make_service
from tests.termination.support import (
    delete_nodes,
    drain_workflows,
    kwok_node,
    node_ready,
    nth_settings,
    pdb,
    replica_set,
    running_pods,
)
from workers.main import build_workers

pytestmark = [pytest.mark.stack, pytest.mark.fault]


async def test_a_blocked_drain_queue_does_not_starve_load_balancers(
    stack: LocalStack, kube: Kube, client: Client, settings: Settings, namespace: str
) -> None:
    aws = NthCloud.at(stack.moto_endpoint, stack.autoscaling_endpoint)
    queue = aws.queue()
    instance, dns = aws.plain_instance()
    source = kwok_node(kube, dns, namespace)
    base = f"domains-{uuid.uuid4().hex[:6]}"
    queues = {d: TaskQueueSettings() for d in Domain.ALL}
    queues[Domain.DRAIN] = TaskQueueSettings(max_concurrent_activities=1, activities_per_second=5)
    config = nth_settings(
        settings, stack, queue, drain_round_s=30.0, node_termination_grace_period_s=120.0
    )
    config = config.model_copy(
        update={
            "cluster_name": base,
            "temporal": config.temporal.model_copy(update={"task_queue": base, "queues": queues}),
            "ccm": config.ccm.model_copy(update={"node_selector": f"cloudloop-test={base}"}),
        }
    )
    AwsWorld.create(stack.moto_endpoint, config.cluster_name, instances=1)
    informers = Informers(kube)
    context = StarterContext(
        settings=config,
        kube=kube,
        client=client,
        driver=AwsDriver(AWS.section(config)),
        informers=informers,
    )
    processor = QueueProcessor.from_context(context)
    services = ServiceStarter.from_context(context)
    assert processor is not None and services is not None
    services.services = informers.services(namespace=namespace)
    workers = build_workers(client, config, driver=context.driver, kube=kube)
    tasks: list[asyncio.Task[None]] = []
    try:
        await eventually(lambda: node_ready(kube, source), what="node Ready", timeout=60)
        await asyncio.to_thread(replica_set, kube, namespace, "web", 1, namespace)
        await asyncio.to_thread(pdb, kube, namespace, "web", max_unavailable=0)
        await eventually(
            lambda: len(running_pods(kube, namespace, source)) == 1, timeout=60, what="pod"
        )
        async with contextlib.AsyncExitStack() as running:
            for worker in workers:
                await running.enter_async_context(worker)
            tasks = [asyncio.create_task(processor.run()), asyncio.create_task(services.run())]
            aws.send(queue, spot_itn(instance))
            drains = await eventually_async(
                lambda: drain_workflows(client, config, source), timeout=60, what="the drain"
            )
            # The drain's eviction round now holds the drain queue's only slot for 30 s.
            service = await asyncio.to_thread(make_service, kube, namespace, "web")
            await eventually(
                lambda: ingress(kube, namespace, "web"), timeout=60, what="LB beside the drain"
            )
            drain = await client.get_workflow_handle(drains[0].id).describe()
            lb = await client.get_workflow_handle(
                lb_workflow_id(ObjectRef.of(SERVICES, service))
            ).describe()
            assert drain.task_queue == f"{base}-drain"
            assert lb.task_queue == f"{base}-loadbalancer"
            await asyncio.to_thread(kube.delete, SERVICES, "web", namespace)
            await eventually(
                lambda: kube.get(SERVICES, "web", namespace) is None, timeout=60, what="deleted"
            )
    finally:
        processor.stop()
        services.stop()
        informers.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        delete_nodes(kube, source)
