"""MachineStarter: the configured provider's Cluster API kinds → the two machine reconcilers.

Watches the provider's InfraMachines and InfraClusters (DeckhouseMachine/DeckhouseCluster for
``dvp``, ZvirtMachine/ZvirtCluster for ``zvirt``) with the CAPI Machines and Clusters. Events only
queue keys (``machine:<ns>/<name>``, ``cluster:<ns>/<name>``) in the starters' work queue; a few
workers reconcile each key from the informers' stores, one at a time per key, so a burst of events
is one reconcile and objects are handled side by side. A Machine event queues its InfraMachine; a
Cluster event queues its InfraMachines and its InfraCluster. Failures retry with per-key backoff.

A cluster without Cluster API (no ``cluster.x-k8s.io`` Machine CRD, or no CRD of the provider's
InfraMachine) turns machines off at start: its informers would only fail (and make the starter
not ready); e.g. an AWS cluster that runs cloudloop as its CCM only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client

from cloudloop.cloud.capi import NodeTemplates
from cloudloop.cloud.driver import Capability
from cloudloop.cloud.registration import provider_values
from cloudloop.cloud.registry import provider_for
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import BodyT, CapiCluster, CapiMachine, InfraObject, NodeGroupObject
from cloudloop.kube.informer import Informer, Informers, WatchEvent
from cloudloop.kube.resources import NODE_GROUPS, Resource
from cloudloop.kube.workqueue import WorkQueue
from cloudloop.messages.machine import MachineTimings
from cloudloop.nodegroup.group import controller_of
from cloudloop.rules import machine as capi
from cloudloop.settings import Domain
from starters.context import StarterContext
from starters.machine.infra_cluster import InfraClusterReconciler
from starters.machine.infra_machine import InfraMachineReconciler
from starters.machine.node_group import NodeGroupReconciler
from starters.supervisor import run_parts

log = logging.getLogger(__name__)

RETRY_MIN_S, RETRY_MAX_S = 2.0, 60.0
MACHINE, CLUSTER = "machine:", "cluster:"
NODE_GROUP, INSTANCE_CLASS = "nodegroup:", "instanceclass:"
#: Deckhouse's node manager's own NodeGroup: where it is served, node groups are its.
DECKHOUSE_NODE_GROUPS: Resource = Resource("deckhouse.io", "v1", "nodegroups", "NodeGroup", False)


@dataclass(frozen=True)
class NodeGroupParts:
    """What the node-group reconciler needs beyond the machine starter's own."""

    templates: NodeTemplates
    #: The registration's ``<type>`` subtree, the templates' ``.provider``.
    provider_values: dict[str, Any]


