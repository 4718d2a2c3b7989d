"""Shared set-up of the load-balancer stack tests: a moto VPC with instances, matching Nodes,
Services, and a running ServiceStarter scoped to one test's namespace and Nodes."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client

from cloudloop.cloud.aws.loadbalancers import (
    LOAD_BALANCER_TAG,
    backend_security_group_name,
    security_group_name,
)
from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Event, Service
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import EVENTS, NODES, SERVICES
from cloudloop.messages.loadbalancer import default_load_balancer_name
from devstack.backends.aws import ZONES, aws_client, create_cluster_network, launch_instances
from starters.loadbalancer import INLINE_NODES_MAX_BYTES, ServiceStarter


@dataclass
class AwsWorld:
    """One test's slice of moto: a VPC, cluster-tagged subnets, a node group, instances."""

    endpoint: str
    cluster: str
    vpc_id: str = ""
    subnet_ids: list[str] = field(default_factory=list)
    node_group: str = ""
    instance_ids: list[str] = field(default_factory=list)

    def client(self, service: str) -> Any:
        return aws_client(service, self.endpoint)

    @classmethod
    def create(cls, endpoint: str, cluster: str, instances: int = 3) -> AwsWorld:
        world = cls(endpoint=endpoint, cluster=cluster)
        ec2 = world.client("ec2")
        network = create_cluster_network(ec2, cluster)
        world.vpc_id, world.subnet_ids = network.vpc_id, network.subnet_ids
        world.node_group = network.node_group_id
        launched = launch_instances(
            ec2, instances, SubnetId=world.subnet_ids[0], SecurityGroupIds=[world.node_group]
        )
        world.instance_ids = [i["InstanceId"] for i in launched]
        return world

    def enable_ipv6(self) -> None:
        """Give the VPC an Amazon IPv6 block and each subnet a /64 of it (for dual-stack)."""
        ec2 = self.client("ec2")
        vpc = ec2.associate_vpc_cidr_block(VpcId=self.vpc_id, AmazonProvidedIpv6CidrBlock=True)
        block = vpc["Ipv6CidrBlockAssociation"]["Ipv6CidrBlock"]
        prefix = block.split("::")[0]
        for index, subnet in enumerate(self.subnet_ids):
            ec2.associate_subnet_cidr_block(
                SubnetId=subnet, Ipv6CidrBlock=f"{prefix[:-1]}{index}::/64"
            )

    def certificate(self, domain: str = "example.com") -> str:
        """An issued ACM certificate (imported, self-signed) for ``domain``."""
        body, key = _self_signed(domain)
        return str(
            self.client("acm").import_certificate(Certificate=body, PrivateKey=key)[
                "CertificateArn"
            ]
        )

    def classic_state(self, name: str) -> dict[str, Any]:
        """Everything the driver sets on a Classic ELB, for before/after comparisons."""
        elb = self.client("elb")
        lb = self.classic(name) or {}
        attributes = elb.describe_load_balancer_attributes(LoadBalancerName=name)[
            "LoadBalancerAttributes"
        ]
        attributes.pop("AdditionalAttributes", None)
        return {
            "lb": {k: v for k, v in lb.items() if k != "CreatedTime"},
            "created": lb.get("CreatedTime"),
            "attributes": attributes,
            "rules": sorted(r["SecurityGroupRuleId"] for r in self.rules(name)),
        }

    def nlb_state(self, name: str) -> dict[str, Any]:
        """Everything the driver sets on an NLB, for before/after comparisons."""
        v2 = self.client("elbv2")
        [nlb] = self.nlbs(name)
        arn = nlb["LoadBalancerArn"]
        groups = sorted(self.target_groups(name), key=lambda g: g["TargetGroupName"])
        return {
            "lb": nlb,
            "listeners": sorted(
                v2.describe_listeners(LoadBalancerArn=arn)["Listeners"], key=lambda lst: lst["Port"]
            ),
            "attributes": v2.describe_load_balancer_attributes(LoadBalancerArn=arn)["Attributes"],
            "groups": groups,
            "group_attributes": [
                v2.describe_target_group_attributes(TargetGroupArn=g["TargetGroupArn"])[
                    "Attributes"
                ]
                for g in groups
            ],
            "rules": sorted(r["SecurityGroupRuleId"] for r in self.rules(name)),
        }

    def provider_id(self, instance_id: str) -> str:
        return f"aws:///{ZONES[0]}/{instance_id}"

    # -- what moto holds for one load balancer ---------------------------------------------
    def classic(self, name: str) -> dict[str, Any] | None:
        found = self.client("elb").describe_load_balancers()["LoadBalancerDescriptions"]
        matches = [lb for lb in found if lb["LoadBalancerName"] == name]
        assert len(matches) <= 1, matches
        return matches[0] if matches else None

    def nlbs(self, name: str) -> list[dict[str, Any]]:
        found = self.client("elbv2").describe_load_balancers()["LoadBalancers"]
        return [lb for lb in found if lb["LoadBalancerName"] == name]

    def target_groups(self, name: str) -> list[dict[str, Any]]:
        """Target groups tagged for ``name`` (attached or not)."""
        tagging = self.client("resourcegroupstaggingapi")
        arns = [
            r["ResourceARN"]
            for r in tagging.get_resources(
                TagFilters=[{"Key": LOAD_BALANCER_TAG, "Values": [name]}],
                ResourceTypeFilters=["elasticloadbalancing:targetgroup"],
            )["ResourceTagMappingList"]
        ]
        elbv2 = self.client("elbv2")
        groups: list[dict[str, Any]] = []
        for arn in arns:  # one by one: a group deleted after the listing is simply gone
            try:
                groups += elbv2.describe_target_groups(TargetGroupArns=[arn])["TargetGroups"]
            except elbv2.exceptions.TargetGroupNotFoundException:
                continue
        return groups

    def rules(self, name: str) -> list[dict[str, Any]]:
        return list(
            self.client("ec2").describe_security_group_rules(
                Filters=[{"Name": f"tag:{LOAD_BALANCER_TAG}", "Values": [name]}]
            )["SecurityGroupRules"]
        )

    def node_group_ingress(self) -> list[dict[str, Any]]:
        rules = self.client("ec2").describe_security_group_rules(
            Filters=[{"Name": "group-id", "Values": [self.node_group]}]
        )["SecurityGroupRules"]
        return [r for r in rules if not r["IsEgress"]]

    def backend_group(self) -> str:
        found = self.client("ec2").describe_security_groups(
            Filters=[{"Name": "group-name", "Values": [backend_security_group_name(self.cluster)]}]
        )["SecurityGroups"]
        assert len(found) <= 1, found
        return str(found[0]["GroupId"]) if found else ""

    def node_rules_besides_backend(self) -> list[dict[str, Any]]:
        """Ingress rules on the node group other than the cluster's shared ELB backend rule."""
        backend = self.backend_group()
        return [
            r
            for r in self.node_group_ingress()
            if (r.get("ReferencedGroupInfo") or {}).get("GroupId") != backend or not backend
        ]

    def own_groups(self, name: str) -> list[dict[str, Any]]:
        return list(
            self.client("ec2").describe_security_groups(
                Filters=[{"Name": "group-name", "Values": [security_group_name(name)]}]
            )["SecurityGroups"]
        )

    def nothing_left(self, name: str) -> bool:
        return (
            self.classic(name) is None
            and not self.nlbs(name)
            and not self.target_groups(name)
            and not self.rules(name)
            and not self.own_groups(name)
        )


