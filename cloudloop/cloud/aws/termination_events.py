"""SQS message bodies → interruption events, as aws-node-termination-handler's queue processor
reads them. These are AWS's own formats, so they live in the AWS package; the starter reaches
them through ``AwsTermination.parse_message`` (the cloud-neutral ``TerminationClient``).

A body is either an EventBridge event (``{version, id, detail-type, source, time, detail, ...}``)
or, when it has no ``detail-type``, a raw Auto Scaling notification, flat or wrapped in an SNS
envelope (``{"Message": "<json>"}``). Five kinds are acted on: ASG terminate lifecycle actions,
Spot interruption warnings, rebalance recommendations, instance state changes (``stopping``,
``stopped``, ``shutting-down``, ``terminated``) and AWS Health scheduled changes for EC2 (one event
per affected instance). Everything else is *ignored* (the message is deleted: test
notifications, launch hooks, other states and sources) or *malformed* (:class:`MalformedMessage`).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from cloudloop.cloud.termination import (
    EventKind,
    InterruptionEvent,
    LifecycleAction,
    MalformedMessage,
    ParsedMessage,
)

TEST_NOTIFICATION = "autoscaling:TEST_NOTIFICATION"
TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"
LAUNCHING = "autoscaling:EC2_INSTANCE_LAUNCHING"
DETAIL_ASG_TERMINATE = "EC2 Instance-terminate Lifecycle Action"
DETAIL_ASG_LAUNCH = "EC2 Instance-launch Lifecycle Action"
DETAIL_SPOT_ITN = "EC2 Spot Instance Interruption Warning"
DETAIL_REBALANCE = "EC2 Instance Rebalance Recommendation"
DETAIL_STATE_CHANGE = "EC2 Instance State-change Notification"
DETAIL_HEALTH = "AWS Health Event"
#: Instance states that start a drain (upstream's ``instanceStatesToDrain``).
DRAIN_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})
_INSTANCE_ID = re.compile(r"^i-[0-9A-Za-z]+$")


def parse_message(body: str, *, message_id: str = "", now: datetime) -> ParsedMessage:
    """Parse one SQS message body; ``now`` stands in for a missing event time."""
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MalformedMessage(f"body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise MalformedMessage(f"body is a JSON {type(doc).__name__}, not an object")
    if doc.get("detail-type"):
        return _eventbridge(doc, message_id=message_id, now=now)
    return _raw_autoscaling(_unwrap(doc), message_id=message_id, now=now)


def _unwrap(doc: dict[str, Any]) -> dict[str, Any]:
    """An SNS-wrapped notification carries the ASG notification as a JSON string in Message."""
    if "Message" not in doc:
        return doc
    inner = doc["Message"]
    if isinstance(inner, str):
        try:
            inner = json.loads(inner)
        except json.JSONDecodeError as exc:
            raise MalformedMessage(f"Message is not JSON: {exc}") from None
    if not isinstance(inner, dict):
        raise MalformedMessage("Message is not a JSON object")
    return inner


def _time(value: Any, now: datetime) -> datetime:
    if not value:
        return now
    if not isinstance(value, str):
        raise MalformedMessage(f"time {value!r} is not a string")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise MalformedMessage(f"time {value!r} is not ISO 8601") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _instance_id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _INSTANCE_ID.match(value):
        raise MalformedMessage(f"{where}: {value!r} is not an instance ID")
    return value


def _text(source: dict[str, Any], key: str, where: str) -> str:
    value = source.get(key)
    if not isinstance(value, str) or not value:
        raise MalformedMessage(f"{where}: {key} is missing")
    return value


def _lifecycle(detail: dict[str, Any], where: str) -> LifecycleAction:
    return LifecycleAction(
        auto_scaling_group=_text(detail, "AutoScalingGroupName", where),
        hook_name=_text(detail, "LifecycleHookName", where),
        token=_text(detail, "LifecycleActionToken", where),
        instance_id=_instance_id(detail.get("EC2InstanceId"), where),
    )


#: Why Auto Scaling terminates, from the activity cause AWS writes ("... in response to an
#: Availability Zone rebalancing operation", "... a difference between desired and actual
#: capacity, shrinking the capacity from 3 to 2", "... user request ..."), where a message has it.
ASG_CAUSES = (
    ("az-rebalance", ("rebalanc", "availability zone")),
    ("scale-in", ("shrinking the capacity", "desired and actual capacity", "scale in", "scale-in")),
    ("instance-refresh", ("instance refresh",)),
    ("health-check", ("health check", "unhealthy")),
)
_CAUSE_TEXT = {
    "az-rebalance": "Availability Zone rebalance",
    "scale-in": "scale-in",
    "instance-refresh": "instance refresh",
    "health-check": "failed health check",
}


def asg_cause(*sources: dict[str, Any]) -> str:
    """``az-rebalance``, ``scale-in``, ``instance-refresh``, ``health-check`` or "" (unknown:
    lifecycle hook messages carry no cause unless ``Cause``/``Description``/``StatusMessage`` or
    the hook's ``NotificationMetadata`` says it)."""
    texts = [
        str(source.get(key, ""))
        for source in sources
        for key in ("Cause", "Description", "StatusMessage", "NotificationMetadata")
    ]
    text = " ".join(texts).lower()
    for cause, needles in ASG_CAUSES:
        if any(needle in text for needle in needles):
            return cause
    return ""


def _asg_event(
    action: LifecycleAction, source_id: str, when: datetime, message_id: str, cause: str = ""
) -> ParsedMessage:
    why = f" (cause: {_CAUSE_TEXT[cause]})" if cause else ""
    return ParsedMessage(
        events=[
            InterruptionEvent(
                event_id=f"asg-lifecycle-term-{source_id}",
                kind=EventKind.ASG_LIFECYCLE,
                instance_id=action.instance_id,
                start_time=when,
                description=(
                    "ASG Lifecycle Termination event received. "
                    f"Instance will be interrupted at {when.isoformat()}{why}"
                ),
                lifecycle=action,
                cause=cause,
                message_id=message_id,
            )
        ]
    )


def _raw_autoscaling(doc: dict[str, Any], *, message_id: str, now: datetime) -> ParsedMessage:
    where = "ASG notification"
    if TEST_NOTIFICATION in (doc.get("Event"), doc.get("LifecycleTransition")):
        return ParsedMessage(ignored="ASG test notification")
    transition = doc.get("LifecycleTransition")
    if transition == LAUNCHING:
        return ParsedMessage(ignored="ASG launch lifecycle actions are not handled")
    if transition != TERMINATING:
        raise MalformedMessage(
            f"neither an EventBridge event nor an ASG terminate notification "
            f"(LifecycleTransition {transition!r})"
        )
    action = _lifecycle(doc, where)
    source_id = str(doc.get("RequestId") or action.token)
    when = _time(doc.get("Time"), now)
    return _asg_event(action, source_id, when, message_id, asg_cause(doc))


def _eventbridge(doc: dict[str, Any], *, message_id: str, now: datetime) -> ParsedMessage:
    source = doc.get("source")
    detail_type = doc["detail-type"]
    detail = doc.get("detail")
    if not isinstance(detail, dict):
        raise MalformedMessage(f"{detail_type}: detail is not a JSON object")
    source_id = str(doc.get("id") or message_id)
    if not source_id:
        raise MalformedMessage(f"{detail_type}: no event id")
    when = _time(doc.get("time"), now)
    where = str(detail_type)

    def event(
        kind: EventKind, prefix: str, instance: str, description: str, **extra: Any
    ) -> InterruptionEvent:
        return InterruptionEvent(
            event_id=f"{prefix}-{source_id}",
            kind=kind,
            instance_id=instance,
            start_time=when,
            description=description,
            message_id=message_id,
            **extra,
        )

    if source == "aws.autoscaling":
        if TEST_NOTIFICATION in (detail.get("Event"), detail.get("LifecycleTransition")):
            return ParsedMessage(ignored="ASG test notification")
        if detail_type == DETAIL_ASG_LAUNCH or detail.get("LifecycleTransition") == LAUNCHING:
            return ParsedMessage(ignored="ASG launch lifecycle actions are not handled")
        if detail_type != DETAIL_ASG_TERMINATE:
            return ParsedMessage(ignored=f"unsupported autoscaling event {detail_type!r}")
        action = _lifecycle(detail, where)
        return _asg_event(action, source_id, when, message_id, asg_cause(detail, doc))

    if source == "aws.ec2":
        if detail_type == DETAIL_SPOT_ITN:
            instance = _instance_id(detail.get("instance-id"), where)
            action = detail.get("instance-action", "terminate")
            return ParsedMessage(
                events=[
                    event(
                        EventKind.SPOT_ITN,
                        "spot-itn",
                        instance,
                        f"Spot Interruption notice for instance {instance} ({action}) "
                        f"received at {when.isoformat()}",
                    )
                ]
            )
        if detail_type == DETAIL_REBALANCE:
            instance = _instance_id(detail.get("instance-id"), where)
            return ParsedMessage(
                events=[
                    event(
                        EventKind.REBALANCE_RECOMMENDATION,
                        "rebalance-recommendation",
                        instance,
                        f"Rebalance recommendation for instance {instance} "
                        f"received at {when.isoformat()}",
                    )
                ]
            )
        if detail_type == DETAIL_STATE_CHANGE:
            instance = _instance_id(detail.get("instance-id"), where)
            state = str(detail.get("state", "")).lower()
            if state not in DRAIN_STATES:
                return ParsedMessage(ignored=f"instance state {state!r} needs no drain")
            return ParsedMessage(
                events=[
                    event(
                        EventKind.STATE_CHANGE,
                        "ec2-state-change",
                        instance,
                        f"EC2 State Change event received. Instance {instance} went into "
                        f"{state} at {when.isoformat()}",
                        state=state,
                    )
                ]
            )
        return ParsedMessage(ignored=f"unsupported EC2 event {detail_type!r}")

    if source == "aws.health" and detail_type == DETAIL_HEALTH:
        if detail.get("service") != "EC2":
            return ParsedMessage(ignored=f"AWS Health events of {detail.get('service')!r}")
        if detail.get("eventTypeCategory") != "scheduledChange":
            return ParsedMessage(ignored=f"AWS Health category {detail.get('eventTypeCategory')!r}")
        entities = detail.get("affectedEntities")
        if not isinstance(entities, list):
            raise MalformedMessage(f"{where}: affectedEntities is not a list")
        instances = [
            e["entityValue"]
            for e in entities
            if isinstance(e, dict) and _INSTANCE_ID.match(str(e.get("entityValue", "")))
        ]
        if not instances:
            return ParsedMessage(ignored="AWS Health event affects no instance")
        scheduled = detail.get("startTime", "")
        return ParsedMessage(
            events=[
                event(
                    EventKind.SCHEDULED_EVENT,
                    "scheduled-change",
                    instance,
                    f"AWS Health scheduled change event received. Instance {instance} will be "
                    f"interrupted at {scheduled or when.isoformat()}",
                )
                for instance in dict.fromkeys(instances)
            ]
        )

    return ParsedMessage(ignored=f"unsupported event source {source!r} ({detail_type!r})")
