"""The node termination handler against the real stack: SQS, EC2 and Auto Scaling in moto (the
lifecycle calls answered by the stack's extension), kube-apiserver with controller-manager,
scheduler and kwok, Temporal, an in-process worker and QueueProcessor starters."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import datetime

import pytest
from pydantic import SecretStr
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.termination import AwsTermination
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import NODES, VOLUME_ATTACHMENTS
from cloudloop.messages.scope import scoped_id
from cloudloop.messages.termination import TAINT_KEYS, DrainResult, EventKind
from devstack.audit import eviction_audit_log, read_evictions
from devstack.autoscaling_ext import inject_fault
from devstack.backends.aws import NthCloud, asg_terminate, rebalance, spot_itn, state_change
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
    pods_on,
    processor,
    replica_set,
    running,
    running_pods,
    taints,
    token_calls,
    webhook_receiver,
    workload,
)
from workers.main import build_worker

pytestmark = pytest.mark.stack


def rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def test_asg_termination_drains_then_completes_lifecycle(
    stack: LocalStack, aws: NthCloud, kube: Kube, client: Client, settings: Settings, namespace: str
) -> None:
    queue = aws.queue()
    asg, hook, instance, dns = aws.asg_instance()
    token = str(uuid.uuid4())
    source = kwok_node(kube, dns, namespace)
    spare = ""
    actions_before = metric(
        "actions_total", {"node_action": "cordon-and-drain", "node_status": "success"}
    )
    try:
        spare = await workload(kube, namespace, source, namespace, replicas=4)
        with webhook_receiver() as receiver:
            config = nth_settings(settings, stack, queue, webhook_url=SecretStr(receiver.url))
            # AWS fails the first completion: retried, the message still waits for it.
            inject_fault(stack.autoscaling_endpoint, "CompleteLifecycleAction", count=1)
            worker = build_worker(client, config, driver=AwsDriver(AWS.section(config)), kube=kube)
            async with worker, running(processor(config, kube, client)):
                aws.send(queue, asg_terminate(asg, hook, instance, token))
                await eventually(
                    lambda: aws.depth(queue) == 0, timeout=90, what="message deleted after drain"
                )
                await eventually(
                    lambda: len(running_pods(kube, namespace, spare)) == 4,
                    timeout=60,
                    what="replacements running on the spare node",
                )

        node = kube.get(NODES, source) or {}
        assert node["spec"].get("unschedulable") is True
        value = taints(kube, source)[TAINT_KEYS[EventKind.ASG_LIFECYCLE]]
        assert value.startswith("asg-lifecycle-term-")
        assert not [p for p in pods_on(kube, source, namespace)]

        # Each pod evicted once through the Eviction API, before the lifecycle action completed.
        evictions = read_evictions(eviction_audit_log(stack.state_dir), namespace)
        evicted = [e for e in evictions if 200 <= e.code < 300]
        assert len(evicted) == 4 == len({e.name for e in evicted}), evictions
        completes = token_calls(stack, token, "CompleteLifecycleAction")
        assert [c["status"] for c in completes] == [500, 200]
        done = completes[-1]
        assert (done["result"], done["instance_id"], done["auto_scaling_group"], done["hook"]) == (
            "CONTINUE",
            instance,
            asg,
            hook,
        )
        assert max(rfc3339(e.time) for e in evicted) < done["time"]
        heartbeats = token_calls(stack, token, "RecordLifecycleActionHeartbeat")
        assert all(h["time"] < done["time"] for h in heartbeats)

        # One webhook with upstream's default template.
        assert len(receiver.requests) == 1
        headers, body = receiver.requests[0]
        text = json.loads(body)["text"]
        assert f"Node: {source}" in text and "Kind: ASG_LIFECYCLE" in text
        assert f"Instance: {instance}" in text
        assert {k.lower(): v for k, v in headers.items()}["content-type"] == "application/json"

        # Findable: one workflow for the node, an Event naming it, the action counted.
        found = await eventually_async(
            lambda: drain_workflows(client, config, source),
            what="workflow in visibility",
            timeout=60,
        )
        drain_prefix = scoped_id(config.temporal.id_scope, f"drain/{source}/{instance}/")
        assert len(found) == 1 and found[0].id.startswith(drain_prefix)
        messages = [e["message"] for e in node_events(kube, source, "CordonAndDrain")]
        assert any(found[0].id in m and "4 pod(s) evicted" in m for m in messages), messages
        assert (
            metric("actions_total", {"node_action": "cordon-and-drain", "node_status": "success"})
            == actions_before + 1
        )
    finally:
        delete_nodes(kube, source, *([spare] if spare else []))


async def test_one_interruption_three_kinds_two_replicas_one_drain_with_heartbeats(
    stack: LocalStack, aws: NthCloud, kube: Kube, client: Client, settings: Settings, namespace: str
) -> None:
    """ASG lifecycle action, Spot warning and state change for one instance, each twice, read
    by two starter replicas: one drain workflow, one webhook, one completion; heartbeats on a
    durable timer while the drain waits for the node's VolumeAttachment."""
    queue = aws.queue()
    asg, hook, instance, dns = aws.asg_instance()
    token = str(uuid.uuid4())
    source = kwok_node(kube, dns, namespace)
    spare = ""
    attachment = f"va-{uuid.uuid4().hex[:8]}"
    started_before = metric("cloudloop_workflows_started_total", {"workflow": "DrainNode"})
    try:
        spare = await workload(kube, namespace, source, namespace, replicas=2)
        kube.create(
            VOLUME_ATTACHMENTS,
            {
                "metadata": {"name": attachment},
                "spec": {
                    "attacher": "ebs.csi.aws.com",
                    "nodeName": source,
                    "source": {"persistentVolumeName": f"pv-{attachment}"},
                },
            },
        )
        bodies = [
            asg_terminate(asg, hook, instance, token, event_id=str(uuid.uuid4())),
            spot_itn(instance, event_id=str(uuid.uuid4())),
            state_change(instance, "shutting-down", event_id=str(uuid.uuid4())),
        ]
        with webhook_receiver() as receiver:
            config = nth_settings(
                settings,
                stack,
                queue,
                webhook_url=SecretStr(receiver.url),
                wait_for_volume_attachments=True,
            )
            worker = build_worker(client, config, driver=AwsDriver(AWS.section(config)), kube=kube)
            replicas = [processor(config, kube, client) for _ in range(2)]
            async with worker, running(*replicas):
                aws.send(queue, *bodies, *bodies)
                found = await eventually_async(
                    lambda: drain_workflows(client, config, source),
                    what="drain workflow",
                    timeout=60,
                )
                handle = client.get_workflow_handle(found[0].id, result_type=DrainResult)

                async def three_events() -> list[str] | None:
                    ids: list[str] = await handle.query("event_ids")
                    return ids if len(ids) == 3 else None

                await eventually_async(three_events, timeout=60, what="all three kinds joined")
                await eventually(
                    lambda: len(token_calls(stack, token, "RecordLifecycleActionHeartbeat")) >= 2,
                    what="lifecycle heartbeats while the volume is attached",
                    timeout=60,
                )
                assert token_calls(stack, token, "CompleteLifecycleAction") == []
                assert aws.depth(queue) == 6  # all held while the drain runs

                detached_at = time.time()
                kube.delete(VOLUME_ATTACHMENTS, attachment)
                result = await handle.result()
                await eventually(lambda: aws.depth(queue) == 0, timeout=60, what="queue empty")

        assert result.lifecycle_actions_completed == [token]
        assert len(result.event_ids) == 3 and result.evicted == 2
        (done,) = token_calls(stack, token, "CompleteLifecycleAction")
        assert done["status"] == 200 and done["time"] > detached_at
        heartbeats = token_calls(stack, token, "RecordLifecycleActionHeartbeat")
        assert len(heartbeats) >= 2 and all(h["status"] == 200 for h in heartbeats)
        assert max(h["time"] for h in heartbeats) < done["time"]
        assert len(receiver.requests) == 1
        node_taints = taints(kube, source)
        for kind in (EventKind.ASG_LIFECYCLE, EventKind.SPOT_ITN, EventKind.STATE_CHANGE):
            assert TAINT_KEYS[kind] in node_taints, node_taints
        assert (
            metric("cloudloop_workflows_started_total", {"workflow": "DrainNode"})
            == started_before + 1
        )
        all_runs = await drain_workflows(client, config, source)
        assert [wf.id for wf in all_runs] == [found[0].id]
    finally:
        kube.delete(VOLUME_ATTACHMENTS, attachment)
        delete_nodes(kube, source, *([spare] if spare else []))


