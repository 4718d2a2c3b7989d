"""List+watch of one resource into a local store, delivered as an async stream of events.

The informer lists, then watches from the list's ``resourceVersion`` with bookmarks; when the
server answers ``410 Gone`` (the version fell out of etcd's window) it relists and reports
objects that vanished meanwhile as ``DELETED``. Network errors back off and resume. The blocking
HTTP work runs in a thread; consumers ``async for`` over :meth:`Informer.events`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Literal

from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.resources import Resource

log = logging.getLogger(__name__)

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True)
class WatchEvent:
    type: EventType
    object: dict[str, Any]

    @property
    def key(self) -> str:
        return object_key(self.object)


def object_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


class Informer:
    """Keeps ``store`` (key → object) in sync with the API server and streams the changes."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout_s: int = 300,
        page_size: int = 500,
        resource_version: str = "",
    ) -> None:
        """``resource_version`` resumes a watch from a known version instead of listing first."""
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.selectors = {"labelSelector": label_selector, "fieldSelector": field_selector}
        self.watch_timeout_s = watch_timeout_s
        self.page_size = page_size
        self.store: dict[str, dict[str, Any]] = {}
        self.synced = threading.Event()
        self.relists = 0
        self._stop = threading.Event()
        self._resource_version = resource_version
        self._response: Any = None

    def stop(self) -> None:
        """End the loop; an open watch connection is closed so the thread exits promptly."""
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown() if hasattr(response, "shutdown") else response.close()

    async def events(self) -> AsyncGenerator[WatchEvent, None]:
        """Run the list/watch loop in a thread and yield its events until :meth:`stop`."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()

        def emit(event: WatchEvent | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed while the thread wound down
                loop.call_soon_threadsafe(queue.put_nowait, event)

        thread = threading.Thread(
            target=self._run, args=(emit,), daemon=True, name=f"informer-{self.resource.plural}"
        )
        thread.start()
        try:
            while True:
                event = await queue.get()
                if event is None:
                    return
                yield event
        finally:
            self._stop.set()

    # -- the blocking side -----------------------------------------------------------------
    def _run(self, emit: Any) -> None:
        backoff = 0.5
        try:
            while not self._stop.is_set():
                try:
                    if not self._resource_version:
                        self._relist(emit)
                    self._watch(emit)
                    backoff = 0.5
                except KubeError as exc:
                    if exc.gone:
                        log.info("watch of %s expired (410 Gone); relisting", self.resource.plural)
                        self._resource_version = ""
                        continue
                    log.warning(
                        "watch of %s failed: %s; retrying in %.1fs",
                        self.resource.plural,
                        exc,
                        backoff,
                    )
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 30)
                except Exception as exc:  # network errors, protocol errors
                    if self._stop.is_set():
                        break
                    log.warning(
                        "watch of %s interrupted: %s; retrying in %.1fs",
                        self.resource.plural,
                        exc,
                        backoff,
                    )
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 30)
        finally:
            emit(None)

    def _relist(self, emit: Any) -> None:
        fresh: dict[str, dict[str, Any]] = {}
        token: str | None = None
        while True:
            page = self.kube.list(
                self.resource,
                self.namespace,
                limit=self.page_size,
                **{"continue": token},
                **self.selectors,
            )
            for item in page.get("items", []):
                item.setdefault("apiVersion", self.resource.api_version)
                item.setdefault("kind", self.resource.kind)
                fresh[object_key(item)] = item
            token = page.get("metadata", {}).get("continue")
            if not token:
                self._resource_version = page.get("metadata", {}).get("resourceVersion", "")
                break
        if self.synced.is_set():
            self.relists += 1
        for key, old in list(self.store.items()):
            if key not in fresh:
                del self.store[key]
                emit(WatchEvent("DELETED", old))
        for key, obj in fresh.items():
            previous = self.store.get(key)
            self.store[key] = obj
            if previous is None:
                emit(WatchEvent("ADDED", obj))
            elif previous.get("metadata", {}).get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"
            ):
                emit(WatchEvent("MODIFIED", obj))
        self.synced.set()

    def _watch(self, emit: Any) -> None:
        query = {
            "resourceVersion": self._resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.watch_timeout_s,
            **self.selectors,
        }
        started = time.monotonic()

        def opened(response: Any) -> None:
            self._response = response

        for event in self.kube.stream(
            self.resource.path(self.namespace),
            query,
            read_timeout_s=self.watch_timeout_s + 30,
            opened=opened,
        ):
            if self._stop.is_set():
                return
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                code = int(obj.get("code", 0) or 0)
                raise KubeError(code, str(obj.get("reason", "")), obj)
            version = obj.get("metadata", {}).get("resourceVersion")
            if version:
                self._resource_version = version
            if kind == "BOOKMARK":
                continue
            key = object_key(obj)
            if kind == "DELETED":
                self.store.pop(key, None)
                emit(WatchEvent("DELETED", obj))
            elif kind in ("ADDED", "MODIFIED"):
                self.store[key] = obj
                emit(WatchEvent(kind, obj))
        log.debug(
            "watch of %s closed after %.0fs", self.resource.plural, time.monotonic() - started
        )
