"""SQS message bodies → interruption events: every kind and shape NTH's queue processor reads,
the ones it ignores (deleted) and malformed ones."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from cloudloop.cloud.aws.termination_events import parse_message
from cloudloop.cloud.termination import MalformedMessage
from cloudloop.messages.termination import EventKind

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
INSTANCE = "i-0633ac2b0d9769723"
TOKEN = "0befcbdb-6ecd-498a-9ff7-ae9b54447cd6"
EVENT_ID = "782d5b4c-0f6f-1fd6-9d62-ecf6aed0a470"


def eventbridge(source: str, detail_type: str, detail: dict[str, Any], **extra: Any) -> str:
    return json.dumps(
        {
            "version": "0",
            "id": EVENT_ID,
            "detail-type": detail_type,
            "source": source,
            "account": "123456789012",
            "time": "2024-05-01T11:59:58Z",
            "region": "us-east-1",
            "resources": [],
            "detail": detail,
            **extra,
        }
    )


ASG_DETAIL = {
    "LifecycleActionToken": TOKEN,
    "AutoScalingGroupName": "nodes",
    "LifecycleHookName": "nth",
    "EC2InstanceId": INSTANCE,
    "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
}
RAW_ASG = {
    "Origin": "AutoScalingGroup",
    "Destination": "EC2",
    "AccountId": "123456789012",
    "RequestId": "req-1234",
    "Service": "AWS Auto Scaling",
    "Time": "2024-05-01T11:59:58.123Z",
    **ASG_DETAIL,
}
TEST_NOTIFICATION = {
    "AccountId": "123456789012",
    "RequestId": "req-0",
    "AutoScalingGroupARN": "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:x",
    "AutoScalingGroupName": "nodes",
    "Service": "AWS Auto Scaling",
    "Event": "autoscaling:TEST_NOTIFICATION",
    "Time": "2024-05-01T11:59:58Z",
}


@pytest.mark.parametrize(
    ("body", "kind", "event_id", "instances"),
    [
        pytest.param(
            eventbridge("aws.autoscaling", "EC2 Instance-terminate Lifecycle Action", ASG_DETAIL),
            EventKind.ASG_LIFECYCLE,
            f"asg-lifecycle-term-{EVENT_ID}",
            [INSTANCE],
            id="eventbridge-asg-terminate",
        ),
        pytest.param(
            json.dumps(RAW_ASG),
            EventKind.ASG_LIFECYCLE,
            "asg-lifecycle-term-req-1234",
            [INSTANCE],
            id="raw-asg-flat",
        ),
        pytest.param(
            json.dumps({"Type": "Notification", "Message": json.dumps(RAW_ASG)}),
            EventKind.ASG_LIFECYCLE,
            "asg-lifecycle-term-req-1234",
            [INSTANCE],
            id="raw-asg-in-sns-message-string",
        ),
        pytest.param(
            json.dumps({"Message": RAW_ASG}),
            EventKind.ASG_LIFECYCLE,
            "asg-lifecycle-term-req-1234",
            [INSTANCE],
            id="raw-asg-in-message-object",
        ),
        pytest.param(
            eventbridge(
                "aws.ec2",
                "EC2 Spot Instance Interruption Warning",
                {"instance-id": INSTANCE, "instance-action": "terminate"},
            ),
            EventKind.SPOT_ITN,
            f"spot-itn-{EVENT_ID}",
            [INSTANCE],
            id="spot-interruption-warning",
        ),
        pytest.param(
            eventbridge(
                "aws.ec2", "EC2 Instance Rebalance Recommendation", {"instance-id": INSTANCE}
            ),
            EventKind.REBALANCE_RECOMMENDATION,
            f"rebalance-recommendation-{EVENT_ID}",
            [INSTANCE],
            id="rebalance-recommendation",
        ),
        *[
            pytest.param(
                eventbridge(
                    "aws.ec2",
                    "EC2 Instance State-change Notification",
                    {"instance-id": INSTANCE, "state": state},
                ),
                EventKind.STATE_CHANGE,
                f"ec2-state-change-{EVENT_ID}",
                [INSTANCE],
                id=f"state-change-{state}",
            )
            for state in ("stopping", "stopped", "shutting-down", "terminated")
        ],
        pytest.param(
            eventbridge(
                "aws.health",
                "AWS Health Event",
                {
                    "service": "EC2",
                    "eventTypeCategory": "scheduledChange",
                    "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                    "startTime": "Sat, 05 Jun 2024 15:10:09 GMT",
                    "affectedEntities": [
                        {"entityValue": INSTANCE},
                        {"entityValue": "i-0000000000000000b"},
                        {"entityValue": INSTANCE},  # listed twice: one event
                        {"entityValue": "vol-123"},  # not an instance
                    ],
                },
            ),
            EventKind.SCHEDULED_EVENT,
            f"scheduled-change-{EVENT_ID}",
            [INSTANCE, "i-0000000000000000b"],
            id="health-scheduled-change-fans-out",
        ),
    ],
)
def test_actionable_messages(
    body: str, kind: EventKind, event_id: str, instances: list[str]
) -> None:
    parsed = parse_message(body, message_id="m-1", now=NOW)
    assert parsed.ignored == ""
    assert [e.instance_id for e in parsed.events] == instances
    for event in parsed.events:
        assert event.kind == kind
        assert event.event_id == event_id
        assert event.message_id == "m-1"
        assert event.start_time.tzinfo is not None
        assert len(event.taint_value) <= 63
        assert event.taint_key.startswith("aws-node-termination-handler/")
        if kind == EventKind.ASG_LIFECYCLE:
            assert event.lifecycle is not None
            assert event.lifecycle.token == TOKEN
            assert event.lifecycle.auto_scaling_group == "nodes"
            assert event.lifecycle.hook_name == "nth"
        else:
            assert event.lifecycle is None


@pytest.mark.parametrize(
    ("extra", "cause"),
    [
        (
            {
                "Cause": "At 2024-05-01T11:59:00Z an instance was taken out of service in "
                "response to an Availability Zone rebalancing operation."
            },
            "az-rebalance",
        ),
        (
            {
                "Cause": "At 2024-05-01T11:59:00Z a user request update of AutoScalingGroup "
                "constraints to min: 0, max: 3, desired: 2 changing the desired capacity from 3 "
                "to 2. An instance was taken out of service in response to a difference between "
                "desired and actual capacity, shrinking the capacity from 3 to 2."
            },
            "scale-in",
        ),
        ({"NotificationMetadata": "cloudloop"}, ""),
        ({}, ""),
    ],
)
def test_asg_rebalance_is_told_from_scale_in(extra: dict[str, str], cause: str) -> None:
    body = eventbridge(
        "aws.autoscaling", "EC2 Instance-terminate Lifecycle Action", {**ASG_DETAIL, **extra}
    )
    [event] = parse_message(body, message_id="m", now=NOW).events
    assert event.cause == cause
    assert ("cause:" in event.description) == bool(cause)
    [raw] = parse_message(json.dumps({**RAW_ASG, **extra}), now=NOW).events
    assert raw.cause == cause


def test_event_time_and_state_are_kept() -> None:
    body = eventbridge(
        "aws.ec2",
        "EC2 Instance State-change Notification",
        {"instance-id": INSTANCE, "state": "Shutting-Down"},
    )
    (event,) = parse_message(body, now=NOW).events
    assert event.state == "shutting-down"
    assert event.start_time == datetime(2024, 5, 1, 11, 59, 58, tzinfo=UTC)
    raw = parse_message(json.dumps({**RAW_ASG, "Time": ""}), now=NOW).events[0]
    assert raw.start_time == NOW  # no time: now


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(
            json.dumps(TEST_NOTIFICATION), "test notification", id="raw-test-notification"
        ),
        pytest.param(
            json.dumps({"Message": json.dumps(TEST_NOTIFICATION)}),
            "test notification",
            id="wrapped-test-notification",
        ),
        pytest.param(
            eventbridge(
                "aws.autoscaling",
                "EC2 Instance-terminate Lifecycle Action",
                {**ASG_DETAIL, "LifecycleTransition": "autoscaling:TEST_NOTIFICATION"},
            ),
            "test notification",
            id="eventbridge-test-notification",
        ),
        pytest.param(
            json.dumps({**RAW_ASG, "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING"}),
            "launch",
            id="raw-asg-launch-hook",
        ),
        pytest.param(
            eventbridge(
                "aws.autoscaling",
                "EC2 Instance-launch Lifecycle Action",
                {**ASG_DETAIL, "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING"},
            ),
            "launch",
            id="eventbridge-asg-launch",
        ),
        pytest.param(
            eventbridge(
                "aws.ec2",
                "EC2 Instance State-change Notification",
                {"instance-id": INSTANCE, "state": "running"},
            ),
            "needs no drain",
            id="state-change-running",
        ),
        pytest.param(
            eventbridge(
                "aws.health",
                "AWS Health Event",
                {"service": "RDS", "eventTypeCategory": "scheduledChange"},
            ),
            "RDS",
            id="health-other-service",
        ),
        pytest.param(
            eventbridge(
                "aws.health",
                "AWS Health Event",
                {"service": "EC2", "eventTypeCategory": "issue", "affectedEntities": []},
            ),
            "issue",
            id="health-not-scheduled-change",
        ),
        pytest.param(
            eventbridge("aws.s3", "Object Created", {"bucket": {"name": "b"}}),
            "unsupported event source",
            id="foreign-source",
        ),
        pytest.param(
            eventbridge("aws.ec2", "EBS Snapshot Notification", {"result": "succeeded"}),
            "unsupported EC2 event",
            id="foreign-ec2-detail-type",
        ),
    ],
)
def test_ignored_messages(body: str, reason: str) -> None:
    parsed = parse_message(body, now=NOW)
    assert parsed.events == []
    assert reason in parsed.ignored


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("not json at all", id="not-json"),
        pytest.param("", id="empty-body"),
        pytest.param("[1, 2]", id="json-array"),
        pytest.param(json.dumps({"hello": "world"}), id="json-without-event"),
        pytest.param(json.dumps({"Message": "{not json"}), id="wrapped-message-not-json"),
        pytest.param(json.dumps({"Message": 42}), id="wrapped-message-not-object"),
        pytest.param(
            json.dumps({k: v for k, v in RAW_ASG.items() if k != "LifecycleActionToken"}),
            id="raw-asg-without-token",
        ),
        pytest.param(
            eventbridge(
                "aws.autoscaling",
                "EC2 Instance-terminate Lifecycle Action",
                {**ASG_DETAIL, "EC2InstanceId": "not-an-instance"},
            ),
            id="asg-bad-instance-id",
        ),
        pytest.param(
            eventbridge("aws.ec2", "EC2 Spot Instance Interruption Warning", {}),
            id="spot-without-instance",
        ),
        pytest.param(
            json.dumps(
                {
                    "detail-type": "EC2 Spot Instance Interruption Warning",
                    "source": "aws.ec2",
                    "id": "x",
                    "detail": "instance-id=i-1",
                }
            ),
            id="detail-not-object",
        ),
        pytest.param(
            eventbridge(
                "aws.ec2",
                "EC2 Spot Instance Interruption Warning",
                {"instance-id": INSTANCE},
                time="yesterday",
            ),
            id="bad-time",
        ),
        pytest.param(
            eventbridge(
                "aws.health",
                "AWS Health Event",
                {"service": "EC2", "eventTypeCategory": "scheduledChange", "affectedEntities": 3},
            ),
            id="health-entities-not-list",
        ),
    ],
)
def test_malformed_messages(body: str) -> None:
    with pytest.raises(MalformedMessage):
        parse_message(body, now=NOW)
