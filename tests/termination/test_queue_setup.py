"""The managed interruption queue against moto behind the AWS front: the ``TerminationQueue``
workflow makes the queue, its policy, five EventBridge rules with their target and the lifecycle
hook idempotently and removes them; the queue processor makes it itself when no URL is given, and
makes it again when it is deleted behind its back."""

from __future__ import annotations

import json
import uuid

import pytest
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.termination_queue import RULES, TARGET_ID
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from devstack.backends.aws import NthCloud, aws_client, spot_itn
from devstack.local import LocalStack
from starters.termination import queue_spec, setup_queue
from tests.helpers import eventually
from tests.termination.support import (
    delete_nodes,
    drain_workflows,
    kwok_node,
    metric,
    nth_settings,
    processor,
    running,
)
from workers.main import build_worker

pytestmark = pytest.mark.stack


def managed(settings: Settings, stack: LocalStack, groups: list[str]) -> Settings:
    config = nth_settings(settings, stack, "", lifecycle_hook_groups=groups)
    return config.model_copy(update={"cluster_name": f"nthq-{uuid.uuid4().hex[:8]}"})


async def test_install_is_idempotent_and_uninstall_removes_everything(
    stack: LocalStack, aws: NthCloud, kube: Kube, client: Client, settings: Settings
) -> None:
    asg, hook, _, _ = aws.asg_instance()
    config = managed(settings, stack, [asg, "no-such-group"])
    spec = queue_spec(config)
    events = aws_client("events", stack.moto_endpoint)
    worker = build_worker(client, config, driver=AwsDriver(AWS.section(config)), kube=kube)
    async with worker:
        first = await setup_queue(client, config, task_queue=config.temporal.task_queue)
        second = await setup_queue(client, config, task_queue=config.temporal.task_queue)
        assert first.queue_url == second.queue_url and first.rules == second.rules
        assert len(first.rules) == len(RULES) == 5
        assert first.hooks[0] == asg and first.hooks[1].startswith("no-such-group: missing")

        names = [r["Name"] for r in events.list_rules(NamePrefix=spec.rule_prefix)["Rules"]]
        assert sorted(names) == sorted(f"{spec.rule_prefix}-{s}" for s in RULES)
        for name in names:
            targets = events.list_targets_by_rule(Rule=name)["Targets"]
            assert [(t["Id"], t["Arn"]) for t in targets] == [(TARGET_ID, first.queue_arn)]
        pattern = json.loads(
            events.describe_rule(Name=f"{spec.rule_prefix}-spot-itn")["EventPattern"]
        )
        assert pattern["detail-type"] == ["EC2 Spot Instance Interruption Warning"]
        policy = json.loads(
            aws.sqs.get_queue_attributes(QueueUrl=first.queue_url, AttributeNames=["Policy"])[
                "Attributes"
            ]["Policy"]
        )
        statement = policy["Statement"][0]
        assert statement["Resource"] == first.queue_arn
        assert sorted(statement["Condition"]["ArnEquals"]["aws:SourceArn"]) == sorted(first.rules)
        hooks = aws.autoscaling.describe_lifecycle_hooks(AutoScalingGroupName=asg)
        ours = [h for h in hooks["LifecycleHooks"] if h["LifecycleHookName"] == spec.hook_name]
        assert ours and ours[0]["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING"

        removed = await setup_queue(
            client, config, remove=True, task_queue=config.temporal.task_queue
        )
        assert f"queue/{spec.queue_name}" in removed.removed
        assert not events.list_rules(NamePrefix=spec.rule_prefix)["Rules"]
        hooks = aws.autoscaling.describe_lifecycle_hooks(AutoScalingGroupName=asg)
        assert spec.hook_name not in [h["LifecycleHookName"] for h in hooks["LifecycleHooks"]]
        assert hook in [h["LifecycleHookName"] for h in hooks["LifecycleHooks"]]  # not ours: kept
        again = await setup_queue(
            client, config, remove=True, task_queue=config.temporal.task_queue
        )
        assert again.removed == []


async def test_processor_makes_its_queue_and_makes_it_again_when_deleted(
    stack: LocalStack, aws: NthCloud, kube: Kube, client: Client, settings: Settings
) -> None:
    config = managed(settings, stack, [])
    instance, dns = aws.plain_instance()
    node = kwok_node(kube, dns, "nthq")
    reader = processor(config, kube, client)
    reader.settings = config
    missing_before = metric("events_error_total", {"event_error_where": "queue-missing"})
    worker = build_worker(client, config, driver=AwsDriver(AWS.section(config)), kube=kube)
    try:
        async with worker, running(reader):
            await eventually(lambda: bool(reader.queue_url), timeout=60, what="queue made")
            url = reader.queue_url
            aws.sqs.delete_queue(QueueUrl=url)
            await eventually(
                lambda: (
                    metric("events_error_total", {"event_error_where": "queue-missing"})
                    > missing_before
                ),
                timeout=60,
                what="the missing queue noticed",
            )

            def sent() -> bool:
                try:
                    aws.send(url, spot_itn(instance))
                except Exception:
                    return False
                return True

            await eventually(sent, timeout=60, what="queue made again")
            await eventually(lambda: aws.depth(url) == 0, timeout=90, what="message handled")
        found = await drain_workflows(client, config, node)
        assert len(found) == 1
    finally:
        delete_nodes(kube, node)
        async with build_worker(client, config, driver=AwsDriver(AWS.section(config)), kube=kube):
            await setup_queue(client, config, remove=True, task_queue=config.temporal.task_queue)
