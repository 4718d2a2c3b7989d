"""The node termination handler's AWS calls: SQS (receive, delete, extend), EC2 (the instance
behind an event, the managed tag) and Auto Scaling lifecycle actions.

NTH is AWS-only, so these calls live beside the driver rather than in the cloud contract. They go
through :class:`~cloudloop.cloud.aws.base.AwsBase` clients, so every call is counted in
``cloud_api_requests_total`` and every failure is a :mod:`cloudloop.cloud.errors` class. The SQS
client's read timeout covers the long poll; the Auto Scaling client may use its own endpoint.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from cloudloop.cloud import errors
from cloudloop.cloud.aws.base import AwsBase, calling
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.aws.termination_events import parse_message
from cloudloop.cloud.aws.termination_queue import AwsTerminationQueue, queue_missing
from cloudloop.cloud.termination import (
    InstanceInfo,
    LifecycleAction,
    ParsedMessage,
    QueueInfo,
    QueueMessage,
    QueueSpec,
)
from cloudloop.settings import NthSettings

#: AWS's answer to a lifecycle call whose action was completed or expired.
NO_ACTIVE_ACTION = "No active Lifecycle Action"
#: States whose instances count for ``nth_tagged_instances``.
LIVE_STATES = ("pending", "running", "stopping", "stopped")


def to_instance_info(raw: Mapping[str, Any]) -> InstanceInfo:
    launch = raw.get("LaunchTime")
    zone = raw.get("Placement", {}).get("AvailabilityZone", "") or ""
    return InstanceInfo(
        id=raw["InstanceId"],
        provider_id=f"aws:///{zone}/{raw['InstanceId']}",
        state=str(raw.get("State", {}).get("Name", "")),
        private_dns_name=raw.get("PrivateDnsName", "") or "",
        launch_time=launch if isinstance(launch, datetime) else None,
        zone=zone,
        instance_type=raw.get("InstanceType", "") or "",
        tags={t["Key"]: t.get("Value", "") for t in raw.get("Tags", []) or []},
    )


class AwsTermination:
    """SQS, EC2 and Auto Scaling calls of the termination handler (thread-safe, blocking)."""

    def __init__(
        self, aws: AwsSettings, nth: NthSettings, *, session: AwsBase | None = None
    ) -> None:
        """``session``: the driver's session (made with ``aws``), whose clients EC2's and the
        queue infrastructure's calls share (a boto3 client holds its service's whole model:
        EC2's is about 9 MB); by default a session of its own. SQS (its long poll's timeout) and
        Auto Scaling (its endpoint) have clients of their own on the same boto3 session."""
        self.nth = nth
        self.ec2_base = session if session is not None else AwsBase(aws)
        # On one boto3 session (one load of the models and endpoint data); the long poll must
        # end before the read timeout does.
        self.sqs_base = self.ec2_base.derived(timeout_s=max(aws.timeout_s, nth.wait_time_s + 10.0))
        self.autoscaling_base = self.ec2_base.derived(
            endpoint_url=nth.autoscaling_endpoint_url or aws.endpoint_url
        )

    # -- the queue's infrastructure (:mod:`.termination_queue`) -----------------------------
    def _queue_infra(self) -> AwsTerminationQueue:
        return AwsTerminationQueue(self.ec2_base, self.autoscaling_base)

    def ensure_queue(self, spec: QueueSpec) -> QueueInfo:
        return self._queue_infra().ensure_queue(spec)

    def ensure_rules(self, spec: QueueSpec, queue: QueueInfo) -> list[str]:
        return self._queue_infra().ensure_rules(spec, queue)

    def ensure_lifecycle_hooks(self, spec: QueueSpec) -> list[str]:
        return self._queue_infra().ensure_lifecycle_hooks(spec)

    def remove_queue(self, spec: QueueSpec) -> list[str]:
        return self._queue_infra().remove(spec)

    # -- SQS -------------------------------------------------------------------------------
    def parse_message(self, body: str, *, message_id: str, now: datetime) -> ParsedMessage:
        """An SQS body (EventBridge event or ASG notification): :mod:`.termination_events`."""
        return parse_message(body, message_id=message_id, now=now)

    def receive(
        self, queue_url: str, *, max_messages: int, wait_s: int, visibility_s: int
    ) -> list[QueueMessage]:
        """The next messages; :class:`~cloudloop.cloud.errors.NotFound` when the queue is gone."""
        try:
            with calling("ReceiveMessage"):
                answer = self.sqs_base.client("sqs").receive_message(
                    QueueUrl=queue_url,
                    MaxNumberOfMessages=max_messages,
                    WaitTimeSeconds=wait_s,
                    VisibilityTimeout=visibility_s,
                    MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
                )
        except errors.CloudError as exc:
            if queue_missing(exc):
                raise errors.NotFound("aws", "ReceiveMessage", f"queue {queue_url}: {exc}") from exc
            raise
        return [
            QueueMessage(
                message_id=m["MessageId"],
                receipt_handle=m["ReceiptHandle"],
                body=m.get("Body", ""),
                receive_count=int(m.get("Attributes", {}).get("ApproximateReceiveCount", 1)),
            )
            for m in answer.get("Messages", [])
        ]

    def delete(self, queue_url: str, receipt_handle: str) -> None:
        with calling("DeleteMessage"):
            self.sqs_base.client("sqs").delete_message(
                QueueUrl=queue_url, ReceiptHandle=receipt_handle
            )

    def extend(self, queue_url: str, receipt_handle: str, visibility_s: int) -> None:
        """Keep a held message invisible for another ``visibility_s``."""
        with calling("ChangeMessageVisibility"):
            self.sqs_base.client("sqs").change_message_visibility(
                QueueUrl=queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=visibility_s
            )

    # -- EC2 -------------------------------------------------------------------------------
    def describe_instance(self, instance_id: str) -> InstanceInfo | None:
        """The instance, or ``None`` when EC2 positively says it does not exist."""
        try:
            with calling("DescribeInstances"):
                answer = self.ec2_base.client("ec2").describe_instances(InstanceIds=[instance_id])
        except errors.NotFound:
            return None
        for reservation in answer.get("Reservations", []):
            for raw in reservation.get("Instances", []):
                if raw.get("InstanceId") == instance_id:
                    return to_instance_info(raw)
        return None

    def tagged_instances(self, tag_key: str) -> Iterator[InstanceInfo]:
        """Live instances carrying ``tag_key`` (any value)."""
        ec2 = self.ec2_base.client("ec2")
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {
                "Filters": [
                    {"Name": "tag-key", "Values": [tag_key]},
                    {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
                ]
            }
            if token:
                kwargs["NextToken"] = token
            with calling("DescribeInstances"):
                page = ec2.describe_instances(**kwargs)
            for reservation in page.get("Reservations", []):
                for raw in reservation.get("Instances", []):
                    yield to_instance_info(raw)
            token = page.get("NextToken")
            if not token:
                return

    # -- Auto Scaling ----------------------------------------------------------------------
    def complete_lifecycle_action(self, action: LifecycleAction, result: str = "CONTINUE") -> bool:
        """``False`` when AWS no longer knows the action (completed before, or expired)."""
        try:
            with calling("CompleteLifecycleAction"):
                self.autoscaling_base.client("autoscaling").complete_lifecycle_action(
                    AutoScalingGroupName=action.auto_scaling_group,
                    LifecycleHookName=action.hook_name,
                    LifecycleActionToken=action.token,
                    LifecycleActionResult=result,
                    InstanceId=action.instance_id,
                )
        except errors.InvalidRequest as exc:
            if NO_ACTIVE_ACTION in str(exc):
                return False
            raise
        return True

    def record_lifecycle_heartbeat(self, action: LifecycleAction) -> bool:
        """``False`` when AWS no longer knows the action: stop heartbeating."""
        try:
            with calling("RecordLifecycleActionHeartbeat"):
                self.autoscaling_base.client("autoscaling").record_lifecycle_action_heartbeat(
                    AutoScalingGroupName=action.auto_scaling_group,
                    LifecycleHookName=action.hook_name,
                    LifecycleActionToken=action.token,
                    InstanceId=action.instance_id,
                )
        except errors.InvalidRequest as exc:
            if NO_ACTIVE_ACTION in str(exc):
                return False
            raise
        return True
