"""AWS load balancers for Services: a Classic ELB by default, an NLB with ``type: nlb``.

Every resource this module creates carries the cluster and Service identity as tags
(``kubernetes.io/cluster/<cluster>=owned``, ``kubernetes.io/service-name=<ns>/<name>``,
``cloudloop.io/service-uid``, ``cloudloop.io/load-balancer=<lb name>``), and every step looks
for what exists (by name or by those tags) before creating anything, so a call retried after a
crash adopts what the interrupted one made. The security-group rules it adds (on the ELB's own
group and on the nodes' cluster group) are tagged too, which lets a delete find them without
knowing the cluster. All annotations are parsed and every read happens before the first write,
so an invalid annotation changes nothing in the cloud.

Classic ELB (as cloud-provider-aws): a security group ``k8s-elb-<name>`` opened on the listener
ports to ``loadBalancerSourceRanges`` (unless ``security-groups`` names the groups), TCP listeners
to the node ports, a health check and the instances registered. Unlike upstream, which adds one
rule per ELB to the nodes' group (and so stops at that group's rule quota, 60 by default), every
ELB also carries the cluster's shared backend group ``k8s-traffic-<cluster>`` and each node group
admits that group with one rule (the AWS Load Balancer Controller's backend security group).

NLB: one target group per port (``k8s-<ns>-<name>-<hash>``), one TCP/UDP listener per port,
instances registered at the node port, and node-port rules on the nodes' security group from
the source ranges (plus the NLB subnets, for health checks, when the source ranges are
restricted), as cloud-provider-aws does.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.base import NAME, AwsBase, calling
from cloudloop.cloud.aws.lb_annotations import (
    TRAFFIC_PORT,
    AwsLoadBalancerOptions,
    HealthCheckOptions,
    LoadBalancerKind,
    invalid,
    parse_annotations,
)
from cloudloop.cloud.aws.tags import cluster_tag_key, tag_dict, tagged_for_cluster

log = logging.getLogger(__name__)

SERVICE_NAME_TAG = "kubernetes.io/service-name"
SERVICE_UID_TAG = "cloudloop.io/service-uid"
LOAD_BALANCER_TAG = "cloudloop.io/load-balancer"
#: On security-group rules: ``client`` (traffic to the LB), ``node`` (NLB node ports on the
#: nodes' group), ``elb-backend`` (the nodes admit the cluster's ELB backend group; shared).
RULE_ROLE_TAG = "cloudloop.io/rule"
SECURITY_GROUP_ROLE_TAG = "cloudloop.io/security-group"
ROLE_ELB_TAG = "kubernetes.io/role/elb"
ROLE_INTERNAL_ELB_TAG = "kubernetes.io/role/internal-elb"
ANYWHERE = "0.0.0.0/0"
DESCRIBE_BATCH = 200


# -- pure parts -----------------------------------------------------------------------------
def load_balancer_tags(
    spec: models.LoadBalancerSpec, options: AwsLoadBalancerOptions
) -> dict[str, str]:
    """Tags of every resource made for ``spec``: the annotation's extras, then the identity."""
    return {**options.additional_tags, **identity_tags(spec)}


def identity_tags(spec: models.LoadBalancerSpec) -> dict[str, str]:
    return {
        cluster_tag_key(spec.cluster): "owned",
        SERVICE_NAME_TAG: spec.service,
        SERVICE_UID_TAG: spec.service_uid,
        LOAD_BALANCER_TAG: spec.name,
    }


