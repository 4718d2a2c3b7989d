"""``cloudloop dev``: the local stack, the worker and the starter in one foreground process.

It prints where to look (Temporal UI, kubeconfig, kubectl commands), seeds a small demo and
stops everything on Ctrl-C. ``print_status`` backs ``cloudloop status``.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from cloudloop import temporal
from cloudloop.cloud.aws import AwsDriver
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.client import api_client
from cloudloop.kube.crds import apply_crds
from cloudloop.kube.resources import CLOUD_PROBES, NODES, SERVICES, Resource
from cloudloop.net import free_port
from cloudloop.rules.node import INSTANCE_TYPE_LABELS, UNINITIALIZED_TAINT, ZONE_LABELS
from cloudloop.settings import AwsSettings, LeaderElectionSettings, Settings, TemporalSettings
from devstack import gotools
from devstack.aws_network import create_cluster_network
from devstack.kube import ALL_COMPONENTS, CLUSTER_CIDR, KWOK_NODE_ANNOTATION, KubeOptions
from devstack.local import LocalStack, StackOptions

log = logging.getLogger(__name__)

DEMO_NODES = 2
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")


def stack_settings(
    stack: LocalStack, *, task_queue: str = "cloudloop", cluster: str = "dev"
) -> Settings:
    """Settings that point a worker or starter at a running local stack."""
    return Settings(
        cluster_name=cluster,
        provider="aws",
        kubeconfig=stack.kubeconfig,
        metrics_port=free_port(),
        metrics_bind="127.0.0.1",
        temporal=TemporalSettings(
            address=stack.temporal_address, task_queue=task_queue, graceful_shutdown_s=5
        ),
        aws=AwsSettings(
            endpoint_url=stack.moto_endpoint,
            region="us-east-1",
            access_key_id=SecretStr("testing"),
            secret_access_key=SecretStr("testing"),
            timeout_s=5,
            max_attempts=2,
        ),
        leader_election=LeaderElectionSettings(
            namespace="kube-system", identity=f"dev-{os.getpid()}"
        ),
    )


def seed_demo(kube: Kube, settings: Settings) -> None:
    """The demo, in a fresh moto cloud and cluster:

    - a VPC with cluster-tagged subnets, a route table and a node security group;
    - EC2 instances with kwok Nodes for them, left to node sync to initialize (providerID,
      zone/instance-type labels, addresses) and to routes (their pod CIDRs);
    - a ``type: LoadBalancer`` Service, which gets a Classic ELB through its workflow;
    - a CloudProbe.
    """
    ec2 = AwsDriver(settings.aws).client("ec2")
    network = create_cluster_network(ec2, settings.cluster_name, route_table=True)
    launched = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=DEMO_NODES,
        MaxCount=DEMO_NODES,
        InstanceType="m5.large",
        SubnetId=network.subnet_ids[0],
        SecurityGroupIds=[network.node_group_id],
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    *network.owned_tags,
                    {"Key": settings.nth.managed_tag, "Value": "true"},
                ],
            }
        ],
    )
    for instance in launched["Instances"]:
        name = instance["PrivateDnsName"]  # what a kubelet on EC2 names its Node
        kube.create(
            NODES,
            {
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                    "labels": {"cloudloop.io/demo": "true", "kubernetes.io/hostname": name},
                },
                "spec": {
                    "taints": [
                        {"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}
                    ]
                },
            },
        )
    kube.create(
        DEPLOYMENTS,
        {
            "metadata": {"name": "demo-web", "namespace": "default"},
            "spec": {
                "replicas": 4,
                "selector": {"matchLabels": {"app": "demo-web"}},
                "template": {
                    "metadata": {"labels": {"app": "demo-web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                },
            },
        },
        "default",
    )
    kube.create(
        SERVICES,
        {
            "metadata": {"name": "demo-web", "namespace": "default"},
            "spec": {
                "type": "LoadBalancer",
                "selector": {"app": "demo-web"},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            },
        },
        "default",
    )
    try:
        kube.create(
            CLOUD_PROBES,
            {"metadata": {"name": "aws", "namespace": "default"}, "spec": {"provider": "aws"}},
            "default",
        )
    except KubeError as exc:
        if not exc.conflict:
            raise


DEMO_QUEUE = "cloudloop-dev-interruptions"
DEMO_FILE = "demo.json"


def spot_interruption_message(instance_id: str, event_id: str) -> str:
    """An EventBridge "EC2 Spot Instance Interruption Warning", as AWS sends it to SQS."""
    return json.dumps(
        {
            "version": "0",
            "id": event_id,
            "source": "aws.ec2",
            "account": "123456789012",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "time": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "us-east-1",
            "resources": [f"arn:aws:ec2:us-east-1a:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
    )


def inject_spot_interruption(state_dir: Path, node: str | None) -> str:
    """Send a Spot interruption for ``node`` (default: the first demo node) to the demo's queue;
    return what to look for."""
    demo = json.loads((state_dir / DEMO_FILE).read_text())
    stack = json.loads((state_dir / "stack.json").read_text())
    kube = Kube(api_client(stack["kubeconfigs"]["main"]))
    nodes = kube.list(NODES, labelSelector="cloudloop.io/demo=true")["items"]
    chosen = next((n for n in nodes if node in (None, n["metadata"]["name"])), None)
    if chosen is None or not chosen["spec"].get("providerID"):
        raise RuntimeError(f"no initialized demo node {node or ''} (is `cloudloop dev` up?)")
    instance_id = chosen["spec"]["providerID"].rsplit("/", 1)[-1]
    aws = AwsSettings(
        endpoint_url=stack["moto_endpoint"],
        region="us-east-1",
        access_key_id=SecretStr("testing"),
        secret_access_key=SecretStr("testing"),
    )
    AwsDriver(aws).client("sqs").send_message(
        QueueUrl=demo["queue_url"],
        MessageBody=spot_interruption_message(instance_id, str(uuid.uuid4())),
    )
    return (
        f"Spot interruption sent for {chosen['metadata']['name']} ({instance_id}); watch "
        f"the drain: temporal workflow list --address {stack['temporal_address']} "
        "--query \"WorkflowType='DrainNode'\""
    )


def _banner(stack: LocalStack, kubectl: Path) -> str:
    kubeconfig = stack.kubeconfig
    return "\n".join(
        [
            "",
            f"cloudloop dev is up (stack started in {stack.started_in_s:.1f}s). "
            "Ctrl-C stops everything.",
            f"  Temporal UI : {stack.temporal_ui_url}/namespaces/default/workflows",
            f"  Temporal    : {stack.temporal_address}",
            f"  kubeconfig  : {kubeconfig}",
            f"  moto (AWS)  : {stack.moto_endpoint}",
            f"  logs        : {stack.state_dir / 'logs'}",
            "Watch the demo:",
            f"  export KUBECONFIG={kubeconfig}",
            f"  {kubectl} get nodes -L {ZONE_LABELS[0]},{INSTANCE_TYPE_LABELS[0]}",
            f"  {kubectl} get services demo-web   # EXTERNAL-IP: the ELB's hostname",
            f"  {kubectl} get cloudprobes -o wide",
            f"  cloudloop inject spot-interruption --state-dir {stack.state_dir}"
            "   # then: kubectl get nodes,pods -o wide",
            f"  {kubectl} get events --field-selector involvedObject.kind=CloudProbe",
            f"  temporal workflow list --address {stack.temporal_address} "
            "--query \"CloudloopKind='CloudProbe'\"",
            "",
        ]
    )


async def run_dev(state_dir: Path, *, temporal_port: int, ui_port: int, fresh: bool) -> None:
    from starters.main import run as run_starter
    from workers.main import run as run_worker

    if fresh:
        shutil.rmtree(state_dir, ignore_errors=True)
    stack = LocalStack(
        StackOptions(
            state_dir=state_dir,
            temporal_port=temporal_port,
            temporal_ui_port=ui_port,
            kube=(KubeOptions(components=ALL_COMPONENTS),),
        )
    )
    await asyncio.to_thread(stack.start)
    try:
        kube = Kube(api_client(stack.kubeconfig))
        await asyncio.to_thread(apply_crds, kube)
        kubectl = state_dir / "bin" / "kubectl"
        kubectl.parent.mkdir(parents=True, exist_ok=True)
        kubectl.unlink(missing_ok=True)
        kubectl.symlink_to(gotools.binary_path("kubectl"))
        stop = asyncio.Event()
        settings = stack_settings(stack)
        # The demo cluster's pod network: routes for the nodes' pod CIDRs (allocated by the
        # controller-manager from the same range) go into the demo VPC's route table.
        settings = settings.model_copy(
            update={"ccm": settings.ccm.model_copy(update={"cluster_cidr": CLUSTER_CIDR})}
        )
        queue = AwsDriver(settings.aws).client("sqs").create_queue(QueueName=DEMO_QUEUE)
        settings = settings.model_copy(
            update={"nth": settings.nth.model_copy(update={"queue_url": queue["QueueUrl"]})}
        )
        (state_dir / DEMO_FILE).write_text(json.dumps({"queue_url": queue["QueueUrl"]}))
        await asyncio.to_thread(seed_demo, kube, settings)
        worker = asyncio.create_task(run_worker(settings, stop=stop))
        starter = asyncio.create_task(
            run_starter(settings.model_copy(update={"metrics_port": free_port()}), stop=stop)
        )
        print(_banner(stack, kubectl), flush=True)
        done, _ = await asyncio.wait({worker, starter}, return_when=asyncio.FIRST_COMPLETED)
        stop.set()
        await asyncio.gather(worker, starter, return_exceptions=True)
        for task in done:
            if task.exception() is not None:
                log.error("%s ended with an error", task.get_name(), exc_info=task.exception())
    finally:
        await asyncio.to_thread(stack.stop)
        print("cloudloop dev stopped; every process of the stack has exited.", flush=True)


async def print_status(settings: Settings, stack: dict[str, Any] | None) -> bool:
    """Print reachability of Temporal and Kubernetes and the open workflows; True if all answer."""
    ok = True
    address = stack["temporal_address"] if stack else settings.temporal.address
    kubeconfig = stack["kubeconfigs"]["main"] if stack else settings.kubeconfig
    try:
        client = await temporal.connect(settings.temporal.model_copy(update={"address": address}))
        counts: dict[str, int] = {}
        async for wf in client.list_workflows("ExecutionStatus='Running'"):
            counts[wf.workflow_type] = counts.get(wf.workflow_type, 0) + 1
        print(f"temporal   {address}: ok; running workflows: {counts or 'none'}")
    except Exception as exc:
        ok = False
        print(f"temporal   {address}: unreachable ({exc})")
    try:
        kube = Kube(api_client(kubeconfig))
        version = await asyncio.to_thread(kube.request, "GET", "/version")
        nodes = await asyncio.to_thread(kube.list, NODES)
        print(f"kubernetes {version.get('gitVersion')}: ok; {len(nodes.get('items', []))} nodes")
    except Exception as exc:
        ok = False
        print(f"kubernetes: unreachable ({exc})")
    return ok
