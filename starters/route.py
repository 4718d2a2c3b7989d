"""RouteSync: the cloud route controller as one periodic loop in the starter.

Every ``route_reconciliation_period_s``, and soon after a Node's pod CIDRs, providerID or UID
change, one pass lists the cluster's routes once, deletes blackholes and stale routes inside the
cluster CIDR, creates a route per unrouted pod CIDR to the node's instance (at most
``max_concurrent`` cloud operations at a time), and sets each Node's ``NetworkUnavailable``
condition through ``nodes/status``. A failed listing changes nothing that pass (never delete on
error); a failed creation leaves a ``FailedToCreateRoute`` Warning Event on the Node.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from cloudloop.cloud.driver import Instances, Routes
from cloudloop.cloud.errors import CloudError, CloudThrottled, NotSupported
from cloudloop.cloud.models import Route
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import Node
from cloudloop.kube.conditions import now_rfc3339
from cloudloop.kube.events import record_event
from cloudloop.kube.informer import Informer
from cloudloop.kube.resources import NODES, ObjectRef
from cloudloop.messages.kube import EventSource
from cloudloop.rules import route as rules
from starters.context import StarterContext
from starters.supervisor import run_parts

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Upstream ``maxConcurrentRouteCreations``.
MAX_CONCURRENT_ROUTE_OPERATIONS = 200
#: Attempts per route creation when the cloud throttles (upstream retries 5 times).
CREATE_ATTEMPTS = 5
#: Shortest time between two passes, so a burst of node changes costs one pass.
MIN_PASS_INTERVAL_S = 1.0


class RouteSync:
    def __init__(
        self,
        kube: Kube,
        routes: Routes,
        instances: Instances,
        informer: Informer[Node],
        *,
        cluster: str,
        cluster_cidrs: list[rules.Network],
        period_s: float,
        max_concurrent: int = MAX_CONCURRENT_ROUTE_OPERATIONS,
        min_pass_interval_s: float = MIN_PASS_INTERVAL_S,
        retry_base_s: float = 0.5,
    ) -> None:
        self.kube = kube
        self.routes = routes
        #: Maps each node's providerID to the instance its route points at.
        self.instances = instances
        self.informer = informer
        self.cluster = cluster
        self.cluster_cidrs = cluster_cidrs
        self.period_s = period_s
        self.max_concurrent = max_concurrent
        self.min_pass_interval_s = min_pass_interval_s
        self.retry_base_s = retry_base_s
        self.passes = 0  # passes that listed the routes
        self.failed_passes = 0  # passes that changed nothing because the listing failed
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    @classmethod
    def from_context(cls, context: StarterContext) -> RouteSync | None:
        ccm = context.settings.ccm
        if not ccm.configure_cloud_routes:
            log.info("route controller off: configure_cloud_routes is false")
            return None
        routes, instances = context.driver.routes, context.driver.instances
        if routes is None or instances is None:
            log.info("route controller off: %s has no routes capability", context.driver.provider)
            return None
        try:
            cidrs = rules.parse_cluster_cidrs(ccm.cluster_cidr)
        except rules.ClusterCidrError as exc:
            log.error(
                "route controller NOT started: configure_cloud_routes is on but the cluster "
                "CIDR is invalid (%s); set ccm.cluster_cidr (CLOUDLOOP_CCM__CLUSTER_CIDR) to the "
                "pod network, or turn configure_cloud_routes off",
                exc,
            )
            return None
        informer = (
            context.informers.nodes(label_selector=ccm.node_selector)
            if ccm.node_selector
            else context.informers.nodes()
        )
        return cls(
            context.kube,
            routes,
            instances,
            informer,
            cluster=context.cluster,
            cluster_cidrs=cidrs,
            period_s=ccm.route_reconciliation_period_s,
        )

    def stop(self) -> None:
        self._stopped.set()

    def wake(self) -> None:
        """Ask for a pass soon (after the minimum interval)."""
        self._wake.set()

    async def run(self) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.max_concurrent, thread_name_prefix="routes"
        )
        try:
            await run_parts(self._stopped, watch=self._watch(), passes=self._passes())
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def _passes(self) -> None:
        while not self.informer.synced.is_set():
            await asyncio.sleep(0.05)
        while True:
            started = time.monotonic()
            self._wake.clear()
            try:
                await self.reconcile()
            except Exception:
                log.exception("routes: pass failed")
            await self._wait_next(started)

    async def _wait_next(self, started: float) -> None:
        """Sleep until the period is over, a node change asks for a pass, or ``stop``."""
        stopped = asyncio.create_task(self._stopped.wait())
        woken = asyncio.create_task(self._wake.wait())
        try:
            remaining = self.period_s - (time.monotonic() - started)
            await asyncio.wait(
                {stopped, woken}, timeout=max(0.0, remaining), return_when=asyncio.FIRST_COMPLETED
            )
            if woken.done() and not stopped.done():
                delay = self.min_pass_interval_s - (time.monotonic() - started)
                if delay > 0:
                    await asyncio.wait({stopped}, timeout=delay)
        finally:
            stopped.cancel()
            woken.cancel()

    async def _watch(self) -> None:
        """Wake the loop when something routing depends on changes on a Node."""
        seen: dict[str, tuple[str, str, tuple[str, ...]]] = {}
        async for event in self.informer.events():
            name = event.key
            if event.type == "DELETED":
                if seen.pop(name, None) is not None:
                    self.wake()
                continue
            fingerprint = rules.route_fingerprint(event.object)
            if seen.get(name) != fingerprint:
                seen[name] = fingerprint
                if self.informer.synced.is_set():
                    self.wake()

    # -- one pass --------------------------------------------------------------------------
    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None:
            return await asyncio.to_thread(fn, *args)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args))

    def node_target(self, node: Node) -> rules.NodeTarget:
        meta = node.get("metadata") or {}
        provider_id = str((node.get("spec") or {}).get("providerID") or "")
        instance_id = ""
        if provider_id:
            try:
                instance_id = self.instances.instance_id_from_provider_id(provider_id)
            except CloudError as exc:
                log.debug("routes: node %s: no instance: %s", meta.get("name"), exc)
        return rules.NodeTarget(
            name=str(meta["name"]),
            uid=str(meta.get("uid", "")),
            instance_id=instance_id,
            pod_cidrs=rules.pod_cidrs(node),
        )

    async def reconcile(self) -> rules.RoutePlan | None:
        """One pass; ``None`` when the routes could not be listed (nothing was changed)."""
        nodes = list(self.informer.store.values())
        try:
            routes = await self._call(self.routes.list_routes, self.cluster)
        except NotSupported as exc:  # the cloud's configuration offers no routes (upstream
            log.info("route controller off: %s", exc)  # Routes() is false): stop quietly
            self.stop()
            return None
        except CloudError as exc:
            self.failed_passes += 1
            log.warning("routes: cannot list the routes, changing nothing this pass: %s", exc)
            return None
        targets = [self.node_target(node) for node in nodes]
        plan = rules.plan_routes(self.cluster, targets, routes, self.cluster_cidrs)
        limit = asyncio.Semaphore(self.max_concurrent)
        await asyncio.gather(*(self._delete(route, limit) for route in plan.delete))
        created = await asyncio.gather(
            *(self._create(node, route, limit) for node, route in plan.create)
        )
        for (node, route), ok in zip(plan.create, created, strict=True):
            if ok:
                plan.routed[node.name][route.destination_cidr] = True
        by_name = {str(n["metadata"]["name"]): n for n in nodes}
        await asyncio.gather(
            *(
                self._set_condition(by_name[name], rules.all_routed(statuses))
                for name, statuses in plan.routed.items()
                if name in by_name
            )
        )
        self.passes += 1
        return plan

    async def _delete(self, route: Route, limit: asyncio.Semaphore) -> None:
        async with limit:
            try:
                await self._call(self.routes.delete_route, self.cluster, route)
                log.info("routes: deleted %s", route.name)
            except CloudError as exc:
                log.warning("routes: could not delete %s: %s", route.name, exc)

    async def _create(self, node: rules.NodeTarget, route: Route, limit: asyncio.Semaphore) -> bool:
        for attempt in range(CREATE_ATTEMPTS):
            try:
                async with limit:
                    await self._call(self.routes.create_route, self.cluster, route)
                log.info(
                    "routes: created %s to %s for node %s",
                    route.destination_cidr,
                    route.target_instance_id,
                    node.name,
                )
                return True
            except CloudThrottled as exc:
                if attempt + 1 < CREATE_ATTEMPTS:
                    await asyncio.sleep(self.retry_base_s * 2**attempt)
                    continue
                error: CloudError = exc
            except CloudError as exc:
                error = exc
            message = (
                f"Could not create route {node.uid} {route.destination_cidr} for node "
                f"{node.name}: {error}"
            )
            ref = ObjectRef(plural="nodes", kind="Node", name=node.name, uid=node.uid)
            await asyncio.to_thread(
                record_event,
                self.kube,
                ref,
                type="Warning",
                reason=rules.FAILED_TO_CREATE_ROUTE,
                message=message,
                component=EventSource.ROUTE,
            )
            return False
        return False

    async def _set_condition(self, node: Node, routed: bool) -> None:
        condition = rules.network_condition_patch(node, routed, now=now_rfc3339())
        if condition is None:
            return
        name = str(node["metadata"]["name"])
        try:
            await asyncio.to_thread(
                self.kube.patch,
                NODES,
                name,
                {"status": {"conditions": [condition]}},
                subresource="status",
                patch_type="strategic",
            )
        except KubeError as exc:
            if not exc.not_found:
                log.warning("routes: cannot set %s on node %s: %s", condition["type"], name, exc)
