"""InfraMachine reconciler: one ``MachineWorkflow`` per InfraMachine UID, kept told what is wanted.

It follows the infra-machine contract in its order: the owner Machine, the Cluster (label
``cluster.x-k8s.io/cluster-name``, else ``Machine.spec.clusterName``), pause (the
``cluster.x-k8s.io/paused`` annotation or ``Cluster.spec.paused``, reported as a ``Paused``
condition; a paused machine is neither provisioned nor deleted), the finalizer, then
signal-with-start of the workflow (``machine/<namespace>/<name>/<uid>``, ``USE_EXISTING``, reuse
only after a failure) with the desired state: spec, infrastructure ready, bootstrap Secret name,
deletion and the ``cloudloop.io/retry`` token. The same desired state is signalled once. The
reconcile that adds the finalizer starts the workflow eagerly instead (no workflow can exist
before the finalizer; the input carries the desired state, signalled only if a run was there):
a worker in the same process takes the first workflow task from the start's answer.

A completed workflow has deleted the VM and removed the finalizer; a finalizer found again on a
deleted object was put back by someone, so it is removed without a second workflow.
"""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import Client

from cloudloop import searchattrs
from cloudloop.cloud.models import MachineSpec
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import CapiCluster, CapiMachine, InfraObject
from cloudloop.kube.finalizers import add_finalizer, remove_finalizer
from cloudloop.kube.informer import Informer
from cloudloop.kube.resources import ObjectRef
from cloudloop.messages.machine import (
    MachineDesired,
    MachineInput,
    MachineSignal,
    MachineTimings,
    workflow_id,
)
from cloudloop.rules import machine as capi
from cloudloop.temporal import signal_with_start
from starters.machine.paused import paused_stale, report_paused
from workflows.machine import MachineWorkflow

log = logging.getLogger(__name__)


class InfraMachineReconciler:
    def __init__(
        self,
        kube: Kube,
        client: Client,
        *,
        kinds: capi.InfraKinds,
        task_queue: str,
        cluster: str,
        timings: MachineTimings,
        infra_machines: Informer[InfraObject],
        machines: Informer[CapiMachine],
        clusters: Informer[CapiCluster],
    ) -> None:
        self.kube = kube
        self.client = client
        self.kinds = kinds
        self.task_queue = task_queue
        self.cluster = cluster
        self.timings = timings
        self.infra_machines = infra_machines
        self.machines = machines
        self.clusters = clusters
        self._sent: dict[str, MachineDesired] = {}  # uid → last desired state signalled

    def forget(self, uid: str) -> None:
        """The object is gone: forget what was signalled to its workflow."""
        self._sent.pop(uid, None)

    async def reconcile(self, key: str) -> str | None:
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
        if paused_stale(obj, paused):  # no thread hop when there is nothing to write
            await asyncio.to_thread(report_paused, self.kube, ref, obj, paused)
        if paused and not has_finalizer:
            return None
        if not has_finalizer:
            written = await asyncio.to_thread(
                add_finalizer, self.kube, ref, self.kinds.finalizer, obj
            )
            if written is None:
                return None
        desired = self.desired(obj, machine, cluster, cluster_name, paused=paused)
        wf_id = workflow_id(namespace, ref.name, ref.uid)
        if self._sent.get(ref.uid) == desired:
            return wf_id
        # No finalizer before this reconcile: no workflow was started for the object yet (the
        # finalizer goes first), so the start can be eager.
        await self._signal_with_start(
            ref, desired, wf_id, deleting=deleting, eager=not has_finalizer
        )
        self._sent[ref.uid] = desired
        return wf_id

    def desired(
        self,
        obj: InfraObject,
        machine: CapiMachine | None,
        cluster: CapiCluster | None,
        cluster_name: str,
        *,
        paused: bool,
    ) -> MachineDesired:
        meta = obj["metadata"]
        deleting = bool(meta.get("deletionTimestamp"))
        machine_spec = (machine or {}).get("spec") or {}
        return MachineDesired(
            spec=MachineSpec(
                name=str(meta["name"]),
                namespace=str(meta.get("namespace", "")),
                cluster=cluster_name,
                machine_uid=str(meta.get("uid", "")),
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

    async def _signal_with_start(
        self,
        ref: ObjectRef,
        desired: MachineDesired,
        wf_id: str,
        *,
        deleting: bool,
        eager: bool = False,
    ) -> None:
        input = MachineInput(
            object=ref,
            provider=self.kinds.provider,
            finalizer=self.kinds.finalizer,
            desired=desired,
            id_field=self.kinds.id_field,
            timings=self.timings,
        )
        started = await signal_with_start(
            self.client,
            MachineWorkflow.run,
            input,
            kind="Machine",
            id=wf_id,
            task_queue=self.task_queue,
            summary=f"{self.kinds.provider} VM of {ref.kind} {ref.key}",
            signal=MachineSignal.DESIRED,
            signal_args=[desired],
            eager=eager,
            search_attributes=searchattrs.for_object(
                cluster=self.cluster,
                provider=self.kinds.provider,
                kind=ref.kind,
                namespace=ref.namespace,
                name=ref.name,
            ),
        )
        if started is None:
            # The workflow completed: it deleted the VM and took the finalizer off. A finalizer
            # still there was put back by someone; the deletion itself is done.
            log.info("%s %s: workflow %s already completed", ref.kind, ref.key, wf_id)
            if deleting:
                await asyncio.to_thread(remove_finalizer, self.kube, ref, self.kinds.finalizer)
