"""DVP layout resources: objects in the parent cluster's namespace, found by name, created with
their labels, repaired, deleted.

All on the driver's base (:class:`~cloudloop.cloud.dvp.base.DvpBase`), with the
``DVPClusterConfiguration``'s ``kubeconfigDataBase64`` and ``namespace``; the worker's DVP section
gives the request timeout. Why: docs/decisions/0046-dvp-layout-standard.md.

Rules:
- A node object is found by its labels and role (the computed name is only the first guess, one
  GET, and the name to create); two live candidates are an error, never a guess. Anything else is
  found by name; one without this cluster's uuid label is ``AlreadyExists``, never adopted.
- Objects are created with their labels in the create call, so a retry finds them.
- A destructive change of a VM deletes it, then creates it anew, owner references to the old VM
  dropped first; a crash between the two leaves no VM, which the retry creates.
- ``adopt`` refuses another cluster's or node's object and only adds the labels it lacks.
- Ensure waits as upstream's Terraform (disk ``Ready``, VM ``Running`` with an address); a failed
  disk ends the step with DVP's message, not retried.
- Drift repaired by merge patch; a disk's source or class and a Secret's type only reported. A
  cloud-init Secret with other data is kept while its VM runs, rewritten before a new VM.
- A second ensure of an unchanged object makes only GETs; ``delete`` is idempotent and waits.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Mapping
from typing import Any

from kubernetes.utils import parse_quantity

from cloudloop.cloud import errors
from cloudloop.cloud.dvp import layout as defs
from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.base import DEFAULT_ZONES, NAME, DvpBase
from cloudloop.cloud.dvp.layout_state import STATE_TYPES
from cloudloop.cloud.dvp.settings import DvpSettings
from cloudloop.cloud.layouts import Drift, Ensured, Found, user_data_drift
from cloudloop.kube.resources import Resource
from cloudloop.layouts import bootstrap
from cloudloop.layouts.config import DVPClusterConfiguration
from cloudloop.layouts.model import LayoutDef, ResourceDef
from cloudloop.layouts.tfstate import StateMapping

Props = dict[str, Any]
Obj = dict[str, Any]
#: The digest of the bootstrap data a cloud-init Secret was made with (for plan to compare).
USER_DATA_ANNOTATION = bootstrap.DIGEST_KEY
#: The drift field of bootstrap data (a cloud-init Secret's ``data`` with its digest).
USER_DATA_FIELD = "user_data"
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
RESOURCES = {
    defs.NETWORK_POLICY: NETWORK_POLICIES,
    defs.VM_CLASS: r.VIRTUAL_MACHINE_CLASSES,
    defs.IMAGE["ClusterVirtualImage"]: r.CLUSTER_VIRTUAL_IMAGES,
    defs.IMAGE["VirtualImage"]: r.VIRTUAL_IMAGES,
    defs.DISK: r.VIRTUAL_DISKS,
    defs.SECRET: r.SECRETS,
    defs.VM: r.VIRTUAL_MACHINES,
}
#: The labels that say which cluster and node a node object is for.
_IDENTITY = (r.CLUSTER_UUID_LABEL, r.HOSTNAME_LABEL)
#: ``Ready=False`` reasons of a VirtualDisk that will not pass by waiting (upstream's check).
_DISK_FAILURES = frozenset(
    {
        "ProvisioningFailed",
        "ImageNotReady",
        "ClusterImageNotReady",
        "ImageNotFound",
        "ClusterImageNotFound",
        "QuotaExceeded",
        "StorageClassNotFound",
        "DatasourceIsNotReady",
    }
)


def _subset_drift(want: Any, have: Any, path: str) -> list[Drift]:
    """Where ``have`` does not hold ``want`` (maps: key by key; anything else: equal)."""
    if isinstance(want, dict) and isinstance(have, dict):
        drift: list[Drift] = []
        for key, value in want.items():
            drift += _subset_drift(value, have.get(key), f"{path}.{key}")
        return drift
    if want != have:
        return [Drift(path, have, want)]
    return []


def _quantity(value: Any) -> int:
    try:
        return int(parse_quantity(value)) if value not in (None, "") else 0  # type: ignore[no-untyped-call]
    except ValueError:
        return 0


class DvpLayoutResources:
    """The DVP :class:`~cloudloop.cloud.layouts.LayoutResources`."""

    def __init__(self, settings: DvpSettings, *, poll_s: float = 0.2, wait_s: float = 600.0):
        self.api = DvpBase(settings)
        self.poll_s = poll_s
        self.wait_s = wait_s

    # -- the contract ----------------------------------------------------------------------
    def layout_zones(self) -> list[str]:
        """DVP has no zones of its own; one request checks the parent answers."""
        self.api.call(
            "ListVirtualMachines",
            lambda: self.api.kube.list(r.VIRTUAL_MACHINES, self.api.namespace, limit=1),
        )
        return list(self.api.settings.zones or DEFAULT_ZONES)

    def _resource(self, resource: ResourceDef) -> Resource:
        found = RESOURCES.get(resource.kind)
        if found is None:
            raise errors.NotSupported(NAME, f"layout resource {resource.kind}")
        return found

    @staticmethod
    def _stems(resource: ResourceDef) -> list[str]:
        return [str(stem) for stem in resource.properties.get("stems") or []]

    @staticmethod
    def _plays(resource: ResourceDef, obj: Obj) -> bool:
        """Whether ``obj`` is ``resource``'s object: its labels name the cluster and node, its
        name less the hash suffix is a stem."""
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if any(labels.get(k) != resource.tags.get(k) for k in _IDENTITY):
            return False
        stem = re.sub(defs.HASH_SUFFIX + "$", "", str(meta.get("name", "")))
        return stem in DvpLayoutResources._stems(resource)

    def _find(self, resource: ResourceDef) -> Obj | None:
        kind = self._resource(resource)
        obj = self.api.get(kind, resource.name)
        if obj is None and not resource.read_only and self._stems(resource):
            selector = ",".join(f"{k}={resource.tags[k]}" for k in _IDENTITY)
            found = [
                o
                for o in self.api.list_objects(kind, label_selector=selector)
                if self._plays(resource, o)
            ]
            live = [o for o in found if not o["metadata"].get("deletionTimestamp")]
            if len(live) > 1:
                names = ", ".join(sorted(o["metadata"]["name"] for o in live))
                raise errors.AlreadyExists(
                    NAME,
                    f"List{kind.kind}",
                    f"{resource.key}: several {kind.kind}s play this part ({names}); delete all "
                    "but one",
                )
            candidates = live or found
            obj = candidates[0] if candidates else None
        if obj is None or resource.read_only:
            return obj
        labels = (obj.get("metadata") or {}).get("labels") or {}
        want = resource.tags.get(r.CLUSTER_UUID_LABEL)
        if want and labels.get(r.CLUSTER_UUID_LABEL) != want:
            raise errors.AlreadyExists(
                NAME,
                f"Get{obj.get('kind', resource.kind)}",
                f"{obj.get('kind', resource.kind)} {resource.name!r} exists but is not this "
                f"cluster's (label {r.CLUSTER_UUID_LABEL}={labels.get(r.CLUSTER_UUID_LABEL)!r})",
            )
        return obj

    def _with_parts(self, resource: ResourceDef, props: Props) -> Props:
        """A VM's properties naming the disks and Secret found (by labels and role); a part
        not found keeps the computed name."""
        parts = props.get("parts")
        if resource.kind != defs.VM or not parts:
            return props
        identity = {k: resource.tags[k] for k in _IDENTITY}

        def found(name: str) -> str:
            part = parts.get(name)
            if part is None:
                return name
            obj = self._find(
                ResourceDef(
                    kind=part["kind"], name=name, tags=identity, properties={"stems": part["stems"]}
                )
            )
            return name if obj is None else self._name(obj)

        spec = dict(props.get("spec") or {})
        spec["blockDeviceRefs"] = [
            {**device, "name": found(str(device.get("name")))}
            for device in spec.get("blockDeviceRefs") or []
        ]
        provisioning = dict(spec.get("provisioning") or {})
        if "userDataRef" in provisioning:
            user_data = dict(provisioning["userDataRef"])
            user_data["name"] = found(str(user_data.get("name")))
            provisioning["userDataRef"] = user_data
            spec["provisioning"] = provisioning
        return {**props, "spec": spec}

    def _release_parts(self, props: Props, vm: Obj) -> None:
        """Drop the owner references upstream's Terraform put on a VM's disks and Secret
        (``kubernetes_owner_references_v1``), so that replacing the VM does not have the garbage
        collector take them with it."""
        uid = vm["metadata"].get("uid")
        spec = props.get("spec") or {}
        parts = [(r.VIRTUAL_DISKS, str(d.get("name"))) for d in spec.get("blockDeviceRefs") or []]
        user_data = (spec.get("provisioning") or {}).get("userDataRef") or {}
        if user_data.get("name"):
            parts.append((r.SECRETS, str(user_data["name"])))
        for kind, name in parts:
            part = self.api.get(kind, name)
            owners = ((part or {}).get("metadata") or {}).get("ownerReferences") or []
            kept = [o for o in owners if o.get("uid") != uid]
            if part is not None and len(kept) != len(owners):
                self.api.patch(kind, name, {"metadata": {"ownerReferences": kept or None}})

    @staticmethod
    def _name(obj: Obj) -> str:
        return str(obj["metadata"]["name"])

    @staticmethod
    def _destructive_drift(resource: ResourceDef, props: Props, obj: Obj) -> list[Drift]:
        """A VM's destructive parameters changed (recreate), from its annotation."""
        if resource.kind != defs.VM or "destructive" not in props:
            return []
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        have = annotations.get(defs.DESTRUCTIVE_ANNOTATION)
        if defs.same_destructive(props["destructive"], have):
            return []
        want = props.get("created_annotations", {}).get(defs.DESTRUCTIVE_ANNOTATION)
        return [Drift(f"metadata.annotations.{defs.DESTRUCTIVE_ANNOTATION}", have, want)]

    def inspect(self, resource: ResourceDef, properties: Props) -> Found | None:
        obj = self._find(resource)
        if obj is None:
            return None
        if resource.read_only:
            return Found(outputs=self._outputs(resource, obj))
        properties = self._with_parts(resource, properties)
        drift = self._destructive_drift(resource, properties, obj)
        drift += self._drift(resource, properties, obj)
        return Found(outputs=self._outputs(resource, obj), drift=drift)

    def ensure(self, resource: ResourceDef, properties: Props) -> Ensured:
        properties = self._with_parts(resource, properties)
        obj = self._find(resource)
        if obj is None:
            created = self.api.create(self._resource(resource), self._body(resource, properties))
            obj = created if created is not None else self._find(resource)
            if obj is None:
                raise errors.CloudError(
                    NAME, f"Create{resource.kind}", f"{resource.name}: created but not found"
                )
            return Ensured("created", self._outputs(resource, self._settle(resource, obj)))
        if obj["metadata"].get("deletionTimestamp"):
            raise errors.CloudError(
                NAME, f"Get{obj.get('kind')}", f"{self._name(obj)} is being deleted; retry"
            )
        recreate = self._destructive_drift(resource, properties, obj)
        if recreate:  # upstream renames, and so replaces, the VM: the old one goes first
            self._release_parts(properties, obj)
            self._delete(self._resource(resource), self._name(obj))
            return self.ensure(resource, properties)
        changed = self._drift(resource, properties, obj)
        repairable = [d for d in changed if not d.immutable]
        if repairable:
            patch = self._repair(resource, properties, repairable)
            obj = self.api.patch(self._resource(resource), self._name(obj), patch)
        obj = self._settle(resource, obj)
        return Ensured(
            "updated" if repairable else "unchanged", self._outputs(resource, obj), changed
        )

    def delete(self, resource: ResourceDef, properties: Props) -> bool:
        obj = self._find(resource)
        if obj is None:
            return False
        self._delete(self._resource(resource), self._name(obj), obj)
        return True

    def _delete(self, kind: Resource, name: str, obj: Obj | None = None) -> None:
        if obj is None or not obj["metadata"].get("deletionTimestamp"):
            self.api.delete(kind, name)
        self._wait(f"Delete{kind.kind}", lambda: self.api.get(kind, name) is None)

    def adopt(self, resource: ResourceDef, properties: Props, cloud_id: str) -> Found | None:
        """The object a Terraform state names (its ID is its name), given the layout's labels
        it lacks (upstream's cloud-init Secret has none), then ``inspect``'s answer; ``None``
        when the namespace has no such object. Another cluster's or node's is refused."""
        kind = self._resource(resource)
        obj = self.api.get(kind, cloud_id)
        if obj is None:
            return None
        labels = (obj.get("metadata") or {}).get("labels") or {}
        identity = _IDENTITY if self._stems(resource) else (r.CLUSTER_UUID_LABEL,)
        for label in identity:
            have, want = labels.get(label), resource.tags.get(label)
            if have is not None and have != want:
                raise errors.AlreadyExists(
                    NAME,
                    "adopt",
                    f"{resource.key}: the state's {kind.kind} {cloud_id} has {label}={have!r}, "
                    f"this layout's is {want!r}",
                )
        missing = {k: v for k, v in resource.tags.items() if k not in labels}
        if missing:
            self.api.patch(kind, cloud_id, {"metadata": {"labels": missing}})
        found = self.inspect(resource, properties)
        if found is not None and found.outputs.get("name") != cloud_id:
            raise errors.AlreadyExists(
                NAME,
                "adopt",
                f"{resource.key} is {found.outputs.get('name')}, not the state's {cloud_id}",
            )
        return found

    def blockers(self, layout: LayoutDef, found: dict[str, dict[str, Any]]) -> list[str]:
        """VMs and disks labelled for this cluster that the layout did not make (ephemeral
        nodes, CSI volumes)."""
        defined = [d for m in layout.modules for d in m.resources]
        selector = f"{r.CLUSTER_UUID_LABEL}={layout.uuid}"
        blockers: list[str] = []
        for resource in (r.VIRTUAL_MACHINES, r.VIRTUAL_DISKS):
            mine = [d for d in defined if RESOURCES.get(d.kind) == resource]
            for obj in self.api.list_objects(resource, label_selector=selector):
                name = obj["metadata"]["name"]
                ours = any(d.name == name or self._plays(d, obj) for d in mine)
                if not ours and not obj["metadata"].get("deletionTimestamp"):
                    blockers.append(f"{resource.kind} {name}")
        return sorted(blockers)

    # -- bodies, drift, patches ------------------------------------------------------------
    def _body(self, resource: ResourceDef, props: Props) -> Obj:
        metadata: dict[str, Any] = {
            "name": resource.name,
            "namespace": self.api.namespace,
            "labels": dict(resource.tags),
        }
        annotations = {
            **(props.get("annotations") or {}),
            **(props.get("created_annotations") or {}),
        }
        if annotations:
            metadata["annotations"] = annotations
        if resource.kind == defs.SECRET:
            user_data = bootstrap.loaded(props.get("user_data"))
            text = bootstrap.merged(str(props["userData"]), bootstrap.data_of(user_data))
            if user_data is not None:
                digest = {USER_DATA_ANNOTATION: user_data.sha256}
                metadata["annotations"] = {**metadata.get("annotations", {}), **digest}
            encoded = base64.b64encode(text.encode()).decode()
            return {
                "metadata": metadata,
                "type": props["type"],
                "data": {r.CLOUD_INIT_KEY: encoded},
            }
        return {"metadata": metadata, "spec": props["spec"]}

    def _drift(self, resource: ResourceDef, props: Props, obj: Obj) -> list[Drift]:
        meta = obj.get("metadata") or {}
        drift = _subset_drift(resource.tags, meta.get("labels") or {}, "metadata.labels")
        drift += _subset_drift(
            props.get("annotations") or {}, meta.get("annotations") or {}, "metadata.annotations"
        )
        if resource.kind == defs.SECRET:
            if obj.get("type") != props["type"]:
                drift.append(Drift("type", obj.get("type"), props["type"], immutable=True))
            booted = (meta.get("annotations") or {}).get(USER_DATA_ANNOTATION)
            wanted = bootstrap.digest_of(props.get("user_data"))
            if wanted and booted != wanted and self._vm_made_anew(resource, props):
                old = bootstrap.short(booted) if booted else None
                note = "rewritten: its VM is made anew"
                return [*drift, Drift(USER_DATA_FIELD, old, bootstrap.short(wanted), note=note)]
            return drift + user_data_drift(booted, props)
        have = obj.get("spec") or {}
        want = props.get("spec") or {}
        if resource.kind == defs.DISK:
            return drift + self._disk_drift(want, have)
        if resource.kind in (defs.VM, defs.NETWORK_POLICY):
            # lists are compared whole; a merge patch writes the spec's top-level keys back
            drift += [
                Drift(f"spec.{key}", have.get(key), value)
                for key, value in want.items()
                if _subset_drift(value, have.get(key), key)
            ]
        return drift

    def _vm_made_anew(self, secret: ResourceDef, props: Props) -> bool:
        """Whether the VM booting from ``secret`` is to be created: none plays the part, it is
        going, or its destructive parameters changed (it is replaced)."""
        vm = props.get("vm")
        if not vm:
            return False
        identity = {k: secret.tags[k] for k in _IDENTITY if k in secret.tags}
        found = self._find(
            ResourceDef(
                kind=defs.VM, name=str(vm["name"]), tags=identity, properties={"stems": vm["stems"]}
            )
        )
        if found is None or found["metadata"].get("deletionTimestamp"):
            return True
        annotations = found["metadata"].get("annotations") or {}
        return not defs.same_destructive(
            vm["destructive"], annotations.get(defs.DESTRUCTIVE_ANNOTATION)
        )

    def _repair(self, resource: ResourceDef, props: Props, repairable: list[Drift]) -> Obj:
        """The merge patch of ``repairable``; a cloud-init Secret rewritten whole."""
        patch = self._patch([d for d in repairable if d.field != USER_DATA_FIELD])
        if any(d.field == USER_DATA_FIELD for d in repairable):
            body = self._body(resource, props)
            patch["data"] = body["data"]
            annotations = patch.setdefault("metadata", {}).setdefault("annotations", {})
            annotations.update(body["metadata"].get("annotations") or {})
        return patch

    @staticmethod
    def _disk_drift(want: Obj, have: Obj) -> list[Drift]:
        drift = [
            Drift("spec.dataSource", have.get("dataSource"), want["dataSource"], immutable=True)
            for _ in [0]
            if "dataSource" in want
            and _subset_drift(want["dataSource"], have.get("dataSource"), "")
        ]
        claim_want = want.get("persistentVolumeClaim") or {}
        claim_have = have.get("persistentVolumeClaim") or {}
        storage_class = claim_want.get("storageClassName")
        if storage_class and storage_class != claim_have.get("storageClassName"):
            drift.append(
                Drift(
                    "spec.persistentVolumeClaim.storageClassName",
                    claim_have.get("storageClassName"),
                    storage_class,
                    immutable=True,
                )
            )
        size_want, size_have = claim_want.get("size"), claim_have.get("size")
        if _quantity(size_want) > _quantity(size_have):
            drift.append(Drift("spec.persistentVolumeClaim.size", size_have, size_want))
        elif _quantity(size_want) < _quantity(size_have):
            drift.append(
                Drift("spec.persistentVolumeClaim.size", size_have, size_want, immutable=True)
            )
        return drift

    @staticmethod
    def _patch(drift: list[Drift]) -> Obj:
        """A merge patch that writes the wanted values of ``drift`` back."""
        patch: Obj = {}
        for d in drift:
            parts = d.field.split(".")
            if parts[0] == "metadata":  # metadata.labels.<key with dots>
                parts = [parts[0], parts[1], ".".join(parts[2:])]
            node = patch
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = d.want
        return patch

    # -- waiting ---------------------------------------------------------------------------
    def _wait(self, what: str, done: Any) -> None:
        deadline = time.monotonic() + self.wait_s
        while not done():
            if time.monotonic() > deadline:
                raise errors.CloudError(NAME, what, f"not done after {self.wait_s:.0f}s; retry")
            time.sleep(self.poll_s)

    def _settle(self, resource: ResourceDef, obj: Obj) -> Obj:
        """A disk ``Ready``, a VM ``Running`` with its address (DVP's failures end the step)."""
        if resource.kind not in (defs.DISK, defs.VM):
            return obj
        kind = self._resource(resource)
        name = self._name(obj)
        deadline = time.monotonic() + self.wait_s
        while True:
            status = obj.get("status") or {}
            if resource.kind == defs.DISK:
                failure = _disk_failure(status)
                if failure:
                    raise errors.InvalidRequest(
                        NAME, "WaitForVirtualDisk", f"VirtualDisk {name}: {failure}"
                    )
                if status.get("phase") == "Ready":
                    return obj
            elif status.get("phase") == "Running" and status.get("ipAddress"):
                return obj
            if time.monotonic() > deadline:
                raise errors.CloudError(
                    NAME,
                    f"WaitFor{kind.kind}",
                    f"{name} is {status.get('phase') or 'Pending'} after {self.wait_s:.0f}s; retry",
                )
            time.sleep(self.poll_s)
            found = self.api.get(kind, name)
            if found is None:
                raise errors.CloudError(NAME, f"Get{kind.kind}", f"{name} is gone; retry")
            obj = found

    def _outputs(self, resource: ResourceDef, obj: Obj) -> dict[str, Any]:
        meta, status = obj.get("metadata") or {}, obj.get("status") or {}
        name = str(meta.get("name", ""))
        values = {"id": name, "name": name, "ip": status.get("ipAddress")}
        values["device"] = defs.data_device(name)
        return {k: values.get(k) for k in resource.outputs}


