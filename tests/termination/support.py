"""Shared parts of the termination handler's stack tests: kwok Nodes named after their instances,
a ReplicaSet behind a PDB, the handler's settings and starters, and a webhook receiver (the AWS
side, queues, ASGs and message bodies, is :mod:`devstack.backends.aws`)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import REGISTRY
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Event, Pod
from cloudloop.kube.resources import EVENTS, NODES, PDBS, PODS, Resource
from cloudloop.settings import NthSettings
from devstack.autoscaling_ext import lifecycle_calls
from devstack.kube import KWOK_NODE_ANNOTATION
from devstack.local import LocalStack
from starters.termination import QueueProcessor
from tests.helpers import eventually
from tests.support.workers import aws_env, worker_env

REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
POOL_LABEL = "cloudloop-test/pool"


# -- kube --------------------------------------------------------------------------------------
def kwok_node(kube: Kube, name: str, pool: str) -> str:
    kube.create(
        NODES,
        {
            "metadata": {
                "name": name,
                "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                "labels": {"kubernetes.io/hostname": name, POOL_LABEL: pool},
            }
        },
    )
    return name


def node_ready(kube: Kube, name: str) -> bool:
    node = kube.get(NODES, name) or {}
    conditions = node.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def replica_set(kube: Kube, namespace: str, name: str, replicas: int, pool: str) -> None:
    labels = {"app": name}
    kube.create(
        REPLICA_SETS,
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {POOL_LABEL: pool},
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "c", "image": "busybox"}],
                    },
                },
            },
        },
        namespace,
    )


def pdb(kube: Kube, namespace: str, app: str, *, max_unavailable: int) -> None:
    kube.create(
        PDBS,
        {
            "metadata": {"name": app, "namespace": namespace},
            "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"app": app}}},
        },
        namespace,
    )


def running_pods(kube: Kube, namespace: str, node: str | None = None) -> list[Pod]:
    pods = kube.list(PODS, namespace)["items"]
    return [
        p
        for p in pods
        if p.get("status", {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
        and (node is None or p["spec"].get("nodeName") == node)
    ]


def pods_on(kube: Kube, node: str, namespace: str) -> list[Pod]:
    return kube.list(PODS, namespace, fieldSelector=f"spec.nodeName={node}")["items"]


def node_events(kube: Kube, node: str, reason: str) -> list[Event]:
    events = kube.list(EVENTS, "default", fieldSelector=f"involvedObject.name={node}")["items"]
    return [e for e in events if e["reason"] == reason]


def taints(kube: Kube, node: str) -> dict[str, str]:
    spec = (kube.get(NODES, node) or {}).get("spec", {})
    return {t["key"]: t.get("value", "") for t in spec.get("taints") or []}


def delete_nodes(kube: Kube, *names: str) -> None:
    for name in names:
        kube.delete(NODES, name)


def metric(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


async def workload(
    kube: Kube, namespace: str, source: str, pool: str, replicas: int, *, spare: bool = True
) -> str:
    """``replicas`` pods of a ReplicaSet behind a PDB (maxUnavailable 1) on ``source``, then a
    spare kwok Node in the same pool for their replacements (unless ``spare`` is false: then
    one eviction is allowed and the rest wait until :func:`spare_node`); the spare's name."""
    await eventually(lambda: node_ready(kube, source), what="source node Ready", timeout=60)
    await asyncio.to_thread(replica_set, kube, namespace, "web", replicas, pool)
    await asyncio.to_thread(pdb, kube, namespace, "web", max_unavailable=1)
    await eventually(
        lambda: len(running_pods(kube, namespace, source)) == replicas,
        timeout=60,
        what="pods running on the source node",
    )
    return await spare_node(kube, pool) if spare else ""


async def spare_node(kube: Kube, pool: str) -> str:
    spare = await asyncio.to_thread(kwok_node, kube, f"spare-{uuid.uuid4().hex[:8]}", pool)
    await eventually(lambda: node_ready(kube, spare), what="spare node Ready", timeout=60)
    return spare


def token_calls(stack: LocalStack, token: str, action: str) -> list[dict[str, Any]]:
    return [
        c
        for c in lifecycle_calls(stack.autoscaling_endpoint)
        if c["token"] == token and c["action"] == action
    ]


# -- processes ---------------------------------------------------------------------------------
def nth_settings(settings: Settings, stack: LocalStack, queue_url: str, **nth: Any) -> Settings:
    """The test's settings with a fast termination handler on ``queue_url``."""
    defaults: dict[str, Any] = {
        "queue_url": queue_url,
        "autoscaling_endpoint_url": stack.autoscaling_endpoint,
        "wait_time_s": 1,
        "visibility_timeout_s": 10,
        "heartbeat_interval_s": 0.5,
        "eviction_retry_interval_s": 0.5,
        "drain_poll_interval_s": 1.0,
        "drain_round_s": 5.0,
        "activity_heartbeat_timeout_s": 3.0,
        "node_termination_grace_period_s": 60.0,
        "tagged_metrics_interval_s": 3600.0,
    }
    return settings.model_copy(update={"nth": NthSettings(**{**defaults, **nth})})


def processor(settings: Settings, kube: Kube, client: Client) -> QueueProcessor:
    from cloudloop.cloud.aws.termination import AwsTermination

    return QueueProcessor(
        kube,
        client,
        AwsTermination(AWS.section(settings), settings.nth),
        settings.nth,
        task_queue=settings.temporal.task_queue,
        cluster=settings.cluster_name,
        id_scope=settings.temporal.id_scope,  # as the starter's (QueueProcessor.from_context)
    )


@contextlib.asynccontextmanager
async def running(*processors: QueueProcessor) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(p.run()) for p in processors]
    try:
        yield
    finally:
        for p in processors:
            p.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def drain_workflows(client: Client, settings: Settings, node: str) -> list[Any]:
    query = (
        f"WorkflowType='DrainNode' AND CloudloopCluster='{settings.cluster_name}' "
        f"AND CloudloopKind='Node' AND CloudloopName='{node}'"
    )
    return [wf async for wf in client.list_workflows(query)]


# -- webhook -----------------------------------------------------------------------------------
@dataclass
class WebhookReceiver:
    """A loopback HTTP server that records the POSTs it gets."""

    status: int = 200
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    url: str = ""


@contextlib.contextmanager
def webhook_receiver(status: int = 200) -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver(status=status)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            receiver.requests.append((dict(self.headers.items()), body))
            self.send_response(receiver.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def nth_worker_env(settings: Settings, stack: LocalStack) -> dict[str, str]:
    """Environment of a ``cloudloop worker`` process for ``settings`` (with its NTH part)."""
    return worker_env(
        settings,
        stack,
        aws_env(stack.aws_endpoint, CLOUDLOOP_AWS__MAX_ATTEMPTS="2"),
        {"CLOUDLOOP_NTH__AUTOSCALING_ENDPOINT_URL": settings.nth.autoscaling_endpoint_url or ""},
    )
