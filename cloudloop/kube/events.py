"""Kubernetes Events on objects, the way controllers report what they did (``kubectl describe``)."""

from __future__ import annotations

import logging
import os
import uuid
from typing import Literal

from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.conditions import now_rfc3339
from cloudloop.kube.resources import EVENTS, ObjectRef

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
COMPONENT = "cloudloop"


def record_event(
    kube: Kube,
    ref: ObjectRef,
    *,
    type: EventType,
    reason: str,
    message: str,
    component: str = COMPONENT,
) -> None:
    """Create an Event about ``ref``; failures are logged, never raised (events are best effort)."""
    now = now_rfc3339()
    namespace = ref.namespace or "default"
    event = {
        "metadata": {"name": f"{ref.name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": f"{ref.group}/{ref.version}" if ref.group else ref.version,
            "kind": ref.kind,
            "name": ref.name,
            "namespace": ref.namespace or None,
            "uid": ref.uid or None,
        },
        "type": type,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": component, "host": os.uname().nodename},
        "reportingComponent": component,
        "reportingInstance": os.uname().nodename,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    log.log(
        logging.WARNING if type == "Warning" else logging.INFO,
        "%s %s %s: %s",
        ref.kind,
        ref.key,
        reason,
        message,
    )
    try:
        kube.create(EVENTS, event, namespace)
    except KubeError as exc:
        log.warning("could not record event %s on %s %s: %s", reason, ref.kind, ref.key, exc)
