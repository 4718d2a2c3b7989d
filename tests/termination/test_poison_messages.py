"""Messages the termination handler cannot help: given up on with one Warning and a metric,
not redelivered forever; and Node look-ups served by the informer, not a LIST per event."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import BodyT, ObjectList
from cloudloop.kube.resources import NODES, PODS, Resource
from devstack.backends.aws import NthCloud, spot_itn
from devstack.local import LocalStack
from tests.helpers import eventually, eventually_async
from tests.termination.support import (
    delete_nodes,
    drain_workflows,
    kwok_node,
    metric,
    node_events,
    node_ready,
    nth_settings,
    pdb,
    processor,
    replica_set,
    running,
    running_pods,
)
from workers.main import build_worker

pytestmark = pytest.mark.stack


def bare_pod(kube: Kube, namespace: str, node: str) -> None:
    """A pod no controller owns: kubectl drain (without --force) refuses to evict it."""
    kube.create(
        PODS,
        {
            "metadata": {"name": "bare", "namespace": namespace},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "busybox"}],
            },
        },
        namespace,
    )


async def test_a_drain_that_fails_for_good_gives_the_message_up_at_once(
    stack: LocalStack,
    kube: Kube,
    client: Client,
    settings: Settings,
    namespace: str,
    aws: NthCloud,
) -> None:
    queue = aws.queue()
    instance, dns = aws.plain_instance()
    source = kwok_node(kube, dns, namespace)
    before = metric("nth_sqs_poison_messages_total", {"reason": "permanent"})
    try:
        await eventually(lambda: node_ready(kube, source), what="node Ready", timeout=60)
        await asyncio.to_thread(bare_pod, kube, namespace, source)
        # 6 s: long enough that a loaded machine deletes the message before SQS hands it out again
        config = nth_settings(settings, stack, queue, force=False, visibility_timeout_s=6)
        worker = build_worker(client, config, driver=AwsDriver(AWS.section(config)), kube=kube)
        async with worker, running(processor(config, kube, client)):
            aws.send(queue, spot_itn(instance))
            await eventually(lambda: aws.depth(queue) == 0, timeout=60, what="message deleted")
            await asyncio.sleep(7)  # past a visibility timeout: nothing comes back
        assert len(await drain_workflows(client, config, source)) == 1
        warnings = node_events(kube, source, "InterruptionNotHandled")
        assert len(warnings) == 1 and warnings[0]["count"] == 1
        assert "DrainRefused" in warnings[0]["message"]
        assert metric("nth_sqs_poison_messages_total", {"reason": "permanent"}) == before + 1
    finally:
        delete_nodes(kube, source)


async def test_a_message_received_too_often_is_given_up(
    stack: LocalStack,
    kube: Kube,
    client: Client,
    settings: Settings,
    namespace: str,
    aws: NthCloud,
) -> None:
    """A drain a PDB blocks past its deadline fails each time: after two receives, no more."""
    queue = aws.queue()
    instance, dns = aws.plain_instance()
    source = kwok_node(kube, dns, namespace)
    try:
        await eventually(lambda: node_ready(kube, source), what="node Ready", timeout=60)
        await asyncio.to_thread(replica_set, kube, namespace, "web", 1, namespace)
        await asyncio.to_thread(pdb, kube, namespace, "web", max_unavailable=0)
        await eventually(
            lambda: len(running_pods(kube, namespace, source)) == 1, timeout=60, what="pod"
        )
        config = nth_settings(
            settings,
            stack,
            queue,
            visibility_timeout_s=2,
            node_termination_grace_period_s=2.0,
            max_receive_count=2,
        )
        worker = build_worker(client, config, driver=AwsDriver(AWS.section(config)), kube=kube)
        async with worker, running(processor(config, kube, client)):
            aws.send(queue, spot_itn(instance))
            await eventually(lambda: aws.depth(queue) == 0, timeout=90, what="message given up")
            await asyncio.sleep(4)  # two visibility timeouts: nothing comes back
            runs = len(await drain_workflows(client, config, source))
            await asyncio.sleep(3)
        # Two receives; a slow extension may let the second join the first run.
        assert 1 <= runs == len(await drain_workflows(client, config, source)) <= 2
        warnings = node_events(kube, source, "InterruptionNotHandled")
        assert len(warnings) == 1 and "received 2 times" in warnings[0]["message"]
    finally:
        delete_nodes(kube, source)


class CountingKube(Kube):
    def __init__(self, kube: Kube) -> None:
        super().__init__(kube.api)
        self.node_lists = 0

    def list(
        self, resource: Resource[BodyT], namespace: str | None = None, **query: Any
    ) -> ObjectList[BodyT]:
        if resource == NODES:
            self.node_lists += 1
        return super().list(resource, namespace, **query)


async def test_nodes_are_found_in_the_informer(
    stack: LocalStack,
    kube: Kube,
    client: Client,
    settings: Settings,
    namespace: str,
    aws: NthCloud,
) -> None:
    """Ten events by providerID cost no Node LIST beyond the informer's own."""
    queue = aws.queue()
    instance, _ = aws.plain_instance()
    name = f"pid-{namespace}"
    body = {"metadata": {"name": name}, "spec": {"providerID": f"aws:///us-east-1a/{instance}"}}
    await asyncio.to_thread(kube.create, NODES, body)
    counting = CountingKube(kube)
    try:
        config = nth_settings(settings, stack, queue, use_provider_id=True)
        nth = processor(config, counting, client)
        async with running(nth):  # no worker: every message stays held by its drain
            for _ in range(10):
                aws.send(queue, spot_itn(instance))
            await eventually(lambda: len(nth._tasks) == 10, timeout=30, what="10 held")
            await eventually_async(
                lambda: drain_workflows(client, config, name), timeout=30, what="the drain"
            )
            await asyncio.sleep(1)
        assert counting.node_lists <= 1, counting.node_lists
    finally:
        delete_nodes(kube, name)
