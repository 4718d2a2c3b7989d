"""A cloud without a load-balancer API (zVirt, vSphere): every ``type: LoadBalancer`` Service is
told so by one Warning Event, on the real kube-apiserver; nothing else is written to it."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from cloudloop.cloud.zvirt import PROVIDER as ZVIRT
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Event
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import EVENTS, SERVICES
from starters.loadbalancer import UnservedLoadBalancers
from tests.helpers import eventually


def service(name: str, kind: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"type": kind, "ports": [{"port": 80, "targetPort": 8080}], **spec},
    }


def warnings(kube: Kube, namespace: str, name: str) -> list[Event]:
    found = kube.list(EVENTS, namespace, fieldSelector=f"involvedObject.name={name}")["items"]
    return [e for e in found if e["reason"] == "UnsupportedLoadBalancer"]


async def test_each_load_balancer_service_is_told_once(kube: Kube, namespace: str) -> None:
    informers = Informers(kube)
    notice = UnservedLoadBalancers(
        kube,
        informers.services(namespace=namespace),
        provider="zvirt",
        hint=ZVIRT.load_balancer_hint,
    )
    task = asyncio.create_task(notice.run())
    try:
        kube.create(SERVICES, service("web", "LoadBalancer"), namespace)
        kube.create(SERVICES, service("inner", "ClusterIP"), namespace)
        kube.create(
            SERVICES,
            service("other", "LoadBalancer", loadBalancerClass="example.com/lb"),
            namespace,
        )
        [event] = await eventually(
            lambda: warnings(kube, namespace, "web"), what="the Warning on web"
        )
        assert event["type"] == "Warning"
        assert "zvirt has no load-balancer API" in event["message"]
        assert "metallb" in event["message"]
        # A change of the Service does not repeat the Warning.
        kube.patch(SERVICES, "web", {"metadata": {"labels": {"touched": "yes"}}}, namespace)
        await asyncio.sleep(1.0)
        [again] = warnings(kube, namespace, "web")
        assert again.get("count", 1) == 1
        assert not warnings(kube, namespace, "inner")
        assert not warnings(kube, namespace, "other")  # another controller serves it
        web = kube.get(SERVICES, "web", namespace) or {}
        assert not web["metadata"].get("finalizers")
        assert not (web.get("status") or {}).get("loadBalancer", {}).get("ingress")
    finally:
        notice.stop()
        informers.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await task
