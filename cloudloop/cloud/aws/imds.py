"""The EC2 instance metadata service (IMDSv2) as aws-node-termination-handler's IMDS mode reads
it: the instance's identity, and four interruption notices.

Paths and event IDs follow upstream (``pkg/ec2metadata``, ``pkg/monitor/*``):
``spot/instance-action`` → ``SPOT_ITN``, ``events/maintenance/scheduled`` → ``SCHEDULED_EVENT``,
``events/recommendations/rebalance`` → ``REBALANCE_RECOMMENDATION``,
``autoscaling/target-lifecycle-state`` ``Terminated`` → ``ASG_LIFECYCLE`` (no lifecycle token).
Each path's IDs and start times, and the departure:
docs/decisions/0050-termination-handler-as-workflows.md.

Rules:
- The ASG notice's ID hashes the instance and its launch (``pendingTime``), so one termination
  is one event.
- IMDSv2 only, token first (``PUT /latest/api/token``, kept until shortly before its TTL; a 401
  refreshes it once).
- Every HTTP call has ``timeout_s``: a metadata service that hangs is an :class:`ImdsError`, never
  a stuck poll.
- An answer that is not what the path promises (bad JSON, bad time, wrong shape) is
  :class:`~cloudloop.cloud.termination.MalformedMessage`. Nothing retries here: the monitor polls
  again.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cloudloop.cloud.termination import (
    EventKind,
    InstanceInfo,
    InterruptionEvent,
    MalformedMessage,
)

TOKEN_PATH = "/latest/api/token"
TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
TOKEN_TTL_S = 21600
#: A token is renewed this long before it expires (upstream: 15 s).
TOKEN_REFRESH_S = 60
IDENTITY_PATH = "/latest/dynamic/instance-identity/document"
SPOT_ITN_PATH = "/latest/meta-data/spot/instance-action"
SCHEDULED_PATH = "/latest/meta-data/events/maintenance/scheduled"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
ASG_STATE_PATH = "/latest/meta-data/autoscaling/target-lifecycle-state"
SCHEDULED_TIME_FORMAT = "%d %b %Y %H:%M:%S GMT"
SCHEDULED_DONE = frozenset({"canceled", "completed"})
#: Monitor names (upstream's monitor kinds), used in metrics and Events.
SPOT_ITN_MONITOR = "SPOT_ITN_MONITOR"
SCHEDULED_EVENT_MONITOR = "SCHEDULED_EVENT_MONITOR"
REBALANCE_RECOMMENDATION_MONITOR = "REBALANCE_RECOMMENDATION_MONITOR"
ASG_LIFECYCLE_MONITOR = "ASG_LIFECYCLE_MONITOR"


class ImdsError(Exception):
    """The metadata service did not answer (timeout, refused, 5xx, token refused)."""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _rfc3339(value: Any, where: str) -> datetime:
    if not isinstance(value, str) or not value:
        raise MalformedMessage(f"{where}: time {value!r} is missing")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise MalformedMessage(f"{where}: time {value!r} is not RFC 3339") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedMessage(f"{where}: not JSON: {exc}") from None


# -- pure parsing ------------------------------------------------------------------------------
def parse_identity(text: str) -> InstanceInfo:
    """The instance identity document: ID, launch (``pendingTime``), zone, type."""
    doc = _json(text, "identity document")
    if not isinstance(doc, dict) or not str(doc.get("instanceId", "")).startswith("i-"):
        raise MalformedMessage("identity document: no instanceId")
    zone = str(doc.get("availabilityZone") or "")
    pending = doc.get("pendingTime")
    return InstanceInfo(
        id=str(doc["instanceId"]),
        state="running",
        provider_id=f"aws:///{zone}/{doc['instanceId']}",
        launch_time=_rfc3339(pending, "identity document") if pending else None,
        zone=zone,
        instance_type=str(doc.get("instanceType") or ""),
    )


def parse_spot_itn(text: str, instance: InstanceInfo) -> InterruptionEvent:
    doc = _json(text, "spot/instance-action")
    if not isinstance(doc, dict):
        raise MalformedMessage("spot/instance-action: not a JSON object")
    action, when = str(doc.get("action", "")), doc.get("time")
    start = _rfc3339(when, "spot/instance-action")
    return InterruptionEvent(
        event_id=f"spot-itn-{_sha(f'&{{{action} {when}}}')}",
        kind=EventKind.SPOT_ITN,
        instance_id=instance.id,
        start_time=start,
        description=f"Spot ITN received. Instance will be interrupted at {when}",
    )


def parse_rebalance(text: str, instance: InstanceInfo) -> InterruptionEvent:
    doc = _json(text, "events/recommendations/rebalance")
    if not isinstance(doc, dict):
        raise MalformedMessage("events/recommendations/rebalance: not a JSON object")
    notice = doc.get("noticeTime")
    start = _rfc3339(notice, "events/recommendations/rebalance")
    return InterruptionEvent(
        event_id=f"rebalance-recommendation-{_sha(f'&{{{notice}}}')}",
        kind=EventKind.REBALANCE_RECOMMENDATION,
        instance_id=instance.id,
        start_time=start,
        description=f"Rebalance recommendation received. Instance will be cordoned at {notice}",
    )


def parse_scheduled(text: str, instance: InstanceInfo, now: datetime) -> list[InterruptionEvent]:
    doc = _json(text, "events/maintenance/scheduled")
    if not isinstance(doc, list):
        raise MalformedMessage("events/maintenance/scheduled: not a JSON list")
    events = []
    for item in doc:
        if not isinstance(item, dict) or not item.get("EventId"):
            raise MalformedMessage("events/maintenance/scheduled: an event without EventId")
        not_before = str(item.get("NotBefore", ""))
        try:
            datetime.strptime(not_before, SCHEDULED_TIME_FORMAT)
        except ValueError:
            raise MalformedMessage(
                f"events/maintenance/scheduled: NotBefore {not_before!r} is not a time"
            ) from None
        if str(item.get("State", "")) in SCHEDULED_DONE:
            continue
        events.append(
            InterruptionEvent(
                event_id=str(item["EventId"]),
                kind=EventKind.SCHEDULED_EVENT,
                instance_id=instance.id,
                start_time=now,
                description=(
                    f"{item.get('Code', '')} will occur between {not_before} and "
                    f"{item.get('NotAfter', '')} because {item.get('Description', '')}"
                ),
                state=str(item.get("State", "")),
            )
        )
    return events


def parse_asg_state(text: str, instance: InstanceInfo, now: datetime) -> InterruptionEvent | None:
    state = text.strip()
    if state != "Terminated":
        return None  # InService, Standby, ...; empty without a hook
    launch = instance.launch_time.isoformat() if instance.launch_time else ""
    return InterruptionEvent(
        event_id=f"target-lifecycle-state-terminated-{_sha(f'{state}:{instance.id}:{launch}')}",
        kind=EventKind.ASG_LIFECYCLE,
        instance_id=instance.id,
        start_time=now,
        description="ASG target lifecycle state received. Instance will be terminated",
    )


# -- the service -------------------------------------------------------------------------------
class Imds:
    """An IMDSv2 client (thread-safe, blocking; every request bounded by ``timeout_s``)."""

    def __init__(self, endpoint: str, *, timeout_s: float = 2.0) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.timeout_s = timeout_s
        self._token = ""
        self._expires = 0.0
        self._lock = threading.Lock()

    def _request(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
        request = urllib.request.Request(
            self.endpoint + path,
            method=method,
            headers=headers,
            data=b"" if method == "PUT" else None,
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                return int(answer.status), answer.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return int(exc.code), ""
        except (OSError, ValueError) as exc:  # URLError, timeouts, resets, bad status lines
            raise ImdsError(f"{method} {path}: {exc}") from None

    def token(self, *, renew: bool = False) -> str:
        with self._lock:
            if renew or not self._token or time.monotonic() >= self._expires:
                status, text = self._request(
                    "PUT", TOKEN_PATH, {TOKEN_TTL_HEADER: str(TOKEN_TTL_S)}
                )
                if status != 200 or not text:
                    raise ImdsError(f"PUT {TOKEN_PATH}: HTTP {status}")
                self._token = text.strip()
                self._expires = time.monotonic() + TOKEN_TTL_S - TOKEN_REFRESH_S
            return self._token

    def get(self, path: str) -> str | None:
        """The body at ``path``; ``None`` on 404 (no such notice)."""
        status, text = self._request("GET", path, {TOKEN_HEADER: self.token()})
        if status == 401:  # the token expired early (or the service restarted): once more
            status, text = self._request("GET", path, {TOKEN_HEADER: self.token(renew=True)})
        if status == 404:
            return None
        if status != 200:
            raise ImdsError(f"GET {path}: HTTP {status}")
        return text

    def identity(self) -> InstanceInfo:
        text = self.get(IDENTITY_PATH)
        if text is None:
            raise MalformedMessage("identity document: not found")
        return parse_identity(text)

    def monitors(
        self, instance: InstanceInfo
    ) -> dict[str, Callable[[datetime], list[InterruptionEvent]]]:
        """One poll function per upstream monitor (each may raise :class:`ImdsError` or
        :class:`MalformedMessage` on its own)."""

        def spot(now: datetime) -> list[InterruptionEvent]:
            text = self.get(SPOT_ITN_PATH)
            return [] if text is None else [parse_spot_itn(text, instance)]

        def scheduled(now: datetime) -> list[InterruptionEvent]:
            text = self.get(SCHEDULED_PATH)
            return [] if text is None else parse_scheduled(text, instance, now)

        def rebalance(now: datetime) -> list[InterruptionEvent]:
            text = self.get(REBALANCE_PATH)
            return [] if text is None else [parse_rebalance(text, instance)]

        def asg(now: datetime) -> list[InterruptionEvent]:
            text = self.get(ASG_STATE_PATH)
            event = None if text is None else parse_asg_state(text, instance, now)
            return [] if event is None else [event]

        return {
            SPOT_ITN_MONITOR: spot,
            SCHEDULED_EVENT_MONITOR: scheduled,
            REBALANCE_RECOMMENDATION_MONITOR: rebalance,
            ASG_LIFECYCLE_MONITOR: asg,
        }
