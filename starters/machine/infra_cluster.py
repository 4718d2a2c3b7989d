"""InfraCluster reconciler: the cluster's infrastructure object is marked ready and provisioned.

cloudloop creates no cloud resources for a DeckhouseCluster or ZvirtCluster: once its owner
Cluster exists and neither is paused, ``status.ready``, ``status.initialization.provisioned``,
``Ready=True/Provisioned`` and ``Paused=False`` are written (once; an object already so is not
written). An object annotated ``cluster.x-k8s.io/managed-by`` belongs to someone else.
"""

from __future__ import annotations

import asyncio
import logging

from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import CapiCluster, InfraObject
from cloudloop.kube.conditions import get_condition, set_condition
from cloudloop.kube.informer import Informer
from cloudloop.kube.resources import ObjectRef
from cloudloop.rules import machine as capi
from starters.machine.paused import report_paused

log = logging.getLogger(__name__)


class InfraClusterReconciler:
    def __init__(
        self,
        kube: Kube,
        *,
        kinds: capi.InfraKinds,
        infra_clusters: Informer[InfraObject],
        clusters: Informer[CapiCluster],
    ) -> None:
        self.kube = kube
        self.kinds = kinds
        self.infra_clusters = infra_clusters
        self.clusters = clusters

    async def reconcile(self, key: str) -> bool:
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
            await asyncio.to_thread(report_paused, self.kube, ref, obj, paused)
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