async def test_lifecycle_action_after_a_completed_drain_is_completed(
    stack: LocalStack, aws: NthCloud, kube: Kube, client: Client, settings: Settings, namespace: str
) -> None:
    """Spot warning first (drained, done), then the ASG's lifecycle action for the same
    instance: no second drain, but the action is completed and both messages deleted."""
    queue = aws.queue()
    asg, hook, instance, dns = aws.asg_instance()
    token = str(uuid.uuid4())
    source = kwok_node(kube, dns, namespace)
    try:
        await eventually(lambda: node_ready(kube, source), what="node Ready", timeout=60)
        config = nth_settings(settings, stack, queue)
        worker = build_worker(client, config, driver=AwsDriver(AWS.section(config)), kube=kube)
        async with worker, running(processor(config, kube, client)):
            aws.send(queue, spot_itn(instance))
            await eventually(lambda: aws.depth(queue) == 0, timeout=60, what="spot drained")
            aws.send(queue, asg_terminate(asg, hook, instance, token))
            await eventually(lambda: aws.depth(queue) == 0, timeout=60, what="late ASG event")
            # A copy of the same ASG event later: nothing left to do.
            aws.send(queue, asg_terminate(asg, hook, instance, token))
            await eventually(lambda: aws.depth(queue) == 0, timeout=60, what="copy deleted")
        completes = token_calls(stack, token, "CompleteLifecycleAction")
        assert [c["status"] for c in completes] == [200]
        assert len(await drain_workflows(client, config, source)) == 1
        late = client.get_workflow_handle(f"lifecycle/{instance}/{token}")
        assert await late.result() is True
    finally:
        delete_nodes(kube, source)


