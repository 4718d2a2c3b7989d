"""The informer against the real API server, including a real 410 Gone after etcd compaction."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from typing import Any

import pytest

from cloudloop.kube.api import Kube
from cloudloop.kube.informer import Informer, WatchEvent
from cloudloop.kube.resources import Resource
from devstack.local import LocalStack

pytestmark = pytest.mark.stack

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
#: Only the test's own ConfigMaps (the controller-manager adds kube-root-ca.crt everywhere).
LABEL = "cloudloop-test"


def configmap(kube: Kube, namespace: str, name: str, value: str = "1") -> dict[str, Any]:
    return kube.create(
        CONFIGMAPS,
        {
            "metadata": {"name": name, "namespace": namespace, "labels": {LABEL: "yes"}},
            "data": {"v": value},
        },
        namespace,
    )


async def next_events(events: Any, count: int) -> list[WatchEvent]:
    return [await asyncio.wait_for(anext(events), timeout=15) for _ in range(count)]


async def test_watch_sees_add_modify_delete(kube: Kube, namespace: str) -> None:
    informer = Informer(kube, CONFIGMAPS, namespace=namespace, label_selector=LABEL)
    events = informer.events()
    try:
        await asyncio.to_thread(configmap, kube, namespace, "a")
        assert [(e.type, e.key) for e in await next_events(events, 1)] == [
            ("ADDED", f"{namespace}/a")
        ]
        await asyncio.to_thread(kube.patch, CONFIGMAPS, "a", {"data": {"v": "2"}}, namespace)
        (modified,) = await next_events(events, 1)
        assert modified.type == "MODIFIED" and modified.object["data"]["v"] == "2"
        await asyncio.to_thread(kube.delete, CONFIGMAPS, "a", namespace)
        (deleted,) = await next_events(events, 1)
        assert deleted.type == "DELETED"
        assert informer.store == {}
    finally:
        informer.stop()
        await events.aclose()


def compact_etcd(stack: LocalStack) -> None:
    """Compact etcd to its current revision through its HTTP/JSON gateway."""
    args = " ".join(stack.clusters["main"].process("etcd").argv)
    found = re.search(r"--listen-client-urls=(\S+)", args)
    assert found, args
    url = found.group(1)

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(f"{url}{path}", data=json.dumps(body).encode())
        with urllib.request.urlopen(request) as response:
            return dict(json.loads(response.read()))

    revision = int(post("/v3/kv/range", {"key": "Lw=="})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": revision, "physical": True})


async def test_relists_after_real_410(stack: LocalStack, kube: Kube, namespace: str) -> None:
    """Resuming from a version etcd has compacted away gets 410 Gone: the informer relists."""
    await asyncio.to_thread(configmap, kube, namespace, "before")
    await asyncio.to_thread(configmap, kube, namespace, "after")
    await asyncio.to_thread(compact_etcd, stack)

    informer = Informer(
        kube, CONFIGMAPS, namespace=namespace, label_selector=LABEL, resource_version="1"
    )
    events = informer.events()
    try:
        seen = await next_events(events, 2)
        assert {e.key for e in seen} == {f"{namespace}/before", f"{namespace}/after"}
        assert await asyncio.to_thread(informer.synced.wait, 5)  # it listed: 410 on the old version
        assert all(e.type == "ADDED" for e in seen)
    finally:
        informer.stop()
        await events.aclose()
