"""AWS ``WithoutNAT`` and ``WithNAT`` end to end: the layout workflows on the Temporal dev server,
their activities in a worker, moto behind the AWS front (one stack for the module).

Apply makes every resource with the reference's names and tags; a second apply makes no
mutating call (counted in the front); drift made out of band (a deleted route, a changed SG rule)
shows in the plan and the next apply repairs it; destroy leaves nothing of the cluster.
"""

from __future__ import annotations

import base64
import functools
import gzip
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.registry import Settings
from cloudloop.messages.layout import (
    LayoutResult,
    module_workflow_id,
)
from cloudloop.messages.layout import workflow_id as layout_workflow_id
from cloudloop.settings import TemporalSettings
from devstack.backends.aws import aws_client
from devstack.backends.aws_layouts import cluster_resources
from devstack.local import LocalStack
from starters.layout import LayoutFailed
from tests.layouts import support
from tests.layouts.support import Front, config_file, payloads
from tests.support.histories import plain_json

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
#: Calls that change nothing in the cloud.
READ_ONLY = ("Describe", "Get", "List")

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def layout_settings(aws_stack: LocalStack) -> Settings:
    """The worker's settings: Temporal and the AWS front (credentials come from the config)."""
    return Settings(
        provider="aws",
        temporal=TemporalSettings(
            address=aws_stack.temporal_address,
            task_queue=f"layouts-{uuid.uuid4().hex[:8]}",
            codec=aws_stack.codec,
        ),
        aws=AwsSettings(endpoint_url=aws_stack.aws_endpoint, timeout_s=5, max_attempts=2),
    )


@pytest.fixture(scope="module")
async def layout_client(aws_stack: LocalStack, layout_settings: Settings) -> Client:
    return await temporal.connect(layout_settings.temporal)


@pytest.fixture(scope="module")
async def layout_worker(layout_client: Client, layout_settings: Settings) -> AsyncIterator[None]:
    async with support.layout_worker(layout_client, layout_settings):
        yield


#: The action as ``cloudloop layout`` runs it (:func:`tests.layouts.support.run`).
run = functools.partial(support.run, provider="aws")


def tagged(ec2: Any, describe: str, key: str, name: str) -> list[dict[str, Any]]:
    """The items tagged ``Name=name`` (checked here too: moto ignores the filter for some kinds,
    e.g. NAT gateways, and other tests' resources share the module's moto)."""
    answer = getattr(ec2, describe)(Filters=[{"Name": "tag:Name", "Values": [name]}])

    def named(item: dict[str, Any]) -> bool:
        if "Instances" in item:  # a reservation: its instances carry the tags
            return any(named(i) for i in item["Instances"])
        return {t["Key"]: t["Value"] for t in item.get("Tags", [])}.get("Name") == name

    return [item for item in answer[key] if named(item)]


def plan_actions(result: LayoutResult) -> dict[str, str]:
    return {r.key: r.action for m in result.plan for r in m.resources}


