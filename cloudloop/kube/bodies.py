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


# -- Cluster API ----------------------------------------------------------------------------
class Condition(TypedDict, total=False):
    """A ``metav1.Condition`` (CAPI v1beta2 ``status.conditions[]``)."""

    type: str
    status: str
    reason: str
    message: str
    observedGeneration: int
    lastTransitionTime: str


class ObjectReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    namespace: str


class MachineBootstrap(TypedDict, total=False):
    dataSecretName: str


class CapiMachineSpec(TypedDict, total=False):
    clusterName: str
    failureDomain: str
    bootstrap: MachineBootstrap
    infrastructureRef: ObjectReference


class CapiMachine(TypedDict, total=False):
    """A ``cluster.x-k8s.io`` Machine: what the InfraMachine reconciler reads of it."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: CapiMachineSpec


class CapiClusterSpec(TypedDict, total=False):
    paused: bool
    infrastructureRef: ObjectReference


class CapiClusterInitialization(TypedDict, total=False):
    infrastructureProvisioned: bool


class CapiClusterStatus(TypedDict, total=False):
    initialization: CapiClusterInitialization
    infrastructureReady: bool  # v1beta1


class CapiCluster(TypedDict, total=False):
    """A ``cluster.x-k8s.io`` Cluster: pause, infrastructure readiness, its InfraCluster."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: CapiClusterSpec
    status: CapiClusterStatus


class InfraInitialization(TypedDict, total=False):
    provisioned: bool


class InfraStatus(TypedDict, total=False):
    ready: bool
    initialization: InfraInitialization
    conditions: list[Condition]


class InfraObject(TypedDict, total=False):
    """A provider's InfraMachine or InfraCluster (DVPMachine, ZvirtCluster, …): its ``spec`` is
    the provider's own (read by the driver's parser), its status the CAPI contract's."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]
    status: InfraStatus


# -- cloudloop.io ---------------------------------------------------------------------------
class CloudProbeSpec(TypedDict, total=False):
    provider: str


class CloudProbeStatus(TypedDict, total=False):
    observedGeneration: int


class CloudProbe(TypedDict, total=False):
    """A ``cloudloop.io`` CloudProbe: what the probe starter reads to start a probe."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: CloudProbeSpec
    status: CloudProbeStatus
