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
from typing import Any

from temporalio.client import Client

from cloudloop.cloud.driver import Capability
from cloudloop.cloud.registry import provider_for
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import BodyT, CapiCluster, CapiMachine, InfraObject
from cloudloop.kube.informer import Informer, Informers, WatchEvent
from cloudloop.kube.resources import Resource
from cloudloop.kube.workqueue import WorkQueue
from cloudloop.messages.machine import MachineTimings
from cloudloop.rules import machine as capi
from cloudloop.settings import Domain
from starters.context import StarterContext
from starters.machine.infra_cluster import InfraClusterReconciler
from starters.machine.infra_machine import InfraMachineReconciler
from starters.supervisor import run_parts

log = logging.getLogger(__name__)

RETRY_MIN_S, RETRY_MAX_S = 2.0, 60.0
MACHINE, CLUSTER = "machine:", "cluster:"


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
        )

    def stop(self) -> None:
        self.queue.shut_down()
        self._stopped.set()

    async def run(self) -> None:
        try:
            await run_parts(
                self._stopped,
                infra_machines=self._feed(self.infra_machines, self._on_infra_machine),
                infra_clusters=self._feed(self.infra_clusters, lambda e: [CLUSTER + e.key]),
                machines=self._feed(self.machines, self._on_machine),
                clusters=self._feed(self.clusters, self._on_cluster),
                workers=self.queue.run(self.reconcile, workers=self.concurrency),
            )
        finally:
            if self._stopped.is_set():
                for informer in self._own_informers:
                    informer.stop()

    async def reconcile(self, key: str) -> None:
        if key.startswith(MACHINE):
            await self.reconcile_machine(key.removeprefix(MACHINE))
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
