"""ServiceStarter: Services of ``type: LoadBalancer`` and the Node set → load-balancer workflows.

For every Service that wants a load balancer (``type: LoadBalancer``, no ``loadBalancerClass``)
the starter adds the cleanup finalizer first, then sends the desired state (ports, annotations,
the LB node set) to the Service's :class:`LoadBalancerWorkflow` (ID ``lb/<namespace>/<name>/<uid>``)
by signal-with-start, ``USE_EXISTING``. Why the desired state is trimmed so:
docs/decisions/0047-one-load-balancer-workflow-per-service.md.

Rules:
- A signal is sent only when the desired state differs from what was sent last; a Service being
  deleted, or no longer wanting an LB, gets ``tear_down`` (the workflow removes the finalizer).
- Work is keyed by Service (one sync per key at a time, ``concurrent_service_syncs`` at once,
  failures retried with per-key backoff). Nothing is sent before both informers have listed.
- The desired state carries only what the cloud reads; a Node change that alters that view
  re-syncs every LB Service (changes within 0.5 s together); any other change sends nothing.
- A node set larger than ``inline_nodes_max_bytes`` is written to a ConfigMap first
  (:mod:`cloudloop.kube.nodesets`) and the signal carries the digest of the Service's projection.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy

from cloudloop import searchattrs
from cloudloop.cloud.driver import Capability, LoadBalancers
from cloudloop.cloud.registry import provider_for
from cloudloop.kube import nodesets
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Node, Service
from cloudloop.kube.events import record_event
from cloudloop.kube.finalizers import add_finalizer
from cloudloop.kube.informer import Informer
from cloudloop.kube.resources import SERVICES, ObjectRef
from cloudloop.kube.workqueue import WorkQueue
from cloudloop.messages.kube import EventSource
from cloudloop.messages.loadbalancer import (
    LB_FINALIZER,
    ApplyRequest,
    DesiredLoadBalancer,
    LoadBalancerNode,
    LoadBalancerSignal,
    LoadBalancerState,
    LoadBalancerTarget,
    NodeSetRef,
    workflow_id,
)
from cloudloop.rules import loadbalancer as rules
from cloudloop.settings import Domain
from cloudloop.temporal import signal_with_start
from starters.context import StarterContext
from starters.supervisor import run_parts
from workflows.loadbalancer import LoadBalancerWorkflow

log = logging.getLogger(__name__)

RETRY_MIN_S, RETRY_MAX_S = 0.5, 60.0
#: Node changes this close together are one re-sync of the LB Services (a burst of 5,000
#: Nodes is one pass, not 5,000).
NODE_BATCH_S = 0.5
#: A node set whose canonical JSON is larger goes by reference (≈ 250 nodes).
INLINE_NODES_MAX_BYTES = 16 * 1024


class Projection:
    """One label projection of the LB node set, with its canonical size and digest (computed
    once per node-set change, not once per Service)."""

    def __init__(self, nodes: list[LoadBalancerNode]) -> None:
        self.nodes = nodes
        canonical = nodesets.canonical(nodes)
        self.size = len(canonical)
        self.digest = hashlib.sha256(canonical).hexdigest()


class ServiceStarter:
    def __init__(
        self,
        kube: Kube,
        client: Client,
        *,
        services: Informer[Service],
        nodes: Informer[Node],
        task_queue: str,
        cluster: str,
        provider: str,
        concurrency: int = 1,
        history_limit: int = 0,
        resync_period_s: float = 600.0,
        load_balancers: LoadBalancers | None = None,
        node_set_namespace: str = "kube-system",
        node_set_name: str = "",
        inline_nodes_max_bytes: int = INLINE_NODES_MAX_BYTES,
    ) -> None:
        """``load_balancers`` say which annotations and node labels the cloud reads (without:
        every annotation, no labels); a big node set goes to the ConfigMap ``node_set_name``
        in ``node_set_namespace`` (default name: from the cluster)."""
        self.kube = kube
        self.client = client
        self.services = services
        self.nodes = nodes
        self.task_queue = task_queue
        self.cluster = cluster
        self.provider = provider
        self.concurrency = max(1, concurrency)
        self.history_limit = history_limit
        self.resync_period_s = resync_period_s
        self.signals_sent = 0
        self.queue = WorkQueue("service", backoff_min_s=RETRY_MIN_S, backoff_max_s=RETRY_MAX_S)
        #: Service key → (uid, signal, desired state) last sent.
        self._sent: dict[str, tuple[str, str, DesiredLoadBalancer | None]] = {}
        self.load_balancers = load_balancers
        self.node_set_namespace = node_set_namespace
        self.inline_nodes_max_bytes = inline_nodes_max_bytes
        #: Node name → its LB view over the label keys some Service names (None: not a backend).
        self._node_view: dict[str, LoadBalancerNode | None] = {}
        #: Service key → the node label keys its annotations name; their union.
        self._label_keys: dict[str, frozenset[str]] = {}
        self._all_label_keys: frozenset[str] = frozenset()
        #: The LB node set per label projection (cleared by a node-set change).
        self._lb_nodes: dict[frozenset[str], Projection] = {}
        #: The node-set ConfigMap: the digest of what was written to it last.
        self.node_set_name = node_set_name or nodesets.configmap_name(cluster)
        self._node_set_written: str | None = None
        self._node_set_lock = asyncio.Lock()
        self._node_flush: asyncio.TimerHandle | None = None
        self._stopped = asyncio.Event()

    @classmethod
    def from_context(cls, context: StarterContext) -> ServiceStarter | None:
        if context.driver.load_balancers is None:
            log.info("service LBs off: %s has no load-balancer capability", context.driver.provider)
            return None
        ccm = context.settings.ccm
        nodes = (
            context.informers.nodes(label_selector=ccm.node_selector)
            if ccm.node_selector
            else context.informers.nodes()
        )
        return cls(
            context.kube,
            context.client,
            services=context.informers.services(),
            nodes=nodes,
            task_queue=context.queue(Domain.LOAD_BALANCER),
            cluster=context.cluster,
            provider=context.settings.provider,
            concurrency=ccm.concurrent_service_syncs,
            resync_period_s=ccm.load_balancer_resync_period_s,
            load_balancers=context.driver.load_balancers,
            node_set_namespace=context.settings.leader_election.namespace,
            node_set_name=f"{context.settings.leader_election.name}-lb-nodes",
        )

    def stop(self) -> None:
        if self._node_flush is not None:
            self._node_flush.cancel()
        self.queue.shut_down()
        self._stopped.set()

    async def run(self) -> None:
        self.services.start()
        self.nodes.start()
        await run_parts(
            self._stopped,
            services=self._watch_services(),
            nodes=self._watch_nodes(),
            workers=self.queue.run(self.sync, workers=self.concurrency, before=self._synced),
        )

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    async def _synced(self) -> None:
        """Both informers listed: a restart never sends an empty node set."""
        await self.services.wait_synced()
        await self.nodes.wait_synced()

    # -- watches ---------------------------------------------------------------------------
    async def _watch_services(self) -> None:
        async for event in self.services.events():
            self.enqueue(event.key)

    async def _watch_nodes(self) -> None:
        async for event in self.nodes.events():
            name = str(event.object["metadata"]["name"])
            if event.type == "DELETED":
                if name not in self._node_view:
                    continue
                del self._node_view[name]
            else:
                view = rules.load_balancer_node(event.object, self._all_label_keys)
                if name in self._node_view and self._node_view[name] == view:
                    continue  # a heartbeat, a condition, a label no LB names: nothing to send
                self._node_view[name] = view
            if self._node_flush is None:  # a burst of node changes: one pass over the Services
                self._node_flush = asyncio.get_running_loop().call_later(
                    NODE_BATCH_S, self._node_set_changed
                )

    def _node_set_changed(self) -> None:
        """The LB node set changed: drop the cached projections, re-sync every LB Service."""
        self._node_flush = None
        self._lb_nodes = {}
        for key, service in list(self.services.store.items()):
            if rules.wants_load_balancer(service) or rules.has_finalizer(service):
                self.enqueue(key)

    def _projection(self, label_keys: frozenset[str]) -> Projection:
        projection = self._lb_nodes.get(label_keys)
        if projection is None:
            nodes = rules.load_balancer_nodes(list(self.nodes.store.values()), label_keys)
            projection = Projection(nodes)
            self._lb_nodes[label_keys] = projection
        return projection

    def _inputs(self, key: str, service: Service) -> tuple[dict[str, str], frozenset[str]]:
        """The annotations and node label keys the cloud reads for this Service."""
        annotations = rules.service_annotations(service)
        if self.load_balancers is None:
            return annotations, frozenset()
        keys = self.load_balancers.load_balancer_node_labels(annotations)
        if self._label_keys.get(key) != keys:
            self._label_keys[key] = keys
            self._all_label_keys = frozenset().union(*self._label_keys.values())
        return self.load_balancers.load_balancer_annotations(annotations), keys

    async def _node_set(self, projection: Projection) -> NodeSetRef:
        """The reference to send for ``projection``, after writing the ConfigMap (the node set
        with every label some Service names) if its content changed since the last write."""
        async with self._node_set_lock:
            union = self._projection(self._all_label_keys)
            if self._node_set_written != union.digest:
                await asyncio.to_thread(
                    nodesets.write_node_set,
                    self.kube,
                    self.node_set_namespace,
                    self.node_set_name,
                    union.nodes,
                    cluster=self.cluster,
                )
                self._node_set_written = union.digest
                log.info("LB node set %s written: %d nodes", self.node_set_name, len(union.nodes))
        return NodeSetRef(
            namespace=self.node_set_namespace,
            name=self.node_set_name,
            digest=projection.digest,
            count=len(projection.nodes),
        )

    # -- one Service -----------------------------------------------------------------------
    async def sync(self, key: str) -> None:
        service = self.services.store.get(key)
        if service is None:  # gone; normally torn down through the finalizer already
            if self._label_keys.pop(key, None) is not None:
                self._all_label_keys = frozenset().union(*self._label_keys.values())
            sent = self._sent.pop(key, None)
            if sent is not None and sent[1] == LoadBalancerSignal.APPLY:
                namespace, _, name = key.partition("/")
                ref = ObjectRef(
                    plural=SERVICES.plural,
                    kind=SERVICES.kind,
                    namespace=namespace,
                    name=name,
                    uid=sent[0],
                )
                await self._send(ref, LoadBalancerSignal.TEAR_DOWN, None)
            return
        ref = ObjectRef.of(SERVICES, service)
        sent = self._sent.get(key)
        if sent is not None and sent[0] != ref.uid:
            sent = None  # a recreated Service: the old one had its own teardown
        if rules.needs_cleanup(service):
            if sent is None or sent[1] != LoadBalancerSignal.TEAR_DOWN:
                await self._send(ref, LoadBalancerSignal.TEAR_DOWN, None)
            return
        if not rules.wants_load_balancer(service) or rules.is_deleting(service):
            if sent is not None and sent[1] == LoadBalancerSignal.APPLY:  # finalizer lost
                await self._send(ref, LoadBalancerSignal.TEAR_DOWN, None)
            return
        if not rules.has_finalizer(service):
            updated = await asyncio.to_thread(add_finalizer, self.kube, ref, LB_FINALIZER, service)
            if updated is None or not rules.has_finalizer(updated):
                return  # gone, or being deleted already
        annotations, label_keys = self._inputs(key, service)
        projection = self._projection(label_keys)
        if projection.size > self.inline_nodes_max_bytes:
            node_set = await self._node_set(projection)
            desired = rules.desired_load_balancer(
                service, [], annotations=annotations, node_set=node_set
            )
        else:
            desired = rules.desired_load_balancer(
                service, projection.nodes, annotations=annotations
            )
        if sent is not None and sent[1] == LoadBalancerSignal.APPLY and sent[2] == desired:
            return
        request = ApplyRequest(
            desired=desired,
            observed_ingress=rules.ingress_hostnames(service),
            resync_period_s=self.resync_period_s,
        )
        await self._send(ref, LoadBalancerSignal.APPLY, request)

    async def _send(self, ref: ObjectRef, signal: str, request: ApplyRequest | None) -> None:
        """Signal-with-start the Service's workflow (joining the running one, if any)."""
        target = LoadBalancerTarget(service=ref, cluster=self.cluster, provider=self.provider)
        await signal_with_start(
            self.client,
            LoadBalancerWorkflow.run,
            LoadBalancerState(target=target, history_limit=self.history_limit),
            kind="LoadBalancer",
            id=workflow_id(ref),
            task_queue=self.task_queue,
            reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            summary=f"load balancer of Service {ref.key} ({target.name})",
            signal=signal,
            signal_args=[request] if request is not None else [],
            search_attributes=searchattrs.for_object(
                cluster=self.cluster,
                provider=self.provider,
                kind=ref.kind,
                namespace=ref.namespace,
                name=ref.name,
            ),
        )
        self.signals_sent += 1
        self._sent[ref.key] = (ref.uid, signal, request.desired if request else None)
        log.debug("Service %s: %s sent to %s", ref.key, signal, workflow_id(ref))


