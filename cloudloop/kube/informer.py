"""List+watch of one resource into a local store, shared by any number of async subscribers.

The informer lists, then watches from the list's ``resourceVersion`` with bookmarks; the blocking
HTTP work runs in one thread per informer; each :meth:`Informer.events` call is a subscription
that first replays the current store as ``ADDED`` and then follows the changes, so node sync,
load balancers and routes can share one watch of Nodes.

Rules:
- ``410 Gone`` relists and reports objects that vanished meanwhile as ``DELETED``; network errors
  back off and resume.
- Stored objects are slimmed (:func:`slim`: managed fields, the last-applied annotation, a Node's
  status beyond conditions and addresses; short strings interned), or stored as a projection of
  the informer's own (``transform``, client-go's ``SetTransform``).
- After a listing of more than one page the C heap's free pages go back to the system
  (:func:`release_free_heap`; why: ``bench/README.md``, figures behind design choices).
- An informer that keeps failing to list or watch reports since when; :meth:`Informers.staleness`
  turns that into a readiness reason after ``stale_after_s``. The store is kept meanwhile, and
  the informer catches up by itself once it can list again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal

from cloudloop.heap import release_free_heap
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import BodyT, Node, Service
from cloudloop.kube.resources import NODES, SERVICES, Resource

log = logging.getLogger(__name__)

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True)
class WatchEvent(Generic[BodyT]):
    type: EventType
    object: BodyT

    @property
    def key(self) -> str:
        return object_key(self.object)


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


#: Fields no starter reads are dropped from stored objects (as client-go's
#: ``TransformStripManagedFields``, and a Node's status but for what node sync and routes read):
#: at 5,000 Nodes they are most of the store's memory.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
NODE_STATUS_KEPT = ("conditions", "addresses")
#: Strings up to this long are interned: condition types and reasons, label values, zones.
INTERN_MAX = 32


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without managed fields, ``kubectl apply``'s copy of itself and, for a Node, any
    status but its conditions and addresses; keys and short strings interned, so the thousands
    of equal ones (``type``, ``"True"``, label keys) are stored once."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(LAST_APPLIED, None)
    status = obj.get("status")
    if obj.get("kind") == "Node" and isinstance(status, dict):
        obj["status"] = {k: status[k] for k in NODE_STATUS_KEPT if k in status}
    compact: dict[str, Any] = _interned(obj)
    return compact


def _interned(value: Any) -> Any:
    if isinstance(value, dict):
        return {sys.intern(k) if isinstance(k, str) else k: _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v) for v in value]
    if isinstance(value, str) and len(value) <= INTERN_MAX:
        return sys.intern(value)
    return value


_Subscriber = tuple[asyncio.AbstractEventLoop, "asyncio.Queue[WatchEvent[BodyT] | None]"]


class Informer(Generic[BodyT]):
    """Keeps ``store`` (key → object) in sync with the API server and streams the changes.

    An informer of ``NODES`` (a ``Resource[Node]``) is an ``Informer[Node]`` and stores typed
    bodies (:mod:`cloudloop.kube.bodies`): the objects are the API's dicts as they are (after
    ``transform``), typed once where they are stored (:meth:`_apply`)."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource[BodyT],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout_s: int = 300,
        page_size: int = 500,
        resource_version: str = "",
        transform: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None,
    ) -> None:
        """``resource_version`` resumes a watch from a known version instead of listing first;
        ``transform`` is what is stored of each received object (client-go's ``SetTransform``;
        default :func:`slim`): a projection must keep ``metadata`` (name, namespace,
        resourceVersion), which keys and relists compare."""
        self.transform = transform or slim
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.selectors = {"labelSelector": label_selector, "fieldSelector": field_selector}
        self.watch_timeout_s = watch_timeout_s
        self.page_size = page_size
        self.store: dict[str, BodyT] = {}
        self.synced = threading.Event()
        self.relists = 0
        self._stop = threading.Event()
        self._resource_version = resource_version
        self._response: Any = None
        self._lock = threading.Lock()
        self._subscribers: list[_Subscriber[BodyT]] = []
        self._thread: threading.Thread | None = None
        self._failing_since: float | None = None  # monotonic; None while lists/watches work

    def stale_for(self) -> float:
        """Seconds this informer has been failing to list or watch (0 when it is fine)."""
        since = self._failing_since
        return 0.0 if since is None else time.monotonic() - since

    def dead(self) -> bool:
        """The list/watch thread ended although nobody stopped it."""
        thread = self._thread
        return thread is not None and not thread.is_alive() and not self._stop.is_set()

    def _contact(self) -> None:
        self._failing_since = None

    def _failed(self) -> None:
        if self._failing_since is None:
            self._failing_since = time.monotonic()

    def stop(self) -> None:
        """End the loop and every subscription; an open watch connection is closed at once."""
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown() if hasattr(response, "shutdown") else response.close()
        with self._lock:
            for subscriber in self._subscribers:
                _put(subscriber, None)

    def start(self) -> None:
        """Start listing and watching now (subscribing does this too)."""
        with self._lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(
                target=self._run, daemon=True, name=f"informer-{self.resource.plural}"
            )
            self._thread.start()

    async def wait_synced(self, timeout: float | None = None) -> bool:
        return await asyncio.to_thread(self.synced.wait, timeout)

    async def events(self) -> AsyncGenerator[WatchEvent[BodyT], None]:
        """Subscribe: the store as ``ADDED`` events, then every change, until :meth:`stop`."""
        subscriber: _Subscriber[BodyT] = (asyncio.get_running_loop(), asyncio.Queue())
        with self._lock:
            for obj in self.store.values():
                subscriber[1].put_nowait(WatchEvent("ADDED", obj))
            self._subscribers.append(subscriber)
            if self._stop.is_set():
                subscriber[1].put_nowait(None)
            self._start_locked()
        try:
            while True:
                event = await subscriber[1].get()
                if event is None:
                    return
                yield event
        finally:
            with self._lock:
                if subscriber in self._subscribers:
                    self._subscribers.remove(subscriber)

    # -- the blocking side -----------------------------------------------------------------
    def _apply(self, kind: EventType, key: str, received: Mapping[str, Any]) -> None:
        """Update the store and tell every subscriber, atomically with respect to subscribing.

        Where a received object becomes a ``BodyT`` (:meth:`Resource.body`: a type, not a
        check)."""
        obj = self.resource.body(received)
        with self._lock:
            if kind == "DELETED":
                self.store.pop(key, None)
            else:
                self.store[key] = obj
            event = WatchEvent(kind, obj)
            for subscriber in self._subscribers:
                _put(subscriber, event)

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                if not self._resource_version:
                    self._relist()
                self._watch()
                backoff = 0.5
            except KubeError as exc:
                if self._stop.is_set():
                    break
                if exc.gone:
                    log.info("watch of %s expired (410 Gone); relisting", self.resource.plural)
                    self._resource_version = ""
                    continue
                self._failed()
                log.warning(
                    "watch of %s failed: %s; retrying in %.1fs", self.resource.plural, exc, backoff
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30)
            except Exception as exc:  # network errors, protocol errors
                if self._stop.is_set():
                    break
                self._failed()
                log.warning(
                    "watch of %s interrupted: %s; retrying in %.1fs",
                    self.resource.plural,
                    exc,
                    backoff,
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30)

    def _relist(self) -> None:
        fresh: dict[str, Mapping[str, Any]] = {}
        token: str | None = None
        pages = 0
        while True:
            page = self.kube.list(
                self.resource.untyped,
                self.namespace,
                limit=self.page_size,
                **{"continue": token},
                **self.selectors,
            )
            items = page.pop("items", None) or []
            items.reverse()  # popped from the end, in the server's order
            while items:  # slimmed one by one: the page's full objects go as they are read
                item = items.pop()
                item.setdefault("apiVersion", self.resource.api_version)
                item.setdefault("kind", self.resource.kind)
                fresh[object_key(item)] = self.transform(item)
            self._contact()
            pages += 1
            token = page.get("metadata", {}).get("continue")
            if not token:
                self._resource_version = page.get("metadata", {}).get("resourceVersion", "")
                break
        if self.synced.is_set():
            self.relists += 1
        for key, old in list(self.store.items()):
            if key not in fresh:
                self._apply("DELETED", key, old)
        for key, obj in fresh.items():
            previous = self.store.get(key)
            if previous is None:
                self._apply("ADDED", key, obj)
            elif previous["metadata"].get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"
            ):
                self._apply("MODIFIED", key, obj)
        del fresh
        if pages > 1:
            release_free_heap()
        self.synced.set()

    def _watch(self) -> None:
        query = {
            "resourceVersion": self._resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.watch_timeout_s,
            **self.selectors,
        }

        def opened(response: Any) -> None:
            self._response = response
            if 200 <= int(getattr(response, "status", 0) or 0) < 300:
                self._contact()

        started = time.monotonic()
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
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(kind, object_key(obj), self.transform(obj))
        log.debug(
            "watch of %s closed after %.0fs", self.resource.plural, time.monotonic() - started
        )


