"""Classic ELBs for Services (the default type), as cloud-provider-aws makes them.

A security group ``k8s-elb-<name>`` opened on the listener ports to ``loadBalancerSourceRanges``
(unless ``security-groups`` names the groups), TCP listeners to the node ports, a health check
and the instances registered. Unlike upstream, which adds one rule per ELB to the nodes' group
(and so stops at that group's rule quota, 60 by default), every ELB also carries the cluster's
shared backend group ``k8s-traffic-<cluster>`` and each node group admits that group with one
rule. Every read happens before the first write; a name taken meanwhile is adopted.
"""

from __future__ import annotations

import logging
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.base import NAME, calling
from cloudloop.cloud.aws.lb_annotations import (
    TRAFFIC_PORT,
    AwsLoadBalancerOptions,
    HealthCheckOptions,
    invalid,
)
from cloudloop.cloud.aws.loadbalancers.naming import (
    ANYWHERE,
    aws_tags,
    error_code,
    load_balancer_tags,
    target_instance_ids,
)
from cloudloop.cloud.aws.loadbalancers.parts import LoadBalancerParts, Network
from cloudloop.cloud.aws.loadbalancers.security_groups import Rule
from cloudloop.cloud.aws.tags import tag_dict

log = logging.getLogger(__name__)


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


class AwsClassicLoadBalancers(LoadBalancerParts):
    def _describe_classic(self, name: str) -> dict[str, Any] | None:
        try:
            with calling("DescribeLoadBalancers"):
                found = self.client("elb").describe_load_balancers(LoadBalancerNames=[name])
        except errors.NotFound:
            return None
        descriptions = found.get("LoadBalancerDescriptions", [])
        return dict(descriptions[0]) if descriptions else None

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
            if error_code(exc) != "DuplicateLoadBalancerName":
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