@pytest.mark.parametrize("example", ["aws-without-nat", "aws-with-nat"])
async def test_apply_reapply_drift_destroy(
    example: str,
    aws_stack: LocalStack,
    layout_client: Client,
    layout_settings: Settings,
    layout_worker: None,
    tmp_path: Path,
) -> None:
    prefix, cluster_uuid = f"t{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = config_file(tmp_path, example, prefix)
    ec2 = aws_client("ec2", aws_stack.moto_endpoint)
    front = Front(aws_stack.aws_endpoint)

    # plan of nothing: everything is created
    plan = await run(layout_client, layout_settings, "plan", path, prefix, cluster_uuid)
    assert set(plan_actions(plan).values()) == {"create"}

    applied = await run(layout_client, layout_settings, "apply", path, prefix, cluster_uuid)
    nat = example == "aws-with-nat"
    [vpc] = tagged(ec2, "describe_vpcs", "Vpcs", prefix)
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])[
        "Subnets"
    ]
    names = sorted(t["Value"] for s in subnets for t in s["Tags"] if t["Key"] == "Name")
    expected = [f"{prefix}-public-0", f"{prefix}-public-1"]
    if nat:
        expected = [f"{prefix}-internal-0", f"{prefix}-internal-1", *expected]
    assert names == expected
    for subnet in subnets:
        tags = {t["Key"]: t["Value"] for t in subnet["Tags"]}
        assert tags[f"kubernetes.io/cluster/{cluster_uuid}"] == "shared"
        assert tags[f"kubernetes.io/cluster/{prefix}"] == "shared"
    masters = tagged(ec2, "describe_instances", "Reservations", f"{prefix}-master-0")
    assert len(masters) == 1
    [master] = masters[0]["Instances"]
    assert master["KeyName"] == prefix
    assert master["IamInstanceProfile"]["Arn"].endswith(f"/{prefix}-node")
    [data] = tagged(ec2, "describe_volumes", "Volumes", f"{prefix}-kubernetes-data-0")
    assert data["Attachments"][0]["Device"] == "/dev/xvdf"
    assert data["Attachments"][0]["InstanceId"] == master["InstanceId"]
    groups = ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])[
        "SecurityGroups"
    ]
    by_name = {g["GroupName"]: g for g in groups}
    assert {f"{prefix}-node", f"{prefix}-loadbalancer", f"{prefix}-ssh-accessible"} <= set(by_name)
    assert len(tagged(ec2, "describe_nat_gateways", "NatGateways", prefix)) == (1 if nat else 0)
    if nat:
        assert tagged(ec2, "describe_instances", "Reservations", f"{prefix}-bastion")
        assert applied.outputs["bastion_ip_address_for_ssh"]
    discovery = applied.cloud_discovery_data
    side = "internal" if nat else "public"
    subnet_ids = {
        s["AvailabilityZone"]: s["SubnetId"]
        for s in subnets
        if any(t["Value"].startswith(f"{prefix}-{side}-") for t in s["Tags"] if t["Key"] == "Name")
    }
    assert discovery == {
        "apiVersion": "deckhouse.io/v1",
        "kind": "AWSCloudDiscoveryData",
        "keyName": prefix,
        "instances": {
            "ami": "ami-12c6146b",
            "additionalSecurityGroups": [by_name[f"{prefix}-node"]["GroupId"]],
            "associatePublicIPAddress": not nat,
            "iamProfileName": f"{prefix}-node",
        },
        "loadBalancerSecurityGroup": by_name[f"{prefix}-loadbalancer"]["GroupId"],
        "zones": ["us-east-1a", "us-east-1b"],
        "zoneToSubnetIdMap": subnet_ids,
    }
    [master_result] = [m for m in applied.modules if m.module == "master-0"]
    assert master_result.outputs["kubernetes_data_device_path"] == "/dev/xvdf"
    assert master_result.outputs["node_internal_ip_address"] == master["PrivateIpAddress"]

    # a second apply changes nothing
    front.reset()
    again = await run(layout_client, layout_settings, "apply", path, prefix, cluster_uuid)
    changed = [(s.key, s.changes) for m in again.modules for s in m.steps if s.changes]
    assert front.mutating() == {}, changed
    assert {s.action for m in again.modules for s in m.steps} == {"unchanged"}

    # drift out of band: the public default route goes, the SSH rule opens to another CIDR
    [public] = tagged(ec2, "describe_route_tables", "RouteTables", f"{prefix}-public")
    ec2.delete_route(RouteTableId=public["RouteTableId"], DestinationCidrBlock="0.0.0.0/0")
    ssh = by_name[f"{prefix}-ssh-accessible"]["GroupId"]
    ec2.authorize_security_group_ingress(
        GroupId=ssh,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 22,
                "ToPort": 22,
                "IpRanges": [{"CidrIp": "6.6.6.6/32"}],
            }
        ],
    )
    plan = await run(layout_client, layout_settings, "plan", path, prefix, cluster_uuid)
    drifted = {k for k, a in plan_actions(plan).items() if a != "no-op"}
    assert drifted == {
        f"aws.route_table/{prefix}-public",
        f"aws.security_group_rules/{prefix}-ssh-accessible",
    }
    repaired = await run(layout_client, layout_settings, "apply", path, prefix, cluster_uuid)
    updated = {s.key for m in repaired.modules for s in m.steps if s.action == "updated"}
    assert updated == drifted
    plan = await run(layout_client, layout_settings, "plan", path, prefix, cluster_uuid)
    assert set(plan_actions(plan).values()) == {"no-op"}

    # destroy is refused while the cluster's own load balancer is in its network
    elb = aws_client("elb", aws_stack.moto_endpoint)
    elb.create_load_balancer(
        LoadBalancerName=f"{prefix}-svc",
        Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
        Subnets=[subnets[0]["SubnetId"]],
    )
    with pytest.raises(LayoutFailed, match=f"ELB {prefix}-svc") as refused:
        await run(layout_client, layout_settings, "destroy", path, prefix, cluster_uuid)
    assert refused.value.kind == "DestroyBlocked"
    assert tagged(ec2, "describe_vpcs", "Vpcs", prefix) != []  # nothing was deleted
    elb.delete_load_balancer(LoadBalancerName=f"{prefix}-svc")

    # destroy: nothing of the cluster is left
    assert len(cluster_resources(aws_stack.moto_endpoint, prefix)) >= 16
    await run(layout_client, layout_settings, "destroy", path, prefix, cluster_uuid)
    assert cluster_resources(aws_stack.moto_endpoint, prefix) == []
    assert tagged(ec2, "describe_vpcs", "Vpcs", prefix) == []
    live = ec2.describe_instances(
        Filters=[
            {"Name": "tag:kubernetes.io/cluster/" + cluster_uuid, "Values": ["shared"]},
            {
                "Name": "instance-state-name",
                "Values": ["pending", "running", "stopping", "stopped"],
            },
        ]
    )["Reservations"]
    assert live == []
    assert tagged(ec2, "describe_volumes", "Volumes", f"{prefix}-kubernetes-data-0") == []
    assert tagged(ec2, "describe_addresses", "Addresses", f"{prefix}-master-0") == []
    assert (
        ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [prefix]}])["KeyPairs"] == []
    )
    iam = aws_client("iam", aws_stack.moto_endpoint)
    assert f"{prefix}-node" not in {r["RoleName"] for r in iam.list_roles()["Roles"]}
    plan = await run(layout_client, layout_settings, "plan", path, prefix, cluster_uuid)
    assert set(plan_actions(plan).values()) == {"create"}


