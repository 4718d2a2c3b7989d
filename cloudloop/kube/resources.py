"""Names of Kubernetes resources and object references, and the REST paths built from them.

A :class:`Resource` names the type of its bodies (:mod:`cloudloop.kube.bodies`): ``NODES`` is a
``Resource[Node]``, so ``kube.get(NODES, name)`` is a ``Node | None`` and ``Informer(kube,
NODES)`` an ``Informer[Node]``. A resource without a typed body is a plain ``Resource``, whose
bodies are the API's dicts as they are. The body type is only a type: a resource's value is its
group, version, plural, kind and scope, which equality and hashing compare.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, cast

from pydantic import BaseModel

from cloudloop.kube.bodies import (
    BodyT,
    BodyT_co,
    CloudProbe,
    ConfigMap,
    Event,
    Node,
    NodeGroupObject,
    ObjectList,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    Secret,
    Service,
    StorageClass,
    VolumeAttachment,
)


@dataclass(frozen=True)
class Resource(Generic[BodyT_co]):
    """A resource type: ``group`` is empty for the core API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base

    def body(self, obj: Mapping[str, Any]) -> BodyT_co:
        """``obj``, an object of this resource the API server sent, as its typed body: the one
        place an answer becomes a typed body (:class:`~cloudloop.kube.api.Kube`'s verbs and the
        informers), a type and not a check."""
        return cast(BodyT_co, obj)

    def page(self, obj: Mapping[str, Any]) -> ObjectList[BodyT_co]:
        """A LIST answer of this resource as a page of its typed bodies (as :meth:`body`)."""
        return cast(ObjectList[BodyT_co], obj)

    @property
    def untyped(self) -> Resource:
        """This resource with the API's plain dicts as bodies (an equal resource), for code that
        edits what the server sent before it becomes a body (the informer's transform)."""
        return Resource(self.group, self.version, self.plural, self.kind, self.namespaced)


NODES: Resource[Node] = Resource("", "v1", "nodes", "Node", namespaced=False)
SERVICES: Resource[Service] = Resource("", "v1", "services", "Service")
EVENTS: Resource[Event] = Resource("", "v1", "events", "Event")
SECRETS: Resource[Secret] = Resource("", "v1", "secrets", "Secret")
NODE_GROUPS: Resource[NodeGroupObject] = Resource(
    "cloudloop.io", "v1alpha1", "nodegroups", "NodeGroup"
)
CLOUD_PROBES: Resource[CloudProbe] = Resource(
    "cloudloop.io", "v1alpha1", "cloudprobes", "CloudProbe"
)
CONFIG_MAPS: Resource[ConfigMap] = Resource("", "v1", "configmaps", "ConfigMap")
#: Namespaces: ``kube-system``'s UID is the cluster's identity (:mod:`cloudloop.claim`); a layout
#: publish creates ``d8-system`` when the cluster has none yet.
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
PERSISTENT_VOLUMES: Resource[PersistentVolume] = Resource(
    "", "v1", "persistentvolumes", "PersistentVolume", namespaced=False
)
PERSISTENT_VOLUME_CLAIMS: Resource[PersistentVolumeClaim] = Resource(
    "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"
)
STORAGE_CLASSES: Resource[StorageClass] = Resource(
    "storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False
)
PODS: Resource[Pod] = Resource("", "v1", "pods", "Pod")
PDBS: Resource[PodDisruptionBudget] = Resource(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"
)
VOLUME_ATTACHMENTS: Resource[VolumeAttachment] = Resource(
    "storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", namespaced=False
)
INSTANCE_TYPES_CATALOGS = Resource(
    "deckhouse.io", "v1alpha1", "instancetypescatalogs", "InstanceTypesCatalog", namespaced=False
)


class ObjectRef(BaseModel):
    """Identity of one Kubernetes object; crosses the Temporal boundary in workflow inputs."""

    group: str = ""
    version: str = "v1"
    plural: str
    kind: str
    namespace: str = ""
    name: str
    uid: str = ""

    @classmethod
    def of(cls, resource: Resource[Any], obj: Mapping[str, Any]) -> ObjectRef:
        meta = obj.get("metadata", {})
        return cls(
            group=resource.group,
            version=resource.version,
            plural=resource.plural,
            kind=resource.kind,
            namespace=meta.get("namespace", "") or "",
            name=meta["name"],
            uid=meta.get("uid", ""),
        )

    @property
    def resource(self) -> Resource:
        return Resource(
            self.group, self.version, self.plural, self.kind, namespaced=bool(self.namespace)
        )

    def resource_of(self, body: type[BodyT]) -> Resource[BodyT]:
        """:attr:`resource` with ``body`` as its body type: a ref crosses Temporal without one,
        so the code that knows the kind names it (``ref.resource_of(InfraObject)``), as the
        resource constants do; a type, not a check."""
        return Resource(
            self.group, self.version, self.plural, self.kind, namespaced=bool(self.namespace)
        )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name
