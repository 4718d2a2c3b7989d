"""Typed views of the Kubernetes JSON the product reads most: Node, Service and their parts.

These are :class:`~typing.TypedDict` s, as kopf's typed bodies: at run time a body is the plain
``dict`` the API server sent (the informer's store, :class:`~cloudloop.kube.api.Kube`'s answers),
so nothing is parsed, copied or validated; the types only tell mypy which keys the code reads
and what they hold. Every class is ``total=False``: the API server omits empty fields, so each
read keeps its ``.get`` with a default. Only fields the product reads or writes are declared;
a body keeps every other field the server sent (a Node written back with PUT loses nothing).

A plain dict from the API becomes a typed body at one boundary: a
:class:`~cloudloop.kube.resources.Resource` names its bodies' type (``NODES`` is a
``Resource[Node]``), and :meth:`~cloudloop.kube.resources.Resource.body` is the one ``cast`` that
:class:`~cloudloop.kube.api.Kube`'s verbs and the informers go through; no check happens there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, Literal, TypedDict

from typing_extensions import TypeVar

#: Where code takes any object body: a typed one from here, else the API's plain dict.
BodyT = TypeVar("BodyT", bound=Mapping[str, Any], default=dict[str, Any])
#: A resource's body type (``Resource[Node]``): covariant, so any resource fits a
#: ``Resource[Mapping[str, Any]]`` parameter that only reads.
BodyT_co = TypeVar("BodyT_co", bound=Mapping[str, Any], default=dict[str, Any], covariant=True)


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


#: A list's ``metadata`` (``continue`` is a keyword, hence the functional form).
ListMeta = TypedDict(
    "ListMeta", {"resourceVersion": str, "continue": str, "remainingItemCount": int}, total=False
)


#: One operation of a JSON patch (RFC 6902; ``from`` is a keyword, hence the functional form).
JsonPatchOperation = TypedDict(
    "JsonPatchOperation",
    {
        "op": Literal["add", "remove", "replace", "move", "copy", "test"],
        "path": str,
        "value": object,
        "from": str,
    },
    total=False,
)


class ObjectList(TypedDict, Generic[BodyT], total=False):
    """A LIST answer: one page of ``items`` of one resource's bodies."""

    apiVersion: str
    kind: str
    metadata: ListMeta
    items: list[BodyT]


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


# -- Pod, PodDisruptionBudget (the termination handler's drain) ----------------------------
class LabelSelectorRequirement(TypedDict, total=False):
    key: str
    operator: str
    values: list[str]


class LabelSelector(TypedDict, total=False):
    matchLabels: dict[str, str]
    matchExpressions: list[LabelSelectorRequirement]


class PersistentVolumeClaimVolumeSource(TypedDict, total=False):
    claimName: str
    readOnly: bool


class EmptyDirVolumeSource(TypedDict, total=False):
    medium: str
    sizeLimit: str


class Volume(TypedDict, total=False):
    """``spec.volumes[]``: which kind of volume it is (the drain refuses ``emptyDir``)."""

    name: str
    emptyDir: EmptyDirVolumeSource
    persistentVolumeClaim: PersistentVolumeClaimVolumeSource


class PodSpec(TypedDict, total=False):
    nodeName: str
    volumes: list[Volume]


class PodStatus(TypedDict, total=False):
    phase: str


