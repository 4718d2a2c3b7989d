"""Names and tags of what the AWS load balancers make, and the pure choices behind them.

Every resource made for a Service carries its identity as tags (``kubernetes.io/cluster/<cluster>
=owned``, ``kubernetes.io/service-name=<ns>/<name>``, ``cloudloop.io/service-uid``,
``cloudloop.io/load-balancer=<lb name>``), which is how a retried call finds what an interrupted
one made. Names follow cloud-provider-aws: ``k8s-elb-<lb>`` for an ELB's own security group,
``k8s-<ns:8>-<name:8>-<hash:10>`` for NLB target groups; ``k8s-traffic-<cluster>`` is the cluster's
shared ELB backend group (the AWS Load Balancer Controller's name). No I/O here.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.loadbalancers.service_annotations import (
    AwsLoadBalancerOptions,
    LoadBalancerKind,
    invalid,
)
from cloudloop.cloud.aws.tags import cluster_tag_key, tag_dict, tagged_for_cluster

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import TagTypeDef

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


def aws_tags(tags: dict[str, str]) -> list[TagTypeDef]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


def security_group_name(lb_name: str) -> str:
    return f"k8s-elb-{lb_name}"


def backend_security_group_name(cluster: str) -> str:
    """The cluster's shared ELB backend group (as the AWS Load Balancer Controller's
    ``k8s-traffic-<cluster>``): every Classic ELB carries it, and each node group admits it
    with one rule, so the node groups hold one rule however many Services there are."""
    return f"k8s-traffic-{cluster}"


def target_group_name(
    spec: models.LoadBalancerSpec, port: models.LoadBalancerPort, protocol: str | None = None
) -> str:
    """``k8s-<ns:8>-<name:8>-<hash:10>`` (as cloud-provider-aws), hashed over the Service UID,
    port, node port and the group's protocol (the port's unless ``backend-protocol: ssl`` makes
    it TLS), so a changed port or protocol gets a new group and a retry finds the old."""
    namespace, _, name = spec.service.partition("/")
    protocol = (protocol or port.protocol).upper()
    digest = hashlib.sha1(
        f"{spec.service_uid}/{port.port}/{port.node_port}/{protocol}".encode()
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


def target_instance_ids(
    spec: models.LoadBalancerSpec, options: AwsLoadBalancerOptions
) -> list[str]:
    """The instances to register: the backends that ``target-node-labels`` selects."""
    if spec.backends:
        ids = [b.instance_id for b in spec.backends if options.selects(b.labels)]
    else:
        ids = [] if options.target_node_labels else list(spec.backend_instance_ids)
    return sorted(set(ids))


SubnetT = TypeVar("SubnetT", bound=Mapping[str, Any])


def choose_subnets(subnets: Iterable[SubnetT], cluster: str, *, internal: bool) -> list[SubnetT]:
    """One cluster subnet per zone, preferring the role tag of the scheme (``kubernetes.io/role/
    elb`` or ``internal-elb``) and skipping subnets tagged only for the other scheme."""
    wanted, other = (
        (ROLE_INTERNAL_ELB_TAG, ROLE_ELB_TAG) if internal else (ROLE_ELB_TAG, ROLE_INTERNAL_ELB_TAG)
    )
    best: dict[str, tuple[int, str, SubnetT]] = {}
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


def error_code(exc: errors.CloudError) -> str:
    """The AWS error code behind a translated error (``""`` when there is none)."""
    cause: Any = exc.__cause__
    response = getattr(cause, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))
