"""Adoption of a cluster made by the upstream tooling: a WithoutNAT cluster made with raw boto3
calls as Terraform makes it (the reference's names and tags, a few ``Name`` tags different),
its Terraform v4 state written as dhctl keeps it (base state + one state per node, with a
``user_data`` secret in it), then ``cloudloop layout adopt`` (a real CLI process): every listed
resource found by its ID and made findable, the one released since reported missing, nothing
created; the plan then creates only that one, the apply makes only its calls, a re-apply none.

One stack for the folder (Temporal, moto behind the AWS front), the worker in this process.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.cloud.aws import layout as defs
from cloudloop.cloud.aws.layout_state import STATE_TYPES
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.resources import SECRETS, Resource
from cloudloop.layouts.config import ClusterIdentity, load_documents
from cloudloop.layouts.model import ConfigSource, LayoutDef, ResourceDef
from cloudloop.messages.layout import LayoutInput, LayoutTimings
from cloudloop.messages.layout import workflow_id as layout_workflow_id
from cloudloop.settings import TemporalSettings
from devstack.backends.aws import aws_client
from devstack.backends.aws_layouts import cluster_resources
from devstack.local import LocalStack
from starters.layout import run_layout, state_records
from tests.layouts.support import (
    SECRET,
    Front,
    TerraformStates,
    cli,
    config_file,
    counts,
    layout_worker,
    payloads,
)
from tests.support.histories import plain_json

pytestmark = pytest.mark.stack
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
#: Something secret a real state holds (the node's cloud-config): it must never leave the file.
USER_DATA = "bootstrap-token-s3cr3t"


@pytest.fixture(scope="module")
async def adopt_queue(aws_stack: LocalStack) -> AsyncIterator[tuple[Client, str]]:
    queue = f"layout-adopt-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        provider="aws",
        temporal=TemporalSettings(
            address=aws_stack.temporal_address, task_queue=queue, codec=aws_stack.codec
        ),
        aws=AwsSettings(endpoint_url=aws_stack.aws_endpoint, timeout_s=5, max_attempts=2),
    )
    client = await temporal.connect(settings.temporal)
    async with layout_worker(client, settings, queue):
        yield client, queue


class Terraform(TerraformStates):
    """Makes the layout's resources with raw boto3 calls, as the upstream modules do, and
    records each in a v4 state (one per module)."""

    provider = 'provider["registry.terraform.io/hashicorp/aws"]'
    schema_version = 1
    serial = 7

    def __init__(self, endpoint: str, layout: LayoutDef) -> None:
        super().__init__(layout)
        self.ec2 = aws_client("ec2", endpoint)
        self.iam = aws_client("iam", endpoint)

    def props(self, resource: ResourceDef) -> dict[str, Any]:
        def value(v: Any) -> Any:
            if isinstance(v, dict) and "$ref" in v:
                return (
                    self.ids[v["$ref"]]
                    if v.get("output", "id") == "id"
                    else v["$ref"].split("/")[1]
                )
            if isinstance(v, dict):
                return {k: value(x) for k, x in v.items()}
            if isinstance(v, list):
                return [value(x) for x in v]
            return v

        return {k: value(v) for k, v in resource.properties.items()}

    @staticmethod
    def tags(tags: dict[str, str], kind: str) -> list[dict[str, Any]]:
        return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]

    def make(self, renamed: dict[str, str]) -> None:
        """Every resource of the layout, ``renamed`` (key → Name tag) as upstream names some."""
        for module, r in self.resources():
            p = self.props(r)
            tags = {**r.tags, **({"Name": renamed[r.key]} if r.key in renamed else {})}
            getattr(self, "_" + r.kind.split(".")[1])(module, r, p, tags)

    def _vpc(self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]) -> None:
        vpc = self.ec2.create_vpc(
            CidrBlock=p["cidr_block"], TagSpecifications=self.tags(tags, "vpc")
        )
        vpc_id = self.ids[r.key] = vpc["Vpc"]["VpcId"]
        self.ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})
        self.record(module, "aws_vpc", "kube", id=vpc_id, cidr_block=p["cidr_block"], tags=tags)

    def _subnet(self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]) -> None:
        subnet = self.ec2.create_subnet(
            VpcId=p["vpc_id"],
            CidrBlock=p["cidr_block"],
            AvailabilityZone=p["availability_zone"],
            TagSpecifications=self.tags(tags, "subnet"),
        )["Subnet"]
        self.ids[r.key] = subnet["SubnetId"]
        if p["map_public_ip_on_launch"]:
            self.ec2.modify_subnet_attribute(
                SubnetId=subnet["SubnetId"], MapPublicIpOnLaunch={"Value": True}
            )
        self.record(
            module,
            "aws_subnet",
            "kube_public",
            id=subnet["SubnetId"],
            vpc_id=p["vpc_id"],
            cidr_block=p["cidr_block"],
            availability_zone=p["availability_zone"],
            tags=tags,
        )

    def _internet_gateway(
        self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]
    ) -> None:
        igw = self.ec2.create_internet_gateway(
            TagSpecifications=self.tags(tags, "internet-gateway")
        )
        igw_id = self.ids[r.key] = igw["InternetGateway"]["InternetGatewayId"]
        self.ec2.attach_internet_gateway(InternetGatewayId=igw_id, VpcId=p["vpc_id"])
        self.record(module, "aws_internet_gateway", "gw", id=igw_id, vpc_id=p["vpc_id"], tags=tags)

    def _route_table(
        self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]
    ) -> None:
        table = self.ec2.create_route_table(
            VpcId=p["vpc_id"], TagSpecifications=self.tags(tags, "route-table")
        )
        table_id = self.ids[r.key] = table["RouteTable"]["RouteTableId"]
        [route] = p["routes"]
        target = {"gateway_id": route.get("gateway_id", ""), "nat_gateway_id": ""}
        if route.get("nat_gateway_id"):
            target["nat_gateway_id"] = route["nat_gateway_id"]
            self.ec2.create_route(
                RouteTableId=table_id,
                DestinationCidrBlock="0.0.0.0/0",
                NatGatewayId=route["nat_gateway_id"],
            )
        else:
            self.ec2.create_route(
                RouteTableId=table_id,
                DestinationCidrBlock="0.0.0.0/0",
                GatewayId=route["gateway_id"],
            )
        self.record(
            module,
            "aws_route_table",
            "kube",
            id=table_id,
            vpc_id=p["vpc_id"],
            route=[{"cidr_block": "0.0.0.0/0", **target}],
            tags=tags,
        )

    def _nat_gateway(
        self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]
    ) -> None:
        nat = self.ec2.create_nat_gateway(
            SubnetId=p["subnet_id"],
            AllocationId=p["allocation_id"],
            TagSpecifications=self.tags(tags, "natgateway"),
        )["NatGateway"]
        self.ids[r.key] = nat["NatGatewayId"]
        self.record(
            module,
            "aws_nat_gateway",
            "nat",
            id=nat["NatGatewayId"],
            subnet_id=p["subnet_id"],
            allocation_id=p["allocation_id"],
            tags=tags,
        )

    def _route_table_association(
        self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]
    ) -> None:
        answer = self.ec2.associate_route_table(
            RouteTableId=p["route_table_id"], SubnetId=p["subnet_id"]
        )
        self.ids[r.key] = answer["AssociationId"]
        self.record(
            module,
            "aws_route_table_association",
            "kube_public",
            id=answer["AssociationId"],
            subnet_id=p["subnet_id"],
            route_table_id=p["route_table_id"],
        )

    def _security_group(
        self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]
    ) -> None:
        group = self.ec2.create_security_group(
            GroupName=r.name,
            Description=p["description"],
            VpcId=p["vpc_id"],
            TagSpecifications=self.tags(tags, "security-group"),
        )
        self.ids[r.key] = group["GroupId"]
        self.record(
            module,
            "aws_security_group",
            "node",
            id=group["GroupId"],
            name=r.name,
            vpc_id=p["vpc_id"],
            tags=tags,
        )

    def _security_group_rules(
        self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]
    ) -> None:
        group = p["group_id"]
        self.ids[r.key] = group
        self.ec2.revoke_security_group_egress(
            GroupId=group,
            IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
        )
        for direction in ("ingress", "egress"):
            for i, rule in enumerate(p[direction]):
                perm: dict[str, Any] = {"IpProtocol": rule["protocol"]}
                if rule["protocol"] != "-1":
                    perm["FromPort"], perm["ToPort"] = rule["from_port"], rule["to_port"]
                if "group" in rule:
                    perm["UserIdGroupPairs"] = [{"GroupId": rule["group"]}]
                else:
                    perm["IpRanges"] = [{"CidrIp": rule["cidr"]}]
                call = getattr(self.ec2, f"authorize_security_group_{direction}")
                call(GroupId=group, IpPermissions=[perm])
                self.record(
                    module,
                    "aws_security_group_rule",
                    f"{r.name}_{direction}_{i}",
                    id=f"sgrule-{uuid.uuid4().hex[:10]}",
                    security_group_id=group,
                    type=direction,
                )

    def _iam_role(
        self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]
    ) -> None:
        self.iam.create_role(RoleName=r.name, AssumeRolePolicyDocument=p["assume_role_policy"])
        self.ids[r.key] = r.name
        self.record(module, "aws_iam_role", "node", id=r.name, name=r.name)

    def _iam_role_policy(
        self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]
    ) -> None:
        # upstream's document: the same policy as the layout's, in another form (a one-element
        # Resource list, the actions in another order) — IAM, and so the plan, sees no change
        policy = json.loads(p["policy"])
        for statement in policy["Statement"]:
            statement["Resource"] = [statement["Resource"]]
            statement["Action"] = list(reversed(statement["Action"]))
        self.iam.put_role_policy(
            RoleName=p["role_name"], PolicyName=r.name, PolicyDocument=json.dumps(policy)
        )
        self.record(
            module,
            "aws_iam_role_policy",
            "node",
            id=f"{p['role_name']}:{r.name}",
            name=r.name,
            role=p["role_name"],
        )

    def _iam_instance_profile(
        self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]
    ) -> None:
        self.iam.create_instance_profile(InstanceProfileName=r.name)
        self.iam.add_role_to_instance_profile(InstanceProfileName=r.name, RoleName=p["role_name"])
        self.record(
            module, "aws_iam_instance_profile", "node", id=r.name, name=r.name, role=p["role_name"]
        )

    def _key_pair(
        self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]
    ) -> None:
        self.ec2.import_key_pair(
            KeyName=r.name,
            PublicKeyMaterial=p["public_key"].encode(),
            TagSpecifications=self.tags(tags, "key-pair"),
        )
        self.record(module, "aws_key_pair", "ssh", id=r.name, key_name=r.name)

    def _ebs_volume(
        self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]
    ) -> None:
        volume = self.ec2.create_volume(
            AvailabilityZone=p["availability_zone"],
            Size=p["size_gb"],
            VolumeType=p["type"],
            TagSpecifications=self.tags(tags, "volume"),
        )
        self.ids[r.key] = volume["VolumeId"]
        self.record(
            module,
            "aws_ebs_volume",
            "kubernetes_data",
            id=volume["VolumeId"],
            availability_zone=p["availability_zone"],
            tags=tags,
        )

    def _instance(
        self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]
    ) -> None:
        params: dict[str, Any] = {
            "ImageId": p["ami"],
            "InstanceType": p["instance_type"],
            "MinCount": 1,
            "MaxCount": 1,
            "KeyName": p["key_name"],
            "IamInstanceProfile": {"Name": p["iam_profile"]},
            "UserData": USER_DATA,
            "TagSpecifications": self.tags(tags, "instance"),
        }
        if "associate_public_ip" in p:
            params["NetworkInterfaces"] = [
                {
                    "DeviceIndex": 0,
                    "SubnetId": p["subnet_id"],
                    "Groups": p["security_group_ids"],
                    "AssociatePublicIpAddress": True,
                }
            ]
        else:
            params["SubnetId"], params["SecurityGroupIds"] = p["subnet_id"], p["security_group_ids"]
        instance = self.ec2.run_instances(**params)["Instances"][0]
        instance_id = self.ids[r.key] = instance["InstanceId"]
        if p.get("source_dest_check") is False:
            self.ec2.modify_instance_attribute(
                InstanceId=instance_id, SourceDestCheck={"Value": False}
            )
        self.record(
            module,
            "aws_instance",
            "node",
            id=instance_id,
            subnet_id=p["subnet_id"],
            user_data=USER_DATA,
            tags=tags,
        )

    def _volume_attachment(
        self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]
    ) -> None:
        self.ec2.attach_volume(
            VolumeId=p["volume_id"], InstanceId=p["instance_id"], Device=p["device"]
        )
        self.record(
            module,
            "aws_volume_attachment",
            "kubernetes_data",
            id=f"vai-{uuid.uuid4().int % 10**9}",
            volume_id=p["volume_id"],
            instance_id=p["instance_id"],
            device_name=p["device"],
        )

    def _eip(self, module: str, r: ResourceDef, p: dict[str, Any], tags: dict[str, str]) -> None:
        eip = self.ec2.allocate_address(
            Domain="vpc", TagSpecifications=self.tags(tags, "elastic-ip")
        )
        self.ids[r.key] = eip["AllocationId"]
        if p.get("instance_id"):
            self.ec2.associate_address(
                AllocationId=eip["AllocationId"], InstanceId=p["instance_id"]
            )
        self.record(
            module,
            "aws_eip",
            "eip",
            id=eip["AllocationId"],
            instance=p.get("instance_id", ""),
            tags=tags,
        )


def ensure_namespace(kube: Kube, name: str) -> None:
    try:
        kube.create(NAMESPACES, {"metadata": {"name": name}})
    except KubeError as exc:
        if not exc.conflict:
            raise


async def test_adopt_a_terraform_made_cluster_then_apply_makes_nothing(
    aws_stack: LocalStack,
    adopt_queue: tuple[Client, str],
    kube: Kube,
    stack: LocalStack,
    tmp_path: Path,
) -> None:
    kubeconfig = stack.kubeconfig
    client, queue = adopt_queue
    prefix, cluster_uuid = f"a{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = config_file(tmp_path, "aws-without-nat", prefix)
    loaded = load_documents(list(yaml.safe_load_all(path.read_text())), uuid=cluster_uuid)
    layout = defs.define(loaded.document, loaded.cluster, ZONES)
    terraform = Terraform(aws_stack.moto_endpoint, layout)
    # upstream names some things its own way: the layout's finder would not find these
    renamed = {
        f"{defs.SUBNET}/{prefix}-public-0": "kube-public-a",
        f"{defs.SUBNET}/{prefix}-public-1": "kube-public-b",
        f"{defs.VOLUME}/{prefix}-kubernetes-data-0": "etcd-data",
        f"{defs.INSTANCE}/{prefix}-front-0": "front-node",
        f"{defs.ROUTE_TABLE}/{prefix}-public": "",
    }
    terraform.make(renamed)
    files = {}
    for module in layout.modules:
        files[module.id] = tmp_path / f"{module.id}-tf-state.json"
        files[module.id].write_text(terraform.state(module.id))
    # released after the state was written: the state lists it, the cloud has it no more
    gone = f"{defs.EIP}/{prefix}-front-0"
    terraform.ec2.release_address(AllocationId=terraform.ids[gone])
    before = sorted(cluster_resources(aws_stack.moto_endpoint, prefix))

    def run(action: str) -> Any:
        input = LayoutInput(
            action=action,
            provider="aws",
            source=ConfigSource(file=str(path)),
            cluster=ClusterIdentity(prefix=prefix, uuid=cluster_uuid),
            timings=LayoutTimings(max_attempts=3),
        )
        return run_layout(client, queue, input, poll_s=0.2)

    # the finder does not see the renamed ones: a plan would create them again
    plan = await run("plan")
    assert counts(plan)["create"] > len(renamed)

    front = Front(aws_stack.aws_endpoint)
    front.reset()
    states = [
        f"--state={files['base']}",
        f"--state={prefix}-master-0={files['master-0']}",
        f"--state={prefix}-front-0={files['static-front-0']}",
    ]
    code, out = await cli(
        aws_stack, queue, "adopt", "--config", str(path), "--cluster-uuid", cluster_uuid, *states
    )
    assert code == 0, out
    assert f"@ aws.subnet/{prefix}-public-0 adopted" in out
    assert f"@ aws.instance/{prefix}-front-0 adopted" in out
    assert f"! {gone}: listed in the state, not in the cloud" in out
    total = sum(1 for _, r in terraform.resources())
    assert f"Adopted {total - 1} resource(s) (0 drifted), 1 missing, 0 not placed." in out, out
    # only the names were set; nothing was created
    assert set(front.mutating()) == {"ec2:CreateTags"}, front.mutating()
    # the renamed ones now carry the layout's names (counted by them), nothing else is new
    after = cluster_resources(aws_stack.moto_endpoint, prefix)
    assert set(before) <= set(after) and len(after) == len(before) + len(renamed)

    # the adoption is a workflow: its history holds IDs, never the state's secrets
    history = await client.get_workflow_handle(
        layout_workflow_id(prefix, queue)
    ).fetch_history()  # the CLI scopes it by its queue
    text = payloads(plain_json(history, client))
    assert terraform.ids[f"{defs.VPC}/{prefix}"] in text
    assert USER_DATA not in text and SECRET not in text

    plan = await run("plan")
    assert counts(plan) == {"create": 1, "no-op": total - 1}, [
        (r.key, r.action, r.changes) for m in plan.plan for r in m.resources if r.action != "no-op"
    ]
    front.reset()
    applied = await run("apply")
    created = [s.key for m in applied.modules for s in m.steps if s.action == "created"]
    assert created == [gone]
    assert front.mutating() == {"ec2:AllocateAddress": 1, "ec2:AssociateAddress": 1}
    front.reset()
    await run("apply")
    assert front.mutating() == {}
    counted = cluster_resources(aws_stack.moto_endpoint, prefix)
    assert len(counted) == len(set(counted))  # nothing twice

    # apply writes its results and the state Secrets into the cluster; adopting from them
    # takes everything over again and changes nothing
    ensure_namespace(kube, "d8-system")
    common = ["--config", str(path), "--cluster-uuid", cluster_uuid]
    code, out = await cli(aws_stack, queue, "apply", *common, "--kubeconfig", str(kubeconfig))
    assert code == 0, out
    assert "written: Secret d8-system/d8-cluster-terraform-state" in out
    assert f"written: Secret d8-system/d8-node-terraform-state-{prefix}-front-0" in out
    front.reset()
    code, out = await cli(
        aws_stack, queue, "adopt", *common, "--state", "cluster", "--kubeconfig", str(kubeconfig)
    )
    assert code == 0, out
    rule_sets = sum(1 for _, r in terraform.resources() if r.kind == defs.SG_RULES)
    assert f"Adopted {total - rule_sets} resource(s) (0 drifted), 0 missing, 0 not placed." in out
    assert front.mutating() == {}
    for secret in (
        "d8-cluster-terraform-state",
        f"d8-node-terraform-state-{prefix}-master-0",
        f"d8-node-terraform-state-{prefix}-front-0",
    ):
        kube.delete(SECRETS, secret, "d8-system")

    await run("destroy")
    assert cluster_resources(aws_stack.moto_endpoint, prefix) == []


async def test_adopt_with_nat_places_unnamed_eips_by_what_refers_to_them(
    aws_stack: LocalStack, adopt_queue: tuple[Client, str], tmp_path: Path
) -> None:
    """WithNAT: the NAT gateway's and the bastion's EIPs carry no names upstream, nor does the
    internal route table; the state's references place them, and after the adoption an apply
    makes no mutating call at all."""
    client, queue = adopt_queue
    prefix, cluster_uuid = f"n{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = config_file(tmp_path, "aws-with-nat", prefix)
    loaded = load_documents(list(yaml.safe_load_all(path.read_text())), uuid=cluster_uuid)
    layout = defs.define(loaded.document, loaded.cluster, ZONES)
    terraform = Terraform(aws_stack.moto_endpoint, layout)
    renamed = {
        f"{defs.EIP}/{prefix}-natgw": "",
        f"{defs.EIP}/{prefix}-bastion": "",
        f"{defs.ROUTE_TABLE}/{prefix}-internal": "",
        f"{defs.SUBNET}/{prefix}-internal-0": "",
    }
    terraform.make(renamed)
    sources = []
    for module in layout.modules:
        file = tmp_path / f"{module.id}-tf-state.json"
        file.write_text(terraform.state(module.id))
        sources.append(str(file) if module.id == "base" else f"{module.node_name}={file}")
    input = LayoutInput(
        action="adopt",
        provider="aws",
        source=ConfigSource(file=str(path)),
        cluster=ClusterIdentity(prefix=prefix, uuid=cluster_uuid),
        timings=LayoutTimings(max_attempts=3),
        state=state_records(sources, STATE_TYPES),
    )
    adopted = await run_layout(client, queue, input, poll_s=0.2)
    assert adopted.unmapped == []
    actions = {s.key: s.action for m in adopted.modules for s in m.steps}
    assert set(actions.values()) == {"adopted"}, actions
    assert [s.changes for m in adopted.modules for s in m.steps if s.changes] == []
    assert adopted.adopted[f"{defs.EIP}/{prefix}-natgw"] == ["aws_eip.eip"]
    front = Front(aws_stack.aws_endpoint)
    front.reset()
    applied = await run_layout(
        client, queue, input.model_copy(update={"action": "apply", "state": []}), poll_s=0.2
    )
    assert front.mutating() == {}
    assert {s.action for m in applied.modules for s in m.steps} == {"unchanged"}
    await run_layout(client, queue, input.model_copy(update={"action": "destroy"}), poll_s=0.2)
    assert cluster_resources(aws_stack.moto_endpoint, prefix) == []
