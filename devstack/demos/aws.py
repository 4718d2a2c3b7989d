"""The AWS demo of ``cloudloop dev``: moto's EC2, ELB and SQS with kwok Nodes for the instances.

A VPC with cluster-tagged subnets and route table, two instances whose Nodes node sync
initializes and routes sync gives pod routes, an LB Service, a CloudProbe and an SQS queue that
``cloudloop inject spot-interruption`` feeds; and a node group: the Cluster API manager runs in
the demo's control plane, an ``AWSInstanceClass`` rendered into a MachineDeployment
(``render_node_group``, what ``cloudloop nodegroup render`` prints) is scaled 0 → 2, and each
AWSMachine's ``Machine`` workflow launches its EC2 instance; and storage (:mod:`.storage`): the
CSI controller behind the real sidecars, and a Deployment mounting a ``gp3`` PVC that gets bound
to an EBS volume and attached to its Node's instance, through the volume workflows. And a layout
(:meth:`AwsDemo.layout_config`, the ``WithoutNAT`` example) that ``cloudloop dev`` applies and
whose converge Schedule runs one pass (:func:`devstack.devmode.converge_demo`).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import uuid
from pathlib import Path

from pydantic import SecretStr

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.capi import INFRA_KINDS as AWS_KINDS
from cloudloop.cloud.aws.capi import NODE_TEMPLATES as AWS_TEMPLATES
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.layout import DISCOVERY_API_VERSION, DISCOVERY_KIND
from cloudloop.cloud.aws.settings import AwsNodeDefaults, AwsSettings
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import CLOUD_PROBES, NODES, SECRETS, SERVICES
from cloudloop.rules.discovery import PROVIDER_CONFIGURATION_SECRET, PROVIDER_DISCOVERY_KEY
from cloudloop.rules.node import UNINITIALIZED_TAINT
from devstack.backends.aws import AMI, ZONES, ClusterNetwork, create_cluster_network
from devstack.backends.aws_layouts import layout_config
from devstack.demos.common import DEPLOYMENTS, seed_node_group
from devstack.demos.storage import CLAIM, DemoStorage, registered_node
from devstack.kube import CAPI, KWOK_NODE_ANNOTATION
from devstack.local import LocalStack, StackOptions

DEMO_NODES = 2
#: The label of the demo's EC2 Nodes (the ones with a CSINode).
DEMO_LABEL = "cloudloop.io/demo"
#: The demo node group: its name, InstanceClass and size.
GROUP = "demo-workers"
GROUP_SIZE = 2
#: The demo claim's class: the default of the classes the CSI controller writes (as the chart's).
STORAGE_CLASS = "gp3"
#: The layout of the demo's converge pass (``cloudloop dev``: one pass in the Temporal UI).
LAYOUT_EXAMPLE = (
    Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples" / "aws-without-nat.yaml"
)


class AwsDemo:
    """moto is always part of the stack; the demo adds the NTH queue to the settings."""

    name = "aws"

    def __init__(self) -> None:
        self.storage: DemoStorage | None = None

    def stack_options(self, options: StackOptions) -> StackOptions:
        """The Cluster API manager joins the demo's control plane (for the node group)."""
        kube = tuple(
            dataclasses.replace(k, components=(*k.components, CAPI))
            if k.name == "main" and CAPI not in k.components
            else k
            for k in options.kube
        )
        return dataclasses.replace(options, kube=kube)

    def seed(self, stack: LocalStack, kube: Kube, settings: Settings) -> Settings:
        queue = (
            AwsDriver(AWS.section(settings))
            .session.client("sqs")
            .create_queue(QueueName=DEMO_QUEUE)
        )
        settings = settings.model_copy(
            update={"nth": settings.nth.model_copy(update={"queue_url": queue["QueueUrl"]})}
        )
        (stack.state_dir / DEMO_FILE).write_text(json.dumps({"queue_url": queue["QueueUrl"]}))
        network = _seed_cloud_and_cluster(kube, settings)
        self.storage = DemoStorage(settings, stack.kubeconfig, stack.state_dir / "logs")
        self.storage.start(kube, STORAGE_CLASS, {DEMO_LABEL: "true"})
        settings = _node_group_settings(settings, network)
        _seed_provider_discovery(kube, settings, network)
        _seed_node_group(kube, settings)
        return settings

    def layout_config(self, folder: Path, prefix: str) -> Path | None:
        """The ``WithoutNAT`` example on moto (the workers' endpoint and moto's keys)."""
        return layout_config(LAYOUT_EXAMPLE, folder, prefix, name="aws-cluster.yaml")

    def stop(self) -> None:
        """The CSI controller and its sidecars (the stack stops after them)."""
        if self.storage is not None:
            self.storage.stop()

    def endpoints(self, stack: LocalStack) -> list[str]:
        return [
            f"  AWS front   : {stack.aws_endpoint} (moto at {stack.moto_endpoint}, behind "
            "the real limits)"
        ]

    def watch(self, stack: LocalStack, kubectl: Path) -> list[str]:
        return [
            "  Temporal UI → Schedules: layout-converge/dev-layout   # the demo layout's converge",
            f"  {kubectl} get services demo-web   # EXTERNAL-IP: the ELB's hostname",
            f"  {kubectl} get cloudprobes -o wide",
            f"  cloudloop inject spot-interruption --state-dir {stack.state_dir}"
            "   # then: kubectl get nodes,pods -o wide",
            f"  {kubectl} get events --field-selector involvedObject.kind=CloudProbe",
            f"  temporal workflow list --address {stack.temporal_address} "
            "--query \"CloudloopKind='CloudProbe'\"",
            f"  {kubectl} get nodegroups,machinedeployments,machines,awsmachines -n default"
            f"   # node group {GROUP}: {GROUP_SIZE} machines",
            f"  temporal workflow list --address {stack.temporal_address} "
            "--query \"WorkflowType='Machine'\"",
            f"  {kubectl} patch nodegroup {GROUP} -n default --type=merge "
            '-p \'{"spec":{"cloudInstances":{"maxPerZone":3}}}\''
            f" && {kubectl} scale machinedeployment -n default -l node-group={GROUP} --replicas=3",
            f"  {kubectl} get pvc,volumeattachments   # {CLAIM}: Bound to an EBS volume "
            "(StorageClass gp3), attached to its pod's node",
            f"  temporal workflow list --address {stack.temporal_address} "
            "--query \"WorkflowType='CreateVolume' OR WorkflowType='AttachVolume'\"",
        ]


