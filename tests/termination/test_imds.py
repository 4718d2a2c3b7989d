"""The termination handler's IMDS mode against amazon-ec2-metadata-mock (built from its Go module,
IMDSv2 only) serving the identity of a moto instance: the node agent records the notices on its
Node, the starter's ``ImdsNotices`` starts the same drain workflow as the queue mode from them, and
a notice seen by both modes is one drain. (The agent as the chart runs it, with its own
ServiceAccount: ``test_imds_agent_live.py``.)"""

from __future__ import annotations

import pytest
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.imds import Imds
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.informer import WatchEvent
from cloudloop.kube.resources import NODES
from cloudloop.messages.termination import TAINT_KEYS, DrainResult, EventKind
from cloudloop.nodeagents.termination_imds import ImdsAgent
from cloudloop.settings import ImdsAgentNthSettings
from devstack.backends.aws import NthCloud, spot_itn
from devstack.local import LocalStack
from devstack.metadata_mock import MockInstance, metadata_mock
from starters.termination_imds import ImdsNotices
from tests.helpers import eventually, eventually_async
from tests.termination.support import (
    delete_nodes,
    drain_workflows,
    kwok_node,
    node_events,
    nth_settings,
    processor,
    running,
    taints,
)
from workers.main import build_worker

pytestmark = pytest.mark.stack


def moto_instance(aws: NthCloud) -> MockInstance:
    instance, dns = aws.plain_instance()
    raw = aws.ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]
    return MockInstance(
        instance_id=instance,
        launch_time=raw["LaunchTime"],
        zone=raw["Placement"]["AvailabilityZone"],
        hostname=dns,
    )


def imds_agent(config: Settings, kube: Kube, endpoint: str, node: str) -> ImdsAgent:
    nth = ImdsAgentNthSettings(imds_endpoint=endpoint, imds_timeout_s=config.nth.imds_timeout_s)
    return ImdsAgent(kube, Imds(endpoint, timeout_s=nth.imds_timeout_s), nth, node=node)


def notices_starter(config: Settings, kube: Kube, client: Client) -> ImdsNotices:
    return ImdsNotices(
        kube,
        client,
        config.nth,
        task_queue=config.temporal.task_queue,
        cluster=config.cluster_name,
        provider="aws",
        id_scope=config.temporal.id_scope,  # the queue mode's: one notice, one drain
    )


async def drains_for(starter: ImdsNotices, kube: Kube, node: str) -> list[str]:
    """What the starter starts for the Node as it is now (what its informer would deliver)."""
    return await starter.handle(WatchEvent("MODIFIED", kube.get(NODES, node) or {}))


async def test_spot_notice_from_both_modes_is_one_drain(
    stack: LocalStack, aws: NthCloud, kube: Kube, client: Client, settings: Settings
) -> None:
    """The mock's Spot notice (IMDS mode) and an EventBridge Spot warning for the same instance
    (queue mode): one DrainNode workflow, which got both events, tainted and cordoned."""
    instance = moto_instance(aws)
    node = kwok_node(kube, instance.hostname, "imds")
    queue = aws.queue()
    try:
        with metadata_mock(stack.state_dir, instance, "spot") as endpoint:
            # The notice is two minutes ahead: the drain waits ~20 s, and the queue's copy
            # (time: now) joins the waiting workflow and wakes it.
            config = nth_settings(
                settings, stack, queue, imds_endpoint=endpoint, node_termination_grace_period_s=100
            )
            agent = imds_agent(config, kube, endpoint, node)
            starter = notices_starter(config, kube, client)
            worker = build_worker(client, config, driver=AwsDriver(AWS.section(config)), kube=kube)
            async with worker, running(processor(config, kube, client)):
                assert await agent.identify() is not None
                assert len(await agent.poll_once()) == 2  # Spot and rebalance, on the Node
                assert await agent.poll_once() == []  # polled again: nothing new
                started = await drains_for(starter, kube, node)
                assert len(started) == 2  # the Spot notice drains; the rebalance one cordons
                assert await drains_for(starter, kube, node) == []  # read again: the same
                # A leader change: another starter reads the same notices and joins the drains.
                assert len(await drains_for(notices_starter(config, kube, client), kube, node)) == 2
                aws.send(queue, spot_itn(instance.instance_id))
                await eventually(
                    lambda: aws.depth(queue) == 0, timeout=90, what="queue message handled"
                )
                drain_id = next(w for w in started if not w.endswith("/cordon"))
                result = await client.get_workflow_handle(
                    drain_id, result_type=DrainResult
                ).result()

        assert result.node_found and result.action == "cordon-and-drain"
        assert len(result.event_ids) == 2, result.event_ids  # IMDS's and EventBridge's IDs
        found = await eventually_async(
            lambda: drain_workflows(client, config, node), what="workflows", timeout=60
        )
        assert sorted(w.id for w in found) == sorted(started)
        assert TAINT_KEYS[EventKind.SPOT_ITN] in taints(kube, node)
        assert (kube.get(NODES, node) or {})["spec"].get("unschedulable") is True
        # Upstream's Event reasons: the notice, then the drain.
        assert len(node_events(kube, node, "SpotInterruption")) == 1
        assert node_events(kube, node, "CordonAndDrain")
    finally:
        delete_nodes(kube, node)


async def test_asg_target_lifecycle_state_drains(
    stack: LocalStack, aws: NthCloud, kube: Kube, client: Client, settings: Settings
) -> None:
    """``autoscaling/target-lifecycle-state: Terminated`` drains the node once (IMDSv2)."""
    instance = moto_instance(aws)
    node = kwok_node(kube, instance.hostname, "imds")
    try:
        with metadata_mock(stack.state_dir, instance, "asglifecycle") as endpoint:
            config = nth_settings(settings, stack, "", imds_endpoint=endpoint)
            agent = imds_agent(config, kube, endpoint, node)
            worker = build_worker(client, config, driver=AwsDriver(AWS.section(config)), kube=kube)
            async with worker:
                assert await agent.identify() is not None
                assert len(await agent.poll_once()) == 1
                [wf_id] = await drains_for(notices_starter(config, kube, client), kube, node)
                result = await client.get_workflow_handle(wf_id, result_type=DrainResult).result()
        assert result.node_found
        assert TAINT_KEYS[EventKind.ASG_LIFECYCLE] in taints(kube, node)
    finally:
        delete_nodes(kube, node)
