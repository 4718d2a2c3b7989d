"""Events against the API server: repeats aggregate into one object, named by controller."""

from __future__ import annotations

import uuid

import pytest

from cloudloop.kube import events
from cloudloop.kube.api import Kube
from cloudloop.kube.events import record_event
from cloudloop.kube.resources import EVENTS, ObjectRef
from cloudloop.messages.kube import EventSource

pytestmark = pytest.mark.stack


def test_repeats_are_one_event_with_a_count(kube: Kube, namespace: str) -> None:
    name = f"svc-{uuid.uuid4().hex[:6]}"
    ref = ObjectRef(plural="services", kind="Service", namespace=namespace, name=name, uid="u-1")
    for _ in range(3):
        record_event(
            kube,
            ref,
            type="Warning",
            reason="SyncLoadBalancerFailed",
            message="Error syncing load balancer: throttled",
            component=EventSource.SERVICE,
        )
    events._counts.clear()  # another process (or a restart) meets the same object
    record_event(
        kube,
        ref,
        type="Warning",
        reason="SyncLoadBalancerFailed",
        message="Error syncing load balancer: throttled",
        component=EventSource.SERVICE,
    )
    record_event(
        kube, ref, type="Normal", reason="EnsuredLoadBalancer", message="Ensured load balancer"
    )
    found = kube.list(EVENTS, namespace, fieldSelector=f"involvedObject.name={name}")["items"]
    by_reason = {e["reason"]: e for e in found}
    assert len(found) == 2, found
    failed = by_reason["SyncLoadBalancerFailed"]
    assert failed["count"] == 4
    assert failed["source"]["component"] == "service-controller"
    assert failed["reportingComponent"] == "service-controller"
    assert failed["firstTimestamp"] <= failed["lastTimestamp"]
    assert by_reason["EnsuredLoadBalancer"]["count"] == 1
