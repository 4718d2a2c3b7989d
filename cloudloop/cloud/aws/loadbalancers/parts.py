"""What both kinds of AWS load balancer share: their subnets and their target instances.

The subnets come from ``service.beta.kubernetes.io/aws-load-balancer-subnets`` (IDs or Name tags)
or, as cloud-provider-aws picks them, one cluster-tagged subnet per zone preferring the scheme's
role tag. Target instances are looked up in batches of ``DESCRIBE_BATCH`` filter values (AWS
allows 200 per filter); terminated and shutting-down instances are left out. As
cloud-provider-aws, only ``running`` instances are registered (AWS refuses to register a stopped
one, and one such instance would fail the whole load balancer); an instance already registered
stays registered while it is stopped, so it serves again when it starts.

Rules: what a Service's change of type needs of the other kind is a Protocol here
(:class:`ClassicLookup`, :class:`NlbRemoval`), given to each half at construction, so the
Classic and NLB modules never import each other.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.base import NAME, AwsBase, calling
from cloudloop.cloud.aws.loadbalancers.naming import choose_subnets
from cloudloop.cloud.aws.loadbalancers.security_groups import LoadBalancerSecurityGroups
from cloudloop.cloud.aws.loadbalancers.service_annotations import AwsLoadBalancerOptions, invalid
from cloudloop.cloud.aws.loadbalancers.tls import LoadBalancerChecks
from cloudloop.cloud.aws.tags import cluster_tag_key, tag_dict

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import FilterTypeDef, SubnetTypeDef

log = logging.getLogger(__name__)

#: Filter values per DescribeInstances request (AWS allows 200; cloud-provider-aws uses 150).
DESCRIBE_BATCH = 150


class Targets(dict[str, list[str]]):
    """Instance → its security groups, for instances that exist; ``running``: those that may be
    registered now."""

    def __init__(self) -> None:
        super().__init__()
        self.running: set[str] = set()

    def registered_as_wanted(self, registered: set[str]) -> bool:
        """Whether ``registered`` is what registering leaves: every running target, no
        non-target (a stopped target may be registered or not)."""
        return self.running <= registered <= set(self)


@dataclass
class Network:
    vpc_id: str
    #: In the order of the ``subnets`` annotation, else by zone (an NLB pairs them by position
    #: with ``eip-allocations`` and ``private-ipv4-addresses``).
    subnet_ids: list[str]
    cidrs: list[str]
    #: Subnet → its IPv4 CIDR, and the subnets with an IPv6 CIDR (``dualstack`` needs one each).
    subnet_cidrs: dict[str, str] = field(default_factory=dict)
    ipv6_subnets: frozenset[str] = frozenset()


class ClassicLookup(Protocol):
    """All the NLB half needs of the Classic one: the Classic ELB of a name, if any (a change to
    NLB deletes it)."""

    def describe_classic(self, name: str) -> dict[str, Any] | None: ...


class NlbRemoval(Protocol):
    """All the Classic half needs of the NLB one: the NLB of a name, and its removal with its
    target groups (a change to Classic deletes it)."""

    def describe_nlb(self, name: str) -> dict[str, Any] | None: ...

    def delete_nlb(self, name: str, existing: dict[str, Any] | None) -> None: ...


class LoadBalancerParts:
    """What both kinds share, on the session: subnets and target instances, and the security
    groups and checks both use."""

    def __init__(self, session: AwsBase) -> None:
        self.session = session
        self.groups = LoadBalancerSecurityGroups(session)
        self.checks = LoadBalancerChecks(session)

    def network(self, spec: models.LoadBalancerSpec, options: AwsLoadBalancerOptions) -> Network:
        ec2 = self.session.client("ec2")
        paginator = ec2.get_paginator("describe_subnets")

        def describe(filters: list[FilterTypeDef]) -> list[SubnetTypeDef]:
            with calling("DescribeSubnets"):
                return [s for page in paginator.paginate(Filters=filters) for s in page["Subnets"]]

        if options.subnets:
            ids = [s for s in options.subnets if s.startswith("subnet-")]
            names = [s for s in options.subnets if not s.startswith("subnet-")]
            found: list[SubnetTypeDef] = []
            if ids:
                found += describe([{"Name": "subnet-id", "Values": ids}])
            if names:
                found += describe([{"Name": "tag:Name", "Values": names}])
            by_key: dict[str, SubnetTypeDef] = {}
            for subnet in found:
                by_key.setdefault(str(subnet["SubnetId"]), subnet)
                by_key.setdefault(tag_dict(subnet.get("Tags")).get("Name", ""), subnet)
            missing = [s for s in options.subnets if s not in by_key]
            if missing:
                raise invalid(f"subnets not found: {', '.join(missing)}")
            chosen = [by_key[s] for s in options.subnets]
        else:
            # One filter on the current tag key (the legacy ``KubernetesCluster`` tag would cost a
            # second call on every ensure; ``-subnets`` covers such clusters).
            tagged = describe([{"Name": "tag-key", "Values": [cluster_tag_key(spec.cluster)]}])
            chosen = choose_subnets(tagged, spec.cluster, internal=options.internal)
            if not chosen:
                raise errors.CloudError(
                    NAME,
                    "DescribeSubnets",
                    f"could not find any suitable subnets for creating the ELB (tag subnets "
                    f"with {cluster_tag_key(spec.cluster)})",
                )
        vpcs = {str(s["VpcId"]) for s in chosen}
        if len(vpcs) != 1:
            raise invalid(
                f"the load balancer's subnets span several VPCs ({', '.join(sorted(vpcs))})"
            )
        unique = {str(s["SubnetId"]): s for s in chosen}  # keeps the first, in order
        return Network(
            vpc_id=vpcs.pop(),
            subnet_ids=list(unique),
            cidrs=sorted({str(s.get("CidrBlock", "")) for s in unique.values()} - {""}),
            subnet_cidrs={k: str(s.get("CidrBlock", "")) for k, s in unique.items()},
            ipv6_subnets=frozenset(
                k
                for k, s in unique.items()
                if any(
                    (a.get("Ipv6CidrBlockState") or {}).get("State") == "associated"
                    for a in s.get("Ipv6CidrBlockAssociationSet") or []
                )
            ),
        )

    def live_instances(self, instance_ids: list[str]) -> Targets:
        """Instance → its security groups, for the given instances that exist (not terminated),
        with the running ones marked."""
        found = Targets()
        ec2 = self.session.client("ec2")
        for start in range(0, len(instance_ids), DESCRIBE_BATCH):
            chunk = instance_ids[start : start + DESCRIBE_BATCH]
            token: str | None = None
            while True:
                kwargs: dict[str, Any] = {"Filters": [{"Name": "instance-id", "Values": chunk}]}
                if token:
                    kwargs["NextToken"] = token
                with calling("DescribeInstances"):
                    page = ec2.describe_instances(**kwargs)
                for reservation in page.get("Reservations", []):
                    for raw in reservation.get("Instances", []):
                        state = raw.get("State", {}).get("Name", "")
                        if state in ("terminated", "shutting-down"):
                            continue
                        instance_id = str(raw["InstanceId"])
                        found[instance_id] = sorted(
                            str(g["GroupId"]) for g in raw.get("SecurityGroups", []) or []
                        )
                        if state == "running":
                            found.running.add(instance_id)
                token = page.get("NextToken")
                if not token:
                    break
        missing = set(instance_ids) - set(found)
        if missing:
            log.warning("instances not found or terminated, not registered: %s", sorted(missing))
        idle = set(found) - found.running
        if idle:
            log.info("instances not running, not registered (kept if they are): %s", sorted(idle))
        return found