def _edited(path: Path, **changes: Any) -> Path:
    """The config at ``path`` with the AWSClusterConfiguration's fields changed (None: removed)."""
    docs = list(yaml.safe_load_all(path.read_text()))
    for doc in docs:
        if doc["kind"] == "AWSClusterConfiguration":
            for key, value in changes.items():
                if value is None:
                    doc.pop(key, None)
                else:
                    doc[key] = value
    path.write_text(yaml.safe_dump_all(docs))
    return path


async def test_a_refused_apply_makes_nothing(
    aws_stack: LocalStack,
    layout_client: Client,
    layout_settings: Settings,
    layout_worker: None,
    tmp_path: Path,
) -> None:
    """An ``existingVPCID`` EC2 does not have and an AMI it does not have refuse the apply
    before its first create, named together: no key pair, IAM role or data volume is left."""
    prefix, cluster_uuid = f"r{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = _edited(
        config_file(tmp_path, "aws-without-nat", prefix),
        vpcNetworkCIDR=None,
        existingVPCID="vpc-0123456789abcdef0",
    )
    docs = list(yaml.safe_load_all(path.read_text()))
    [aws] = [d for d in docs if d["kind"] == "AWSClusterConfiguration"]
    aws["masterNodeGroup"]["instanceClass"]["ami"] = "ami-0000000000000dead"
    path.write_text(yaml.safe_dump_all(docs))
    front = Front(aws_stack.aws_endpoint)
    front.reset()
    with pytest.raises(LayoutFailed) as refused:
        await run(layout_client, layout_settings, "apply", path, prefix, cluster_uuid)
    assert refused.value.kind == "NotFound"
    assert f"aws.vpc/{prefix}: not found" in str(refused.value)
    assert f"aws.instance/{prefix}-master-0: image ami-0000000000000dead not found" in str(
        refused.value
    )
    assert cluster_resources(aws_stack.moto_endpoint, prefix) == []
    assert front.mutating() == {}


async def test_an_existing_vpc_without_a_node_cidr_is_split_by_its_own_cidr(
    aws_stack: LocalStack,
    layout_client: Client,
    layout_settings: Settings,
    layout_worker: None,
    tmp_path: Path,
) -> None:
    """``existingVPCID`` alone: the subnets split the VPC's CIDR (upstream's data source), a
    second apply finds them, destroy leaves the VPC (it is not the layout's)."""
    prefix, cluster_uuid = f"v{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    ec2 = aws_client("ec2", aws_stack.moto_endpoint)
    vpc = ec2.create_vpc(CidrBlock="10.77.0.0/16")["Vpc"]["VpcId"]
    path = _edited(
        config_file(tmp_path, "aws-without-nat", prefix),
        vpcNetworkCIDR=None,
        nodeNetworkCIDR=None,
        existingVPCID=vpc,
    )
    await run(layout_client, layout_settings, "apply", path, prefix, cluster_uuid)
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]
    assert sorted(s["CidrBlock"] for s in subnets) == ["10.77.0.0/17", "10.77.128.0/17"]
    plan = await run(layout_client, layout_settings, "plan", path, prefix, cluster_uuid)
    assert set(plan_actions(plan).values()) == {"no-op"}
    await run(layout_client, layout_settings, "destroy", path, prefix, cluster_uuid)
    assert cluster_resources(aws_stack.moto_endpoint, prefix) == []
    assert ec2.describe_vpcs(VpcIds=[vpc])["Vpcs"]
    ec2.delete_vpc(VpcId=vpc)