class MachineStarter:
    def __init__(
        self,
        kube: Kube,
        client: Client,
        *,
        kinds: capi.InfraKinds,
        task_queue: str,
        cluster: str,
        namespace: str | None = None,
        informers: Informers | None = None,
        timings: MachineTimings | None = None,
        concurrency: int = 8,
        node_groups: NodeGroupParts | None = None,
    ) -> None:
        self.kinds = kinds
        self.concurrency = concurrency
        self._own_informers: list[Informer[Any]] = []

        def informer(resource: Resource[BodyT]) -> Informer[BodyT]:
            if informers is not None and namespace is None:
                return informers.get(resource)
            own = Informer(kube, resource, namespace=namespace)
            self._own_informers.append(own)
            return own

        # Typed by their resources (InfraKinds' and the CAPI kinds' body types).
        self.infra_machines = informer(kinds.machine)
        self.infra_clusters = informer(kinds.cluster)
        self.machines = informer(capi.MACHINES)
        self.clusters = informer(capi.CLUSTERS)
        self.machine_reconciler = InfraMachineReconciler(
            kube,
            client,
            kinds=kinds,
            task_queue=task_queue,
            cluster=cluster,
            timings=timings or MachineTimings(),
            infra_machines=self.infra_machines,
            machines=self.machines,
            clusters=self.clusters,
        )
        self.cluster_reconciler = InfraClusterReconciler(
            kube, kinds=kinds, infra_clusters=self.infra_clusters, clusters=self.clusters
        )
        self.node_groups: Informer[NodeGroupObject] | None = None
        self.instance_classes: Informer[dict[str, Any]] | None = None
        self.machine_deployments: Informer[dict[str, Any]] | None = None
        self.node_group_reconciler: NodeGroupReconciler | None = None
        if node_groups is not None:
            self.node_groups = informer(NODE_GROUPS)
            self.instance_classes = informer(node_groups.templates.instance_class)
            self.machine_deployments = informer(capi.MACHINE_DEPLOYMENTS)
            self.node_group_reconciler = NodeGroupReconciler(
                kube,
                kinds=kinds,
                templates=node_groups.templates,
                cluster=cluster,
                provider_values=node_groups.provider_values,
                node_groups=self.node_groups,
                instance_classes=self.instance_classes,
                machine_deployments=self.machine_deployments,
            )
        self.queue = WorkQueue("machine", backoff_min_s=RETRY_MIN_S, backoff_max_s=RETRY_MAX_S)
        self._stopped = asyncio.Event()

    @classmethod
    def from_context(cls, context: StarterContext) -> MachineStarter | None:
        kinds = provider_for(context.settings).infra_kinds
        if kinds is None:
            log.info("machines off: no Cluster API provider for %s", context.settings.provider)
            return None
        if not context.driver.supports(Capability.MACHINES):
            log.info("machines off: the %s driver has no machines", context.driver.provider)
            return None
        missing = _not_served(context.kube, [capi.MACHINES, kinds.machine])
        if missing:
            log.info("machines off: %s not served (Cluster API not installed)", missing)
            return None
        return cls(
            context.kube,
            context.client,
            kinds=kinds,
            task_queue=context.queue(Domain.MACHINE),
            cluster=context.cluster,
            informers=context.informers,
            node_groups=_node_group_parts(context),
        )

    def stop(self) -> None:
        self.queue.shut_down()
        self._stopped.set()

    async def run(self) -> None:
        parts: dict[str, Any] = {}
        if (
            self.node_groups is not None
            and self.instance_classes is not None
            and self.machine_deployments is not None
        ):
            parts["node_groups"] = self._feed(self.node_groups, self._on_node_group)
            parts["machine_deployments"] = self._feed(
                self.machine_deployments, self._on_machine_deployment
            )
            parts["instance_classes"] = self._feed(
                self.instance_classes,
                lambda e: [INSTANCE_CLASS + e.key, *self._groups_of_class(e.key)],
            )
        try:
            await run_parts(
                self._stopped,
                infra_machines=self._feed(self.infra_machines, self._on_infra_machine),
                infra_clusters=self._feed(self.infra_clusters, lambda e: [CLUSTER + e.key]),
                machines=self._feed(self.machines, self._on_machine),
                clusters=self._feed(self.clusters, self._on_cluster),
                **parts,
                workers=self.queue.run(self.reconcile, workers=self.concurrency),
            )
        finally:
            if self._stopped.is_set():
                for informer in self._own_informers:
                    informer.stop()

    async def reconcile(self, key: str) -> None:
        if key.startswith(MACHINE):
            await self.reconcile_machine(key.removeprefix(MACHINE))
        elif key.startswith(NODE_GROUP) and self.node_group_reconciler is not None:
            await self.node_group_reconciler.reconcile(key.removeprefix(NODE_GROUP))
        elif key.startswith(INSTANCE_CLASS) and self.node_group_reconciler is not None:
            await self.node_group_reconciler.reconcile_class(key.removeprefix(INSTANCE_CLASS))
        else:
            await self.reconcile_cluster(key.removeprefix(CLUSTER))

    async def reconcile_machine(self, key: str) -> str | None:
        """Bring the workflow of the InfraMachine ``key`` up to date; its ID, if it has one."""
        return await self.machine_reconciler.reconcile(key)

    async def reconcile_cluster(self, key: str) -> bool:
        """Mark the InfraCluster ``key`` ready and provisioned; True when it is."""
        return await self.cluster_reconciler.reconcile(key)

    # -- events → keys ---------------------------------------------------------------------
    async def _feed(
        self, informer: Informer[BodyT], keys: Callable[[WatchEvent[BodyT]], list[str]]
    ) -> None:
        async for event in informer.events():
            for key in keys(event):
                self.queue.add(key)

    def _groups_of_class(self, name: str) -> list[str]:
        reconciler = self.node_group_reconciler
        return [NODE_GROUP + k for k in reconciler.groups_of_class(name)] if reconciler else []

    def _on_node_group(self, event: WatchEvent[NodeGroupObject]) -> list[str]:
        """The group, and every class that may list it (it may have moved from one)."""
        classes = list(self.instance_classes.store) if self.instance_classes else []
        return [NODE_GROUP + event.key, *(INSTANCE_CLASS + name for name in classes)]

    def _on_machine_deployment(self, event: WatchEvent[dict[str, Any]]) -> list[str]:
        """A group's own MachineDeployment changed (scaled, edited, deleted): its group."""
        owner = controller_of(event.object)
        if owner is None or owner.get("kind") != NODE_GROUPS.kind:
            return []
        if not str(owner.get("apiVersion", "")).startswith(f"{NODE_GROUPS.group}/"):
            return []
        namespace = event.object["metadata"].get("namespace", "")
        return [f"{NODE_GROUP}{namespace}/{owner['name']}"]

    def _on_infra_machine(self, event: WatchEvent[InfraObject]) -> list[str]:
        if event.type == "DELETED":
            self.machine_reconciler.forget(str(event.object["metadata"].get("uid", "")))
        return [MACHINE + event.key]

    def _on_machine(self, event: WatchEvent[CapiMachine]) -> list[str]:
        ref = (event.object.get("spec") or {}).get("infrastructureRef") or {}
        if ref.get("kind") != self.kinds.machine.kind or not ref.get("name"):
            return []
        namespace = event.object["metadata"].get("namespace", "")
        return [f"{MACHINE}{namespace}/{ref['name']}"]

    def _on_cluster(self, event: WatchEvent[CapiCluster]) -> list[str]:
        meta = event.object["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        keys = [
            MACHINE + _key(obj)
            for obj in list(self.infra_machines.store.values())
            if obj["metadata"].get("namespace") == namespace
            and (obj["metadata"].get("labels") or {}).get(capi.CLUSTER_NAME_LABEL) == name
        ]
        ref = (event.object.get("spec") or {}).get("infrastructureRef") or {}
        if ref.get("kind") == self.kinds.cluster.kind and ref.get("name"):
            keys.append(f"{CLUSTER}{namespace}/{ref['name']}")
        return keys