class Pod(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class PodDisruptionBudgetSpec(TypedDict, total=False):
    selector: LabelSelector
    minAvailable: int | str
    maxUnavailable: int | str


class PodDisruptionBudgetStatus(TypedDict, total=False):
    disruptionsAllowed: int


class PodDisruptionBudget(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: PodDisruptionBudgetSpec
    status: PodDisruptionBudgetStatus


class Preconditions(TypedDict, total=False):
    uid: str
    resourceVersion: str


class DeleteOptions(TypedDict, total=False):
    preconditions: Preconditions
    gracePeriodSeconds: int


class Eviction(TypedDict, total=False):
    """A ``policy/v1`` Eviction, POSTed to a Pod's ``eviction`` subresource."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    deleteOptions: DeleteOptions


# -- Event --------------------------------------------------------------------------------------
class InvolvedObject(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    namespace: str | None
    uid: str | None


class EventSource(TypedDict, total=False):
    component: str
    host: str


class Event(TypedDict, total=False):
    """A core ``v1`` Event, as :func:`cloudloop.kube.events.record_event` writes it."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    involvedObject: InvolvedObject
    type: str
    reason: str
    message: str
    source: EventSource
    reportingComponent: str
    reportingInstance: str
    firstTimestamp: str
    lastTimestamp: str
    count: int


# -- Secret, ConfigMap ------------------------------------------------------------------------
class Secret(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    type: str
    data: dict[str, str]  # base64
    stringData: dict[str, str]


class ConfigMap(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    data: dict[str, str]
    binaryData: dict[str, str]


# -- storage (the CSI driver's objects, the drain's VolumeAttachments, discovery's PVs) -------
class TopologySelectorLabelRequirement(TypedDict, total=False):
    key: str
    values: list[str]


class TopologySelectorTerm(TypedDict, total=False):
    matchLabelExpressions: list[TopologySelectorLabelRequirement]


class StorageClass(TypedDict, total=False):
    """A ``storage.k8s.io/v1`` StorageClass (its fields are top-level: it has no spec)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    provisioner: str
    parameters: dict[str, str]
    reclaimPolicy: str
    allowVolumeExpansion: bool
    volumeBindingMode: str
    allowedTopologies: list[TopologySelectorTerm]


class VolumeSnapshotClass(TypedDict, total=False):
    """A ``snapshot.storage.k8s.io/v1`` VolumeSnapshotClass (no spec either)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    driver: str
    deletionPolicy: str
    parameters: dict[str, str]


class CSIDriverSpec(TypedDict, total=False):
    attachRequired: bool
    podInfoOnMount: bool
    requiresRepublish: bool
    storageCapacity: bool
    fsGroupPolicy: str
    volumeLifecycleModes: list[str]


class CSIDriver(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: CSIDriverSpec


class VolumeAttachmentSource(TypedDict, total=False):
    persistentVolumeName: str


class VolumeAttachmentSpec(TypedDict, total=False):
    attacher: str
    nodeName: str
    source: VolumeAttachmentSource


class VolumeAttachmentStatus(TypedDict, total=False):
    attached: bool
    attachmentMetadata: dict[str, str]


class VolumeAttachment(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: VolumeAttachmentSpec
    status: VolumeAttachmentStatus


class CSIPersistentVolumeSource(TypedDict, total=False):
    driver: str
    volumeHandle: str
    fsType: str
    volumeAttributes: dict[str, str]


class AWSElasticBlockStoreVolumeSource(TypedDict, total=False):
    volumeID: str
    fsType: str


class NodeSelectorRequirement(TypedDict, total=False):
    key: str
    operator: str
    values: list[str]


class NodeSelectorTerm(TypedDict, total=False):
    matchExpressions: list[NodeSelectorRequirement]


class NodeSelector(TypedDict, total=False):
    nodeSelectorTerms: list[NodeSelectorTerm]


class VolumeNodeAffinity(TypedDict, total=False):
    """Where a PV can be used: the zone the CSI driver's topology put it in."""

    required: NodeSelector


class PersistentVolumeSpec(TypedDict, total=False):
    csi: CSIPersistentVolumeSource
    awsElasticBlockStore: AWSElasticBlockStoreVolumeSource  # in-tree (before CSI migration)
    persistentVolumeReclaimPolicy: str
    storageClassName: str
    capacity: dict[str, str]
    claimRef: ObjectReference
    nodeAffinity: VolumeNodeAffinity


class PersistentVolume(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: PersistentVolumeSpec


class PersistentVolumeClaimSpec(TypedDict, total=False):
    storageClassName: str
    volumeName: str
    accessModes: list[str]


class PersistentVolumeClaimStatus(TypedDict, total=False):
    phase: str


class PersistentVolumeClaim(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: PersistentVolumeClaimSpec
    status: PersistentVolumeClaimStatus


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
    addresses: list[NodeAddressBody]  # the machine's, which CAPI copies onto the Machine


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
    conditions: list[Condition]
    zones: list[str]
    workflowID: str


class ClassReference(TypedDict, total=False):
    kind: str
    name: str


class CloudInstances(TypedDict, total=False):
    classReference: ClassReference
    zones: list[str]
    minPerZone: int
    maxPerZone: int
    maxSurgePerZone: int
    maxUnavailablePerZone: int


class NodeGroupBootstrap(TypedDict, total=False):
    dataSecretName: str
    configTemplateName: str


class NodeGroupSpec(TypedDict, total=False):
    clusterName: str
    cloudInstances: CloudInstances
    bootstrap: NodeGroupBootstrap
    podSubnet: str


class NodeGroupStatus(TypedDict, total=False):
    observedGeneration: int
    conditions: list[Condition]
    machineDeployments: list[str]


class NodeGroupObject(TypedDict, total=False):
    """A ``cloudloop.io`` NodeGroup: machines from one InstanceClass, a MachineDeployment per
    zone (for clusters without Deckhouse's node manager)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: NodeGroupSpec
    status: NodeGroupStatus


class CloudProbe(TypedDict, total=False):
    """A ``cloudloop.io`` CloudProbe: what the probe starter reads to start a probe."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: CloudProbeSpec
    status: CloudProbeStatus
