"""Cluster API machines: one ``MachineWorkflow`` per InfraMachine UID, kept told what is wanted.

Watches the configured provider's InfraMachines (DeckhouseMachine for ``dvp``, ZvirtMachine for
``zvirt``) with the CAPI Machines and Clusters, and follows the infra-machine contract in its
order: the owner Machine, the Cluster (label ``cluster.x-k8s.io/cluster-name``), pause (the
``cluster.x-k8s.io/paused`` annotation or ``Cluster.spec.paused``, reported as a ``Paused``
condition; a paused machine is neither provisioned nor deleted), the finalizer, then
signal-with-start of the workflow with the desired state: spec, infrastructure ready, bootstrap
Secret name, deletion and the ``cloudloop.io/retry`` token. The workflow waits for the
infrastructure and the bootstrap data itself, so it reports those waits too.

The InfraCluster (DeckhouseCluster, ZvirtCluster) has no cloud resources here: once its owner
Cluster exists and it is not paused, it is marked ready and provisioned.

Events only mark keys dirty; a few workers reconcile each key from the informers' stores, one at
a time per key, so a burst of events is one reconcile and objects are handled side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from cloudloop import searchattrs, temporal
from cloudloop.cloud.driver import Capability
from cloudloop.cloud.models import MachineSpec
from cloudloop.cloud.registry import infra_kinds, provider_for
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.conditions import get_condition, set_condition
from cloudloop.kube.finalizers import add_finalizer, remove_finalizer
from cloudloop.kube.informer import Informer, Informers, WatchEvent
from cloudloop.kube.resources import ObjectRef, Resource
from cloudloop.messages.machine import (
    MachineDesired,
    MachineInput,
    MachineSignal,
    MachineTimings,
    RetryRequest,
    workflow_id,
)
from cloudloop.metrics import WORKFLOWS_STARTED
from cloudloop.rules import machine as capi
from cloudloop.settings import Settings
from starters.context import StarterContext
from workflows.machine import MachineWorkflow

log = logging.getLogger(__name__)

RETRY_DELAY_S = 2.0


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


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
        self.kube = kube
        self.client = client
        self.kinds = kinds
        self.task_queue = task_queue
        self.cluster = cluster
        self.timings = timings or MachineTimings()
        self.concurrency = concurrency

        self._own_informers: list[Informer] = []

        def informer(resource: Resource) -> Informer:
            if informers is not None and namespace is None:
                return informers.get(resource)
            own = Informer(kube, resource, namespace=namespace)
            self._own_informers.append(own)
            return own

        self.infra_machines = informer(kinds.machine)
        self.infra_clusters = informer(kinds.cluster)
        self.machines = informer(capi.MACHINES)
        self.clusters = informer(capi.CLUSTERS)
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._sent: dict[str, MachineDesired] = {}  # uid → last desired state signalled
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
        return cls(
            context.kube,
            context.client,
            kinds=kinds,
            task_queue=context.task_queue,
            cluster=context.cluster,
            informers=context.informers,
        )

    def stop(self) -> None:
        self._stopped.set()

    async def run(self) -> None:
        feeds = [
            self._feed(self.infra_machines, self._on_infra_machine),
            self._feed(self.infra_clusters, lambda e: [f"cluster:{e.key}"]),
            self._feed(self.machines, self._on_machine),
            self._feed(self.clusters, self._on_cluster),
        ]
        tasks = [asyncio.create_task(feed) for feed in feeds]
        tasks += [asyncio.create_task(self._worker()) for _ in range(self.concurrency)]
        try:
            await self._stopped.wait()
        finally:
            for informer in self._own_informers:
                informer.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- events → dirty keys ---------------------------------------------------------------
    async def _feed(self, informer: Informer, keys: Any) -> None:
        async for event in informer.events():
            for key in keys(event):
                self._enqueue(key)

    def _on_infra_machine(self, event: WatchEvent) -> list[str]:
        if event.type == "DELETED":
            self._sent.pop(str(event.object["metadata"].get("uid", "")), None)
        return [f"machine:{event.key}"]

    def _on_machine(self, event: WatchEvent) -> list[str]:
        ref = (event.object.get("spec") or {}).get("infrastructureRef") or {}
        if ref.get("kind") != self.kinds.machine.kind or not ref.get("name"):
            return []
        namespace = event.object["metadata"].get("namespace", "")
        return [f"machine:{namespace}/{ref['name']}"]

    def _on_cluster(self, event: WatchEvent) -> list[str]:
        meta = event.object["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        keys = [
            f"machine:{_key(obj)}"
            for obj in list(self.infra_machines.store.values())
            if obj["metadata"].get("namespace") == namespace
            and (obj["metadata"].get("labels") or {}).get(capi.CLUSTER_NAME_LABEL) == name
        ]
        ref = (event.object.get("spec") or {}).get("infrastructureRef") or {}
        if ref.get("kind") == self.kinds.cluster.kind and ref.get("name"):
            keys.append(f"cluster:{namespace}/{ref['name']}")
        return keys

    def _enqueue(self, key: str) -> None:
        if key in self._queued:
            return
        self._queued.add(key)
        if key not in self._processing:
            self._queue.put_nowait(key)

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._processing.add(key)
            try:
                kind, _, name = key.partition(":")
                if kind == "machine":
                    await self.reconcile_machine(name)
                else:
                    await self.reconcile_cluster(name)
            except Exception:  # one bad object never stops the others
                log.exception("%s: reconcile failed; retrying in %.0fs", key, RETRY_DELAY_S)
                asyncio.get_running_loop().call_later(RETRY_DELAY_S, self._enqueue, key)
            finally:
                self._processing.discard(key)
                if key in self._queued:
                    self._queue.put_nowait(key)

    # -- InfraMachine ----------------------------------------------------------------------
    async def reconcile_machine(self, key: str) -> str | None:
        """Bring the workflow of the InfraMachine ``key`` up to date; its ID, if it has one."""
        obj = self.infra_machines.store.get(key)
        if obj is None:
            return None
        meta = obj["metadata"]
        namespace = meta.get("namespace", "")
        deleting = bool(meta.get("deletionTimestamp"))
        has_finalizer = self.kinds.finalizer in (meta.get("finalizers") or [])
        if deleting and not has_finalizer:
            return None
        machine_name = capi.owner(obj, "Machine")
        machine = self.machines.store.get(f"{namespace}/{machine_name}") if machine_name else None
        labels = meta.get("labels") or {}
        cluster_name = labels.get(capi.CLUSTER_NAME_LABEL) or (
            ((machine or {}).get("spec") or {}).get("clusterName") or ""
        )
        cluster = self.clusters.store.get(f"{namespace}/{cluster_name}") if cluster_name else None
        if not deleting and (machine is None or cluster is None):
            log.debug("%s %s: waiting for its Machine and Cluster", self.kinds.machine.kind, key)
            return None
        paused = capi.is_paused(obj) or capi.cluster_paused(cluster)
        ref = ObjectRef.of(self.kinds.machine, obj)
        await asyncio.to_thread(self._report_paused, ref, obj, paused)
        if paused and not has_finalizer:
            return None
        if not has_finalizer:
            written = await asyncio.to_thread(
                add_finalizer, self.kube, ref, self.kinds.finalizer, obj
            )
            if written is None:
                return None
        machine_spec = (machine or {}).get("spec") or {}
        desired = MachineDesired(
            spec=MachineSpec(
                name=ref.name,
                namespace=namespace,
                cluster=cluster_name,
                machine_uid=ref.uid,
                provider_spec=self.kinds.desired_spec(obj),
                failure_domain=str(machine_spec.get("failureDomain") or ""),
                control_plane=capi.CONTROL_PLANE_LABEL
                in ((machine or {}).get("metadata") or {}).get("labels", {}),
            ),
            infrastructure_ready=capi.cluster_infrastructure_ready(cluster),
            bootstrap_secret=str((machine_spec.get("bootstrap") or {}).get("dataSecretName") or ""),
            paused=paused,
            deleting=deleting and not paused,
            retry_token=str((meta.get("annotations") or {}).get(capi.RETRY_ANNOTATION, "")),
        )
        wf_id = workflow_id(namespace, ref.name, ref.uid)
        if self._sent.get(ref.uid) == desired:
            return wf_id
        await self._signal_with_start(ref, desired, wf_id, deleting=deleting)
        self._sent[ref.uid] = desired
        return wf_id

    async def _signal_with_start(
        self, ref: ObjectRef, desired: MachineDesired, wf_id: str, *, deleting: bool
    ) -> None:
        input = MachineInput(
            object=ref,
            provider=self.kinds.provider,
            finalizer=self.kinds.finalizer,
            desired=desired,
            id_field=self.kinds.id_field,
            timings=self.timings,
        )
        try:
            handle = await self.client.start_workflow(
                MachineWorkflow.run,
                input,
                id=wf_id,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                start_signal=MachineSignal.DESIRED,
                start_signal_args=[desired],
                search_attributes=searchattrs.for_object(
                    cluster=self.cluster,
                    provider=self.kinds.provider,
                    kind=ref.kind,
                    namespace=ref.namespace,
                    name=ref.name,
                ),
            )
        except WorkflowAlreadyStartedError:
            # The workflow completed: it deleted the VM and took the finalizer off. A finalizer
            # still there was put back by someone; the deletion itself is done.
            log.info("%s %s: workflow %s already completed", ref.kind, ref.key, wf_id)
            if deleting:
                await asyncio.to_thread(remove_finalizer, self.kube, ref, self.kinds.finalizer)
            return
        response = getattr(handle, "_start_workflow_response", None)
        if getattr(response, "started", False):
            WORKFLOWS_STARTED.labels("Machine").inc()
            log.info("%s %s: started workflow %s", ref.kind, ref.key, wf_id)

    def _report_paused(self, ref: ObjectRef, obj: dict[str, Any], paused: bool) -> None:
        """The ``Paused`` condition (CAPI v1beta2) when the object is paused or stops being so;
        otherwise the workflow writes it with its first status (one write less on the way)."""
        current = get_condition(obj, capi.PAUSED)
        status = "True" if paused else "False"
        if (current or {}).get("status") == status or (current is None and not paused):
            return
        conditions = set_condition(
            (obj.get("status") or {}).get("conditions"),
            type=capi.PAUSED,
            status=status,
            reason=capi.REASON_PAUSED if paused else capi.REASON_NOT_PAUSED,
            message="reconciliation is paused" if paused else "",
            observed_generation=int(obj["metadata"].get("generation") or 1),
        )
        with contextlib.suppress(KubeError):
            self.kube.patch(
                ref.resource,
                ref.name,
                {"metadata": {"uid": ref.uid}, "status": {"conditions": conditions}},
                ref.namespace,
                subresource="status",
            )

    # -- InfraCluster ----------------------------------------------------------------------
    async def reconcile_cluster(self, key: str) -> bool:
        """Mark the InfraCluster ready and provisioned; True when it is (or was already)."""
        obj = self.infra_clusters.store.get(key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return False
        annotations = obj["metadata"].get("annotations") or {}
        if capi.MANAGED_BY_ANNOTATION in annotations:
            return False
        namespace = obj["metadata"].get("namespace", "")
        owner = capi.owner(obj, "Cluster")
        cluster = self.clusters.store.get(f"{namespace}/{owner}") if owner else None
        if cluster is None:
            return False
        ref = ObjectRef.of(self.kinds.cluster, obj)
        paused = capi.is_paused(obj) or capi.cluster_paused(cluster)
        if paused:
            await asyncio.to_thread(self._report_paused, ref, obj, paused)
            return False
        status = obj.get("status") or {}
        ready = get_condition(obj, capi.READY)
        not_paused = get_condition(obj, capi.PAUSED)
        if (
            status.get("ready") is True
            and (status.get("initialization") or {}).get("provisioned") is True
            and (ready or {}).get("status") == "True"
            and (not_paused or {}).get("status") == "False"
        ):
            return True
        generation = int(obj["metadata"].get("generation") or 1)
        conditions = set_condition(
            status.get("conditions"),
            type=capi.PAUSED,
            status=False,
            reason=capi.REASON_NOT_PAUSED,
            message="",
            observed_generation=generation,
        )
        conditions = set_condition(
            conditions,
            type=capi.READY,
            status=True,
            reason=capi.REASON_PROVISIONED,
            message="nothing to create in the cloud for the cluster",
            observed_generation=generation,
        )
        await asyncio.to_thread(
            self.kube.patch,
            ref.resource,
            ref.name,
            {
                "metadata": {"uid": ref.uid},
                "status": {
                    "ready": True,
                    "initialization": {"provisioned": True},
                    "conditions": conditions,
                },
            },
            ref.namespace,
            subresource="status",
        )
        log.info("%s %s: provisioned", ref.kind, ref.key)
        return True


# -- `cloudloop retry machine` ---------------------------------------------------------------
async def request_retry(settings: Settings, namespace: str, name: str) -> str:
    """Retry a machine's failed provisioning: signal its workflow, or, when no run is open,
    set the ``cloudloop.io/retry`` annotation so the starter starts a new one. Returns what was
    done, for the command's output."""
    from cloudloop.kube.client import api_client

    kube = Kube(api_client(settings.kubeconfig))
    own = provider_for(settings).infra_kinds
    candidates = [own] if own is not None else []
    candidates += [k for k in infra_kinds() if k not in candidates]
    for kinds in candidates:
        obj = await asyncio.to_thread(kube.get, kinds.machine, name, namespace)
        if obj is not None:
            break
    else:
        raise LookupError(f"no DeckhouseMachine or ZvirtMachine {namespace}/{name}")
    ref = ObjectRef.of(kinds.machine, obj)
    wf_id = workflow_id(namespace, name, ref.uid)
    token = uuid.uuid4().hex[:12]
    client = await temporal.connect(settings.temporal)
    handle = client.get_workflow_handle(wf_id)
    try:
        running = (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        running = False
    if running:
        await handle.signal(MachineSignal.RETRY, RetryRequest(token=token, source="cli"))
        return f"asked workflow {wf_id} to retry"
    await asyncio.to_thread(
        kube.patch,
        kinds.machine,
        name,
        {"metadata": {"annotations": {capi.RETRY_ANNOTATION: token}}},
        namespace,
    )
    return (
        f"workflow {wf_id} is not running; set {capi.RETRY_ANNOTATION}={token} "
        f"on {kinds.machine.kind} {namespace}/{name} so the starter starts it again"
    )
