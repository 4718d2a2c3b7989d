"""Network Load Balancers for Services (``aws-load-balancer-type: nlb``), as cloud-provider-aws.

One target group per port (``k8s-<ns>-<name>-<hash>``, hashed over UID, port, node port and the
group's protocol, so a changed port gets a new group and a retry finds the old), one listener per
port (TCP/UDP, or TLS with the certificate and SSL policy: :mod:`.listeners`), instances
registered at the node port, the NLB and target-group attributes (:mod:`.attributes`), and
node-port rules on the nodes' security group from the source ranges (plus the NLB subnets, for
health checks, when the source ranges are restricted). Subnets, Elastic IPs and private
addresses are fixed when the NLB is made (upstream ignores later changes; so does this, with a
log line); the IP address type, listeners, health checks and attributes change in place; a
target group whose protocol changes (``backend-protocol: ssl``) is replaced, as upstream. A
delete removes the NLB, then every target group it used or tagged for it.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.base import NAME, AwsBase, calling
from cloudloop.cloud.aws.loadbalancers.attributes import (
    NLB_DEFAULTS,
    TARGET_GROUP_DEFAULTS,
    as_dict,
    as_list,
    changed_attributes,
    nlb_attributes,
)
from cloudloop.cloud.aws.loadbalancers.listeners import (
    NlbPortMapping,
    nlb_listener_arguments,
    nlb_listener_differs,
    nlb_port_mappings,
)
from cloudloop.cloud.aws.loadbalancers.naming import (
    ANYWHERE,
    LOAD_BALANCER_TAG,
    aws_tags,
    error_code,
    load_balancer_tags,
    target_group_name,
    target_instance_ids,
)
from cloudloop.cloud.aws.loadbalancers.parts import (
    ClassicLookup,
    LoadBalancerParts,
    Network,
    Targets,
)
from cloudloop.cloud.aws.loadbalancers.security_groups import Rule
from cloudloop.cloud.aws.loadbalancers.service_annotations import (
    EIP_ALLOCATIONS,
    IP_ADDRESS_TYPE,
    PRIVATE_IPV4_ADDRESSES,
    TRAFFIC_PORT,
    AwsLoadBalancerOptions,
    HealthCheckOptions,
    invalid,
)
from cloudloop.cloud.aws.tags import tag_dict

log = logging.getLogger(__name__)


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


def subnet_mappings(network: Network, options: AwsLoadBalancerOptions) -> list[dict[str, str]]:
    """``SubnetMappings`` for CreateLoadBalancer: Elastic IPs or private addresses paired with
    the subnets by position (upstream ``createSubnetMappings``), checked one per subnet."""
    nlb = options.nlb
    count = len(network.subnet_ids)
    if nlb.eip_allocations and len(nlb.eip_allocations) != count:
        raise invalid(
            f"{EIP_ALLOCATIONS}: Must have same number of EIP AllocationIDs "
            f"({len(nlb.eip_allocations)}) and SubnetIDs ({count})"
        )
    if nlb.private_ipv4_addresses and len(nlb.private_ipv4_addresses) != count:
        raise invalid(
            f"{PRIVATE_IPV4_ADDRESSES}: Must have same number of Private IPv4Addresses "
            f"({len(nlb.private_ipv4_addresses)}) and SubnetIDs ({count})"
        )
    mappings: list[dict[str, str]] = []
    for index, subnet in enumerate(network.subnet_ids):
        mapping = {"SubnetId": subnet}
        if nlb.eip_allocations:
            mapping["AllocationId"] = nlb.eip_allocations[index]
        if nlb.private_ipv4_addresses:
            address = nlb.private_ipv4_addresses[index]
            cidr = network.subnet_cidrs.get(subnet, "")
            if cidr and not _in_network(address, cidr):
                raise invalid(f"{PRIVATE_IPV4_ADDRESSES}: {address} is not in {subnet} ({cidr})")
            mapping["PrivateIPv4Address"] = address
        mappings.append(mapping)
    if options.nlb.ip_address_type == "dualstack":
        missing = [s for s in network.subnet_ids if s not in network.ipv6_subnets]
        if missing:
            raise invalid(f"{IP_ADDRESS_TYPE}: dualstack needs IPv6 CIDRs on {', '.join(missing)}")
    return mappings


def _in_network(address: str, cidr: str) -> bool:
    return ipaddress.IPv4Address(address) in ipaddress.ip_network(cidr, strict=False)


def mapping_differences(existing: dict[str, Any], mappings: list[dict[str, str]]) -> list[str]:
    """How the live NLB's subnets and addresses differ from the annotations (not applied)."""
    current: dict[str, dict[str, str]] = {}
    for zone in existing.get("AvailabilityZones") or []:
        address = (zone.get("LoadBalancerAddresses") or [{}])[0]
        current[str(zone.get("SubnetId"))] = {
            k: str(address[k]) for k in ("AllocationId", "PrivateIPv4Address") if address.get(k)
        }
    wanted = {m["SubnetId"]: {k: v for k, v in m.items() if k != "SubnetId"} for m in mappings}
    if set(current) != set(wanted):
        return [f"subnets {sorted(current)} (wanted {sorted(wanted)})"]
    return [
        f"{s}: {current[s]} (wanted {wanted[s]})" for s in sorted(wanted) if current[s] != wanted[s]
    ]