def _disk_failure(status: Obj) -> str:
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "Ready"
            and condition.get("status") == "False"
            and condition.get("reason") in _DISK_FAILURES
        ):
            return f"{condition.get('reason')}: {condition.get('message', '')}"
    if status.get("phase") == "Failed":
        return "Failed"
    return ""


class DvpLayouts:
    """The DVP :class:`~cloudloop.cloud.layouts.LayoutPart` (and ``AdoptingPart``)."""

    layouts: tuple[str, ...] = defs.LAYOUTS
    state_types: Mapping[str, StateMapping] = STATE_TYPES
    #: Bootstrap data goes into the cloud-init Secret's document (a cloud-config mapping).
    merges_user_data = True

    def define(self, config: Any, cluster: Any, zones: list[str]) -> LayoutDef:
        return defs.define(config, cluster, zones)

    def connect(self, config: Any, section: Any) -> DvpLayoutResources:
        """A session on the parent cluster of the document's kubeconfig, in its namespace; the
        worker's DVP section gives the request timeout."""
        assert isinstance(config, DVPClusterConfiguration)
        base = section if isinstance(section, DvpSettings) else DvpSettings()
        settings = base.model_copy(
            update={
                "kubeconfig": None,
                "kubeconfig_base64": config.provider.kubeconfigDataBase64,
                "namespace": config.provider.namespace,
                "zones": list(config.zones or []),
                "additional_vm_labels": dict(config.provider.additionalVMLabels),
                "ssh_public_key": config.sshPublicKey,
            }
        )
        return DvpLayoutResources(settings)