def _put(subscriber: _Subscriber[BodyT], event: WatchEvent[BodyT] | None) -> None:
    loop, queue = subscriber
    with contextlib.suppress(RuntimeError):  # that subscriber's loop has closed
        loop.call_soon_threadsafe(queue.put_nowait, event)


class Informers:
    """One informer per (resource, namespace, selector), shared by every starter of a process."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._informers: dict[tuple[Resource[Any], str | None, str | None], Informer[Any]] = {}

    def get(
        self,
        resource: Resource[BodyT],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> Informer[BodyT]:
        """The one informer of ``resource`` (and namespace and selector), of its body type: the
        shared informer of an equal resource is the same (``Resource`` equality ignores body
        types, and each resource constant names one)."""
        key = (resource, namespace, label_selector)
        informer = self._informers.get(key)
        if informer is None:
            informer = Informer(
                self.kube, resource, namespace=namespace, label_selector=label_selector
            )
            self._informers[key] = informer
        return informer

    def nodes(self, *, label_selector: str | None = None) -> Informer[Node]:
        """The Node informer (the one :meth:`get` gives for ``NODES``)."""
        return self.get(NODES, label_selector=label_selector)

    def services(self, *, namespace: str | None = None) -> Informer[Service]:
        """The Service informer (the one :meth:`get` gives for ``SERVICES``)."""
        return self.get(SERVICES, namespace=namespace)

    def stop(self) -> None:
        for informer in self._informers.values():
            informer.stop()

    def staleness(self, stale_after_s: float = 60.0) -> str | None:
        """A readiness reason when an informer is dead or failing for ``stale_after_s``."""
        reasons = []
        for informer in list(self._informers.values()):
            if informer.dead():
                reasons.append(f"{informer.resource.plural}: list/watch thread ended")
            elif informer.stale_for() > stale_after_s:
                reasons.append(
                    f"{informer.resource.plural}: no list or watch for {informer.stale_for():.0f}s"
                )
        return "; ".join(reasons) or None
