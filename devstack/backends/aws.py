"""AWS in moto: boto3 clients, driver settings, a cluster's network, instances, and the
termination handler's side of the cloud (SQS queues, Auto Scaling groups with a lifecycle hook,
the EventBridge messages AWS sends), as the dev demo, the tests and the benchmarks set them up.

Rules: every client signs with moto's fixed test credentials in :data:`REGION`; the network is
what Terraform's base-infrastructure makes (VPC, cluster-tagged and named subnets, the
``<cluster>-nodes`` group, optionally a cluster-tagged route table); nothing here deletes what it
made (moto lives as long as its stack).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3
from pydantic import SecretStr

from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.messages.termination import MANAGED_TAG

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import TagTypeDef

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b")
#: An image moto serves from its start.
AMI = "ami-12c6146b"
#: moto's credentials (any key works unless IAM authentication is on).
TEST_KEY = "testing"
#: EC2 takes at most this many instances per RunInstances call in the scenarios.
LAUNCH_BATCH = 100


def aws_client(service: str, endpoint: str | None = None) -> Any:
    """A boto3 client of ``service`` on ``endpoint`` (``None``: moto's in-process mock)."""
    make: Any = boto3.client  # the stubs want a literal service name
    return make(
        service,
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id=TEST_KEY,
        aws_secret_access_key=TEST_KEY,
    )


def aws_settings(endpoint: str, **overrides: Any) -> AwsSettings:
    """The driver's settings for moto at ``endpoint``; ``overrides`` set any other field."""
    values: dict[str, Any] = {
        "endpoint_url": endpoint,
        "region": REGION,
        "access_key_id": SecretStr(TEST_KEY),
        "secret_access_key": SecretStr(TEST_KEY),
    }
    values.update(overrides)
    return AwsSettings(**values)


def owned(cluster: str) -> list[TagTypeDef]:
    """The tag that marks a resource as the cluster's own."""
    return [{"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"}]


@dataclass
class ClusterNetwork:
    vpc_id: str
    owned_tags: list[TagTypeDef]
    subnet_ids: list[str] = field(default_factory=list)
    node_group_id: str = ""
    route_table_id: str = ""


def create_cluster_network(ec2: Any, cluster: str, *, route_table: bool = False) -> ClusterNetwork:
    """One VPC, a subnet per zone (named ``<cluster>-<zone>``) and the ``<cluster>-nodes`` group,
    all tagged ``owned``; with ``route_table``, a cluster-tagged route table for pod routes too."""
    tags = owned(cluster)
    network = ClusterNetwork(
        vpc_id=ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"], owned_tags=tags
    )
    for index, zone in enumerate(ZONES):
        network.subnet_ids.append(
            ec2.create_subnet(
                VpcId=network.vpc_id,
                CidrBlock=f"10.0.{index + 1}.0/24",
                AvailabilityZone=zone,
                TagSpecifications=[
                    {
                        "ResourceType": "subnet",
                        "Tags": [*tags, {"Key": "Name", "Value": f"{cluster}-{zone}"}],
                    }
                ],
            )["Subnet"]["SubnetId"]
        )
    if route_table:
        network.route_table_id = ec2.create_route_table(
            VpcId=network.vpc_id,
            TagSpecifications=[{"ResourceType": "route-table", "Tags": tags}],
        )["RouteTable"]["RouteTableId"]
    network.node_group_id = ec2.create_security_group(
        GroupName=f"{cluster}-nodes",
        Description="nodes",
        VpcId=network.vpc_id,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": tags}],
    )["GroupId"]
    return network


def launch_instances(ec2: Any, count: int, **run: Any) -> list[dict[str, Any]]:
    """``count`` instances of :data:`AMI` (``run`` adds RunInstances parameters: subnet, groups,
    placement, type, tags), in calls of at most :data:`LAUNCH_BATCH`."""
    instances: list[dict[str, Any]] = []
    while len(instances) < count:
        batch = min(LAUNCH_BATCH, count - len(instances))
        instances += ec2.run_instances(ImageId=AMI, MinCount=batch, MaxCount=batch, **run)[
            "Instances"
        ]
    return instances


def launch_instance(ec2: Any, zone: str) -> str:
    """One instance in ``zone``; its ID."""
    [instance] = launch_instances(ec2, 1, Placement={"AvailabilityZone": zone})
    return str(instance["InstanceId"])


# -- the termination handler's cloud ----------------------------------------------------------
@dataclass
class NthCloud:
    """SQS, EC2 and Auto Scaling clients (Auto Scaling through the stack's lifecycle extension,
    which answers the lifecycle actions moto does not)."""

    sqs: Any
    ec2: Any
    autoscaling: Any

    @classmethod
    def at(cls, endpoint: str, autoscaling_endpoint: str) -> NthCloud:
        return cls(
            sqs=aws_client("sqs", endpoint),
            ec2=aws_client("ec2", endpoint),
            autoscaling=aws_client("autoscaling", autoscaling_endpoint),
        )

    def queue(self, prefix: str = "nth") -> str:
        """A new queue's URL."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        return str(self.sqs.create_queue(QueueName=name)["QueueUrl"])

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

    def asg_instance(
        self,
        *,
        managed: bool = True,
        prefix: str = "asg",
        instance_type: str = "t3.micro",
        heartbeat_timeout_s: int | None = 300,
    ) -> tuple[str, str, str, str]:
        """(ASG name, hook name, instance ID, private DNS name) of a one-instance ASG with a
        terminate lifecycle hook (``heartbeat_timeout_s`` ``None``: AWS's default); ``managed``
        tags it for the handler."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        image = self.ec2.describe_images()["Images"][0]["ImageId"]
        self.ec2.create_launch_template(
            LaunchTemplateName=f"lt-{name}",
            LaunchTemplateData={"ImageId": image, "InstanceType": instance_type},
        )
        tags = [{"Key": MANAGED_TAG, "Value": "", "PropagateAtLaunch": True}] if managed else []
        self.autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=name,
            LaunchTemplate={"LaunchTemplateName": f"lt-{name}"},
            MinSize=1,
            MaxSize=1,
            DesiredCapacity=1,
            AvailabilityZones=[ZONES[0]],
            Tags=tags,
        )
        timeout = {} if heartbeat_timeout_s is None else {"HeartbeatTimeout": heartbeat_timeout_s}
        self.autoscaling.put_lifecycle_hook(
            AutoScalingGroupName=name,
            LifecycleHookName="nth",
            LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
            **timeout,
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


def eventbridge(source: str, detail_type: str, detail: dict[str, Any], event_id: str = "") -> str:
    """An EventBridge event as AWS delivers it to SQS (a fresh ID unless given)."""
    return json.dumps(
        {
            "version": "0",
            "id": event_id or str(uuid.uuid4()),
            "detail-type": detail_type,
            "source": source,
            "account": "123456789012",
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": REGION,
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
        event_id,
    )


def spot_itn(instance: str, event_id: str = "") -> str:
    return eventbridge(
        "aws.ec2",
        "EC2 Spot Instance Interruption Warning",
        {"instance-id": instance, "instance-action": "terminate"},
        event_id,
    )


def state_change(instance: str, state: str, event_id: str = "") -> str:
    return eventbridge(
        "aws.ec2",
        "EC2 Instance State-change Notification",
        {"instance-id": instance, "state": state},
        event_id,
    )


def rebalance(instance: str, event_id: str = "") -> str:
    return eventbridge(
        "aws.ec2", "EC2 Instance Rebalance Recommendation", {"instance-id": instance}, event_id
    )


# -- node groups (Cluster API machines) ---------------------------------------------------------
@dataclass
class MachineCloud:
    """A cluster's network and node defaults for machines: what Deckhouse's ``aws`` provider
    values hold (node security group, IAM profile, a subnet per zone, cluster tags)."""

    cluster: str
    network: ClusterNetwork
    profile: str

    @property
    def subnets(self) -> dict[str, str]:
        return dict(zip(ZONES, self.network.subnet_ids, strict=True))

    def settings(self, endpoint: str, **overrides: Any) -> AwsSettings:
        """The driver's settings for machines of this cluster (quick delete polling)."""
        values: dict[str, Any] = {
            "instances": {
                "ami": AMI,
                "additional_security_groups": [self.network.node_group_id],
                "iam_profile_name": self.profile,
            },
            "zone_to_subnet_id_map": self.subnets,
            "key_name": self.cluster,
            "tags": {"cluster-owner": "cloudloop-tests"},
            "poll_interval_s": 0.1,
            "delete_wait_s": 2.0,
        }
        values.update(overrides)
        return aws_settings(endpoint, **values)


def machine_cloud(endpoint: str, cluster: str) -> MachineCloud:
    """A VPC, subnets, node group and IAM instance profile ``<cluster>-node`` and key pair
    ``<cluster>`` for ``cluster``'s machines, as Terraform's base infrastructure makes them."""
    ec2 = aws_client("ec2", endpoint)
    network = create_cluster_network(ec2, cluster)
    profile = f"{cluster}-node"
    aws_client("iam", endpoint).create_instance_profile(InstanceProfileName=profile)
    ec2.create_key_pair(KeyName=cluster)
    return MachineCloud(cluster, network, profile)


def machine_instances(ec2: Any, cluster: str) -> list[dict[str, Any]]:
    """Every instance launched for a machine of ``cluster`` (any state but terminated)."""
    found: list[dict[str, Any]] = []
    filters = [
        {"Name": "tag-key", "Values": [f"kubernetes.io/role/{cluster}"]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "shutting-down",
                                                  "stopping", "stopped"]},
    ]  # fmt: skip
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            found += reservation["Instances"]
    return found


def machine_volumes(ec2: Any, cluster: str) -> list[dict[str, Any]]:
    """Every volume launched for a machine of ``cluster`` that is not deleted."""
    filters = [{"Name": "tag-key", "Values": [f"kubernetes.io/role/{cluster}"]}]
    volumes = ec2.describe_volumes(Filters=filters)["Volumes"]
    return [v for v in volumes if v.get("State") != "deleted"]
