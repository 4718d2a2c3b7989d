"""Node termination handler figures, measured end to end on the stack (SQS, EC2 and Auto Scaling
in moto with the lifecycle extension, kube-apiserver with controller-manager, scheduler and kwok,
Temporal, an in-process worker and QueueProcessor starters).

- ``drain_100_pods_s``: 100 pods of a ReplicaSet on one kwok Node behind a PDB with
  ``maxUnavailable: 1``, replacements scheduled on two spare Nodes; an ASG terminate lifecycle
  action is sent to SQS; seconds until its message is deleted, i.e. the Node is drained (every
  pod evicted through the Eviction API and gone) and ``CompleteLifecycleAction`` was answered.
  Upstream settings except the drain's global timeout (600 s instead of 120 s, so the figure is
  a time rather than a timeout). ``drain_100_pods_eviction_requests`` counts the eviction
  requests it took (PDB refusals included).
- ``duplicate_events_started_workflows``: 50 messages about one interruption (ASG lifecycle
  action, Spot warning and state change copies, interleaved) read by two starter replicas;
  the number of drain workflows started for the Node (goal: 1).
- ``imds_interruption_to_drain_start_s``: IMDS mode, the node agent (``ImdsAgent`` at upstream's
  2 s poll, writing the notice on its Node through the Kubernetes API only) and the starter's
  ``ImdsNotices`` (a Node informer of its own, starting the drain workflow), against
  amazon-ec2-metadata-mock serving a moto instance's identity; the mock's Spot notice appears at a
  set wall-clock second (``--mock-trigger-time``); seconds from then until the drain workflow has
  tainted the Node (``aws-node-termination-handler/spot-itn``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import REGISTRY

from bench.context import BenchContext
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.imds import Imds
from cloudloop.cloud.aws.termination import AwsTermination
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Node
from cloudloop.kube.resources import NODES, PDBS, PODS, Resource
from cloudloop.messages.termination import TAINT_KEYS, EventKind
from cloudloop.nodeagents.termination_imds import ImdsAgent
from cloudloop.settings import ImdsAgentNthSettings, NthSettings
from devstack.backends.aws import NthCloud, asg_terminate, spot_itn, state_change
from devstack.kube import KWOK_NODE_ANNOTATION
from devstack.metadata_mock import MockInstance, metadata_mock
from starters.termination import QueueProcessor
from starters.termination_imds import ImdsNotices
from workers.main import build_worker

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
POOL = "cloudloop-bench/pool"
PODS_TO_DRAIN = 100
COPIES = 50


def _interruption(asg: str, instance: str) -> list[str]:
    """One interruption as three message kinds."""
    return [
        asg_terminate(asg, "nth", instance, str(uuid.uuid4())),
        spot_itn(instance),
        state_change(instance, "shutting-down"),
    ]


class Scenario:
    """AWS and Kubernetes objects of one benchmark, removed at the end."""

    def __init__(self, ctx: BenchContext) -> None:
        self.ctx = ctx
        self.kube: Kube = ctx.kube
        endpoint = AWS.section(ctx.settings).endpoint_url or ""
        self.aws = NthCloud.at(endpoint, ctx.stack.autoscaling_endpoint)
        self.sqs = self.aws.sqs
        self.namespace = f"bench-nth-{uuid.uuid4().hex[:6]}"
        self.nodes: list[str] = []
        self.queue = self.aws.queue()

    def settings(self, **nth: Any) -> Settings:
        return self.ctx.settings.model_copy(
            update={
                "nth": NthSettings(
                    queue_url=self.queue,
                    autoscaling_endpoint_url=self.ctx.stack.autoscaling_endpoint,
                    wait_time_s=1,
                    **nth,
                )
            }
        )

    def asg_instance(self) -> tuple[str, str, str]:
        """(ASG, instance ID, private DNS name) of a managed one-instance ASG with a hook."""
        name, _, instance, dns = self.aws.asg_instance(
            prefix="bench", instance_type="m5.large", heartbeat_timeout_s=None
        )
        return name, instance, dns

    async def node(self, name: str, pool: str) -> str:
        self.kube.create(
            NODES,
            {
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                    "labels": {"kubernetes.io/hostname": name, POOL: pool},
                }
            },
        )
        self.nodes.append(name)
        while not _ready(self.kube.get(NODES, name)):
            await asyncio.sleep(0.1)
        return name

    async def workload(self, source: str, pool: str, replicas: int) -> None:
        """A ReplicaSet behind a PDB (maxUnavailable 1), all of it running on ``source``."""
        self.kube.create(NAMESPACES, {"metadata": {"name": self.namespace}})
        labels = {"app": "web"}
        self.kube.create(
            REPLICA_SETS,
            {
                "metadata": {"name": "web", "namespace": self.namespace},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "nodeSelector": {POOL: pool},
                            "containers": [{"name": "c", "image": "busybox"}],
                        },
                    },
                },
            },
            self.namespace,
        )
        self.kube.create(
            PDBS,
            {
                "metadata": {"name": "web", "namespace": self.namespace},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
            },
            self.namespace,
        )
        while self._running_on(source) < replicas:
            await asyncio.sleep(0.5)

    def _running_on(self, node: str) -> int:
        pods = self.kube.list(PODS, self.namespace, fieldSelector=f"spec.nodeName={node}")
        return sum(
            1
            for p in pods["items"]
            if p.get("status", {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        )

    def depth(self) -> int:
        return self.aws.depth(self.queue)

    def cleanup(self) -> None:
        for name in self.nodes:
            self.kube.delete(NODES, name)
        self.kube.delete(NAMESPACES, self.namespace)
        self.sqs.delete_queue(QueueUrl=self.queue)


def _ready(node: Node | None) -> bool:
    conditions = (node or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _evictions() -> float:
    return sum(
        REGISTRY.get_sample_value("nth_evictions_total", {"outcome": outcome}) or 0.0
        for outcome in ("evicted", "blocked", "gone", "error")
    )


@contextlib.asynccontextmanager
async def _running(settings: Settings, ctx: BenchContext, replicas: int) -> AsyncIterator[None]:
    worker = build_worker(
        ctx.client, settings, driver=AwsDriver(AWS.section(settings)), kube=ctx.kube
    )
    processors = [
        QueueProcessor(
            ctx.kube,
            ctx.client,
            AwsTermination(AWS.section(settings), settings.nth),
            settings.nth,
            task_queue=settings.temporal.task_queue,
            cluster=settings.cluster_name,
        )
        for _ in range(replicas)
    ]
    async with worker:
        tasks = [asyncio.create_task(p.run()) for p in processors]
        try:
            yield
        finally:
            for p in processors:
                p.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _drain_100_pods(ctx: BenchContext) -> dict[str, float]:
    scenario = Scenario(ctx)
    try:
        asg, instance, dns = scenario.asg_instance()
        pool = uuid.uuid4().hex[:8]
        source = await scenario.node(dns, pool)
        await scenario.workload(source, pool, PODS_TO_DRAIN)
        for _ in range(2):
            await scenario.node(f"spare-{uuid.uuid4().hex[:8]}", pool)
        settings = scenario.settings(node_termination_grace_period_s=600.0)
        requests_before = _evictions()
        async with _running(settings, ctx, replicas=1):
            body = _interruption(asg, instance)[0]
            started = time.monotonic()
            scenario.sqs.send_message(QueueUrl=scenario.queue, MessageBody=body)
            while await asyncio.to_thread(scenario.depth) > 0:
                await asyncio.sleep(0.05)
            elapsed = time.monotonic() - started
        assert scenario._running_on(source) == 0, "the node was not drained"
        return {
            "drain_100_pods_s": elapsed,
            "drain_100_pods_eviction_requests": _evictions() - requests_before,
        }
    finally:
        scenario.cleanup()


async def _duplicate_events(ctx: BenchContext) -> dict[str, float]:
    scenario = Scenario(ctx)
    try:
        asg, instance, dns = scenario.asg_instance()
        pool = uuid.uuid4().hex[:8]
        source = await scenario.node(dns, pool)
        await scenario.workload(source, pool, 3)
        await scenario.node(f"spare-{uuid.uuid4().hex[:8]}", pool)
        kinds = _interruption(asg, instance)
        bodies = [kinds[i % len(kinds)] for i in range(COPIES)]
        settings = scenario.settings()
        async with _running(settings, ctx, replicas=2):
            for start in range(0, len(bodies), 10):
                scenario.sqs.send_message_batch(
                    QueueUrl=scenario.queue,
                    Entries=[
                        {"Id": str(i), "MessageBody": body}
                        for i, body in enumerate(bodies[start : start + 10])
                    ],
                )
            while await asyncio.to_thread(scenario.depth) > 0:
                await asyncio.sleep(0.1)
        query = (
            f"WorkflowType='DrainNode' AND CloudloopCluster='{settings.cluster_name}' "
            f"AND CloudloopName='{source}'"
        )
        runs: set[str] = set()
        for _ in range(10):  # visibility is eventually consistent: let it settle
            runs = {wf.run_id async for wf in ctx.client.list_workflows(query)}
            await asyncio.sleep(0.5)
        return {"duplicate_events_started_workflows": float(len(runs))}
    finally:
        scenario.cleanup()


async def _imds_interruption_to_drain_start(ctx: BenchContext) -> dict[str, float]:
    scenario = Scenario(ctx)
    try:
        instance, dns = scenario.aws.plain_instance()
        raw = scenario.aws.ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]
        placement = raw["Instances"][0]
        source = await scenario.node(dns, uuid.uuid4().hex[:8])
        identity = MockInstance(
            instance_id=instance,
            launch_time=placement["LaunchTime"],
            zone=placement["Placement"]["AvailabilityZone"],
            hostname=dns,
        )
        trigger = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=6)
        settings = scenario.settings()
        stamp = trigger.strftime("%Y-%m-%dT%H:%M:%SZ")
        with metadata_mock(
            ctx.stack.state_dir, identity, "spot", "--mock-trigger-time", stamp, delay_s=3600
        ) as endpoint:
            agent_settings = ImdsAgentNthSettings(
                imds_endpoint=endpoint, imds_timeout_s=settings.nth.imds_timeout_s
            )
            agent = ImdsAgent(
                ctx.kube,
                Imds(endpoint, timeout_s=agent_settings.imds_timeout_s),
                agent_settings,
                node=source,
            )
            notices = ImdsNotices(
                ctx.kube,
                ctx.client,
                settings.nth,
                task_queue=settings.temporal.task_queue,
                cluster=settings.cluster_name,
                provider=AWS.name,
            )
            worker = build_worker(
                ctx.client, settings, driver=AwsDriver(AWS.section(settings)), kube=ctx.kube
            )
            async with worker:
                tasks = [asyncio.create_task(agent.run()), asyncio.create_task(notices.run())]
                try:
                    while TAINT_KEYS[EventKind.SPOT_ITN] not in _taints(ctx.kube, source):
                        await asyncio.sleep(0.05)
                    elapsed = (datetime.now(UTC) - trigger).total_seconds()
                finally:
                    agent.stop()
                    notices.stop()
                    await asyncio.wait_for(tasks[0], 30)
                    tasks[1].cancel()
                    await asyncio.gather(tasks[1], return_exceptions=True)
        return {"imds_interruption_to_drain_start_s": elapsed}
    finally:
        scenario.cleanup()


def _taints(kube: Kube, node: str) -> set[str]:
    spec = (kube.get(NODES, node) or {}).get("spec", {})
    return {t["key"] for t in spec.get("taints") or []}


async def termination_figures(ctx: BenchContext) -> dict[str, float]:
    return {
        **await _drain_100_pods(ctx),
        **await _duplicate_events(ctx),
        **await _imds_interruption_to_drain_start(ctx),
    }
