"""Classic ELBs for Services (the default type), as cloud-provider-aws makes them.

A security group ``k8s-elb-<name>`` opened on the listener ports to the source ranges (unless
``security-groups`` names the groups), listeners to the node ports (TCP, or SSL/HTTPS/HTTP from
the TLS annotations: :mod:`.listeners`), the proxy-protocol and SSL-negotiation policies, the
attributes (:mod:`.attributes`), a health check and the instances registered. Unlike upstream,
which adds one rule per ELB to the nodes' group (and so stops at that group's rule quota, 60 by
default), every ELB also carries the cluster's shared backend group ``k8s-traffic-<cluster>`` and
each node group admits that group with one rule. Every read happens before the first write; a
name taken meanwhile is adopted. A changed listener is replaced (AWS cannot modify one), a changed
certificate alone is swapped in place; policies, attributes and the health check change in place.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.base import NAME, AwsBase, calling
from cloudloop.cloud.aws.loadbalancers.attributes import (
    CLASSIC_DEFAULTS,
    classic_attribute_changes,
    classic_attributes,
)
from cloudloop.cloud.aws.loadbalancers.listeners import (
    PROXY_PROTOCOL_POLICY,
    classic_listeners,
    plan_classic_listeners,
    secure_ports,
    ssl_negotiation_policy_name,
)
from cloudloop.cloud.aws.loadbalancers.naming import (
    ANYWHERE,
    LOAD_BALANCER_TAG,
    aws_tags,
    backend_security_group_name,
    error_code,
    load_balancer_tags,
    security_group_name,
    target_instance_ids,
)
from cloudloop.cloud.aws.loadbalancers.parts import (
    LoadBalancerParts,
    Network,
    NlbRemoval,
    Targets,
)
from cloudloop.cloud.aws.loadbalancers.security_groups import Rule
from cloudloop.cloud.aws.loadbalancers.service_annotations import (
    TRAFFIC_PORT,
    AwsLoadBalancerOptions,
    HealthCheckOptions,
    invalid,
)
from cloudloop.cloud.aws.tags import tag_dict

log = logging.getLogger(__name__)


def _health_check_port(spec: models.LoadBalancerSpec, hc: HealthCheckOptions, default: str) -> str:
    port = hc.port or default
    return str(spec.ports[0].node_port) if port == TRAFFIC_PORT else port


def classic_health_check(
    spec: models.LoadBalancerSpec, hc: HealthCheckOptions, backend_protocol: str | None = None
) -> dict[str, Any]:
    """The ELB ``HealthCheck``: TCP (SSL for an ``https``/``ssl`` backend) to the first node
    port, or HTTP ``/healthz`` on the health check node port for ``externalTrafficPolicy:
    Local``; annotations override each part."""
    local = spec.external_traffic_policy == "Local" and spec.health_check_node_port > 0
    secure_backend = backend_protocol in ("https", "ssl")
    protocol = hc.protocol or ("HTTP" if local else "SSL" if secure_backend else "TCP")
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


def health_check_changes(current: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    return [f"HealthCheck.{k}" for k, v in wanted.items() if current.get(k) != v]


def proxy_protocol_changes(
    described: dict[str, Any], listeners: list[dict[str, Any]], enabled: bool
) -> dict[int, list[str]]:
    """Instance port → back-end policies to set (upstream's proxy-protocol sync: the policy on
    every listener's port when enabled, off everywhere else)."""
    backends = {
        int(b["InstancePort"]): list(b.get("PolicyNames") or [])
        for b in described.get("BackendServerDescriptions") or []
    }
    wanted_ports = {int(lst["InstancePort"]) for lst in listeners}
    changes: dict[int, list[str]] = {}
    for port in sorted(wanted_ports):
        if (PROXY_PROTOCOL_POLICY in backends.get(port, [])) != enabled:
            changes[port] = [PROXY_PROTOCOL_POLICY] if enabled else []
    for port, policies in sorted(backends.items()):
        if port not in wanted_ports and policies:
            changes[port] = []
    return changes


def listener_policy_changes(
    described: dict[str, Any],
    listeners: list[dict[str, Any]],
    policy: str | None,
    replaced: Collection[int] = (),
) -> list[int]:
    """Secure listener ports whose SSL negotiation policy is not the annotation's (none when the
    annotation is absent: upstream then leaves the listeners' policies as they are)."""
    if policy is None:
        return []
    name = ssl_negotiation_policy_name(policy)
    current = {
        int(d["Listener"]["LoadBalancerPort"]): list(d.get("PolicyNames") or [])
        for d in described.get("ListenerDescriptions") or []
    }
    return [p for p in secure_ports(listeners) if p in replaced or current.get(p) != [name]]


class ClassicElbLookup:
    """The Classic ELB of a name, read on the session: the :class:`.parts.ClassicLookup` the NLB
    half is given."""

    def __init__(self, session: AwsBase) -> None:
        self.session = session

    def describe_classic(self, name: str) -> dict[str, Any] | None:
        try:
            with calling("DescribeLoadBalancers"):
                found = self.session.client("elb").describe_load_balancers(LoadBalancerNames=[name])
        except errors.NotFound:
            return None
        descriptions = found.get("LoadBalancerDescriptions", [])
        return dict(descriptions[0]) if descriptions else None


class AwsClassicLoadBalancers(ClassicElbLookup):
    """The Classic ELB half; ``nlb``: what it needs of the NLB half, whose NLB a change to
    Classic removes."""

    def __init__(self, session: AwsBase, parts: LoadBalancerParts, nlb: NlbRemoval) -> None:
        super().__init__(session)
        self.parts = parts
        self.groups = parts.groups
        self.checks = parts.checks
        self.nlb = nlb

    def _classic_attributes(self, name: str) -> dict[str, Any]:
        with calling("DescribeLoadBalancerAttributes"):
            found = self.session.client("elb").describe_load_balancer_attributes(
                LoadBalancerName=name
            )
        return dict(found.get("LoadBalancerAttributes") or {})

    def _check_classic_tls(
        self, options: AwsLoadBalancerOptions, existing: dict[str, Any] | None
    ) -> None:
        tls = options.tls
        if tls.certificate is not None:
            in_use = [
                str(d["Listener"].get("SSLCertificateId") or "")
                for d in (existing or {}).get("ListenerDescriptions") or []
            ]
            self.checks.check_certificate(tls.certificate, in_use)
        if tls.negotiation_policy is not None:
            have = ((existing or {}).get("Policies") or {}).get("OtherPolicies") or []
            if ssl_negotiation_policy_name(tls.negotiation_policy) not in have:
                self.checks.check_classic_ssl_policy(tls.negotiation_policy)

    def ensure_classic(
        self, spec: models.LoadBalancerSpec, options: AwsLoadBalancerOptions
    ) -> models.LoadBalancerStatus:
        elb = self.session.client("elb")
        listeners = classic_listeners(spec, options.tls)
        health_check = classic_health_check(
            spec, options.health_check, options.tls.backend_protocol
        )
        attributes = classic_attributes(options)
        tags = load_balancer_tags(spec, options)
        scheme = "internal" if options.internal else "internet-facing"
        network = self.parts.network(spec, options)
        self.groups.check_security_groups(
            [*options.security_groups, *options.extra_security_groups]
        )
        instances = self.parts.live_instances(target_instance_ids(spec, options))
        existing = self.describe_classic(spec.name)
        nlb = self.nlb.describe_nlb(spec.name) if existing is None else None
        self._check_classic_tls(options, existing)
        recreate = existing is not None and existing.get("Scheme", "internet-facing") != scheme
        current_attributes = (
            CLASSIC_DEFAULTS
            if existing is None or recreate
            else self._classic_attributes(spec.name)
        )
        # -- reads done; from here on the cloud changes ------------------------------------
        if nlb is not None:  # the type changed: the NLB and its target groups go
            self.nlb.delete_nlb(spec.name, nlb)
        if existing is not None and recreate:
            log.info("%s: scheme changes to %s; recreating the ELB", spec.name, scheme)
            with calling("DeleteLoadBalancer"):
                elb.delete_load_balancer(LoadBalancerName=spec.name)
            existing = None
        if nlb is not None:  # its node-port rules, wherever they are
            self.groups.revoke(self.groups.existing_rules(spec.name))
        own, backend, own_created = self.groups.elb_security_groups(
            spec, network.vpc_id, tags, own=not options.security_groups
        )
        rules = {} if own_created else self.groups.rules_in([own] if own else [], spec.name)
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
            existing, replaced = self._create_classic(
                spec, listeners, network, groups, scheme, tags
            )
        else:
            replaced = self._update_classic(spec, existing, listeners, network, groups, tags)
        self._sync_classic_policies(spec.name, existing, listeners, options, replaced)
        current_check = existing.get("HealthCheck") or {}
        if health_check_changes(current_check, health_check):
            with calling("ConfigureHealthCheck"):
                elb.configure_health_check(LoadBalancerName=spec.name, HealthCheck=health_check)
        if classic_attribute_changes(current_attributes, attributes):
            with calling("ModifyLoadBalancerAttributes"):
                elb.modify_load_balancer_attributes(
                    LoadBalancerName=spec.name, LoadBalancerAttributes=attributes
                )
        self.groups.sync_rules(spec, desired, rules)
        self.groups.open_nodes_to(
            backend, self.groups.node_security_groups(spec.cluster, instances), spec
        )
        self._register_classic(spec.name, existing, instances)
        return models.LoadBalancerStatus(name=spec.name, hostname=str(existing.get("DNSName", "")))

    def _create_classic(
        self,
        spec: models.LoadBalancerSpec,
        listeners: list[dict[str, Any]],
        network: Network,
        groups: list[str],
        scheme: str,
        tags: dict[str, str],
    ) -> tuple[dict[str, Any], set[int]]:
        """Create the ELB: its description so far, and the listener ports made new."""
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
                created = self.session.client("elb").create_load_balancer(**kwargs)
        except errors.CloudError as exc:
            if error_code(exc) != "DuplicateLoadBalancerName":
                raise
            found = self.describe_classic(spec.name)  # created meanwhile: adopt it
            if found is None:
                raise
            return found, self._update_classic(spec, found, listeners, network, groups, tags)
        described = {"DNSName": created.get("DNSName", ""), "Instances": [], "HealthCheck": {}}
        return described, {int(lst["LoadBalancerPort"]) for lst in listeners}

    def _update_classic(
        self,
        spec: models.LoadBalancerSpec,
        existing: dict[str, Any],
        listeners: list[dict[str, Any]],
        network: Network,
        groups: list[str],
        tags: dict[str, str],
    ) -> set[int]:
        """Bring tags, listeners, subnets and groups in line; the listener ports made new."""
        elb = self.session.client("elb")
        name = spec.name
        with calling("DescribeTags"):
            described = elb.describe_tags(LoadBalancerNames=[name]).get("TagDescriptions", [])
        current_tags = tag_dict(described[0].get("Tags")) if described else {}
        missing_tags = {k: v for k, v in tags.items() if current_tags.get(k) != v}
        if missing_tags:
            with calling("AddTags"):
                elb.add_tags(LoadBalancerNames=[name], Tags=aws_tags(missing_tags))

        plan = plan_classic_listeners(existing.get("ListenerDescriptions") or [], listeners)
        if plan.delete:
            with calling("DeleteLoadBalancerListeners"):
                elb.delete_load_balancer_listeners(
                    LoadBalancerName=name, LoadBalancerPorts=plan.delete
                )
        if plan.create:
            with calling("CreateLoadBalancerListeners"):
                elb.create_load_balancer_listeners(LoadBalancerName=name, Listeners=plan.create)
        for port, certificate in sorted(plan.certificates.items()):
            with calling("SetLoadBalancerListenerSSLCertificate"):
                elb.set_load_balancer_listener_ssl_certificate(
                    LoadBalancerName=name, LoadBalancerPort=port, SSLCertificateId=certificate
                )

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
        return {int(lst["LoadBalancerPort"]) for lst in plan.create}

    def _sync_classic_policies(
        self,
        name: str,
        described: dict[str, Any],
        listeners: list[dict[str, Any]],
        options: AwsLoadBalancerOptions,
        replaced: set[int],
    ) -> None:
        """Proxy protocol on the back ends, the SSL negotiation policy on the secure listeners
        (upstream's policies, created once per ELB)."""
        elb = self.session.client("elb")
        have = set(((described.get("Policies") or {}).get("OtherPolicies")) or [])
        if options.proxy_protocol and PROXY_PROTOCOL_POLICY not in have:
            with calling("CreateLoadBalancerPolicy"):
                elb.create_load_balancer_policy(
                    LoadBalancerName=name,
                    PolicyName=PROXY_PROTOCOL_POLICY,
                    PolicyTypeName="ProxyProtocolPolicyType",
                    PolicyAttributes=[{"AttributeName": "ProxyProtocol", "AttributeValue": "true"}],
                )
        for port, policies in proxy_protocol_changes(
            described, listeners, options.proxy_protocol
        ).items():
            with calling("SetLoadBalancerPoliciesForBackendServer"):
                elb.set_load_balancer_policies_for_backend_server(
                    LoadBalancerName=name, InstancePort=port, PolicyNames=policies
                )
        policy = options.tls.negotiation_policy
        ports = listener_policy_changes(described, listeners, policy, replaced)
        if policy is None or not ports:
            return
        policy_name = ssl_negotiation_policy_name(policy)
        if policy_name not in have:
            with calling("CreateLoadBalancerPolicy"):
                elb.create_load_balancer_policy(
                    LoadBalancerName=name,
                    PolicyName=policy_name,
                    PolicyTypeName="SSLNegotiationPolicyType",
                    PolicyAttributes=[
                        {"AttributeName": "Reference-Security-Policy", "AttributeValue": policy}
                    ],
                )
        for port in ports:
            with calling("SetLoadBalancerPoliciesOfListener"):
                elb.set_load_balancer_policies_of_listener(
                    LoadBalancerName=name, LoadBalancerPort=port, PolicyNames=[policy_name]
                )

    def _register_classic(self, name: str, existing: dict[str, Any], targets: Targets) -> None:
        """Register the running targets; deregister what is no target (a stopped target that
        is registered stays so)."""
        elb = self.session.client("elb")
        current = {str(i["InstanceId"]) for i in existing.get("Instances", []) or []}
        add, remove = sorted(targets.running - current), sorted(current - set(targets))
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

    def classic_drift(
        self, spec: models.LoadBalancerSpec, options: AwsLoadBalancerOptions
    ) -> list[str]:
        """What of the ELB differs from ``spec`` (drift repair), read in about five calls:
        listeners, policies, health check and instances from one describe, the attributes, the
        groups by name, the target instances, and the rules of the ELB's and nodes' groups."""
        described = self.describe_classic(spec.name)
        if described is None:
            return ["the ELB is missing"]
        scheme = "internal" if options.internal else "internet-facing"
        if described.get("Scheme", "internet-facing") != scheme:
            return [f"the ELB is not {scheme}"]
        listeners = classic_listeners(spec, options.tls)
        drift = plan_classic_listeners(
            described.get("ListenerDescriptions") or [], listeners
        ).describe()
        drift += [
            f"proxy protocol on node port {port}"
            for port in proxy_protocol_changes(described, listeners, options.proxy_protocol)
        ]
        drift += [
            f"SSL negotiation policy on listener {port}"
            for port in listener_policy_changes(
                described, listeners, options.tls.negotiation_policy
            )
        ]
        health_check = classic_health_check(
            spec, options.health_check, options.tls.backend_protocol
        )
        drift += health_check_changes(described.get("HealthCheck") or {}, health_check)
        drift += classic_attribute_changes(
            self._classic_attributes(spec.name), classic_attributes(options)
        )
        wanted = target_instance_ids(spec, options)
        instances = self.parts.live_instances(wanted)
        registered = {str(i["InstanceId"]) for i in described.get("Instances") or []}
        if not instances.registered_as_wanted(registered):
            drift.append("registered instances")
        drift += self._classic_group_drift(spec, options, described, instances)
        return drift

    def _classic_group_drift(
        self,
        spec: models.LoadBalancerSpec,
        options: AwsLoadBalancerOptions,
        described: dict[str, Any],
        instances: dict[str, list[str]],
    ) -> list[str]:
        own_name, backend_name = (
            security_group_name(spec.name),
            backend_security_group_name(spec.cluster),
        )
        with calling("DescribeSecurityGroups"):
            found = self.session.client("ec2").describe_security_groups(
                Filters=[
                    {"Name": "group-name", "Values": [own_name, backend_name]},
                    {"Name": "vpc-id", "Values": [str(described.get("VPCId", ""))]},
                ]
            )["SecurityGroups"]
        ids = {str(g["GroupName"]): str(g["GroupId"]) for g in found}
        own = "" if options.security_groups else ids.get(own_name, "")
        backend = ids.get(backend_name, "")
        if not backend or (not options.security_groups and not own):
            return ["security group missing"]
        drift: list[str] = []
        groups = {*(options.security_groups or [own]), backend, *options.extra_security_groups}
        if set(described.get("SecurityGroups") or []) != groups:
            drift.append("security groups attached")
        node_groups = self.groups.node_security_groups(spec.cluster, instances)
        with calling("DescribeSecurityGroupRules"):
            rules = (
                self.session.client("ec2")
                .describe_security_group_rules(
                    Filters=[
                        {
                            "Name": "group-id",
                            "Values": sorted({*node_groups, *([own] if own else [])}),
                        }
                    ]
                )
                .get("SecurityGroupRules", [])
            )
        opened = {
            str(r["GroupId"])
            for r in rules
            if not r.get("IsEgress")
            and str(r.get("IpProtocol")) == "-1"
            and (r.get("ReferencedGroupInfo") or {}).get("GroupId") == backend
        }
        if set(node_groups) - opened:
            drift.append("node security group rules")
        if own:
            have = {
                Rule.of(r)
                for r in rules
                if not r.get("IsEgress")
                and r.get("GroupId") == own
                and tag_dict(r.get("Tags")).get(LOAD_BALANCER_TAG) == spec.name
            }
            want = {
                Rule(own, "tcp", p.port, p.port, cidr=cidr, role="client")
                for p in spec.ports
                for cidr in spec.source_ranges or [ANYWHERE]
            }
            if have != want:
                drift.append("client security group rules")
        return drift

    def update_classic_backends(
        self,
        spec: models.LoadBalancerSpec,
        options: AwsLoadBalancerOptions,
        instances: Targets,
    ) -> None:
        existing = self.describe_classic(spec.name)
        if existing is None:
            raise errors.NotFound(NAME, "DescribeLoadBalancers", f"no ELB {spec.name}")
        _, backend, _ = self.groups.elb_security_groups(
            spec, str(existing.get("VPCId", "")), {}, own=False
        )
        self.groups.open_nodes_to(
            backend, self.groups.node_security_groups(spec.cluster, instances), spec
        )
        self._register_classic(spec.name, existing, instances)