def allocations_of(existing: dict[str, Any] | None) -> set[str]:
    return {
        str(address["AllocationId"])
        for zone in (existing or {}).get("AvailabilityZones") or []
        for address in zone.get("LoadBalancerAddresses") or []
        if address.get("AllocationId")
    }


class AwsNetworkLoadBalancers:
    """The NLB half; ``classic``: what it needs of the Classic half, the Classic ELB a change to
    NLB deletes."""

    def __init__(self, session: AwsBase, parts: LoadBalancerParts, classic: ClassicLookup) -> None:
        self.session = session
        self.classic = classic
        self.parts = parts
        self.groups = parts.groups
        self.checks = parts.checks

    def describe_nlb(self, name: str) -> dict[str, Any] | None:
        try:
            with calling("DescribeLoadBalancersV2"):
                found = self.session.client("elbv2").describe_load_balancers(Names=[name])
        except errors.NotFound:
            return None
        balancers = [lb for lb in found.get("LoadBalancers", []) if lb.get("Type") == "network"]
        return dict(balancers[0]) if balancers else None

    def _nlb_listeners(self, arn: str) -> dict[int, dict[str, Any]]:
        with calling("DescribeListeners"):
            found = (
                self.session.client("elbv2")
                .describe_listeners(LoadBalancerArn=arn)
                .get("Listeners", [])
            )
        return {int(listener["Port"]): dict(listener) for listener in found}

    def _nlb_attributes(self, arn: str) -> dict[str, str]:
        with calling("DescribeLoadBalancerAttributesV2"):
            found = self.session.client("elbv2").describe_load_balancer_attributes(
                LoadBalancerArn=arn
            )
        return as_dict(found.get("Attributes", []))

    def _check_nlb_tls(
        self, options: AwsLoadBalancerOptions, listeners: dict[int, dict[str, Any]]
    ) -> None:
        tls = options.tls
        if tls.certificate is not None:
            in_use = [
                str(c.get("CertificateArn"))
                for lst in listeners.values()
                for c in lst.get("Certificates") or []
            ]
            self.checks.check_certificate(tls.certificate, in_use)
        policy = tls.negotiation_policy
        if policy is not None and policy not in {
            lst.get("SslPolicy") for lst in listeners.values()
        }:
            self.checks.check_nlb_ssl_policy(policy)

    def ensure_nlb(
        self, spec: models.LoadBalancerSpec, options: AwsLoadBalancerOptions
    ) -> models.LoadBalancerStatus:
        v2 = self.session.client("elbv2")
        health_check = nlb_health_check(spec, options.health_check)
        mappings = nlb_port_mappings(spec, options.tls)
        tags = load_balancer_tags(spec, options)
        scheme = "internal" if options.internal else "internet-facing"
        network = self.parts.network(spec, options)
        subnets = subnet_mappings(network, options)
        instances = self.parts.live_instances(target_instance_ids(spec, options))
        existing = self.describe_nlb(spec.name)
        classic = self.classic.describe_classic(spec.name) if existing is None else None
        recreate = existing is not None and existing.get("Scheme") != scheme
        keep = existing is not None and not recreate
        arn = str(existing["LoadBalancerArn"]) if existing is not None else ""
        current_listeners = self._nlb_listeners(arn) if keep else {}
        self._check_nlb_tls(options, current_listeners)
        differences = mapping_differences(existing, subnets) if existing and keep else []
        if options.nlb.eip_allocations and (not keep or differences):
            self.checks.check_allocations(options.nlb.eip_allocations, allocations_of(existing))
        attributes = nlb_attributes(options)
        current_attributes = self._nlb_attributes(arn) if keep else dict(NLB_DEFAULTS)
        # -- reads done; from here on the cloud changes ------------------------------------
        if classic is not None:  # the type changed: the Classic ELB and its group go
            with calling("DeleteLoadBalancer"):
                self.session.client("elb").delete_load_balancer(LoadBalancerName=spec.name)
        if existing is not None and recreate:
            log.info("%s: scheme changes to %s; recreating the NLB", spec.name, scheme)
            self.delete_nlb(spec.name, existing)
            existing = None
        node_groups = self.groups.node_security_groups(spec.cluster, instances)
        if classic is not None:  # the old ELB's rules, wherever they are
            self.groups.revoke(self.groups.existing_rules(spec.name))
        rules = self.groups.rules_in(node_groups, spec.name)

        created = existing is None
        if existing is None:
            with calling("CreateLoadBalancerV2"):
                existing = v2.create_load_balancer(
                    Name=spec.name,
                    SubnetMappings=subnets,
                    Scheme=scheme,
                    Type="network",
                    IpAddressType=options.nlb.ip_address_type,
                    Tags=aws_tags(tags),
                )["LoadBalancers"][0]
        else:
            self._sync_nlb_tags(str(existing["LoadBalancerArn"]), tags)
            for difference in differences:
                log.warning(
                    "%s: subnets and addresses are fixed at creation (as upstream); not "
                    "applied: %s",
                    spec.name,
                    difference,
                )
            if existing.get("IpAddressType", "ipv4") != options.nlb.ip_address_type:
                with calling("SetIpAddressType"):
                    v2.set_ip_address_type(
                        LoadBalancerArn=existing["LoadBalancerArn"],
                        IpAddressType=options.nlb.ip_address_type,
                    )
        arn = str(existing["LoadBalancerArn"])
        changed = changed_attributes(current_attributes, attributes, NLB_DEFAULTS)
        if changed:
            with calling("ModifyLoadBalancerAttributesV2"):
                v2.modify_load_balancer_attributes(LoadBalancerArn=arn, Attributes=as_list(changed))

        current_groups = {} if created else self._attached_target_groups(arn)
        groups: dict[int, dict[str, Any]] = {}  # service port → target group
        new_groups: set[str] = set()  # ARNs created by this call (no targets yet)
        for mapping in mappings:
            name = target_group_name(spec, mapping.port, mapping.traffic_protocol)
            group = current_groups.get(name)
            if group is None:
                group, made = self._target_group(
                    spec, mapping, network.vpc_id, health_check, tags, name
                )
                if made:
                    new_groups.add(str(group["TargetGroupArn"]))
            if any(group.get(k) != v for k, v in health_check.items()):
                with calling("ModifyTargetGroup"):
                    v2.modify_target_group(TargetGroupArn=group["TargetGroupArn"], **health_check)
            self._sync_target_group_attributes(
                group, options, new=str(group["TargetGroupArn"]) in new_groups
            )
            groups[mapping.port.port] = group
        self._sync_listeners(spec, arn, mappings, groups, current_listeners)
        wanted_names = {str(g["TargetGroupName"]) for g in groups.values()}
        for name, group in current_groups.items():
            if name not in wanted_names:
                with calling("DeleteTargetGroup"):
                    v2.delete_target_group(TargetGroupArn=group["TargetGroupArn"])
        self._register_nlb(groups, instances, new_groups)
        self.groups.sync_rules(spec, self._nlb_rules(spec, node_groups, network.cidrs), rules)
        if classic is not None:  # its rules are revoked now, so its group can go too
            try:
                self.groups.delete_own_security_groups(spec.name)
            except errors.CloudError as exc:
                log.warning("%s: old ELB security group left for the delete: %s", spec.name, exc)
        return models.LoadBalancerStatus(name=spec.name, hostname=str(existing.get("DNSName", "")))

    def _sync_target_group_attributes(
        self, group: dict[str, Any], options: AwsLoadBalancerOptions, *, new: bool
    ) -> None:
        wanted = options.nlb.target_group_attributes
        if not wanted:
            return
        v2 = self.session.client("elbv2")
        arn = str(group["TargetGroupArn"])
        if new:
            current = dict(TARGET_GROUP_DEFAULTS)
        else:
            with calling("DescribeTargetGroupAttributes"):
                current = as_dict(
                    v2.describe_target_group_attributes(TargetGroupArn=arn).get("Attributes", [])
                )
        changed = changed_attributes(current, wanted, TARGET_GROUP_DEFAULTS)
        if changed:
            with calling("ModifyTargetGroupAttributes"):
                v2.modify_target_group_attributes(TargetGroupArn=arn, Attributes=as_list(changed))

    def _sync_nlb_tags(self, arn: str, tags: dict[str, str]) -> None:
        v2 = self.session.client("elbv2")
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
                found = self.session.client("elbv2").describe_target_groups(LoadBalancerArn=arn)
        except errors.NotFound:  # moto's answer for an NLB without target groups
            return {}
        return {str(g["TargetGroupName"]): dict(g) for g in found.get("TargetGroups", [])}

    def _target_group(
        self,
        spec: models.LoadBalancerSpec,
        mapping: NlbPortMapping,
        vpc_id: str,
        health_check: dict[str, Any],
        tags: dict[str, str],
        name: str,
    ) -> tuple[dict[str, Any], bool]:
        """Create the port's target group (``True``), or adopt one an interrupted call made."""
        v2 = self.session.client("elbv2")
        try:
            with calling("CreateTargetGroup"):
                created = dict(
                    v2.create_target_group(
                        Name=name,
                        Protocol=mapping.traffic_protocol,
                        Port=mapping.port.node_port,
                        VpcId=vpc_id,
                        TargetType="instance",
                        Tags=aws_tags(tags),
                        **health_check,
                    )["TargetGroups"][0]
                )
            return created, True
        except errors.CloudError as exc:
            if error_code(exc) != "DuplicateTargetGroupName":
                raise
        with calling("DescribeTargetGroups"):
            return dict(v2.describe_target_groups(Names=[name])["TargetGroups"][0]), False

    def _sync_listeners(
        self,
        spec: models.LoadBalancerSpec,
        arn: str,
        mappings: list[NlbPortMapping],
        groups: dict[int, dict[str, Any]],
        current: dict[int, dict[str, Any]],
    ) -> None:
        v2 = self.session.client("elbv2")
        for mapping in mappings:
            group_arn = str(groups[mapping.port.port]["TargetGroupArn"])
            arguments = nlb_listener_arguments(mapping, group_arn)
            listener = current.get(mapping.port.port)
            if listener is None:
                with calling("CreateListener"):
                    v2.create_listener(LoadBalancerArn=arn, **arguments)
            elif nlb_listener_differs(listener, mapping, group_arn):
                with calling("ModifyListener"):
                    v2.modify_listener(ListenerArn=listener["ListenerArn"], **arguments)
        wanted_ports = {m.port.port for m in mappings}
        for port_number, listener in current.items():
            if port_number not in wanted_ports:
                with calling("DeleteListener"):
                    v2.delete_listener(ListenerArn=listener["ListenerArn"])

    def _register_nlb(
        self, groups: dict[int, dict[str, Any]], targets: Targets, new_groups: set[str]
    ) -> None:
        """Register the running targets in every group; deregister what is no target (a
        stopped target that is registered stays so)."""
        v2 = self.session.client("elbv2")
        for group in groups.values():
            group_arn = str(group["TargetGroupArn"])
            current: set[str] = set()
            if group_arn not in new_groups:
                with calling("DescribeTargetHealth"):
                    health = v2.describe_target_health(TargetGroupArn=group_arn)
                current = {
                    str(d["Target"]["Id"]) for d in health.get("TargetHealthDescriptions", [])
                }
            add, remove = sorted(targets.running - current), sorted(current - set(targets))
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

    def update_nlb_backends(
        self,
        spec: models.LoadBalancerSpec,
        options: AwsLoadBalancerOptions,
        instances: Targets,
    ) -> None:
        existing = self.describe_nlb(spec.name)
        if existing is None:
            raise errors.NotFound(NAME, "DescribeLoadBalancersV2", f"no NLB {spec.name}")
        attached = self._attached_target_groups(str(existing["LoadBalancerArn"]))
        by_port: dict[int, dict[str, Any]] = {}
        for mapping in nlb_port_mappings(spec, options.tls):
            group = attached.get(target_group_name(spec, mapping.port, mapping.traffic_protocol))
            if group is None:
                raise errors.NotFound(
                    NAME,
                    "DescribeTargetGroups",
                    f"{spec.name}: no target group for {mapping.port.port}",
                )
            by_port[mapping.port.port] = group
        self._register_nlb(by_port, instances, set())
        cidrs: list[str] = []
        if spec.source_ranges and ANYWHERE not in spec.source_ranges:
            subnet_ids = [z["SubnetId"] for z in existing.get("AvailabilityZones", [])]
            with calling("DescribeSubnets"):
                subnets = self.session.client("ec2").describe_subnets(SubnetIds=subnet_ids)[
                    "Subnets"
                ]
            cidrs = sorted({str(s["CidrBlock"]) for s in subnets})
        node_groups = self.groups.node_security_groups(spec.cluster, instances)
        self.groups.sync_rules(
            spec,
            self._nlb_rules(spec, node_groups, cidrs),
            self.groups.rules_in(node_groups, spec.name),
            scope=lambda r: r.role == "node",
        )

    def nlb_drift(
        self, spec: models.LoadBalancerSpec, options: AwsLoadBalancerOptions
    ) -> list[str]:
        """What of the NLB differs from ``spec`` (drift repair): the NLB, its attributes and
        listeners, its target groups (health check, attributes, targets) and the node rules."""
        existing = self.describe_nlb(spec.name)
        if existing is None:
            return ["the NLB is missing"]
        scheme = "internal" if options.internal else "internet-facing"
        if existing.get("Scheme") != scheme:
            return [f"the NLB is not {scheme}"]
        v2 = self.session.client("elbv2")
        arn = str(existing["LoadBalancerArn"])
        drift: list[str] = []
        if existing.get("IpAddressType", "ipv4") != options.nlb.ip_address_type:
            drift.append("IP address type")
        drift += [
            f"attribute {k}"
            for k in changed_attributes(
                self._nlb_attributes(arn), nlb_attributes(options), NLB_DEFAULTS
            )
        ]
        health_check = nlb_health_check(spec, options.health_check)
        groups = self._attached_target_groups(arn)
        listeners = self._nlb_listeners(arn)
        wanted = target_instance_ids(spec, options)
        instances: Targets | None = None
        for mapping in nlb_port_mappings(spec, options.tls):
            port = mapping.port.port
            group = groups.get(target_group_name(spec, mapping.port, mapping.traffic_protocol))
            if group is None:
                drift.append(f"target group for {port} missing")
                continue
            listener = listeners.get(port)
            if listener is None:
                drift.append(f"listener {port} missing")
            elif nlb_listener_differs(listener, mapping, str(group["TargetGroupArn"])):
                drift.append(f"listener {port} differs")
            if any(group.get(k) != v for k, v in health_check.items()):
                drift.append(f"health check of the target group for {port}")
            wanted_attributes = options.nlb.target_group_attributes
            if wanted_attributes:
                with calling("DescribeTargetGroupAttributes"):
                    current = as_dict(
                        v2.describe_target_group_attributes(
                            TargetGroupArn=group["TargetGroupArn"]
                        ).get("Attributes", [])
                    )
                drift += [
                    f"target group attribute {k} for {port}"
                    for k in changed_attributes(current, wanted_attributes, TARGET_GROUP_DEFAULTS)
                ]
            with calling("DescribeTargetHealth"):
                health = v2.describe_target_health(TargetGroupArn=group["TargetGroupArn"])
            registered = {
                str(d["Target"]["Id"]) for d in health.get("TargetHealthDescriptions", [])
            }
            if registered != set(wanted):
                instances = (
                    instances if instances is not None else self.parts.live_instances(wanted)
                )
                if not instances.registered_as_wanted(registered):
                    drift.append(f"targets of the target group for {port}")
        extra = sorted(set(listeners) - {p.port for p in spec.ports})
        drift += [f"listener {port} is extra" for port in extra]
        instances = instances if instances is not None else self.parts.live_instances(wanted)
        node_groups = self.groups.node_security_groups(spec.cluster, instances)
        cidrs: list[str] = []
        if spec.source_ranges and ANYWHERE not in spec.source_ranges:
            subnet_ids = [z["SubnetId"] for z in existing.get("AvailabilityZones", [])]
            with calling("DescribeSubnets"):
                subnets = self.session.client("ec2").describe_subnets(SubnetIds=subnet_ids)[
                    "Subnets"
                ]
            cidrs = sorted({str(s["CidrBlock"]) for s in subnets})
        have = set(self.groups.rules_in(node_groups, spec.name))
        if have != self._nlb_rules(spec, node_groups, cidrs):
            drift.append("node security group rules")
        return drift

    def target_security_groups(self, nlb: dict[str, Any]) -> list[str]:
        """The security groups of the instances behind ``nlb`` (where its node rules are)."""
        v2 = self.session.client("elbv2")
        targets: set[str] = set()
        for group in self._attached_target_groups(str(nlb["LoadBalancerArn"])).values():
            with calling("DescribeTargetHealth"):
                health = v2.describe_target_health(TargetGroupArn=group["TargetGroupArn"])
            targets |= {str(d["Target"]["Id"]) for d in health.get("TargetHealthDescriptions", [])}
        instances = self.parts.live_instances(sorted(targets))
        return sorted({g for groups in instances.values() for g in groups})

    def delete_nlb(self, name: str, existing: dict[str, Any] | None) -> None:
        """Delete the NLB, then its target groups: those it uses and any tagged for it."""
        v2 = self.session.client("elbv2")
        group_arns: set[str] = set()
        if existing is not None:
            arn = str(existing["LoadBalancerArn"])
            group_arns |= {
                str(g["TargetGroupArn"]) for g in self._attached_target_groups(arn).values()
            }
            with calling("DeleteLoadBalancerV2"):
                v2.delete_load_balancer(LoadBalancerArn=arn)
        paginator = self.session.client("resourcegroupstaggingapi").get_paginator("get_resources")
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
                if error_code(exc) == "ResourceInUse":  # the listeners are still going away
                    raise errors.CloudError(
                        NAME, "DeleteTargetGroup", f"{group_arn} still in use"
                    ) from exc
                raise