def aws_tags(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


def security_group_name(lb_name: str) -> str:
    return f"k8s-elb-{lb_name}"


def backend_security_group_name(cluster: str) -> str:
    """The cluster's shared ELB backend group (as the AWS Load Balancer Controller's
    ``k8s-traffic-<cluster>``): every Classic ELB carries it, and each node group admits it
    with one rule, so the node groups hold one rule however many Services there are."""
    return f"k8s-traffic-{cluster}"


def target_group_name(spec: models.LoadBalancerSpec, port: models.LoadBalancerPort) -> str:
    """``k8s-<ns:8>-<name:8>-<hash:10>`` (as cloud-provider-aws), hashed over the Service UID,
    port, node port and protocol, so a changed port gets a new group and a retry finds the old."""
    namespace, _, name = spec.service.partition("/")
    digest = hashlib.sha1(
        f"{spec.service_uid}/{port.port}/{port.node_port}/{port.protocol.upper()}".encode()
    ).hexdigest()

    def clean(text: str) -> str:
        return re.sub(r"[^a-zA-Z0-9-]", "", text)[:8]

    return f"k8s-{clean(namespace)}-{clean(name)}-{digest[:10]}"


def check_ports(spec: models.LoadBalancerSpec, kind: LoadBalancerKind) -> None:
    if not spec.ports:
        raise invalid("the Service has no ports")
    allowed = ("TCP",) if kind is LoadBalancerKind.CLASSIC else ("TCP", "UDP")
    for port in spec.ports:
        if port.protocol.upper() not in allowed:
            lb = "a Classic ELB" if kind is LoadBalancerKind.CLASSIC else "an NLB"
            raise invalid(f"port {port.port}: protocol {port.protocol} is not supported by {lb}")
        if not 0 < port.node_port < 65536:
            raise invalid(f"port {port.port} has no node port (allocateLoadBalancerNodePorts?)")


def _health_check_port(spec: models.LoadBalancerSpec, hc: HealthCheckOptions, default: str) -> str:
    port = hc.port or default
    return str(spec.ports[0].node_port) if port == TRAFFIC_PORT else port


def classic_health_check(spec: models.LoadBalancerSpec, hc: HealthCheckOptions) -> dict[str, Any]:
    """The ELB ``HealthCheck``: TCP to the first node port, or HTTP ``/healthz`` on the health
    check node port for ``externalTrafficPolicy: Local``; annotations override each part."""
    local = spec.external_traffic_policy == "Local" and spec.health_check_node_port > 0
    protocol = hc.protocol or ("HTTP" if local else "TCP")
    port = _health_check_port(spec, hc, str(spec.health_check_node_port) if local else TRAFFIC_PORT)
    path = ""
    if protocol in ("HTTP", "HTTPS"):
        path = hc.path or ("/healthz" if local else "/")
    interval = hc.interval_s or 10
    timeout = hc.timeout_s or 5
    if timeout >= interval:
        raise invalid(f"health check timeout {timeout}s must be shorter than interval {interval}s")
    return {
        "Target": f"{protocol}:{port}{path}",
        "Interval": interval,
        "Timeout": timeout,
        "HealthyThreshold": hc.healthy_threshold or 2,
        "UnhealthyThreshold": hc.unhealthy_threshold or 6,
    }


def nlb_health_check(spec: models.LoadBalancerSpec, hc: HealthCheckOptions) -> dict[str, Any]:
    """Target-group health-check settings (cloud-provider-aws NLB defaults)."""
    local = spec.external_traffic_policy == "Local" and spec.health_check_node_port > 0
    protocol = hc.protocol or ("HTTP" if local else "TCP")
    port = hc.port or (str(spec.health_check_node_port) if local else TRAFFIC_PORT)
    interval = hc.interval_s or (10 if local else 30)
    timeout = hc.timeout_s or (6 if local else 10)
    if timeout >= interval:
        raise invalid(f"health check timeout {timeout}s must be shorter than interval {interval}s")
    settings: dict[str, Any] = {
        "HealthCheckProtocol": protocol,
        "HealthCheckPort": port,
        "HealthCheckIntervalSeconds": interval,
        "HealthCheckTimeoutSeconds": timeout,
        "HealthyThresholdCount": hc.healthy_threshold or (2 if local else 3),
        "UnhealthyThresholdCount": hc.unhealthy_threshold or (2 if local else 3),
    }
    if protocol in ("HTTP", "HTTPS"):
        settings["HealthCheckPath"] = hc.path or ("/healthz" if local else "/")
    return settings


def target_instance_ids(
    spec: models.LoadBalancerSpec, options: AwsLoadBalancerOptions
) -> list[str]:
    """The instances to register: the backends that ``target-node-labels`` selects."""
    if spec.backends:
        ids = [b.instance_id for b in spec.backends if options.selects(b.labels)]
    else:
        ids = [] if options.target_node_labels else list(spec.backend_instance_ids)
    return sorted(set(ids))


def choose_subnets(
    subnets: Iterable[dict[str, Any]], cluster: str, *, internal: bool
) -> list[dict[str, Any]]:
    """One cluster subnet per zone, preferring the role tag of the scheme (``kubernetes.io/role/
    elb`` or ``internal-elb``) and skipping subnets tagged only for the other scheme."""
    wanted, other = (
        (ROLE_INTERNAL_ELB_TAG, ROLE_ELB_TAG) if internal else (ROLE_ELB_TAG, ROLE_INTERNAL_ELB_TAG)
    )
    best: dict[str, tuple[int, str, dict[str, Any]]] = {}
    for subnet in subnets:
        tags = tag_dict(subnet.get("Tags"))
        if not tagged_for_cluster(tags, cluster):
            continue
        if other in tags and wanted not in tags:
            continue
        rank = (0 if wanted in tags else 1, str(subnet["SubnetId"]), subnet)
        zone = str(subnet.get("AvailabilityZone", ""))
        if zone not in best or rank[:2] < best[zone][:2]:
            best[zone] = rank
    return [entry[2] for _, entry in sorted(best.items())]


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

    def permission(self, description: str) -> dict[str, Any]:
        permission: dict[str, Any] = {"IpProtocol": self.protocol}
        if self.protocol != "-1":
            permission.update(FromPort=self.from_port, ToPort=self.to_port)
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
    def of(cls, raw: dict[str, Any]) -> Rule:
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


@dataclass
class Network:
    vpc_id: str
    subnet_ids: list[str]
    cidrs: list[str]


def _error_code(exc: errors.CloudError) -> str:
    cause: Any = exc.__cause__
    response = getattr(cause, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


# -- the driver mixin -----------------------------------------------------------------------
class AwsLoadBalancers(AwsBase):
    # -- contract --------------------------------------------------------------------------
    def ensure_load_balancer(self, spec: models.LoadBalancerSpec) -> models.LoadBalancerStatus:
        options = parse_annotations(spec.annotations)
        check_ports(spec, options.kind)
        if options.kind is LoadBalancerKind.NLB:
            return self._ensure_nlb(spec, options)
        return self._ensure_classic(spec, options)

    def update_load_balancer_backends(self, spec: models.LoadBalancerSpec) -> None:
        """Register/deregister instances and fix the node rules; ``NotFound`` without an LB."""
        options = parse_annotations(spec.annotations)
        check_ports(spec, options.kind)
        instances = self._live_instances(target_instance_ids(spec, options))
        if options.kind is LoadBalancerKind.NLB:
            self._update_nlb_backends(spec, options, instances)
        else:
            self._update_classic_backends(spec, options, instances)

    def get_load_balancer(self, name: str) -> models.LoadBalancerStatus | None:
        classic = self._describe_classic(name)
        if classic is not None:
            return models.LoadBalancerStatus(name=name, hostname=str(classic.get("DNSName", "")))
        nlb = self._describe_nlb(name)
        if nlb is not None:
            return models.LoadBalancerStatus(name=name, hostname=str(nlb.get("DNSName", "")))
        return None

    def delete_load_balancer(self, name: str) -> None:
        """Delete the LB of either type, its target groups, tagged rules and own security group.

        Each part is found by itself (name or tags), so a delete retried after a crash finishes
        whatever the interrupted one left; nothing left is not an error. A Classic ELB's rules
        live in its own group and go with it; an NLB's node-port rules are looked up in the
        groups of its targets, and by tag when no LB is left to say where they are.
        """
        classic = self._describe_classic(name)
        if classic is not None:
            with calling("DeleteLoadBalancer"):
                self.client("elb").delete_load_balancer(LoadBalancerName=name)
        nlb = self._describe_nlb(name)
        target_groups = self._target_security_groups(nlb) if nlb is not None else []
        self._delete_nlb(name, nlb)
        if nlb is not None or classic is None:
            # Without targets (or without any LB: an interrupted delete) only the tags tell.
            where = self._rules_in(target_groups, name) if target_groups else None
            self._revoke(where if where is not None else self._existing_rules(name))
        self._delete_own_security_groups(name)

    # -- lookups ---------------------------------------------------------------------------
    def _describe_classic(self, name: str) -> dict[str, Any] | None:
        try:
            with calling("DescribeLoadBalancers"):
                found = self.client("elb").describe_load_balancers(LoadBalancerNames=[name])
        except errors.NotFound:
            return None
        descriptions = found.get("LoadBalancerDescriptions", [])
        return dict(descriptions[0]) if descriptions else None

    def _describe_nlb(self, name: str) -> dict[str, Any] | None:
        try:
            with calling("DescribeLoadBalancersV2"):
                found = self.client("elbv2").describe_load_balancers(Names=[name])
        except errors.NotFound:
            return None
        balancers = [lb for lb in found.get("LoadBalancers", []) if lb.get("Type") == "network"]
        return dict(balancers[0]) if balancers else None

    def _network(self, spec: models.LoadBalancerSpec, options: AwsLoadBalancerOptions) -> Network:
        ec2 = self.client("ec2")
        paginator = ec2.get_paginator("describe_subnets")

        def describe(filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
            with calling("DescribeSubnets"):
                return [s for page in paginator.paginate(Filters=filters) for s in page["Subnets"]]

        if options.subnets:
            ids = [s for s in options.subnets if s.startswith("subnet-")]
            names = [s for s in options.subnets if not s.startswith("subnet-")]
            chosen: list[dict[str, Any]] = []
            if ids:
                chosen += describe([{"Name": "subnet-id", "Values": ids}])
            if names:
                chosen += describe([{"Name": "tag:Name", "Values": names}])
            known = {str(s["SubnetId"]) for s in chosen} | {
                tag_dict(s.get("Tags")).get("Name", "") for s in chosen
            }
            missing = [s for s in options.subnets if s not in known]
            if missing:
                raise invalid(f"subnets not found: {', '.join(missing)}")
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
        unique = {str(s["SubnetId"]): s for s in chosen}
        return Network(
            vpc_id=vpcs.pop(),
            subnet_ids=sorted(unique),
            cidrs=sorted({str(s.get("CidrBlock", "")) for s in unique.values()} - {""}),
        )

    def _check_security_groups(self, groups: Iterable[str]) -> None:
        wanted = sorted(set(groups))
        if not wanted:
            return
        with calling("DescribeSecurityGroups"):
            found = self.client("ec2").describe_security_groups(
                Filters=[{"Name": "group-id", "Values": wanted}]
            )
        missing = set(wanted) - {str(g["GroupId"]) for g in found.get("SecurityGroups", [])}
        if missing:
            raise invalid(f"security groups not found: {', '.join(sorted(missing))}")

    def _live_instances(self, instance_ids: list[str]) -> dict[str, list[str]]:
        """Instance → its security groups, for the given instances that exist (not terminated)."""
        found: dict[str, list[str]] = {}
        ec2 = self.client("ec2")
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
                        found[str(raw["InstanceId"])] = sorted(
                            str(g["GroupId"]) for g in raw.get("SecurityGroups", []) or []
                        )
                token = page.get("NextToken")
                if not token:
                    break
        missing = set(instance_ids) - set(found)
        if missing:
            log.warning("instances not found or terminated, not registered: %s", sorted(missing))
        return found

    def _node_security_groups(self, cluster: str, instances: dict[str, list[str]]) -> list[str]:
        """Each instance's cluster security group, as cloud-provider-aws picks it: the one tagged
        for the cluster, else its only group. Ambiguous instances are skipped with a warning."""
        groups: set[str] = set()
        ambiguous = {i: g for i, g in instances.items() if len(g) > 1}
        tagged: set[str] = set()
        if ambiguous:
            candidates = sorted({g for gs in ambiguous.values() for g in gs})
            with calling("DescribeSecurityGroups"):
                found = self.client("ec2").describe_security_groups(
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
    def _rules_in(self, groups: list[str], name: str) -> dict[Rule, str]:
        """The rules tagged for load balancer ``name`` in ``groups`` → their rule IDs.

        Looking in known groups is one cheap call; a tag-only search (:meth:`_existing_rules`)
        scans every group of the account in some implementations (moto), so it is kept for
        the rare paths that do not know where the rules are.
        """
        if not groups:
            return {}
        rules: dict[Rule, str] = {}
        paginator = self.client("ec2").get_paginator("describe_security_group_rules")
        with calling("DescribeSecurityGroupRules"):
            for page in paginator.paginate(
                Filters=[{"Name": "group-id", "Values": sorted(set(groups))}]
            ):
                for raw in page.get("SecurityGroupRules", []):
                    tags = tag_dict(raw.get("Tags"))
                    if not raw.get("IsEgress") and tags.get(LOAD_BALANCER_TAG) == name:
                        rules[Rule.of(raw)] = str(raw["SecurityGroupRuleId"])
        return rules

    def _existing_rules(self, name: str) -> dict[Rule, str]:
        """Every rule tagged for load balancer ``name`` → its rule ID."""
        rules: dict[Rule, str] = {}
        paginator = self.client("ec2").get_paginator("describe_security_group_rules")
        with calling("DescribeSecurityGroupRules"):
            for page in paginator.paginate(
                Filters=[{"Name": f"tag:{LOAD_BALANCER_TAG}", "Values": [name]}]
            ):
                for raw in page.get("SecurityGroupRules", []):
                    if not raw.get("IsEgress"):
                        rules[Rule.of(raw)] = str(raw["SecurityGroupRuleId"])
        return rules

    def _sync_rules(
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
        ec2 = self.client("ec2")
        description = f"kubernetes.io/rule/{spec.name}"
        for (group_id, role), rules in by_group.items():
            tags = aws_tags({**identity_tags(spec), RULE_ROLE_TAG: role})
            tag_spec = [{"ResourceType": "security-group-rule", "Tags": tags}]
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
        self._revoke({r: i for r, i in existing.items() if r not in desired and scope(r)})

    def _revoke(self, rules: dict[Rule, str]) -> None:
        by_group: dict[str, list[str]] = defaultdict(list)
        for rule, rule_id in rules.items():
            by_group[rule.group_id].append(rule_id)
        for group_id, rule_ids in sorted(by_group.items()):
            try:
                with calling("RevokeSecurityGroupIngress"):
                    self.client("ec2").revoke_security_group_ingress(
                        GroupId=group_id, SecurityGroupRuleIds=sorted(rule_ids)
                    )
            except errors.NotFound:
                pass  # the group or the rules went meanwhile

    def _elb_security_groups(
        self, spec: models.LoadBalancerSpec, vpc_id: str, tags: dict[str, str], *, own: bool
    ) -> tuple[str, str, bool]:
        """The ELB's own group (``""`` when ``own`` is false), the cluster's backend group, and
        whether the own group was just created; found by name in the VPC (one call)."""
        ec2 = self.client("ec2")
        names = {
            security_group_name(spec.name): aws_tags(tags),
            backend_security_group_name(spec.cluster): aws_tags(
                {cluster_tag_key(spec.cluster): "owned", SECURITY_GROUP_ROLE_TAG: "elb-backend"}
            ),
        }
        wanted = list(names) if own else list(names)[1:]
        filters = [
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

    def _open_nodes_to(
        self, backend: str, node_groups: list[str], spec: models.LoadBalancerSpec
    ) -> None:
        """One allow-all rule from the cluster's backend group on each node group (shared by
        every ELB of the cluster, so it is never revoked with one of them)."""
        if not node_groups:
            return
        ec2 = self.client("ec2")
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

    def _delete_own_security_groups(self, name: str) -> None:
        ec2 = self.client("ec2")
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
                if _error_code(exc) == "DependencyViolation":  # ELB interfaces still detaching
                    raise errors.CloudError(
                        NAME, "DeleteSecurityGroup", f"{group['GroupId']} still in use"
                    ) from exc
                raise

    # -- Classic ELB -----------------------------------------------------------------------
    def _ensure_classic(
        self, spec: models.LoadBalancerSpec, options: AwsLoadBalancerOptions
    ) -> models.LoadBalancerStatus:
        elb = self.client("elb")
        health_check = classic_health_check(spec, options.health_check)
        listeners = [
            {
                "Protocol": "TCP",
                "LoadBalancerPort": p.port,
                "InstanceProtocol": "TCP",
                "InstancePort": p.node_port,
            }
            for p in spec.ports
        ]
        tags = load_balancer_tags(spec, options)
        scheme = "internal" if options.internal else "internet-facing"
        network = self._network(spec, options)
        self._check_security_groups([*options.security_groups, *options.extra_security_groups])
        instances = self._live_instances(target_instance_ids(spec, options))
        existing = self._describe_classic(spec.name)
        nlb = self._describe_nlb(spec.name) if existing is None else None
        # -- reads done; from here on the cloud changes ------------------------------------
        if nlb is not None:  # the type changed: the NLB and its target groups go
            self._delete_nlb(spec.name, nlb)
        if existing is not None and existing.get("Scheme", "internet-facing") != scheme:
            log.info("%s: scheme changes to %s; recreating the ELB", spec.name, scheme)
            with calling("DeleteLoadBalancer"):
                elb.delete_load_balancer(LoadBalancerName=spec.name)
            existing = None
        if nlb is not None:  # its node-port rules, wherever they are
            self._revoke(self._existing_rules(spec.name))
        own, backend, own_created = self._elb_security_groups(
            spec, network.vpc_id, tags, own=not options.security_groups
        )
        rules = {} if own_created else self._rules_in([own] if own else [], spec.name)
        groups = list(options.security_groups) or [own]
        for group in (backend, *options.extra_security_groups):
            if group not in groups:
                groups.append(group)

        desired: set[Rule] = set()
        if own:
            for port in spec.ports:
                for cidr in spec.source_ranges or [ANYWHERE]:
                    desired.add(Rule(own, "tcp", port.port, port.port, cidr=cidr, role="client"))

        if existing is None:
            existing = self._create_classic(spec, listeners, network, groups, scheme, tags)
        else:
            self._update_classic(spec, existing, listeners, network, groups, tags)
        current_check = existing.get("HealthCheck") or {}
        if any(current_check.get(k) != v for k, v in health_check.items()):
            with calling("ConfigureHealthCheck"):
                elb.configure_health_check(LoadBalancerName=spec.name, HealthCheck=health_check)
        self._sync_rules(spec, desired, rules)
        self._open_nodes_to(backend, self._node_security_groups(spec.cluster, instances), spec)
        self._register_classic(spec.name, existing, set(instances))
        return models.LoadBalancerStatus(name=spec.name, hostname=str(existing.get("DNSName", "")))

    def _create_classic(
        self,
        spec: models.LoadBalancerSpec,
        listeners: list[dict[str, Any]],
        network: Network,
        groups: list[str],
        scheme: str,
        tags: dict[str, str],
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "LoadBalancerName": spec.name,
            "Listeners": listeners,
            "Subnets": network.subnet_ids,
            "SecurityGroups": groups,
            "Tags": aws_tags(tags),
        }
        if scheme == "internal":
            kwargs["Scheme"] = "internal"
        try:
            with calling("CreateLoadBalancer"):
                created = self.client("elb").create_load_balancer(**kwargs)
        except errors.CloudError as exc:
            if _error_code(exc) != "DuplicateLoadBalancerName":
                raise
            found = self._describe_classic(spec.name)  # created meanwhile: adopt it
            if found is None:
                raise
            self._update_classic(spec, found, listeners, network, groups, tags)
            return found
        return {"DNSName": created.get("DNSName", ""), "Instances": [], "HealthCheck": {}}

    def _update_classic(
        self,
        spec: models.LoadBalancerSpec,
        existing: dict[str, Any],
        listeners: list[dict[str, Any]],
        network: Network,
        groups: list[str],
        tags: dict[str, str],
    ) -> None:
        elb = self.client("elb")
        name = spec.name
        with calling("DescribeTags"):
            described = elb.describe_tags(LoadBalancerNames=[name]).get("TagDescriptions", [])
        current_tags = tag_dict(described[0].get("Tags")) if described else {}
        missing_tags = {k: v for k, v in tags.items() if current_tags.get(k) != v}
        if missing_tags:
            with calling("AddTags"):
                elb.add_tags(LoadBalancerNames=[name], Tags=aws_tags(missing_tags))

        def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
            return (
                str(a.get("Protocol", "")).upper() == str(b["Protocol"]).upper()
                and int(a.get("InstancePort", 0)) == int(b["InstancePort"])
                and str(a.get("InstanceProtocol", "")).upper() == str(b["InstanceProtocol"]).upper()
            )

        current = {
            int(d["Listener"]["LoadBalancerPort"]): d["Listener"]
            for d in existing.get("ListenerDescriptions", [])
        }
        wanted = {int(listener["LoadBalancerPort"]): listener for listener in listeners}
        stale = sorted(
            p for p, lst in current.items() if p not in wanted or not same(lst, wanted[p])
        )
        if stale:
            with calling("DeleteLoadBalancerListeners"):
                elb.delete_load_balancer_listeners(LoadBalancerName=name, LoadBalancerPorts=stale)
        create = [lst for p, lst in sorted(wanted.items()) if p not in current or p in stale]
        if create:
            with calling("CreateLoadBalancerListeners"):
                elb.create_load_balancer_listeners(LoadBalancerName=name, Listeners=create)

        subnets = set(existing.get("Subnets", []))
        attach = sorted(set(network.subnet_ids) - subnets)
        detach = sorted(subnets - set(network.subnet_ids))
        if attach:
            with calling("AttachLoadBalancerToSubnets"):
                elb.attach_load_balancer_to_subnets(LoadBalancerName=name, Subnets=attach)
        if detach:
            with calling("DetachLoadBalancerFromSubnets"):
                elb.detach_load_balancer_from_subnets(LoadBalancerName=name, Subnets=detach)
        if set(existing.get("SecurityGroups", [])) != set(groups):
            with calling("ApplySecurityGroupsToLoadBalancer"):
                elb.apply_security_groups_to_load_balancer(
                    LoadBalancerName=name, SecurityGroups=groups
                )

    def _register_classic(self, name: str, existing: dict[str, Any], wanted: set[str]) -> None:
        elb = self.client("elb")
        current = {str(i["InstanceId"]) for i in existing.get("Instances", []) or []}
        add, remove = sorted(wanted - current), sorted(current - wanted)
        if add:
            with calling("RegisterInstancesWithLoadBalancer"):
                elb.register_instances_with_load_balancer(
                    LoadBalancerName=name, Instances=[{"InstanceId": i} for i in add]
                )
        if remove:
            with calling("DeregisterInstancesFromLoadBalancer"):
                elb.deregister_instances_from_load_balancer(
                    LoadBalancerName=name, Instances=[{"InstanceId": i} for i in remove]
                )

    def _update_classic_backends(
        self,
        spec: models.LoadBalancerSpec,
        options: AwsLoadBalancerOptions,
        instances: dict[str, list[str]],
    ) -> None:
        existing = self._describe_classic(spec.name)
        if existing is None:
            raise errors.NotFound(NAME, "DescribeLoadBalancers", f"no ELB {spec.name}")
        _, backend, _ = self._elb_security_groups(
            spec, str(existing.get("VPCId", "")), {}, own=False
        )
        self._open_nodes_to(backend, self._node_security_groups(spec.cluster, instances), spec)
        self._register_classic(spec.name, existing, set(instances))

    # -- NLB -------------------------------------------------------------------------------
    def _ensure_nlb(
        self, spec: models.LoadBalancerSpec, options: AwsLoadBalancerOptions
    ) -> models.LoadBalancerStatus:
        v2 = self.client("elbv2")
        health_check = nlb_health_check(spec, options.health_check)
        tags = load_balancer_tags(spec, options)
        scheme = "internal" if options.internal else "internet-facing"
        network = self._network(spec, options)
        instances = self._live_instances(target_instance_ids(spec, options))
        existing = self._describe_nlb(spec.name)
        classic = self._describe_classic(spec.name) if existing is None else None
        # -- reads done; from here on the cloud changes ------------------------------------
        if classic is not None:  # the type changed: the Classic ELB and its group go
            with calling("DeleteLoadBalancer"):
                self.client("elb").delete_load_balancer(LoadBalancerName=spec.name)
        if existing is not None and existing.get("Scheme") != scheme:
            log.info("%s: scheme changes to %s; recreating the NLB", spec.name, scheme)
            self._delete_nlb(spec.name, existing)
            existing = None
        node_groups = self._node_security_groups(spec.cluster, instances)
        if classic is not None:  # the old ELB's rules, wherever they are
            self._revoke(self._existing_rules(spec.name))
        rules = self._rules_in(node_groups, spec.name)

        created = existing is None
        if existing is None:
            with calling("CreateLoadBalancerV2"):
                existing = v2.create_load_balancer(
                    Name=spec.name,
                    Subnets=network.subnet_ids,
                    Scheme=scheme,
                    Type="network",
                    Tags=aws_tags(tags),
                )["LoadBalancers"][0]
        else:
            self._sync_nlb_tags(str(existing["LoadBalancerArn"]), tags)
        arn = str(existing["LoadBalancerArn"])

        current_groups = {} if created else self._attached_target_groups(arn)
        groups: dict[int, dict[str, Any]] = {}  # service port → target group
        new_groups: set[str] = set()  # ARNs created by this call (no targets yet)
        for port in spec.ports:
            name = target_group_name(spec, port)
            group = current_groups.get(name)
            if group is None:
                group, made = self._target_group(
                    spec, port, network.vpc_id, health_check, tags, name
                )
                if made:
                    new_groups.add(str(group["TargetGroupArn"]))
            if any(group.get(k) != v for k, v in health_check.items()):
                with calling("ModifyTargetGroup"):
                    v2.modify_target_group(TargetGroupArn=group["TargetGroupArn"], **health_check)
            groups[port.port] = group
        self._sync_listeners(spec, arn, groups, created=created)
        wanted_names = {str(g["TargetGroupName"]) for g in groups.values()}
        for name, group in current_groups.items():
            if name not in wanted_names:
                with calling("DeleteTargetGroup"):
                    v2.delete_target_group(TargetGroupArn=group["TargetGroupArn"])
        self._register_nlb(groups, set(instances), new_groups)
        self._sync_rules(spec, self._nlb_rules(spec, node_groups, network.cidrs), rules)
        if classic is not None:  # its rules are revoked now, so its group can go too
            try:
                self._delete_own_security_groups(spec.name)
            except errors.CloudError as exc:
                log.warning("%s: old ELB security group left for the delete: %s", spec.name, exc)
        return models.LoadBalancerStatus(name=spec.name, hostname=str(existing.get("DNSName", "")))

    def _sync_nlb_tags(self, arn: str, tags: dict[str, str]) -> None:
        v2 = self.client("elbv2")
        with calling("DescribeTagsV2"):
            described = v2.describe_tags(ResourceArns=[arn]).get("TagDescriptions", [])
        current = tag_dict(described[0].get("Tags")) if described else {}
        missing = {k: v for k, v in tags.items() if current.get(k) != v}
        if missing:
            with calling("AddTagsV2"):
                v2.add_tags(ResourceArns=[arn], Tags=aws_tags(missing))

    def _attached_target_groups(self, arn: str) -> dict[str, dict[str, Any]]:
        try:
            with calling("DescribeTargetGroups"):
                found = self.client("elbv2").describe_target_groups(LoadBalancerArn=arn)
        except errors.NotFound:  # moto's answer for an NLB without target groups
            return {}
        return {str(g["TargetGroupName"]): dict(g) for g in found.get("TargetGroups", [])}

    def _target_group(
        self,
        spec: models.LoadBalancerSpec,
        port: models.LoadBalancerPort,
        vpc_id: str,
        health_check: dict[str, Any],
        tags: dict[str, str],
        name: str,
    ) -> tuple[dict[str, Any], bool]:
        """Create the port's target group (``True``), or adopt one an interrupted call made."""
        v2 = self.client("elbv2")
        try:
            with calling("CreateTargetGroup"):
                created = dict(
                    v2.create_target_group(
                        Name=name,
                        Protocol=port.protocol.upper(),
                        Port=port.node_port,
                        VpcId=vpc_id,
                        TargetType="instance",
                        Tags=aws_tags(tags),
                        **health_check,
                    )["TargetGroups"][0]
                )
            return created, True
        except errors.CloudError as exc:
            if _error_code(exc) != "DuplicateTargetGroupName":
                raise
        with calling("DescribeTargetGroups"):
            return dict(v2.describe_target_groups(Names=[name])["TargetGroups"][0]), False

    def _sync_listeners(
        self,
        spec: models.LoadBalancerSpec,
        arn: str,
        groups: dict[int, dict[str, Any]],
        *,
        created: bool,
    ) -> None:
        v2 = self.client("elbv2")
        current: dict[int, dict[str, Any]] = {}
        if not created:
            with calling("DescribeListeners"):
                found = v2.describe_listeners(LoadBalancerArn=arn).get("Listeners", [])
            current = {int(listener["Port"]): listener for listener in found}
        for port in spec.ports:
            group_arn = str(groups[port.port]["TargetGroupArn"])
            actions = [{"Type": "forward", "TargetGroupArn": group_arn}]
            listener = current.get(port.port)
            if listener is None:
                with calling("CreateListener"):
                    v2.create_listener(
                        LoadBalancerArn=arn,
                        Protocol=port.protocol.upper(),
                        Port=port.port,
                        DefaultActions=actions,
                    )
                continue
            targets = [a.get("TargetGroupArn") for a in listener.get("DefaultActions", [])]
            if targets != [group_arn] or listener.get("Protocol") != port.protocol.upper():
                with calling("ModifyListener"):
                    v2.modify_listener(
                        ListenerArn=listener["ListenerArn"],
                        Protocol=port.protocol.upper(),
                        Port=port.port,
                        DefaultActions=actions,
                    )
        wanted_ports = {p.port for p in spec.ports}
        for port_number, listener in current.items():
            if port_number not in wanted_ports:
                with calling("DeleteListener"):
                    v2.delete_listener(ListenerArn=listener["ListenerArn"])

    def _register_nlb(
        self, groups: dict[int, dict[str, Any]], wanted: set[str], new_groups: set[str]
    ) -> None:
        v2 = self.client("elbv2")
        for group in groups.values():
            group_arn = str(group["TargetGroupArn"])
            current: set[str] = set()
            if group_arn not in new_groups:
                with calling("DescribeTargetHealth"):
                    health = v2.describe_target_health(TargetGroupArn=group_arn)
                current = {
                    str(d["Target"]["Id"]) for d in health.get("TargetHealthDescriptions", [])
                }
            add, remove = sorted(wanted - current), sorted(current - wanted)
            if add:
                with calling("RegisterTargets"):
                    v2.register_targets(TargetGroupArn=group_arn, Targets=[{"Id": i} for i in add])
            if remove:
                with calling("DeregisterTargets"):
                    v2.deregister_targets(
                        TargetGroupArn=group_arn, Targets=[{"Id": i} for i in remove]
                    )

    def _nlb_rules(
        self, spec: models.LoadBalancerSpec, node_groups: list[str], cidrs: list[str]
    ) -> set[Rule]:
        """Node-port rules on the nodes' groups: clients from the source ranges, and the NLB's
        subnets for health checks when the source ranges do not already cover them."""
        sources = spec.source_ranges or [ANYWHERE]
        health = [] if ANYWHERE in sources else cidrs
        rules: set[Rule] = set()
        for group in node_groups:
            for port in spec.ports:
                protocol = port.protocol.lower()
                for cidr in [*sources, *health]:
                    rules.add(Rule(group, protocol, port.node_port, port.node_port, cidr=cidr))
            if health and spec.external_traffic_policy == "Local" and spec.health_check_node_port:
                hc_port = spec.health_check_node_port
                for cidr in health:
                    rules.add(Rule(group, "tcp", hc_port, hc_port, cidr=cidr))
        return rules

    def _update_nlb_backends(
        self,
        spec: models.LoadBalancerSpec,
        options: AwsLoadBalancerOptions,
        instances: dict[str, list[str]],
    ) -> None:
        existing = self._describe_nlb(spec.name)
        if existing is None:
            raise errors.NotFound(NAME, "DescribeLoadBalancersV2", f"no NLB {spec.name}")
        attached = self._attached_target_groups(str(existing["LoadBalancerArn"]))
        by_port: dict[int, dict[str, Any]] = {}
        for port in spec.ports:
            group = attached.get(target_group_name(spec, port))
            if group is None:
                raise errors.NotFound(
                    NAME,
                    "DescribeTargetGroups",
                    f"{spec.name}: no target group for {port.port}",
                )
            by_port[port.port] = group
        self._register_nlb(by_port, set(instances), set())
        cidrs: list[str] = []
        if spec.source_ranges and ANYWHERE not in spec.source_ranges:
            subnet_ids = [z["SubnetId"] for z in existing.get("AvailabilityZones", [])]
            with calling("DescribeSubnets"):
                subnets = self.client("ec2").describe_subnets(SubnetIds=subnet_ids)["Subnets"]
            cidrs = sorted({str(s["CidrBlock"]) for s in subnets})
        node_groups = self._node_security_groups(spec.cluster, instances)
        self._sync_rules(
            spec,
            self._nlb_rules(spec, node_groups, cidrs),
            self._rules_in(node_groups, spec.name),
            scope=lambda r: r.role == "node",
        )

    def _target_security_groups(self, nlb: dict[str, Any]) -> list[str]:
        """The security groups of the instances behind ``nlb`` (where its node rules are)."""
        v2 = self.client("elbv2")
        targets: set[str] = set()
        for group in self._attached_target_groups(str(nlb["LoadBalancerArn"])).values():
            with calling("DescribeTargetHealth"):
                health = v2.describe_target_health(TargetGroupArn=group["TargetGroupArn"])
            targets |= {str(d["Target"]["Id"]) for d in health.get("TargetHealthDescriptions", [])}
        instances = self._live_instances(sorted(targets))
        return sorted({g for groups in instances.values() for g in groups})

    def _delete_nlb(self, name: str, existing: dict[str, Any] | None) -> None:
        """Delete the NLB, then its target groups: those it uses and any tagged for it."""
        v2 = self.client("elbv2")
        group_arns: set[str] = set()
        if existing is not None:
            arn = str(existing["LoadBalancerArn"])
            group_arns |= {
                str(g["TargetGroupArn"]) for g in self._attached_target_groups(arn).values()
            }
            with calling("DeleteLoadBalancerV2"):
                v2.delete_load_balancer(LoadBalancerArn=arn)
        paginator = self.client("resourcegroupstaggingapi").get_paginator("get_resources")
        with calling("GetResources"):
            for page in paginator.paginate(
                TagFilters=[{"Key": LOAD_BALANCER_TAG, "Values": [name]}],
                ResourceTypeFilters=["elasticloadbalancing:targetgroup"],
            ):
                group_arns |= {
                    str(r["ResourceARN"]) for r in page.get("ResourceTagMappingList", [])
                }
        for group_arn in sorted(group_arns):
            try:
                with calling("DeleteTargetGroup"):
                    v2.delete_target_group(TargetGroupArn=group_arn)
            except errors.NotFound:
                pass
            except errors.CloudError as exc:
                if _error_code(exc) == "ResourceInUse":  # the listeners are still going away
                    raise errors.CloudError(
                        NAME, "DeleteTargetGroup", f"{group_arn} still in use"
                    ) from exc
                raise
