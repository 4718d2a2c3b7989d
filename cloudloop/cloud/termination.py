"""What the node termination handler needs of a cloud: a queue of interruption notices, the
instance behind a notice, and the cloud's lifecycle actions.

A provider that has such a service (AWS: SQS, EC2, Auto Scaling) returns a
:class:`TerminationClient` from its record's ``termination`` factory; the queue processor and the
drain activities use only this protocol. Rules: blocking calls, ``CloudError`` on failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from pydantic import BaseModel


class LifecycleAction(BaseModel):
    """An ASG lifecycle action waiting for ``CompleteLifecycleAction``."""

    auto_scaling_group: str
    hook_name: str
    token: str
    instance_id: str


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


class TerminationClient(Protocol):
    """The cloud side of the node termination handler."""

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
