"""AWS load balancers for Services: a Classic ELB by default, an NLB with ``type: nlb``.

Every resource made carries the cluster and Service identity as tags, and every step looks for
what exists (by name or by those tags) before creating anything, so a call retried after a crash
adopts what the interrupted one made. All annotations are parsed and every read happens before
the first write, so an invalid annotation changes nothing in the cloud.

The parts, one module each: :mod:`.service_annotations` (the Service's annotations, parsed and
checked; their values read by :mod:`.annotation_values`), :mod:`.naming` (names, tags, pure
choices), :mod:`.listeners` and :mod:`.attributes` (what the annotations ask for, and how the
cloud differs: pure), :mod:`.security_groups` (groups and tagged rules), :mod:`.tls`
(certificate, SSL policy and Elastic IP checks before writes), :mod:`.parts` (subnets, target
instances), :mod:`.classic` (Classic ELB) and :mod:`.nlb` (NLB). This module holds the
contract's operations, including the drift check of drift repair (reads only; the ensure puts
things back).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from cloudloop.cloud import models
from cloudloop.cloud.aws.base import NAME, AwsBase, calling
from cloudloop.cloud.aws.loadbalancers.annotation_values import items
from cloudloop.cloud.aws.loadbalancers.classic import (
    AwsClassicLoadBalancers,
    ClassicElbLookup,
    classic_health_check,
)
from cloudloop.cloud.aws.loadbalancers.naming import (
    ANYWHERE,
    LOAD_BALANCER_TAG,
    RULE_ROLE_TAG,
    SECURITY_GROUP_ROLE_TAG,
    SERVICE_NAME_TAG,
    SERVICE_UID_TAG,
    aws_tags,
    backend_security_group_name,
    check_ports,
    choose_subnets,
    identity_tags,
    load_balancer_tags,
    security_group_name,
    target_group_name,
    target_instance_ids,
)
from cloudloop.cloud.aws.loadbalancers.nlb import AwsNetworkLoadBalancers, nlb_health_check
from cloudloop.cloud.aws.loadbalancers.parts import DESCRIBE_BATCH, LoadBalancerParts, Network
from cloudloop.cloud.aws.loadbalancers.security_groups import Rule
from cloudloop.cloud.aws.loadbalancers.service_annotations import (
    LEGACY_SOURCE_RANGES,
    PREFIX,
    TARGET_NODE_LABELS,
    AwsLoadBalancerOptions,
    LoadBalancerKind,
    parse_annotations,
    source_ranges,
)
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.driver import LoadBalancerDefaults

__all__ = [
    "ANYWHERE",
    "DESCRIBE_BATCH",
    "LOAD_BALANCER_TAG",
    "RULE_ROLE_TAG",
    "SECURITY_GROUP_ROLE_TAG",
    "SERVICE_NAME_TAG",
    "SERVICE_UID_TAG",
    "AwsLoadBalancers",
    "Network",
    "Rule",
    "aws_tags",
    "backend_security_group_name",
    "check_ports",
    "choose_subnets",
    "classic_health_check",
    "identity_tags",
    "load_balancer_tags",
    "nlb_health_check",
    "security_group_name",
    "target_group_name",
    "target_instance_ids",
]


def parsed(
    spec: models.LoadBalancerSpec, settings: AwsSettings
) -> tuple[models.LoadBalancerSpec, AwsLoadBalancerOptions]:
    """The Service's options, checked, and its spec with the effective source ranges (the
    field, else the deprecated annotation). The cluster's ``tags`` go under the Service's
    ``additional-resource-tags``; a Classic ELB without ``security-groups`` gets the cluster's
    ``load_balancer_security_group`` (upstream's ``ElbSecurityGroup``)."""
    options = parse_annotations(spec.annotations, tuple(p.protocol.upper() for p in spec.ports))
    options = replace(
        options,
        additional_tags={**settings.tags, **options.additional_tags},
        security_groups=(
            options.security_groups
            or (
                (settings.load_balancer_security_group,)
                if settings.load_balancer_security_group
                and options.kind is LoadBalancerKind.CLASSIC
                else ()
            )
        ),
    )
    check_ports(spec, options.kind)
    ranges = source_ranges(spec.source_ranges, spec.annotations)
    return spec.model_copy(update={"source_ranges": ranges}), options


class AwsLoadBalancers(LoadBalancerDefaults):
    """Both kinds on the session: each half is given what it needs of the other when it is
    made (a Service that changes type removes the other kind): the NLB half a Classic ELB
    lookup, the Classic half the NLB half."""

    provider = NAME

    def __init__(self, session: AwsBase) -> None:
        self.session = session
        self.parts = LoadBalancerParts(session)
        self.groups = self.parts.groups
        self.nlb = AwsNetworkLoadBalancers(session, self.parts, ClassicElbLookup(session))
        self.classic = AwsClassicLoadBalancers(session, self.parts, self.nlb)

    # -- contract --------------------------------------------------------------------------
    def load_balancer_annotations(self, annotations: Mapping[str, str]) -> dict[str, str]:
        """``aws-load-balancer-*`` and the legacy source-range annotation: all the ELB reads."""
        return {
            k: v
            for k, v in annotations.items()
            if k.startswith(PREFIX) or k == LEGACY_SOURCE_RANGES
        }

    def load_balancer_node_labels(self, annotations: Mapping[str, str]) -> frozenset[str]:
        """The keys ``target-node-labels`` names (read leniently: the ensure checks the value)."""
        return frozenset(
            key
            for key in (
                i.partition("=")[0].strip() for i in items(annotations.get(TARGET_NODE_LABELS, ""))
            )
            if key
        )

    def ensure_load_balancer(self, spec: models.LoadBalancerSpec) -> models.LoadBalancerStatus:
        spec, options = parsed(spec, self.session.settings)
        if options.kind is LoadBalancerKind.NLB:
            return self.nlb.ensure_nlb(spec, options)
        return self.classic.ensure_classic(spec, options)

    def update_load_balancer_backends(self, spec: models.LoadBalancerSpec) -> None:
        """Register/deregister instances and fix the node rules; ``NotFound`` without an LB."""
        spec, options = parsed(spec, self.session.settings)
        instances = self.parts.live_instances(target_instance_ids(spec, options))
        if options.kind is LoadBalancerKind.NLB:
            self.nlb.update_nlb_backends(spec, options, instances)
        else:
            self.classic.update_classic_backends(spec, options, instances)

    def load_balancer_drift(self, spec: models.LoadBalancerSpec) -> list[str]:
        """Drift repair's check: reads only; see ``classic_drift`` and ``nlb_drift``."""
        spec, options = parsed(spec, self.session.settings)
        if options.kind is LoadBalancerKind.NLB:
            return self.nlb.nlb_drift(spec, options)
        return self.classic.classic_drift(spec, options)

    def get_load_balancer(self, name: str) -> models.LoadBalancerStatus | None:
        classic = self.classic.describe_classic(name)
        if classic is not None:
            return models.LoadBalancerStatus(name=name, hostname=str(classic.get("DNSName", "")))
        nlb = self.nlb.describe_nlb(name)
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
        classic = self.classic.describe_classic(name)
        if classic is not None:
            with calling("DeleteLoadBalancer"):
                self.session.client("elb").delete_load_balancer(LoadBalancerName=name)
        nlb = self.nlb.describe_nlb(name)
        target_groups = self.nlb.target_security_groups(nlb) if nlb is not None else []
        self.nlb.delete_nlb(name, nlb)
        if nlb is not None or classic is None:
            # Without targets (or without any LB: an interrupted delete) only the tags tell.
            where = self.groups.rules_in(target_groups, name) if target_groups else None
            self.groups.revoke(where if where is not None else self.groups.existing_rules(name))
        self.groups.delete_own_security_groups(name)
