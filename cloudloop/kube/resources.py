"""Names of Kubernetes resources and object references, and the REST paths built from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class Resource:
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


NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
SERVICES = Resource("", "v1", "services", "Service")
EVENTS = Resource("", "v1", "events", "Event")
SECRETS = Resource("", "v1", "secrets", "Secret")
CLOUD_PROBES = Resource("cloudloop.io", "v1alpha1", "cloudprobes", "CloudProbe")
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
PERSISTENT_VOLUMES = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod")
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
VOLUME_ATTACHMENTS = Resource(
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
    def of(cls, resource: Resource, obj: Mapping[str, Any]) -> ObjectRef:
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

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name
