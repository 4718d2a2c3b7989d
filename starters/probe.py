"""Watches ``CloudProbe`` objects and starts one :class:`CloudProbeWorkflow` per generation.

Events queue the object's key in the starters' work queue; a worker reads the object from the
informer's store and starts its workflow. The workflow ID comes from the object's identity and
generation, started with conflict policy ``USE_EXISTING`` and reuse policy
``ALLOW_DUPLICATE_FAILED_ONLY``: a repeated event, a relist or a second starter replica joins the
running workflow or finds the finished one, never a second run. A failed start (Temporal
unreachable) is retried with per-key backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from temporalio.client import Client

from cloudloop import searchattrs
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import CloudProbe
from cloudloop.kube.informer import Informer, WatchEvent
from cloudloop.kube.resources import CLOUD_PROBES, ObjectRef
from cloudloop.kube.workqueue import WorkQueue
from cloudloop.messages.probe import ProbeInput, workflow_id
from cloudloop.temporal import signal_with_start
from starters.context import StarterContext
from workflows.probe import CloudProbeWorkflow

log = logging.getLogger(__name__)


class CloudProbeStarter:
    @classmethod
    def from_context(cls, context: StarterContext) -> CloudProbeStarter:
        return cls(
            context.kube, context.client, task_queue=context.task_queue, cluster=context.cluster
        )

    def __init__(
        self,
        kube: Kube,
        client: Client,
        *,
        task_queue: str,
        cluster: str,
        namespace: str | None = None,
    ) -> None:
        self.kube = kube
        self.client = client
        self.task_queue = task_queue
        self.cluster = cluster
        self.informer = Informer[CloudProbe](kube, CLOUD_PROBES, namespace=namespace)
        self.queue = WorkQueue("cloudprobe")

    async def run(self) -> None:
        worker = asyncio.create_task(self.queue.run(self.reconcile))
        try:
            async for event in self.informer.events():
                self.queue.add(event.key)
        finally:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    def stop(self) -> None:
        self.queue.shut_down()
        self.informer.stop()

    @staticmethod
    def wants_probe(obj: CloudProbe) -> bool:
        meta = obj.get("metadata", {})
        if meta.get("deletionTimestamp"):
            return False
        observed = (obj.get("status") or {}).get("observedGeneration")
        return bool(observed != meta.get("generation"))

    async def reconcile(self, key: str) -> str | None:
        """Start (or join) the probe workflow of the object ``key`` as the store has it."""
        obj = self.informer.store.get(key)
        return None if obj is None else await self.start(obj)

    async def handle(self, event: WatchEvent[CloudProbe]) -> str | None:
        """Start (or join) the probe workflow for this event; return its ID, if any."""
        return None if event.type == "DELETED" else await self.start(event.object)

    async def start(self, obj: CloudProbe) -> str | None:
        if not self.wants_probe(obj):
            return None
        ref = ObjectRef.of(CLOUD_PROBES, obj)
        input = ProbeInput(
            object=ref,
            generation=int(obj["metadata"].get("generation", 1)),
            provider=str(obj.get("spec", {}).get("provider", "")),
            cluster=self.cluster,
        )
        wf_id = workflow_id(input)
        started = await signal_with_start(
            self.client,
            CloudProbeWorkflow.run,
            input,
            kind="CloudProbe",
            id=wf_id,
            task_queue=self.task_queue,
            summary=f"probe {input.provider} for CloudProbe {ref.key}",
            search_attributes=searchattrs.for_object(
                cluster=self.cluster,
                provider=input.provider,
                kind=ref.kind,
                namespace=ref.namespace,
                name=ref.name,
            ),
        )
        if started is None:
            log.debug("CloudProbe %s: workflow %s already ran", ref.key, wf_id)
        return wf_id