def user_data_of(ec2: Any, name: str) -> bytes:
    [reservation] = tagged(ec2, "describe_instances", "Reservations", name)
    instance = reservation["Instances"][0]["InstanceId"]
    answer = ec2.describe_instance_attribute(InstanceId=instance, Attribute="userData")
    return base64.b64decode(answer["UserData"]["Value"])


async def test_nodes_boot_with_the_bootstrap_data_given(
    aws_stack: LocalStack,
    layout_client: Client,
    layout_settings: Settings,
    layout_worker: None,
    tmp_path: Path,
) -> None:
    """``--cloud-config master=F --cloud-config G``: the master launches with F's bytes, the
    static node with G's (gzipped: any bytes); the histories hold the files' names and digests,
    never the bytes; a re-apply makes no mutating call; other data later is shown by plan as a
    kept change and apply leaves the running master as it is (upstream's ``ignore_changes``)."""
    prefix, cluster_uuid = f"b{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = config_file(tmp_path, "aws-without-nat", prefix)
    token = f"bootstrap-token-{uuid.uuid4().hex}"
    master_data = f"#cloud-config\nbootstrap_token: {token}\n".encode()
    node_data = gzip.compress(b"#cloud-config\nruncmd: [node]\n")
    (tmp_path / "master.cloud-config").write_bytes(master_data)
    (tmp_path / "node.cloud-config").write_bytes(node_data)
    selection = {
        "master": str(tmp_path / "master.cloud-config"),
        "": str(tmp_path / "node.cloud-config"),
    }
    ec2 = aws_client("ec2", aws_stack.moto_endpoint)
    front = Front(aws_stack.aws_endpoint)
    args = (layout_client, layout_settings)

    await run(*args, "apply", path, prefix, cluster_uuid, selection)
    assert user_data_of(ec2, f"{prefix}-master-0") == master_data
    assert user_data_of(ec2, f"{prefix}-front-0") == node_data
    for workflow in (layout_workflow_id(prefix), module_workflow_id(prefix, "master-0")):
        history = await layout_client.get_workflow_handle(workflow).fetch_history()
        text = payloads(plain_json(history, layout_client))
        assert "master.cloud-config" in text and token not in text

    front.reset()
    await run(*args, "apply", path, prefix, cluster_uuid, selection)
    assert front.mutating() == {}

    (tmp_path / "master.cloud-config").write_bytes(b"#cloud-config\nother: data\n")
    plan = await run(*args, "plan", path, prefix, cluster_uuid, selection)
    changed = {r.key: r.changes for m in plan.plan for r in m.resources if r.changes}
    [change] = changed[f"aws.instance/{prefix}-master-0"]
    assert change.field.startswith("user_data (kept") and change.have != change.want
    assert f"aws.instance/{prefix}-front-0" not in changed
    front.reset()
    await run(*args, "apply", path, prefix, cluster_uuid, selection)
    assert front.mutating() == {}
    assert user_data_of(ec2, f"{prefix}-master-0") == master_data

    await run(*args, "destroy", path, prefix, cluster_uuid)
    assert cluster_resources(aws_stack.moto_endpoint, prefix) == []


async def test_bootstrap_data_outside_the_mount_is_refused_unread(
    aws_stack: LocalStack,
    layout_client: Client,
    layout_settings: Settings,
    layout_worker: None,
    tmp_path: Path,
) -> None:
    """A ``--cloud-config`` file outside ``layouts.source_dir``, or a selector that names no
    node, refuses the apply before any cloud call, naming the file or selector only."""
    prefix, cluster_uuid = f"o{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = config_file(tmp_path, "aws-without-nat", prefix)
    front = Front(aws_stack.aws_endpoint)
    front.reset()
    args = (layout_client, layout_settings)
    with pytest.raises(LayoutFailed) as outside:
        await run(*args, "apply", path, prefix, cluster_uuid, {"": "/etc/passwd"})
    assert outside.value.kind == "LayoutConfigRefused"
    assert "/etc/passwd: outside layouts.source_dir; nothing read" in str(outside.value)
    assert "root:" not in str(outside.value)
    (tmp_path / "boot").write_bytes(b"#cloud-config\n")
    with pytest.raises(LayoutFailed) as unknown:
        await run(*args, "apply", path, prefix, cluster_uuid, {"back": str(tmp_path / "boot")})
    assert unknown.value.kind == "LayoutConfigInvalid"
    assert "no node or node group named back" in str(unknown.value)
    (tmp_path / "big").write_bytes(b"#" * (16 * 1024 + 1))
    with pytest.raises(LayoutFailed) as big:
        await run(*args, "apply", path, prefix, cluster_uuid, {"": str(tmp_path / "big")})
    assert "user data of 16385 bytes is over EC2's 16384 bytes" in str(big.value)
    assert {k for k in front.mutating()} == set()
    assert cluster_resources(aws_stack.moto_endpoint, prefix) == []