async def test_rebalance_recommendation_only_cordons(
    stack: LocalStack, aws: NthCloud, kube: Kube, client: Client, settings: Settings, namespace: str
) -> None:
    queue = aws.queue()
    instance, dns = aws.plain_instance()
    source = kwok_node(kube, dns, namespace)
    try:
        await eventually(lambda: node_ready(kube, source), what="node Ready", timeout=60)
        replica_set(kube, namespace, "web", 2, namespace)
        await eventually(lambda: len(running_pods(kube, namespace, source)) == 2, timeout=60)
        config = nth_settings(settings, stack, queue)
        worker = build_worker(client, config, driver=AwsDriver(AWS.section(config)), kube=kube)
        async with worker, running(processor(config, kube, client)):
            aws.send(queue, rebalance(instance))
            await eventually(lambda: aws.depth(queue) == 0, timeout=60, what="message deleted")
        assert (kube.get(NODES, source) or {})["spec"].get("unschedulable") is True
        assert TAINT_KEYS[EventKind.REBALANCE_RECOMMENDATION] in taints(kube, source)
        assert len(running_pods(kube, namespace, source)) == 2  # nothing evicted
        found = await eventually_async(lambda: drain_workflows(client, config, source), timeout=60)
        assert found[0].id.endswith("/cordon")
        assert node_events(kube, source, "Cordon")
    finally:
        delete_nodes(kube, source)


async def test_unknown_unmanaged_and_odd_messages_are_deleted(
    stack: LocalStack, aws: NthCloud, kube: Kube, client: Client, settings: Settings
) -> None:
    """Each message's fate, decided without a worker: nothing here starts a drain."""
    queue = aws.queue()
    unmanaged, unmanaged_dns = aws.plain_instance(managed=False)
    nodeless, _ = aws.plain_instance()
    kwok_node(kube, unmanaged_dns, "none")
    config = nth_settings(settings, stack, queue)
    nth = processor(config, kube, client)
    calls = AwsTermination(AWS.section(config), config.nth)
    parse_errors = metric("events_error_total", {"event_error_where": "parse"})
    cases = {
        "unknown-instance": spot_itn("i-0123456789abcdef0"),
        "unmanaged-instance": spot_itn(unmanaged),
        "no-node": state_change(nodeless, "stopping"),
        "malformed": "{not json",
        "test-notification": json.dumps({"Event": "autoscaling:TEST_NOTIFICATION"}),
        "running-state": state_change(nodeless, "running"),
    }
    expected = {
        "unknown-instance": "skipped",
        "unmanaged-instance": "skipped",
        "no-node": "skipped",
        "malformed": "malformed",
        "test-notification": "ignored",
        "running-state": "ignored",
    }
    try:
        fates: dict[str, str] = {}
        for name, body in cases.items():
            aws.send(queue, body)
            (message,) = calls.receive(queue, max_messages=1, wait_s=1, visibility_s=30)
            fates[name] = await nth.handle_message(message)
        assert fates == expected
        assert aws.depth(queue) == 0
        assert metric("events_error_total", {"event_error_where": "parse"}) == parse_errors + 1

        # Keeping messages about Nodes not in the cluster, when told to.
        keep = processor(
            nth_settings(settings, stack, queue, delete_message_if_node_not_found=False),
            kube,
            client,
        )
        aws.send(queue, state_change(nodeless, "stopped"))
        (message,) = calls.receive(queue, max_messages=1, wait_s=1, visibility_s=30)
        assert await keep.handle_message(message) == "left"
        assert aws.depth(queue) == 1
        assert await drain_workflows(client, config, unmanaged_dns) == []
    finally:
        delete_nodes(kube, unmanaged_dns)


async def test_tagged_node_gauges(
    stack: LocalStack, aws: NthCloud, kube: Kube, client: Client, settings: Settings
) -> None:
    tagged, tagged_dns = aws.plain_instance()
    _, untagged_dns = aws.plain_instance(managed=False)
    nodes = [kwok_node(kube, tagged_dns, "none"), kwok_node(kube, untagged_dns, "none")]
    try:
        nth = processor(nth_settings(settings, stack, aws.queue()), kube, client)
        instances, tagged_nodes = await asyncio.to_thread(nth.refresh_tagged_metrics)
        assert instances >= 1 and tagged_nodes >= 1
        assert metric("nth_tagged_instances") == instances
        assert metric("nth_tagged_nodes") == tagged_nodes
        aws.ec2.delete_tags(
            Resources=[tagged], Tags=[{"Key": "aws-node-termination-handler/managed"}]
        )
        after_instances, after_nodes = await asyncio.to_thread(nth.refresh_tagged_metrics)
        assert (after_instances, after_nodes) == (instances - 1, tagged_nodes - 1)
    finally:
        delete_nodes(kube, *nodes)