def _key(obj: InfraObject) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def _node_group_parts(context: StarterContext) -> NodeGroupParts | None:
    """The node-group reconciler's parts, or None (with the reason logged) where it must not
    run: no templates for the provider, no NodeGroup CRD, or Deckhouse's node manager there."""
    provider = provider_for(context.settings)
    templates = provider.node_templates
    if templates is None:
        return None
    missing = _not_served(
        context.kube, [NODE_GROUPS, capi.MACHINE_DEPLOYMENTS, templates.instance_class]
    )
    if missing:
        log.info("node groups off: %s not served", missing)
        return None
    if _discovered(context.kube, DECKHOUSE_NODE_GROUPS):
        log.info("node groups off: Deckhouse's node manager owns node groups here")
        return None
    build = provider.registration
    values = provider_values(build(provider.section(context.settings))) if build else {}
    return NodeGroupParts(templates=templates, provider_values=values)


def _discovered(kube: Kube, resource: Resource[Any]) -> bool:
    """Whether the API server's discovery lists ``resource`` (discovery needs no RBAC); an
    answer other than 404 counts as listed, so a doubt keeps the other owner's objects apart."""
    try:
        found = kube.request("GET", f"/apis/{resource.group}/{resource.version}")
    except KubeError as exc:
        return exc.status != 404
    return any(r.get("name") == resource.plural for r in found.get("resources") or [])


def _not_served(kube: Kube, resources: list[Resource[Any]]) -> str:
    """The kinds among ``resources`` the API server answers 404 for (no CRD); other errors
    count as served (the informers retry them)."""
    missing = []
    for resource in resources:
        try:
            kube.list(resource, None, limit=1)
        except KubeError as exc:
            if exc.status == 404:
                missing.append(resource.kind)
    return ", ".join(missing)
