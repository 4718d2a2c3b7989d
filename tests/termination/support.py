"""Shared parts of the termination handler's stack tests: AWS clients on moto, an ASG with a
lifecycle hook, kwok Nodes named after their instances, a ReplicaSet behind a PDB, SQS message
bodies of each kind, and a webhook receiver."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
from prometheus_client import REGISTRY
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import EVENTS, NODES, PDBS, PODS, Resource
from cloudloop.messages.termination import MANAGED_TAG
from cloudloop.settings import NthSettings, Settings
from devstack.autoscaling_ext import lifecycle_calls
from devstack.kube import KWOK_NODE_ANNOTATION
from devstack.local import LocalStack
from starters.termination import QueueProcessor
from tests.helpers import eventually

REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
POOL_LABEL = "cloudloop-test/pool"


def aws_client(service: str, endpoint: str) -> Any:
    make: Any = boto3.client  # the stubs want a literal service name
    return make(
        service,
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@dataclass
class Aws:
    """boto3 clients on moto (Auto Scaling through the lifecycle extension)."""

    sqs: Any
    ec2: Any
    autoscaling: Any

    @classmethod
    def of(cls, stack: LocalStack) -> Aws:
        return cls(
            sqs=aws_client("sqs", stack.moto_endpoint),
            ec2=aws_client("ec2", stack.moto_endpoint),
            autoscaling=aws_client("autoscaling", stack.autoscaling_endpoint),
        )

    def queue(self) -> str:
        return str(self.sqs.create_queue(QueueName=f"nth-{uuid.uuid4().hex[:10]}")["QueueUrl"])

    def depth(self, queue_url: str) -> int:
        """Messages still in the queue, visible or held."""
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(
            attrs["ApproximateNumberOfMessagesNotVisible"]
        )

    def send(self, queue_url: str, *bodies: str) -> None:
        for body in bodies:
            self.sqs.send_message(QueueUrl=queue_url, MessageBody=body)

    def asg_instance(self, *, managed: bool = True) -> tuple[str, str, str, str]:
        """(ASG name, hook name, instance ID, private DNS name) of a one-instance ASG."""
        name = f"asg-{uuid.uuid4().hex[:8]}"
        image = self.ec2.describe_images()["Images"][0]["ImageId"]
        self.ec2.create_launch_template(
            LaunchTemplateName=f"lt-{name}",
            LaunchTemplateData={"ImageId": image, "InstanceType": "t3.micro"},
        )
        tags = [{"Key": MANAGED_TAG, "Value": "", "PropagateAtLaunch": True}] if managed else []
        self.autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=name,
            LaunchTemplate={"LaunchTemplateName": f"lt-{name}"},
            MinSize=1,
            MaxSize=1,
            DesiredCapacity=1,
            AvailabilityZones=["us-east-1a"],
            Tags=tags,
        )
        self.autoscaling.put_lifecycle_hook(
            AutoScalingGroupName=name,
            LifecycleHookName="nth",
            LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
            HeartbeatTimeout=300,
        )
        group = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])
        instance_id = group["AutoScalingGroups"][0]["Instances"][0]["InstanceId"]
        raw = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0][
            "Instances"
        ][0]
        return name, "nth", instance_id, raw["PrivateDnsName"]

    def plain_instance(self, *, managed: bool = True) -> tuple[str, str]:
        """(instance ID, private DNS name) of an instance outside any ASG."""
        image = self.ec2.describe_images()["Images"][0]["ImageId"]
        tags = [{"ResourceType": "instance", "Tags": [{"Key": MANAGED_TAG, "Value": ""}]}]
        raw = self.ec2.run_instances(
            ImageId=image, MinCount=1, MaxCount=1, TagSpecifications=tags if managed else []
        )["Instances"][0]
        return raw["InstanceId"], raw["PrivateDnsName"]


# -- message bodies --------------------------------------------------------------------------
def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def eventbridge(source: str, detail_type: str, detail: dict[str, Any], event_id: str) -> str:
    return json.dumps(
        {
            "version": "0",
            "id": event_id,
            "detail-type": detail_type,
            "source": source,
            "account": "123456789012",
            "time": _now(),
            "region": "us-east-1",
            "resources": [],
            "detail": detail,
        }
    )


def asg_terminate(asg: str, hook: str, instance: str, token: str, event_id: str = "") -> str:
    return eventbridge(
        "aws.autoscaling",
        "EC2 Instance-terminate Lifecycle Action",
        {
            "LifecycleActionToken": token,
            "AutoScalingGroupName": asg,
            "LifecycleHookName": hook,
            "EC2InstanceId": instance,
            "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
        },
        event_id or str(uuid.uuid4()),
    )


def spot_itn(instance: str, event_id: str = "") -> str:
    return eventbridge(
        "aws.ec2",
        "EC2 Spot Instance Interruption Warning",
        {"instance-id": instance, "instance-action": "terminate"},
        event_id or str(uuid.uuid4()),
    )


def state_change(instance: str, state: str, event_id: str = "") -> str:
    return eventbridge(
        "aws.ec2",
        "EC2 Instance State-change Notification",
        {"instance-id": instance, "state": state},
        event_id or str(uuid.uuid4()),
    )


def rebalance(instance: str, event_id: str = "") -> str:
    return eventbridge(
        "aws.ec2",
        "EC2 Instance Rebalance Recommendation",
        {"instance-id": instance},
        event_id or str(uuid.uuid4()),
    )


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


def running_pods(kube: Kube, namespace: str, node: str | None = None) -> list[dict[str, Any]]:
    pods = kube.list(PODS, namespace)["items"]
    return [
        p
        for p in pods
        if p.get("status", {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
        and (node is None or p["spec"].get("nodeName") == node)
    ]


def pods_on(kube: Kube, node: str, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.list(PODS, namespace, fieldSelector=f"spec.nodeName={node}")[
        "items"
    ]
    return items


def node_events(kube: Kube, node: str, reason: str) -> list[dict[str, Any]]:
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
        "drain_poll_interval_s": 0.1,
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
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def worker_env(settings: Settings, stack: LocalStack, metrics_port: int) -> dict[str, str]:
    """Environment of a ``cloudloop worker`` process for ``settings`` (with its NTH part)."""
    import os

    nth = settings.nth
    return {
        **os.environ,
        "CLOUDLOOP_CLUSTER_NAME": settings.cluster_name,
        "CLOUDLOOP_KUBECONFIG": str(stack.kubeconfig),
        "CLOUDLOOP_METRICS_PORT": str(metrics_port),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": settings.temporal.task_queue,
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "1",
        "CLOUDLOOP_AWS__ENDPOINT_URL": stack.moto_endpoint,
        "CLOUDLOOP_AWS__ACCESS_KEY_ID": "testing",
        "CLOUDLOOP_AWS__SECRET_ACCESS_KEY": "testing",
        "CLOUDLOOP_AWS__MAX_ATTEMPTS": "2",
        "CLOUDLOOP_NTH__AUTOSCALING_ENDPOINT_URL": nth.autoscaling_endpoint_url or "",
    }
