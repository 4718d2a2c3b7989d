"""NodeSync: the cloud node controllers as three loops in the starter, with batched cloud calls.

- **init**: tainted Nodes are collected for a short window, looked up in one batched call, then
  written (addresses, labels, providerID, the taint removed) and given a ``Synced`` Event.
- **lifecycle** (``--node-monitor-period`` after the last pass ended): NotReady nodes looked up
  in one batched call; gone instances' Nodes deleted, stopped ones tainted.
- **address refresh** (``--node-status-update-frequency``): one batched lookup of all
  initialized nodes. Why batched, why two writes, why fail closed:
  docs/decisions/0059-node-sync-in-the-starter-batched.md.

Rules:
- Two writes a Node (the status PATCH with the addresses first, then the PUT with providerID and
  the taint removed), at most ``--concurrent-node-syncs`` at once; a conflict reads again; the
  Event is recorded outside the write slots.
- Failures keep the taint and retry with per-node backoff (one ``FailedToInitializeNode`` Warning
  per failure streak).
- A node is deleted only when the cloud answered without error that its instance does not exist;
  any cloud error keeps every node, and a malformed providerID is never looked up (one
  ``InvalidProviderID`` Warning).
- Addresses are patched only when they changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cloudloop.cloud.driver import Instances
from cloudloop.cloud.errors import CloudError
from cloudloop.cloud.models import Instance
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import JsonPatchOperation, Node
from cloudloop.kube.events import record_event
from cloudloop.kube.informer import Informer
from cloudloop.kube.resources import NODES, ObjectRef
from cloudloop.kube.workqueue import WorkQueue
from cloudloop.messages.kube import EventSource
from cloudloop.rules import node as rules
from cloudloop.settings import CcmSettings
from starters.context import StarterContext
from starters.supervisor import run_parts

log = logging.getLogger(__name__)

#: Longest a burst of new nodes waits for more to join its batch.
INIT_BATCH_MAX_S = 1.0
RETRY_MIN_S, RETRY_MAX_S = 1.0, 300.0
CONFLICT_RETRIES = 20
#: Threads recording the ``Synced`` Events of initialized nodes (at most concurrent_node_syncs).
EVENT_THREADS = 2


@dataclass
class Lookup:
    """One batched cloud answer for a set of nodes: node name → instance (None: missing)."""

    instances: dict[str, Instance | None] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)  # names the cloud gave no answer for
    #: name → what the cloud answered when it could not decide (a miss, two matches), or why
    #: the call failed: the Warning says this, not a guess.
    why: dict[str, str] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)  # name → why its providerID is bad


class NodeSync:
    def __init__(
        self, kube: Kube, instances: Instances, informer: Informer[Node], settings: CcmSettings
    ) -> None:
        self.kube = kube
        self.instances = instances
        self.informer = informer
        self.settings = settings
        self.queue = WorkQueue("node-init", backoff_min_s=RETRY_MIN_S, backoff_max_s=RETRY_MAX_S)
        self._warned_invalid: dict[str, str] = {}  # node name → the providerID warned about
        self._logged_invalid: dict[str, str] = {}  # node name → the providerID logged about
        self._stopped = asyncio.Event()
        self.passes = 0
        # Node writes of every init batch: at most concurrent_node_syncs at once, in threads of
        # their own (not the loop's default executor, which the lookups and the loops share).
        syncs = max(1, settings.concurrent_node_syncs)
        self._writes = asyncio.Semaphore(syncs)
        self._writer = ThreadPoolExecutor(syncs, thread_name_prefix="node-init")
        # The Synced Events, after each node's writes, off the write slots (EVENT_THREADS).
        self._eventer = ThreadPoolExecutor(
            max(1, min(syncs, EVENT_THREADS)), thread_name_prefix="node-init-event"
        )

    @classmethod
    def from_context(cls, context: StarterContext) -> NodeSync | None:
        instances = context.driver.instances
        if instances is None:
            log.info("node sync off: %s has no instances capability", context.driver.provider)
            return None
        ccm = context.settings.ccm
        informer = (
            context.informers.nodes(label_selector=ccm.node_selector)
            if ccm.node_selector
            else context.informers.nodes()
        )
        return cls(context.kube, instances, informer, ccm)

    def stop(self) -> None:
        self.queue.shut_down()
        self._stopped.set()
        self._writer.shutdown(wait=False, cancel_futures=True)
        self._eventer.shutdown(wait=False, cancel_futures=True)

    async def run(self) -> None:
        await run_parts(
            self._stopped,
            watch=self._watch(),
            init=self._init_worker(),
            lifecycle=self._every(self.settings.node_monitor_period_s, self.lifecycle_pass),
            addresses=self._every(
                self.settings.node_status_update_frequency_s, self.refresh_addresses
            ),
        )

    async def _every(self, period_s: float, job: Any) -> None:
        """``job``, then a whole period's wait, as upstream's ``wait.UntilWithContext`` (sliding:
        the period starts when the run ends), so a pass slowed by a busy cloud is not followed
        at once by the next one."""
        await self.informer.wait_synced()
        while True:
            try:
                await job()
            except Exception:
                log.exception("node sync: %s failed", job.__name__)
            await asyncio.sleep(period_s)

    # -- lookups ---------------------------------------------------------------------------
    def lookup(self, nodes: Iterable[Node]) -> Lookup:
        """One batched call by providerID and one by name (each chunked); errors fail closed."""
        result = Lookup()
        by_id: dict[str, str] = {}
        by_name: list[str] = []
        for node in nodes:
            name = node["metadata"]["name"]
            pid = rules.provider_id(node)
            if not pid:
                by_name.append(name)
                continue
            try:
                by_id[self.instances.instance_id_from_provider_id(pid)] = name
            except CloudError as exc:  # not a providerID of this cloud: never act on it
                # Said once per node and value (the lifecycle pass runs every few seconds).
                level = logging.DEBUG if self._logged_invalid.get(name) == pid else logging.WARNING
                self._logged_invalid[name] = pid
                log.log(level, "node %s: %s", name, exc)
                result.failed.add(name)
                result.invalid[name] = str(exc)
        if by_id:
            try:
                listing = self.instances.list_instances(list(by_id))
                for instance_id, name in by_id.items():
                    if instance_id in listing.undecided:
                        result.failed.add(name)
                        result.why[name] = listing.why.get(instance_id, "")
                    else:
                        result.instances[name] = listing.found.get(instance_id)
            except CloudError as exc:
                log.warning("instance lookup by ID failed, acting on no node: %s", exc)
                result.failed.update(by_id.values())
                result.why.update(dict.fromkeys(by_id.values(), f"the cloud did not answer: {exc}"))
        if by_name:
            try:
                listing = self.instances.find_instances_by_name(by_name)
                for name in by_name:
                    if name in listing.undecided:
                        result.failed.add(name)
                        result.why[name] = listing.why.get(name, "")
                    else:
                        result.instances[name] = listing.found.get(name)
            except CloudError as exc:
                log.warning("instance lookup by name failed, acting on no node: %s", exc)
                result.failed.update(by_name)
                result.why.update(dict.fromkeys(by_name, f"the cloud did not answer: {exc}"))
        return result

    # -- init ------------------------------------------------------------------------------
    async def _watch(self) -> None:
        async for event in self.informer.events():
            name = event.object["metadata"]["name"]
            if event.type != "DELETED" and rules.needs_init(event.object):
                if not self.queue.tracked(name):  # a node backing off waits for its retry
                    self.queue.add(name)
            else:
                self.queue.discard(name)

    async def _init_worker(self) -> None:
        """Batches are looked up one after another; a batch's kube writes run while the next
        batch is looked up (at most ``concurrent_node_syncs`` writes at once, over all batches),
        so a burst's cloud calls and kube writes overlap."""
        writing: set[asyncio.Task[None]] = set()
        try:
            while True:
                names = await self.queue.get_batch(
                    window_s=self.settings.init_batch_window_s, max_wait_s=INIT_BATCH_MAX_S
                )
                try:
                    nodes, lookup = await self._look_up_batch(names)
                except BaseException:
                    for name in names:
                        self.queue.done(name)
                    raise
                task = asyncio.create_task(self._write_batch(names, nodes, lookup))
                writing.add(task)
                task.add_done_callback(writing.discard)
        finally:
            for task in writing:
                task.cancel()
            await asyncio.gather(*writing, return_exceptions=True)

    async def initialize(self, names: list[str]) -> None:
        """Look the named Nodes up and initialize them (one batch, start to end)."""
        nodes, lookup = await self._look_up_batch(names)
        await self._write_batch([], nodes, lookup)

    async def _look_up_batch(self, names: list[str]) -> tuple[list[Node], Lookup]:
        nodes = [self.informer.store[n] for n in names if n in self.informer.store]
        nodes = [n for n in nodes if rules.needs_init(n)]
        for name in set(names) - {n["metadata"]["name"] for n in nodes}:
            self.queue.discard(name)
        if not nodes:
            return [], Lookup()
        return nodes, await asyncio.to_thread(self.lookup, nodes)

    async def _write_batch(self, names: list[str], nodes: list[Node], lookup: Lookup) -> None:
        """Initialize ``nodes`` from ``lookup``; then ``names`` are done in the queue."""
        loop = asyncio.get_running_loop()

        async def one(node: Node) -> None:
            name = node["metadata"]["name"]
            async with self._writes:
                try:
                    if name in lookup.invalid:
                        raise rules.InitError(f"invalid providerID: {lookup.invalid[name]}")
                    if name in lookup.failed:
                        raise rules.InitError(
                            lookup.why.get(name) or "the cloud could not decide about this node"
                        )
                    instance = lookup.instances.get(name)
                    if instance is None:
                        raise rules.InitError("no instance found in the cloud for this node")
                    if instance.init_error:
                        raise rules.InitError(instance.init_error)
                    await loop.run_in_executor(
                        self._writer, self._initialize_node, name, instance, node
                    )
                    self.queue.forget(name)
                except (rules.InitError, KubeError, CloudError) as exc:
                    await self._retry_later(node, str(exc))
                except Exception as exc:  # a bug must not end the loop: retry, loudly
                    log.exception("node %s: initialization failed unexpectedly", name)
                    await self._retry_later(node, f"{type(exc).__name__}: {exc}")

        try:
            await asyncio.gather(*(one(n) for n in nodes))
        finally:
            for name in names:
                self.queue.done(name)

    async def _retry_later(self, node: Node, reason: str) -> None:
        name = node["metadata"]["name"]
        delay = self.queue.retry(name)
        log.warning("node %s not initialized: %s; retrying in %.0fs", name, reason, delay)
        if self.queue.failures(name) == 1:  # one Event per failure streak, not per retry
            await asyncio.to_thread(
                record_event,
                self.kube,
                ObjectRef.of(NODES, node),
                type="Warning",
                reason="FailedToInitializeNode",
                message=f"cloudloop: {reason}",
                component=EventSource.NODE,
            )

    def _initialize_node(self, name: str, instance: Instance, cached: Node | None = None) -> None:
        """Addresses first, then labels + providerID + taint removal in one Update.

        The first try starts from the informer's copy (``cached``) and the status patch's
        answer, so a node costs two writes and its Event, no read; a conflict (the copy was
        stale) reads the node and tries again.
        """
        for _ in range(CONFLICT_RETRIES):
            node = copy.deepcopy(cached) if cached is not None else self._get(name)
            cached = None
            if node is None or not rules.needs_init(node):
                return
            addresses = rules.node_addresses(node, instance.addresses)
            try:
                if rules.addresses_changed(node, addresses):
                    node = self.kube.patch(
                        NODES, name, {"status": {"addresses": addresses}}, subresource="status"
                    )
                    if not rules.needs_init(node):  # the copy was stale: done already
                        return
                labels = rules.node_labels(instance, node["metadata"].get("labels") or {})
                node["metadata"]["labels"] = {**(node["metadata"].get("labels") or {}), **labels}
                node["spec"] = rules.initialized_spec(node, instance)
                self.kube.request("PUT", NODES.path(None, name), body=node)
            except KubeError as exc:
                if exc.not_found:  # deleted meanwhile: nothing to initialize
                    return
                if exc.conflict:
                    time.sleep(0.05)
                    continue
                raise
            with contextlib.suppress(RuntimeError):  # stopping: the Event is best effort
                self._eventer.submit(self._synced, ObjectRef.of(NODES, node))
            return
        raise rules.InitError("conflicts kept the node from being updated")

    def _get(self, name: str) -> Node | None:
        """The Node as the API server has it now."""
        return self.kube.get(NODES, name)

    def _synced(self, ref: ObjectRef) -> None:
        record_event(
            self.kube,
            ref,
            type="Normal",
            reason="Synced",
            message="Node synced successfully",
            component=EventSource.NODE,
        )

    # -- lifecycle -------------------------------------------------------------------------
    async def lifecycle_pass(self) -> None:
        self.passes += 1
        nodes = list(self.informer.store.values())
        for node in nodes:
            if rules.ready_status(node) == "True" and rules.has_taint(node, rules.SHUTDOWN_TAINT):
                await asyncio.to_thread(self._set_shutdown_taint, node, False)
        not_ready = [
            n
            for n in nodes
            if rules.ready_status(n) != "True"
            and not rules.needs_init(n)
            and not n["metadata"].get("deletionTimestamp")
        ]
        if not not_ready:
            return
        lookup = await asyncio.to_thread(self.lookup, not_ready)
        for node in not_ready:
            name = node["metadata"]["name"]
            if name in lookup.invalid:
                await asyncio.to_thread(self._warn_invalid, node, lookup.invalid[name])
                continue
            verdict = rules.lifecycle_verdict(
                node,
                lookup.instances.get(name),
                looked_up=name not in lookup.failed and name in lookup.instances,
            )
            if verdict is rules.Verdict.DELETE:
                await asyncio.to_thread(self._delete_node, node)
            elif verdict is rules.Verdict.TAINT_SHUTDOWN:
                await asyncio.to_thread(self._set_shutdown_taint, node, True)

    def _warn_invalid(self, node: Node, reason: str) -> None:
        """One Warning per node and providerID value (kept, never deleted)."""
        name, provider_id = node["metadata"]["name"], rules.provider_id(node)
        if self._warned_invalid.get(name) == provider_id:
            return
        self._warned_invalid[name] = provider_id
        record_event(
            self.kube,
            ObjectRef.of(NODES, node),
            type="Warning",
            reason="InvalidProviderID",
            message=f"Node {name} is kept: its providerID names no instance ({reason})",
            component=EventSource.NODE_LIFECYCLE,
        )

    def _delete_node(self, node: Node) -> None:
        name = node["metadata"]["name"]
        ref = ObjectRef.of(NODES, node)
        record_event(
            self.kube,
            ref,
            type="Normal",
            reason="DeletingNode",
            message=f"Deleting node {name} because it does not exist in the cloud provider",
            component=EventSource.NODE_LIFECYCLE,
        )
        try:
            self.kube.request(
                "DELETE",
                NODES.path(None, name),
                body={"preconditions": {"uid": node["metadata"]["uid"]}},
            )
        except KubeError as exc:
            if not exc.not_found:
                record_event(
                    self.kube,
                    ref,
                    type="Warning",
                    reason="DeletingNodeFailed",
                    message=f"Error deleting node {name}: {exc}",
                    component=EventSource.NODE_LIFECYCLE,
                )

    def _set_shutdown_taint(self, node: Node, present: bool) -> None:
        name = node["metadata"]["name"]
        for _ in range(CONFLICT_RETRIES):
            current = self._get(name)
            if current is None or rules.has_taint(current, rules.SHUTDOWN_TAINT) == present:
                return
            kept = [t for t in rules.taints(current) if t.get("key") != rules.SHUTDOWN_TAINT]
            if present:
                kept.append({"key": rules.SHUTDOWN_TAINT, "effect": "NoSchedule"})
            patch: list[JsonPatchOperation] = [
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": current["metadata"]["resourceVersion"],
                },
                {"op": "add", "path": "/spec/taints", "value": kept},
            ]
            try:
                self.kube.patch(NODES, name, patch, patch_type="json")
                return
            except KubeError as exc:
                if exc.status not in (409, 422):
                    raise
                time.sleep(0.05)

    # -- addresses -------------------------------------------------------------------------
    async def refresh_addresses(self) -> None:
        nodes = [
            n
            for n in self.informer.store.values()
            if not rules.needs_init(n) and rules.provider_id(n)
        ]
        if not nodes:
            return
        lookup = await asyncio.to_thread(self.lookup, nodes)
        limit = asyncio.Semaphore(
            max(
                1,
                self.settings.concurrent_node_status_updates or self.settings.concurrent_node_syncs,
            )
        )

        async def one(node: Node) -> None:
            instance = lookup.instances.get(node["metadata"]["name"])
            if instance is None or not instance.addresses:
                return
            try:
                addresses = rules.node_addresses(node, instance.addresses)
            except rules.InitError as exc:
                log.warning("node %s: %s", node["metadata"]["name"], exc)
                return
            if rules.addresses_changed(node, addresses):
                async with limit:
                    await asyncio.to_thread(
                        self.kube.patch,
                        NODES,
                        node["metadata"]["name"],
                        {"status": {"addresses": addresses}},
                        subresource="status",
                    )

        await asyncio.gather(*(one(n) for n in nodes))
