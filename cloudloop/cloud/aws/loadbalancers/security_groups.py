"""Security groups and rules of the AWS load balancers: found by tag, changed only as needed.

Rules this driver adds carry the LB's identity tags and ``cloudloop.io/rule`` (``client``: traffic
to a Classic ELB on its own group; ``node``: NLB node ports on the nodes' group; ``elb-backend``:
the nodes admit the cluster's shared backend group, never revoked with one ELB), so a delete finds
them without knowing the cluster and an untagged rule someone else made is left alone. A node's
cluster security group is picked as cloud-provider-aws does: the one tagged for the cluster, else
its only group; an ambiguous instance gets no rule and a warning.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.base import NAME, AwsBase, calling
from cloudloop.cloud.aws.loadbalancers.naming import (
    LOAD_BALANCER_TAG,
    RULE_ROLE_TAG,
    SECURITY_GROUP_ROLE_TAG,
    aws_tags,
    backend_security_group_name,
    error_code,
    identity_tags,
    security_group_name,
)
from cloudloop.cloud.aws.loadbalancers.service_annotations import invalid
from cloudloop.cloud.aws.tags import cluster_tag_key, tag_dict, tagged_for_cluster

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import FilterTypeDef, IpPermissionTypeDef, TagSpecificationTypeDef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rule:
    """One ingress permission: from a CIDR or from a security group."""

    group_id: str
    protocol: str  # tcp | udp | -1
    from_port: int = -1
    to_port: int = -1
    cidr: str = ""
    source_group: str = ""
    role: str = "node"

    def permission(self, description: str) -> IpPermissionTypeDef:
        permission: IpPermissionTypeDef = {"IpProtocol": self.protocol}
        if self.protocol != "-1":
            permission["FromPort"] = self.from_port
            permission["ToPort"] = self.to_port
        if self.source_group:
            permission["UserIdGroupPairs"] = [
                {"GroupId": self.source_group, "Description": description}
            ]
        elif ":" in self.cidr:
            permission["Ipv6Ranges"] = [{"CidrIpv6": self.cidr, "Description": description}]
        else:
            permission["IpRanges"] = [{"CidrIp": self.cidr, "Description": description}]
        return permission

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> Rule:
        protocol = str(raw.get("IpProtocol", "-1")).lower()
        all_ports = protocol == "-1"
        return cls(
            group_id=str(raw["GroupId"]),
            protocol=protocol,
            from_port=-1 if all_ports else int(raw.get("FromPort", -1)),
            to_port=-1 if all_ports else int(raw.get("ToPort", -1)),
            cidr=str(raw.get("CidrIpv4") or raw.get("CidrIpv6") or ""),
            source_group=str((raw.get("ReferencedGroupInfo") or {}).get("GroupId") or ""),
            role=tag_dict(raw.get("Tags")).get(RULE_ROLE_TAG, "node"),
        )


class LoadBalancerSecurityGroups:
    """The load balancers' security groups and their tagged rules, on the session."""

    def __init__(self, session: AwsBase) -> None:
        self.session = session

    def check_security_groups(self, groups: Iterable[str]) -> None:
        wanted = sorted(set(groups))
        if not wanted:
            return
        with calling("DescribeSecurityGroups"):
            found = self.session.client("ec2").describe_security_groups(
                Filters=[{"Name": "group-id", "Values": wanted}]
            )
        missing = set(wanted) - {str(g["GroupId"]) for g in found.get("SecurityGroups", [])}
        if missing:
            raise invalid(f"security groups not found: {', '.join(sorted(missing))}")

    def node_security_groups(self, cluster: str, instances: dict[str, list[str]]) -> list[str]:
        """Each instance's cluster security group, as cloud-provider-aws picks it: the one tagged
        for the cluster, else its only group. Ambiguous instances are skipped with a warning."""
        groups: set[str] = set()
        ambiguous = {i: g for i, g in instances.items() if len(g) > 1}
        tagged: set[str] = set()
        if ambiguous:
            candidates = sorted({g for gs in ambiguous.values() for g in gs})
            with calling("DescribeSecurityGroups"):
                found = self.session.client("ec2").describe_security_groups(
                    Filters=[{"Name": "group-id", "Values": candidates}]
                )
            tagged = {
                str(g["GroupId"])
                for g in found.get("SecurityGroups", [])
                if tagged_for_cluster(tag_dict(g.get("Tags")), cluster)
            }
        for instance_id, instance_groups in instances.items():
            if len(instance_groups) == 1:
                groups.add(instance_groups[0])
                continue
            mine = [g for g in instance_groups if g in tagged]
            if len(mine) == 1:
                groups.add(mine[0])
            elif instance_groups:
                log.warning(
                    "instance %s: %d security groups and %d tagged for %s; no rule added",
                    instance_id,
                    len(instance_groups),
                    len(mine),
                    cluster,
                )
        return sorted(groups)

    # -- security-group rules --------------------------------------------------------------
    def rules_in(self, groups: list[str], name: str) -> dict[Rule, str]:
        """The rules tagged for load balancer ``name`` in ``groups`` → their rule IDs.

        Looking in known groups is one cheap call; a tag-only search (:meth:`_existing_rules`)
        scans every group of the account in some implementations (moto), so it is kept for
        the rare paths that do not know where the rules are.
        """
        if not groups:
            return {}
        rules: dict[Rule, str] = {}
        paginator = self.session.client("ec2").get_paginator("describe_security_group_rules")
        with calling("DescribeSecurityGroupRules"):
            for page in paginator.paginate(
                Filters=[{"Name": "group-id", "Values": sorted(set(groups))}]
            ):
                for raw in page.get("SecurityGroupRules", []):
                    tags = tag_dict(raw.get("Tags"))
                    if not raw.get("IsEgress") and tags.get(LOAD_BALANCER_TAG) == name:
                        rules[Rule.of(raw)] = str(raw["SecurityGroupRuleId"])
        return rules

    def existing_rules(self, name: str) -> dict[Rule, str]:
        """Every rule tagged for load balancer ``name`` → its rule ID."""
        rules: dict[Rule, str] = {}
        paginator = self.session.client("ec2").get_paginator("describe_security_group_rules")
        with calling("DescribeSecurityGroupRules"):
            for page in paginator.paginate(
                Filters=[{"Name": f"tag:{LOAD_BALANCER_TAG}", "Values": [name]}]
            ):
                for raw in page.get("SecurityGroupRules", []):
                    if not raw.get("IsEgress"):
                        rules[Rule.of(raw)] = str(raw["SecurityGroupRuleId"])
        return rules

    def sync_rules(
        self,
        spec: models.LoadBalancerSpec,
        desired: set[Rule],
        existing: dict[Rule, str],
        *,
        scope: Callable[[Rule], bool] = lambda rule: True,
    ) -> None:
        """Authorize the missing rules (tagged), revoke the tagged ones in ``scope`` not wanted."""
        by_group: dict[tuple[str, str], list[Rule]] = defaultdict(list)
        for rule in sorted(desired - existing.keys(), key=repr):
            by_group[(rule.group_id, rule.role)].append(rule)
        ec2 = self.session.client("ec2")
        description = f"kubernetes.io/rule/{spec.name}"
        for (group_id, role), rules in by_group.items():
            tags = aws_tags({**identity_tags(spec), RULE_ROLE_TAG: role})
            tag_spec: list[TagSpecificationTypeDef] = [
                {"ResourceType": "security-group-rule", "Tags": tags}
            ]
            try:
                with calling("AuthorizeSecurityGroupIngress"):
                    ec2.authorize_security_group_ingress(
                        GroupId=group_id,
                        IpPermissions=[r.permission(description) for r in rules],
                        TagSpecifications=tag_spec,
                    )
            except errors.AlreadyExists:  # one of them exists untagged: add the others singly
                for rule in rules:
                    try:
                        with calling("AuthorizeSecurityGroupIngress"):
                            ec2.authorize_security_group_ingress(
                                GroupId=group_id,
                                IpPermissions=[rule.permission(description)],
                                TagSpecifications=tag_spec,
                            )
                    except errors.AlreadyExists:
                        log.info("rule %s exists already (untagged); left as it is", rule)
        self.revoke({r: i for r, i in existing.items() if r not in desired and scope(r)})

    def revoke(self, rules: dict[Rule, str]) -> None:
        by_group: dict[str, list[str]] = defaultdict(list)
        for rule, rule_id in rules.items():
            by_group[rule.group_id].append(rule_id)
        for group_id, rule_ids in sorted(by_group.items()):
            try:
                with calling("RevokeSecurityGroupIngress"):
                    self.session.client("ec2").revoke_security_group_ingress(
                        GroupId=group_id, SecurityGroupRuleIds=sorted(rule_ids)
                    )
            except errors.NotFound:
                pass  # the group or the rules went meanwhile

    def elb_security_groups(
        self, spec: models.LoadBalancerSpec, vpc_id: str, tags: dict[str, str], *, own: bool
    ) -> tuple[str, str, bool]:
        """The ELB's own group (``""`` when ``own`` is false), the cluster's backend group, and
        whether the own group was just created; found by name in the VPC (one call)."""
        ec2 = self.session.client("ec2")
        names = {
            security_group_name(spec.name): aws_tags(tags),
            backend_security_group_name(spec.cluster): aws_tags(
                {cluster_tag_key(spec.cluster): "owned", SECURITY_GROUP_ROLE_TAG: "elb-backend"}
            ),
        }
        wanted = list(names) if own else list(names)[1:]
        filters: list[FilterTypeDef] = [
            {"Name": "group-name", "Values": wanted},
            {"Name": "vpc-id", "Values": [vpc_id]},
        ]
        with calling("DescribeSecurityGroups"):
            found = ec2.describe_security_groups(Filters=filters).get("SecurityGroups", [])
        ids = {str(g["GroupName"]): str(g["GroupId"]) for g in found}
        own_created = own and security_group_name(spec.name) not in ids
        for name in wanted:
            if name in ids:
                continue
            description = (
                f"Security group for Kubernetes ELB {spec.name} ({spec.service})"
                if name == security_group_name(spec.name)
                else f"Kubernetes ELBs of cluster {spec.cluster}: the nodes accept traffic from it"
            )
            try:
                with calling("CreateSecurityGroup"):
                    created = ec2.create_security_group(
                        GroupName=name,
                        Description=description,
                        VpcId=vpc_id,
                        TagSpecifications=[{"ResourceType": "security-group", "Tags": names[name]}],
                    )
                ids[name] = str(created["GroupId"])
            except errors.AlreadyExists:  # created meanwhile (e.g. by a parallel ensure)
                with calling("DescribeSecurityGroups"):
                    again = ec2.describe_security_groups(
                        Filters=[
                            {"Name": "group-name", "Values": [name]},
                            {"Name": "vpc-id", "Values": [vpc_id]},
                        ]
                    )["SecurityGroups"]
                ids[name] = str(again[0]["GroupId"])
        own_id = ids.get(security_group_name(spec.name), "")
        return own_id, ids[backend_security_group_name(spec.cluster)], own_created

    def open_nodes_to(
        self, backend: str, node_groups: list[str], spec: models.LoadBalancerSpec
    ) -> None:
        """One allow-all rule from the cluster's backend group on each node group (shared by
        every ELB of the cluster, so it is never revoked with one of them)."""
        if not node_groups:
            return
        ec2 = self.session.client("ec2")
        with calling("DescribeSecurityGroupRules"):
            found = ec2.describe_security_group_rules(
                Filters=[{"Name": "group-id", "Values": node_groups}]
            ).get("SecurityGroupRules", [])
        opened = {
            str(r["GroupId"])
            for r in found
            if not r.get("IsEgress")
            and str(r.get("IpProtocol")) == "-1"
            and (r.get("ReferencedGroupInfo") or {}).get("GroupId") == backend
        }
        tags = aws_tags({cluster_tag_key(spec.cluster): "owned", RULE_ROLE_TAG: "elb-backend"})
        for group in node_groups:
            if group in opened:
                continue
            try:
                with calling("AuthorizeSecurityGroupIngress"):
                    ec2.authorize_security_group_ingress(
                        GroupId=group,
                        IpPermissions=[
                            Rule(group, "-1", source_group=backend).permission(
                                f"kubernetes.io/rule/elb-backend/{spec.cluster}"
                            )
                        ],
                        TagSpecifications=[{"ResourceType": "security-group-rule", "Tags": tags}],
                    )
            except errors.AlreadyExists:
                pass

    def delete_own_security_groups(self, name: str) -> None:
        ec2 = self.session.client("ec2")
        with calling("DescribeSecurityGroups"):
            found = ec2.describe_security_groups(
                Filters=[
                    {"Name": f"tag:{LOAD_BALANCER_TAG}", "Values": [name]},
                    {"Name": "group-name", "Values": [security_group_name(name)]},
                ]
            ).get("SecurityGroups", [])
        for group in found:
            try:
                with calling("DeleteSecurityGroup"):
                    ec2.delete_security_group(GroupId=group["GroupId"])
            except errors.NotFound:
                pass
            except errors.CloudError as exc:
                if error_code(exc) == "DependencyViolation":  # ELB interfaces still detaching
                    raise errors.CloudError(
                        NAME, "DeleteSecurityGroup", f"{group['GroupId']} still in use"
                    ) from exc
                raise
