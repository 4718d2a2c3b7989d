"""Kubernetes Events on objects, the way controllers report what they did (``kubectl describe``).

Each Event names its reporting controller as upstream does (``cloud-node-controller``,
``cloud-node-lifecycle-controller``, ``service-controller``, ``route-controller``, ...; see
:class:`~cloudloop.kube.models.EventSource`), in ``source.component`` and
``reportingComponent``.

Rules:
- **Aggregation** (client-go's event correlator): repeats of one Event — same controller,
  object, type, reason and message — are one object whose ``count`` and ``lastTimestamp`` grow,
  not one object per retry. The object's name is derived from those fields, so every process
  (and a restarted one) finds the same object: a create that meets it patches it instead.
- **Best effort**: recording never raises. An API server that is down, slow or refuses the write
  costs a log line; the caller's work goes on.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from typing import Literal

from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import Event
from cloudloop.kube.conditions import now_rfc3339
from cloudloop.kube.models import EventSource
from cloudloop.kube.resources import EVENTS, ObjectRef

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
COMPONENT = EventSource.PROBE

#: Aggregated Events remembered per process (name → count); older ones are read back.
_CACHE_SIZE = 4096
_counts: OrderedDict[str, int] = OrderedDict()
_lock = threading.Lock()


def event_name(ref: ObjectRef, component: str, type: str, reason: str, message: str) -> str:
    """The object name shared by every repeat of one Event."""
    key = "\x00".join(
        (component, ref.kind, ref.namespace, ref.name, ref.uid, type, reason, message)
    )
    return f"{ref.name}.{hashlib.sha256(key.encode()).hexdigest()[:16]}"[:253]


def record_event(
    kube: Kube,
    ref: ObjectRef,
    *,
    type: EventType,
    reason: str,
    message: str,
    component: str = COMPONENT,
) -> None:
    """Create (or count once more) an Event about ``ref``; never raises."""
    log.log(
        logging.WARNING if type == "Warning" else logging.INFO,
        "%s %s %s: %s",
        ref.kind,
        ref.key,
        reason,
        message,
    )
    message = message[:1024]
    namespace = ref.namespace or "default"
    name = event_name(ref, component, type, reason, message)
    try:
        _record(
            kube,
            ref,
            namespace,
            name,
            type=type,
            reason=reason,
            message=message,
            component=component,
        )
    except Exception as exc:  # best effort: a down API server costs a log line, no more
        log.warning("could not record event %s on %s %s: %s", reason, ref.kind, ref.key, exc)


def _record(
    kube: Kube,
    ref: ObjectRef,
    namespace: str,
    name: str,
    *,
    type: EventType,
    reason: str,
    message: str,
    component: str,
) -> None:
    now = now_rfc3339()
    with _lock:
        known = _counts.get(name)
    if known is not None:
        try:
            _bump(kube, namespace, name, known + 1, now)
            return
        except KubeError as exc:
            if not exc.not_found:  # expired (the Event TTL): created afresh below
                raise
    host = os.uname().nodename
    event: Event = {
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            "apiVersion": f"{ref.group}/{ref.version}" if ref.group else ref.version,
            "kind": ref.kind,
            "name": ref.name,
            "namespace": ref.namespace or None,
            "uid": ref.uid or None,
        },
        "type": type,
        "reason": reason,
        "message": message,
        "source": {"component": component, "host": host},
        "reportingComponent": component,
        "reportingInstance": host,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        kube.create(EVENTS, event, namespace)
        _remember(name, 1)
    except KubeError as exc:
        if not exc.conflict:
            raise
        # Another process (or this one before a restart) recorded it: count it once more.
        existing = kube.get(EVENTS, name, namespace) or {}
        _bump(kube, namespace, name, int(existing.get("count") or 1) + 1, now)


def _bump(kube: Kube, namespace: str, name: str, count: int, now: str) -> None:
    kube.patch(EVENTS, name, {"count": count, "lastTimestamp": now}, namespace)
    _remember(name, count)


def _remember(name: str, count: int) -> None:
    with _lock:
        _counts[name] = count
        _counts.move_to_end(name)
        while len(_counts) > _CACHE_SIZE:
            _counts.popitem(last=False)
