"""Typed views of the Kubernetes JSON the product reads most: Node, Service and their parts.

These are :class:`~typing.TypedDict` s, as kopf's typed bodies: at run time a body is the plain
``dict`` the API server sent (the informer's store, :class:`~cloudloop.kube.api.Kube`'s answers),
so nothing is parsed, copied or validated; the types only tell mypy which keys the code reads
and what they hold. Every class is ``total=False``: the API server omits empty fields, so each
read keeps its ``.get`` with a default. Only fields the product reads or writes are declared;
a body keeps every other field the server sent (a Node written back with PUT loses nothing).

A plain dict from the API becomes a typed body at one boundary per consumer (the
informer's typed accessors, or one ``cast`` in a reading helper); no check happens there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from typing_extensions import TypeVar

#: Where code takes any object body: a typed one from here, else the API's plain dict.
BodyT = TypeVar("BodyT", bound=Mapping[str, Any], default=dict[str, Any])


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    labels: dict[str, str]
    annotations: dict[str, str]
    finalizers: list[str]
    deletionTimestamp: str
    ownerReferences: list[OwnerReference]
    creationTimestamp: str


# -- Node ---------------------------------------------------------------------------------------
class Taint(TypedDict, total=False):
    key: str
    value: str
    effect: str
    timeAdded: str


class NodeAddressBody(TypedDict, total=False):
    """``status.addresses[]`` (``cloudloop.cloud.models.NodeAddress`` is the cloud's view)."""

    type: str
    address: str


class NodeCondition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str
    lastHeartbeatTime: str
    lastTransitionTime: str


class NodeSpec(TypedDict, total=False):
    providerID: str
    taints: list[Taint]
    podCIDR: str
    podCIDRs: list[str]
    unschedulable: bool


class NodeStatus(TypedDict, total=False):
    """What the informer keeps of a Node's status (``informer.NODE_STATUS_KEPT``)."""

    conditions: list[NodeCondition]
    addresses: list[NodeAddressBody]


class Node(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: NodeSpec
    status: NodeStatus


# -- Service ------------------------------------------------------------------------------------
class ServicePort(TypedDict, total=False):
    name: str
    protocol: str
    port: int
    targetPort: int | str
    nodePort: int


class ServiceSpec(TypedDict, total=False):
    type: str
    loadBalancerClass: str | None
    ports: list[ServicePort]
    loadBalancerSourceRanges: list[str]
    externalTrafficPolicy: str
    healthCheckNodePort: int
    loadBalancerIP: str


class LoadBalancerIngress(TypedDict, total=False):
    ip: str
    hostname: str
    ipMode: str


class LoadBalancerStatus(TypedDict, total=False):
    ingress: list[LoadBalancerIngress]


class ServiceStatus(TypedDict, total=False):
    loadBalancer: LoadBalancerStatus


class Service(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: ServiceSpec
    status: ServiceStatus
