"""Watches ``CloudProbe`` objects and starts one :class:`CloudProbeWorkflow` per generation.

The workflow ID comes from the object's identity and generation, started with conflict policy
``USE_EXISTING`` and reuse policy ``ALLOW_DUPLICATE_FAILED_ONLY``: a repeated event, a relist or a
second starter replica joins the running workflow or finds the finished one, never a second run.
"""

from __future__ import annotations

import logging
from typing import Any

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from cloudloop import searchattrs
from cloudloop.kube.api import Kube
from cloudloop.kube.informer import Informer, WatchEvent
from cloudloop.kube.resources import CLOUD_PROBES, ObjectRef
from cloudloop.messages.probe import ProbeInput
from cloudloop.metrics import WORKFLOWS_STARTED
from starters.context import StarterContext
from workflows.probe import CloudProbeWorkflow, workflow_id

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
        self.informer = Informer(kube, CLOUD_PROBES, namespace=namespace)

    async def run(self) -> None:
        async for event in self.informer.events():
            try:
                await self.handle(event)
            except Exception:  # one bad object never stops the watch
                log.exception("CloudProbe %s: could not handle %s", event.key, event.type)

    def stop(self) -> None:
        self.informer.stop()

    @staticmethod
    def wants_probe(obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata", {})
        if meta.get("deletionTimestamp"):
            return False
        observed = (obj.get("status") or {}).get("observedGeneration")
        return bool(observed != meta.get("generation"))

    async def handle(self, event: WatchEvent) -> str | None:
        """Start (or join) the probe workflow for this event; return its ID, if any."""
        obj = event.object
        if event.type == "DELETED" or not self.wants_probe(obj):
            return None
        ref = ObjectRef.of(CLOUD_PROBES, obj)
        input = ProbeInput(
            object=ref,
            generation=int(obj["metadata"].get("generation", 1)),
            provider=str(obj.get("spec", {}).get("provider", "")),
            cluster=self.cluster,
        )
        wf_id = workflow_id(input)
        try:
            await self.client.start_workflow(
                CloudProbeWorkflow.run,
                input,
                id=wf_id,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                search_attributes=searchattrs.for_object(
                    cluster=self.cluster,
                    provider=input.provider,
                    kind=ref.kind,
                    namespace=ref.namespace,
                    name=ref.name,
                ),
            )
            WORKFLOWS_STARTED.labels("CloudProbe").inc()
        except WorkflowAlreadyStartedError:
            log.debug("CloudProbe %s: workflow %s already ran", ref.key, wf_id)
        return wf_id