class UnservedLoadBalancers:
    """On a cloud without a load-balancer API (zVirt, vSphere): say so on every LB Service.

    Upstream's service controller does not run there, so a ``type: LoadBalancer`` Service waits
    in silence for an address that never comes. This starter records one ``Warning``
    ``UnsupportedLoadBalancer`` Event per Service (per UID; the Event's count aggregates a
    restart's repeat) naming what the cloud lacks and what serves such Services instead. It
    writes nothing else: no finalizer, no status, no workflow.
    """

    def __init__(
        self, kube: Kube, services: Informer[Service], *, provider: str, hint: str = ""
    ) -> None:
        self.kube = kube
        self.services = services
        self.provider = provider
        self.hint = hint
        self.warned: set[str] = set()  # Service UIDs told
        self._stopped = asyncio.Event()

    @classmethod
    def from_context(cls, context: StarterContext) -> UnservedLoadBalancers | None:
        if context.driver.supports(Capability.LOAD_BALANCERS):
            return None
        return cls(
            context.kube,
            context.informers.services(),
            provider=context.settings.provider,
            hint=provider_for(context.settings).load_balancer_hint,
        )

    def message(self) -> str:
        text = (
            f"{self.provider} has no load-balancer API, so cloudloop makes no cloud load "
            "balancer for this Service and will not set its external address"
        )
        return f"{text}; {self.hint}" if self.hint else text

    def stop(self) -> None:
        self._stopped.set()

    async def run(self) -> None:
        self.services.start()
        await run_parts(self._stopped, services=self._watch())

    async def _watch(self) -> None:
        async for event in self.services.events():
            service = event.object
            uid = str(service["metadata"].get("uid") or "")
            if event.type == "DELETED":
                self.warned.discard(uid)
            elif uid not in self.warned and rules.wants_load_balancer(service):
                self.warned.add(uid)
                await asyncio.to_thread(self._warn, service)

    def _warn(self, service: Service) -> None:
        record_event(
            self.kube,
            ObjectRef.of(SERVICES, service),
            type="Warning",
            reason="UnsupportedLoadBalancer",
            message=self.message(),
            component=EventSource.SERVICE,
        )
