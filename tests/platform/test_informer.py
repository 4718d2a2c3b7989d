"""Informer semantics with a scripted API server: 410 Gone relists and reports vanished objects."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cloudloop.kube.api import KubeError
from cloudloop.kube.bodies import BodyT
from cloudloop.kube.informer import LAST_APPLIED, Informer, WatchEvent, slim
from cloudloop.kube.resources import NODES


def node(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}}


class ScriptedKube:
    """Lists return the next scripted page set; watches play scripted events, then 410."""

    def __init__(
        self, lists: list[list[dict[str, Any]]], watches: list[list[dict[str, Any]]]
    ) -> None:
        self.lists = lists
        self.watches = watches
        self.list_calls = 0
        self.watch_versions: list[str] = []

    def list(self, resource: Any, namespace: Any = None, **query: Any) -> dict[str, Any]:
        items = self.lists[min(self.list_calls, len(self.lists) - 1)]
        self.list_calls += 1
        return {"items": items, "metadata": {"resourceVersion": str(100 * self.list_calls)}}

    def stream(
        self,
        path: str,
        query: dict[str, Any],
        *,
        read_timeout_s: float,
        opened: Callable[[Any], None] | None = None,
    ) -> Iterator[dict[str, Any]]:
        self.watch_versions.append(query["resourceVersion"])
        if not self.watches:
            raise ConnectionError("no more scripted watches")
        events = self.watches.pop(0)
        yield from events
        raise KubeError(410, "Gone", {"reason": "Expired", "code": 410})


async def collect(informer: Informer[BodyT], count: int) -> list[WatchEvent[BodyT]]:
    seen: list[WatchEvent[BodyT]] = []
    async for event in informer.events():
        seen.append(event)
        if len(seen) == count:
            informer.stop()
            break
    return seen


async def test_relist_after_410_reports_deleted_and_new() -> None:
    kube = ScriptedKube(
        lists=[[node("a", "1"), node("b", "2")], [node("b", "2"), node("c", "7")]],
        watches=[
            [
                {"type": "MODIFIED", "object": node("a", "5")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}},
            ]
        ],
    )
    informer = Informer(kube, NODES)  # type: ignore[arg-type]
    events = await asyncio.wait_for(collect(informer, 5), timeout=10)
    assert [(e.type, e.key) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),  # first list
        ("MODIFIED", "a"),  # watch (the bookmark is not an event)
        ("DELETED", "a"),
        ("ADDED", "c"),  # relist after 410: a vanished, c is new, b unchanged
    ]
    assert kube.watch_versions[0] == "100"  # watched from the list's resourceVersion
    assert informer.relists == 1
    assert set(informer.store) == {"b", "c"}


async def test_resume_from_version_skips_initial_list() -> None:
    kube = ScriptedKube(
        lists=[[node("x", "1")]], watches=[[{"type": "ADDED", "object": node("y", "9")}]]
    )
    informer = Informer(kube, NODES, resource_version="42")  # type: ignore[arg-type]
    events = await asyncio.wait_for(collect(informer, 1), timeout=10)
    assert [(e.type, e.key) for e in events] == [("ADDED", "y")]
    assert kube.watch_versions[0] == "42"  # the first request was the watch, not a list


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            {
                "kind": "Node",
                "metadata": {"name": "n", "managedFields": [{"manager": "kubelet"}]},
                "status": {
                    "images": [{"names": ["a"]}],
                    "nodeInfo": {"kubeletVersion": "v1.31.0"},
                    "addresses": [{"type": "Hostname"}],
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
            {
                "kind": "Node",
                "metadata": {"name": "n"},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "addresses": [{"type": "Hostname"}],
                },
            },
            id="node",
        ),
        pytest.param(
            {
                "kind": "Service",
                "metadata": {"name": "s", "annotations": {LAST_APPLIED: "{}", "a": "b"}},
                "status": {"images": "kept: not a Node"},
            },
            {
                "kind": "Service",
                "metadata": {"name": "s", "annotations": {"a": "b"}},
                "status": {"images": "kept: not a Node"},
            },
            id="service",
        ),
        pytest.param({"metadata": None}, {"metadata": None}, id="malformed-untouched"),
    ],
)
def test_stored_objects_drop_what_no_starter_reads(
    obj: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert slim(obj) == expected


def test_equal_short_strings_are_stored_once() -> None:
    first, second = (
        slim({"kind": "Node", "metadata": {"labels": {"zone": "".join(["us-east-", "1a"])}}})
        for _ in range(2)
    )
    assert first["metadata"]["labels"]["zone"] is second["metadata"]["labels"]["zone"]


class PagedKube(ScriptedKube):
    """Lists answer ``pages`` pages of one Node each, linked by ``continue`` tokens."""

    def __init__(self, pages: int) -> None:
        super().__init__(lists=[[]], watches=[])
        self.pages = pages

    def list(self, resource: Any, namespace: Any = None, **query: Any) -> dict[str, Any]:
        index = int(query.get("continue") or 0)
        following = {"continue": str(index + 1)} if index + 1 < self.pages else {}
        return {
            "items": [node(f"n{index}", str(index + 1))],
            "metadata": {"resourceVersion": "100", **following},
        }


@pytest.mark.parametrize(("pages", "trims"), [(1, 0), (3, 1)], ids=["one-page", "paged"])
async def test_a_paged_listing_returns_the_free_heap(
    pages: int, trims: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cloudloop.kube import informer as module

    released: list[None] = []
    monkeypatch.setattr(module, "release_free_heap", lambda: released.append(None))
    informer = Informer(PagedKube(pages), NODES, page_size=1)  # type: ignore[arg-type]

    events = await asyncio.wait_for(collect(informer, pages), timeout=10)

    assert [e.key for e in events] == [f"n{i}" for i in range(pages)]
    assert len(released) == trims


def test_the_heap_calls_are_safe_to_make() -> None:
    from cloudloop.heap import cap_malloc_arenas, pin_mmap_threshold, release_free_heap

    cap_malloc_arenas(8)  # glibc: mallopt(M_ARENA_MAX); another C library: nothing
    pin_mmap_threshold()  # glibc: mallopt(M_MMAP_THRESHOLD, 128 KiB)
    release_free_heap()  # glibc: malloc_trim(0)
    assert len(bytearray(1 << 20)) == 1 << 20  # a block past the threshold: mapped, as before


async def test_a_transform_is_what_the_store_keeps_of_listed_and_watched_objects() -> None:
    def full(name: str, rv: str) -> dict[str, Any]:
        return {**node(name, rv), "spec": {"providerID": f"aws:///z/{name}"}, "status": {"a": 1}}

    kube = ScriptedKube(
        lists=[[full("a", "1")], [full("a", "1")]],
        watches=[[{"type": "MODIFIED", "object": full("a", "2")}]],
    )

    def ids(obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return {"metadata": {"name": meta["name"], "resourceVersion": meta["resourceVersion"]}}

    informer = Informer(kube, NODES, transform=ids)  # type: ignore[arg-type]
    events = await asyncio.wait_for(collect(informer, 3), timeout=10)

    # list, watch, relist after 410: every stored object is the projection; its
    # resourceVersion is what the relist compares (2 listed again as 1: a change).
    assert [(e.type, e.object) for e in events] == [
        ("ADDED", ids(full("a", "1"))),
        ("MODIFIED", ids(full("a", "2"))),
        ("MODIFIED", ids(full("a", "1"))),
    ]
    assert informer.store == {"a": ids(full("a", "1"))}
