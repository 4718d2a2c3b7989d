"""Cloud-neutral rules of the node termination handler: when a queue message whose drain failed
is given up on instead of left for redelivery, and what the IMDS node agent's notices on a Node
say (:func:`read_node_notices`). Parsing a cloud's messages is the cloud's own: AWS's
SQS/EventBridge bodies are read in :mod:`cloudloop.cloud.aws.termination_events`.

Rules of the notices: a Node's notices are about that Node only. The annotation is read as the
typed :class:`~cloudloop.messages.termination.NodeNotices`; anything else (not JSON, a field
missing, a notice about another instance than the one recorded, an instance the Node's
``spec.providerID`` does not name) is :class:`InvalidNotices`: the starter records a Warning and
drains nothing for it, and never another Node than the one the annotation is on.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from cloudloop.errortext import describe_validation
from cloudloop.messages.termination import EventKind, InterruptionEvent, NodeNotices

#: Drain failures that a redelivery of the same message would meet again (pods that may not be
#: evicted, an eviction refused for good): the message is given up on at once.
PERMANENT_DRAIN_FAILURES = frozenset({"DrainRefused", "EvictionFailed"})


def give_up_reason(failure_type: str, receive_count: int, max_receive_count: int) -> str | None:
    """Why a message whose drain failed is deleted instead of left for redelivery, or ``None``.

    ``max_receive_count`` 0 leaves every failed message to the queue (its redrive policy)."""
    if failure_type in PERMANENT_DRAIN_FAILURES:
        return "permanent"
    if max_receive_count and receive_count >= max_receive_count:
        return "max-receives"
    return None


def notice_key(event: InterruptionEvent) -> str:
    """One notice per kind and instance incarnation (Spot, rebalance, ASG), one per event ID for
    scheduled events: upstream's IMDS IDs of the first three hash their answer, which may change
    between polls."""
    if event.kind == EventKind.SCHEDULED_EVENT:
        return f"{event.kind}/{event.event_id}"
    return str(event.kind)


class InvalidNotices(ValueError):
    """A Node's notices annotation that is not a valid account of that Node's instance."""


def read_node_notices(text: str, provider_id: str = "") -> NodeNotices:
    """The notices of a Node's annotation ``text`` (its ``spec.providerID`` given, when set)."""
    try:
        notices = NodeNotices.model_validate(json.loads(text))
    except ValidationError as exc:  # field paths and kinds, never the annotation's values
        raise InvalidNotices(f"not a notices document: {describe_validation(exc)[:300]}") from None
    except json.JSONDecodeError as exc:
        raise InvalidNotices(
            f"not a notices document: not JSON (line {exc.lineno}, column {exc.colno})"
        ) from None
    others = sorted({n.instance_id for n in notices.notices} - {notices.instance_id})
    if others:
        raise InvalidNotices(
            f"notices about instance(s) {', '.join(others)[:200]} on the Node of "
            f"{notices.instance_id}"
        )
    if provider_id and provider_id.rsplit("/", 1)[-1] != notices.instance_id:
        raise InvalidNotices(
            f"instance {notices.instance_id} is not the Node's (providerID {provider_id[:200]})"
        )
    return notices