@functools.cache
def _self_signed(domain: str) -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, domain)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(domain)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return (
        certificate.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ),
    )


def lb_name(service: Service) -> str:
    return default_load_balancer_name(service["metadata"]["uid"])


def make_nodes(kube: Kube, world: AwsWorld, scope: str) -> list[str]:
    names = []
    for index, instance_id in enumerate(world.instance_ids):
        name = f"lb-{scope}-{index}"
        kube.create(
            NODES,
            {
                "metadata": {"name": name, "labels": {"cloudloop-test": scope, "pool": "a"}},
                "spec": {"providerID": world.provider_id(instance_id)},
            },
        )
        names.append(name)
    return names


def delete_nodes(kube: Kube, scope: str) -> None:
    for node in kube.list(NODES, labelSelector=f"cloudloop-test={scope}")["items"]:
        kube.delete(NODES, node["metadata"]["name"])


def make_service(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    ports: tuple[int, ...] = (80,),
    type: str = "LoadBalancer",
    lb_class: str | None = None,
) -> Service:
    spec: dict[str, Any] = {
        "type": type,
        "selector": {"app": name},
        "ports": [{"name": f"p{p}", "port": p, "protocol": "TCP"} for p in ports],
    }
    if lb_class:
        spec["loadBalancerClass"] = lb_class
    return kube.create(
        SERVICES,
        {
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": spec,
        },
        namespace,
    )


def ingress(kube: Kube, namespace: str, name: str) -> list[str]:
    service = kube.get(SERVICES, name, namespace) or {}
    entries = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [str(e.get("hostname") or e.get("ip")) for e in entries]


def events(kube: Kube, namespace: str, name: str, reason: str) -> list[Event]:
    found = kube.list(EVENTS, namespace, fieldSelector=f"involvedObject.name={name}")["items"]
    return [e for e in found if e["reason"] == reason]


def lb_settings(settings: Settings, scope: str) -> Settings:
    """A unique cluster (moto is shared by the session) and Nodes limited to this test's."""
    ccm = settings.ccm.model_copy(
        update={"node_selector": f"cloudloop-test={scope}", "concurrent_service_syncs": 2}
    )
    return settings.model_copy(update={"cluster_name": f"lb-{scope}", "ccm": ccm})


def new_scope() -> str:
    return uuid.uuid4().hex[:8]


@contextlib.asynccontextmanager
async def service_starter(
    kube: Kube,
    client: Client,
    settings: Settings,
    namespace: str,
    *,
    history_limit: int = 0,
    driver: CloudDriver | None = None,
    inline_nodes_max_bytes: int = INLINE_NODES_MAX_BYTES,
) -> AsyncIterator[ServiceStarter]:
    """The starter of ``namespace``'s Services; with ``driver``, desired states are trimmed to
    what that cloud reads (as in the starter process)."""
    informers = Informers(kube)
    starter = ServiceStarter(
        kube,
        client,
        services=informers.services(namespace=namespace),
        nodes=informers.nodes(label_selector=settings.ccm.node_selector),
        task_queue=settings.temporal.task_queue,
        cluster=settings.cluster_name,
        provider=settings.provider,
        concurrency=settings.ccm.concurrent_service_syncs,
        history_limit=history_limit,
        resync_period_s=settings.ccm.load_balancer_resync_period_s,
        load_balancers=driver.load_balancers if driver is not None else None,
        inline_nodes_max_bytes=inline_nodes_max_bytes,
    )
    task = asyncio.create_task(starter.run())
    try:
        yield starter
    finally:
        starter.stop()
        informers.stop()
        await asyncio.wait_for(task, 10)