def _seed_cloud_and_cluster(kube: Kube, settings: Settings) -> ClusterNetwork:
    """The demo, in a fresh moto cloud and cluster:

    - a VPC with cluster-tagged subnets, a route table and a node security group;
    - EC2 instances with kwok Nodes for them, left to node sync to initialize (providerID,
      zone/instance-type labels, addresses) and to routes (their pod CIDRs);
    - a ``type: LoadBalancer`` Service, which gets a Classic ELB through its workflow;
    - a CloudProbe;
    - for each Node, what node-driver-registrar would write (kwok runs none): its CSINode and
      topology label (:mod:`.storage`).
    """
    driver = AwsDriver(AWS.section(settings))
    ec2 = driver.session.client("ec2")
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
                    "labels": {DEMO_LABEL: "true", "kubernetes.io/hostname": name},
                },
                "spec": {
                    "taints": [
                        {"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}
                    ]
                },
            },
        )
        registered_node(
            kube,
            name,
            driver=settings.csi.driver_name,
            node_id=instance["InstanceId"],
            topology={
                driver.volumes.volume_topology_key: instance["Placement"]["AvailabilityZone"]
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
    return network


def _node_group_settings(settings: Settings, network: ClusterNetwork) -> Settings:
    """The ``aws`` node defaults (Deckhouse's provider values) for the demo's network, with the
    IAM instance profile and key pair Terraform would have made."""
    driver = AwsDriver(AWS.section(settings))
    profile = f"{settings.cluster_name}-node"
    driver.session.client("iam").create_instance_profile(InstanceProfileName=profile)
    driver.session.client("ec2").create_key_pair(KeyName=settings.cluster_name)
    aws = AWS.section(settings).model_copy(
        update={
            "instances": AwsNodeDefaults(
                ami=AMI,
                additional_security_groups=[network.node_group_id],
                iam_profile_name=profile,
            ),
            "zone_to_subnet_id_map": dict(zip(ZONES, network.subnet_ids, strict=True)),
            "key_name": settings.cluster_name,
            "tags": {"demo": "cloudloop-dev"},
        }
    )
    return settings.model_copy(update={"aws": aws})


def _seed_provider_discovery(kube: Kube, settings: Settings, network: ClusterNetwork) -> None:
    """``kube-system/d8-provider-cluster-configuration``'s discovery document as the AWS base
    layout writes it (key pair, node defaults, subnets per zone), so the discoverer merges its
    live data into a document Deckhouse's schema accepts, as in a cluster dhctl made."""
    aws = AWS.section(settings)
    document = {
        "apiVersion": DISCOVERY_API_VERSION,
        "kind": DISCOVERY_KIND,
        "keyName": aws.key_name,
        "instances": {
            "ami": AMI,
            "additionalSecurityGroups": [network.node_group_id],
            "associatePublicIPAddress": False,
            "iamProfileName": f"{settings.cluster_name}-node",
        },
        "loadBalancerSecurityGroup": "",
        "zones": list(ZONES),
        "zoneToSubnetIdMap": dict(zip(ZONES, network.subnet_ids, strict=True)),
    }
    text = json.dumps(document, sort_keys=True)
    kube.create(
        SECRETS,
        {
            "metadata": {"name": PROVIDER_CONFIGURATION_SECRET, "namespace": "kube-system"},
            "data": {PROVIDER_DISCOVERY_KEY: base64.b64encode(text.encode()).decode()},
        },
        "kube-system",
    )


def _seed_node_group(kube: Kube, settings: Settings) -> None:
    """An AWSInstanceClass, the CAPI Cluster ``dev`` with its AWSCluster, a bootstrap Secret and
    a NodeGroup of :data:`GROUP_SIZE` in the first zone (the starter renders it)."""
    seed_node_group(
        kube,
        instance_class={
            "apiVersion": "deckhouse.io/v1",
            "kind": AWS_TEMPLATES.instance_class.kind,
            "metadata": {"name": GROUP},
            "spec": {"instanceType": "m5.large", "diskSizeGb": 30, "diskType": "gp3"},
        },
        kinds=AWS_KINDS,
        templates=AWS_TEMPLATES,
        namespace="default",
        size=GROUP_SIZE,
        zones=(ZONES[0],),
        cluster="dev",
    )


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
        endpoint_url=stack.get("aws_endpoint") or stack["moto_endpoint"],
        region="us-east-1",
        access_key_id=SecretStr("testing"),
        secret_access_key=SecretStr("testing"),
    )
    AwsDriver(aws).session.client("sqs").send_message(
        QueueUrl=demo["queue_url"],
        MessageBody=spot_interruption_message(instance_id, str(uuid.uuid4())),
    )
    return (
        f"Spot interruption sent for {chosen['metadata']['name']} ({instance_id}); watch "
        f"the drain: temporal workflow list --address {stack['temporal_address']} "
        "--query \"WorkflowType='DrainNode'\""
    )
