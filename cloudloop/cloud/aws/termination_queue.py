"""The queue-processor mode's AWS infrastructure, made and removed by the product: the SQS queue,
its policy, the EventBridge rules and targets feeding it, and the ASG terminate lifecycle hooks.

Rules (upstream's README "Queue Processor" setup, done by code instead of by hand):

- **Identity.** Everything is found by name: the queue ``spec.queue_name``, the rules
  ``<rule_prefix>-{asg-term,spot-itn,rebalance,state-change,scheduled-change}``, the hook
  ``spec.hook_name`` on each group of ``spec.lifecycle_hook_groups``. A create is a find first:
  running it twice, or after a crash half-way, converges to one queue, five rules, one target each.
- **Policy.** Only EventBridge may send, and only from these rules (``aws:SourceArn``).
  Messages are kept 300 s (upstream's template), encrypted with SQS-managed keys.
- **Removal** deletes the rules' targets, the rules, the hooks and the queue; anything already
  gone is skipped (an uninstall run twice is fine).
- Every call goes through :func:`~cloudloop.cloud.aws.base.calling` (counted; errors are the
  contract's classes).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from cloudloop.cloud import errors
from cloudloop.cloud.aws.base import AwsBase, calling
from cloudloop.cloud.termination import QueueInfo, QueueSpec

if TYPE_CHECKING:
    from mypy_boto3_sqs.literals import QueueAttributeNameType

#: (rule suffix, EventBridge pattern): the five sources upstream's queue mode reads.
RULES: dict[str, dict[str, Any]] = {
    "asg-term": {
        "source": ["aws.autoscaling"],
        "detail-type": ["EC2 Instance-terminate Lifecycle Action"],
    },
    "spot-itn": {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
    "rebalance": {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Instance Rebalance Recommendation"],
    },
    "state-change": {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Instance State-change Notification"],
    },
    "scheduled-change": {
        "source": ["aws.health"],
        "detail-type": ["AWS Health Event"],
        "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
    },
}
TARGET_ID = "cloudloop-nth-queue"
QUEUE_ATTRIBUTES: dict[QueueAttributeNameType, str] = {
    "MessageRetentionPeriod": "300",
    "SqsManagedSseEnabled": "true",
}
TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"
_MISSING_QUEUE = ("NonExistentQueue", "QueueDoesNotExist")


def queue_missing(exc: BaseException) -> bool:
    """Whether an SQS error says the queue does not exist."""
    return isinstance(exc, errors.CloudError) and any(m in str(exc) for m in _MISSING_QUEUE)


def rule_names(spec: QueueSpec) -> list[str]:
    return [f"{spec.rule_prefix}-{suffix}" for suffix in RULES]


def queue_policy(queue_arn: str, rule_arns: list[str]) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Id": "cloudloop-nth",
            "Statement": [
                {
                    "Sid": "EventBridgeRules",
                    "Effect": "Allow",
                    "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
                    "Action": "sqs:SendMessage",
                    "Resource": queue_arn,
                    "Condition": {"ArnEquals": {"aws:SourceArn": sorted(rule_arns)}},
                }
            ],
        },
        sort_keys=True,
    )


class AwsTerminationQueue:
    """SQS, EventBridge and Auto Scaling calls that make and remove the interruption queue."""

    def __init__(self, base: AwsBase, autoscaling: AwsBase) -> None:
        self.base = base
        self.autoscaling = autoscaling

    def find_queue(self, name: str) -> QueueInfo | None:
        sqs = self.base.client("sqs")
        try:
            with calling("GetQueueUrl"):
                url = str(sqs.get_queue_url(QueueName=name)["QueueUrl"])
        except errors.CloudError as exc:
            if queue_missing(exc) or isinstance(exc, errors.NotFound):
                return None
            raise
        with calling("GetQueueAttributes"):
            attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        return QueueInfo(url=url, arn=str(attrs["Attributes"]["QueueArn"]))

    def ensure_queue(self, spec: QueueSpec) -> QueueInfo:
        found = self.find_queue(spec.queue_name)
        if found is not None:
            return found
        with calling("CreateQueue"):
            self.base.client("sqs").create_queue(
                QueueName=spec.queue_name, Attributes=dict(QUEUE_ATTRIBUTES), tags=spec.tags
            )
        created = self.find_queue(spec.queue_name)
        if created is None:
            raise errors.CloudError("aws", "CreateQueue", f"queue {spec.queue_name} not found")
        return created

    def ensure_rules(self, spec: QueueSpec, queue: QueueInfo) -> list[str]:
        """Put the rules and their target (both idempotent in EventBridge), then the queue's
        policy naming them; the rules' ARNs."""
        events = self.base.client("events")
        arns: list[str] = []
        tags = [{"Key": k, "Value": v} for k, v in sorted(spec.tags.items())]
        for name, pattern in zip(rule_names(spec), RULES.values(), strict=True):
            with calling("PutRule"):
                answer = events.put_rule(
                    Name=name,
                    EventPattern=json.dumps(pattern, sort_keys=True),
                    State="ENABLED",
                    Description="cloudloop node termination handler",
                    **({"Tags": tags} if tags else {}),
                )
            arns.append(str(answer["RuleArn"]))
            with calling("PutTargets"):
                events.put_targets(Rule=name, Targets=[{"Id": TARGET_ID, "Arn": queue.arn}])
        policy = queue_policy(queue.arn, arns)
        sqs = self.base.client("sqs")
        with calling("GetQueueAttributes"):
            current = sqs.get_queue_attributes(QueueUrl=queue.url, AttributeNames=["Policy"])
        if current.get("Attributes", {}).get("Policy") != policy:
            with calling("SetQueueAttributes"):
                sqs.set_queue_attributes(QueueUrl=queue.url, Attributes={"Policy": policy})
        return arns

    def ensure_lifecycle_hooks(self, spec: QueueSpec) -> list[str]:
        """The terminate hook on each group (``PutLifecycleHook`` creates or updates); groups
        that do not exist are skipped and named in the answer as ``<group>: missing``."""
        client = self.autoscaling.client("autoscaling")
        done: list[str] = []
        existing: set[str] = set()
        groups = list(dict.fromkeys(spec.lifecycle_hook_groups))
        for start in range(0, len(groups), 50):  # DescribeAutoScalingGroups takes 50 names
            with calling("DescribeAutoScalingGroups"):
                page = client.describe_auto_scaling_groups(
                    AutoScalingGroupNames=groups[start : start + 50]
                )
            existing.update(g["AutoScalingGroupName"] for g in page.get("AutoScalingGroups", []))
        for group in groups:
            if group not in existing:
                done.append(f"{group}: missing (no such Auto Scaling group)")
                continue
            try:
                with calling("PutLifecycleHook"):
                    client.put_lifecycle_hook(
                        AutoScalingGroupName=group,
                        LifecycleHookName=spec.hook_name,
                        LifecycleTransition=TERMINATING,
                        HeartbeatTimeout=spec.hook_heartbeat_timeout_s,
                        DefaultResult="CONTINUE",
                    )
            except (errors.InvalidRequest, errors.NotFound) as exc:
                done.append(f"{group}: missing ({exc})")
                continue
            done.append(group)
        return done

    def remove(self, spec: QueueSpec) -> list[str]:
        """Delete what :meth:`ensure_queue`, :meth:`ensure_rules` and the hooks made."""
        removed: list[str] = []
        events = self.base.client("events")
        for name in rule_names(spec):
            try:
                with calling("RemoveTargets"):
                    events.remove_targets(Rule=name, Ids=[TARGET_ID])
                with calling("DeleteRule"):
                    events.delete_rule(Name=name)
                removed.append(f"rule/{name}")
            except errors.CloudError as exc:  # EventBridge: ResourceNotFoundException
                if isinstance(exc, errors.NotFound) or "ResourceNotFound" in str(exc):
                    continue
                raise
        client = self.autoscaling.client("autoscaling")
        for group in spec.lifecycle_hook_groups:
            try:
                with calling("DescribeLifecycleHooks"):
                    hooks = client.describe_lifecycle_hooks(
                        AutoScalingGroupName=group, LifecycleHookNames=[spec.hook_name]
                    ).get("LifecycleHooks", [])
                if not hooks:
                    continue
                with calling("DeleteLifecycleHook"):
                    client.delete_lifecycle_hook(
                        AutoScalingGroupName=group, LifecycleHookName=spec.hook_name
                    )
                removed.append(f"hook/{group}/{spec.hook_name}")
            except (errors.InvalidRequest, errors.NotFound):
                continue
        found = self.find_queue(spec.queue_name)
        if found is not None:
            try:
                with calling("DeleteQueue"):
                    self.base.client("sqs").delete_queue(QueueUrl=found.url)
                removed.append(f"queue/{spec.queue_name}")
            except errors.CloudError as exc:
                if not queue_missing(exc):
                    raise
        return removed
