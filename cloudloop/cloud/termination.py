"""What the node termination handler needs of a cloud: a queue of interruption notices, the
instance behind a notice, the cloud's lifecycle actions, and a node's own metadata service.

A provider that has such a service (AWS: SQS, EC2, Auto Scaling) returns a
:class:`TerminationClient` from its record's ``termination`` factory; the queue processor and the
drain activities use only this protocol. The IMDS node agent uses only
:class:`InstanceMetadata` (the record's ``instance_metadata`` factory), which needs no
credential. Rules: blocking calls, ``CloudError`` on failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel


class LifecycleAction(BaseModel):
    """An ASG lifecycle action waiting for ``CompleteLifecycleAction``."""

    auto_scaling_group: str
    hook_name: str
    token: str
    instance_id: str


class EventKind(StrEnum):
    """Interruption kinds, named as upstream's ``monitor/types.go``."""

    ASG_LIFECYCLE = "ASG_LIFECYCLE"
    SPOT_ITN = "SPOT_ITN"
    REBALANCE_RECOMMENDATION = "REBALANCE_RECOMMENDATION"
    STATE_CHANGE = "STATE_CHANGE"
    SCHEDULED_EVENT = "SCHEDULED_EVENT"


TAINT_PREFIX = "aws-node-termination-handler/"
#: One taint key per kind (upstream's keys; state changes get their own).
TAINT_KEYS: dict[EventKind, str] = {
    EventKind.ASG_LIFECYCLE: TAINT_PREFIX + "asg-lifecycle-termination",
    EventKind.SPOT_ITN: TAINT_PREFIX + "spot-itn",
    EventKind.REBALANCE_RECOMMENDATION: TAINT_PREFIX + "rebalance-recommendation",
    EventKind.SCHEDULED_EVENT: TAINT_PREFIX + "scheduled-maintenance",
    EventKind.STATE_CHANGE: TAINT_PREFIX + "state-change",
}
#: The managed tag's key on instances (``--managed-tag``).
MANAGED_TAG = TAINT_PREFIX + "managed"
_LABEL_VALUE_MAX = 63
_NOT_LABEL_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def label_value(text: str) -> str:
    """``text`` as a valid label (and taint) value: allowed characters, at most 63 of them."""
    value = _NOT_LABEL_CHARS.sub("-", text)[:_LABEL_VALUE_MAX]
    return value.strip("-._")


class InterruptionEvent(BaseModel):
    """One interruption of one instance, parsed from one queue message or read from the
    instance metadata service."""

    event_id: str
    kind: EventKind
    instance_id: str
    #: When the interruption takes effect; the drain starts a grace period before it.
    start_time: datetime
    description: str
    #: Instance state of a state-change event (``stopping``, ``terminated``, ...).
    state: str = ""
    lifecycle: LifecycleAction | None = None
    #: Why Auto Scaling terminates it, when the message says (``az-rebalance``, ``scale-in``,
    #: ``instance-refresh``, ``health-check``); "" otherwise.
    cause: str = ""
    #: The SQS message it came from (for logs; the starter owns the message).
    message_id: str = ""

    @property
    def taint_key(self) -> str:
        return TAINT_KEYS[self.kind]

    @property
    def taint_value(self) -> str:
        return label_value(self.event_id)


class MalformedMessage(ValueError):
    """A notice (queue message, metadata answer) this handler does not understand; retrying
    will not change that."""


@dataclass(frozen=True)
class ParsedMessage:
    """What one queue message says: its interruption events, or why it needs no action."""

    events: list[InterruptionEvent] = field(default_factory=list)
    #: Why the message needs no action, when it needs none (it is deleted).
    ignored: str = ""


@dataclass(frozen=True)
class QueueMessage:
    message_id: str
    receipt_handle: str
    body: str
    receive_count: int = 1


@dataclass(frozen=True)
class InstanceInfo:
    id: str
    state: str
    provider_id: str = ""
    private_dns_name: str = ""
    launch_time: datetime | None = None
    zone: str = ""
    instance_type: str = ""
    tags: dict[str, str] = field(default_factory=dict)


class QueueSpec(BaseModel):
    """The interruption queue the product owns: its name, the rules feeding it (named
    ``<rule_prefix>-<kind>``), and the node groups whose terminations wait for a lifecycle hook."""

    queue_name: str
    rule_prefix: str
    lifecycle_hook_groups: list[str] = []
    hook_name: str = "cloudloop-nth"
    hook_heartbeat_timeout_s: int = 300
    tags: dict[str, str] = {}


class QueueInfo(BaseModel):
    url: str
    arn: str


class InstanceMetadata(Protocol):
    """A node's own view of its instance (AWS: IMDSv2), for the handler's IMDS mode."""

    def identity(self) -> InstanceInfo: ...

    def monitors(
        self, instance: InstanceInfo
    ) -> dict[str, Callable[[datetime], list[InterruptionEvent]]]: ...


class TerminationClient(Protocol):
    """The cloud side of the node termination handler."""

    def ensure_queue(self, spec: QueueSpec) -> QueueInfo: ...

    def ensure_rules(self, spec: QueueSpec, queue: QueueInfo) -> list[str]: ...

    def ensure_lifecycle_hooks(self, spec: QueueSpec) -> list[str]: ...

    def remove_queue(self, spec: QueueSpec) -> list[str]: ...

    def parse_message(self, body: str, *, message_id: str, now: datetime) -> ParsedMessage:
        """One queue message body (:class:`MalformedMessage` when it is not understood)."""
        ...

    def receive(
        self, queue_url: str, *, max_messages: int, wait_s: int, visibility_s: int
    ) -> list[QueueMessage]: ...

    def delete(self, queue_url: str, receipt_handle: str) -> None: ...

    def extend(self, queue_url: str, receipt_handle: str, visibility_s: int) -> None: ...

    def describe_instance(self, instance_id: str) -> InstanceInfo | None: ...

    def tagged_instances(self, tag_key: str) -> Iterator[InstanceInfo]: ...

    def complete_lifecycle_action(
        self, action: LifecycleAction, result: str = "CONTINUE"
    ) -> bool: ...

    def record_lifecycle_heartbeat(self, action: LifecycleAction) -> bool: ...
