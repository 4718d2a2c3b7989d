"""Destroy's first phase: delete, through the cluster's own API, what owns cloud objects.

As upstream ``dhctl destroy``'s ``deleteEntities``: the LoadBalancer Services, the PVCs and
their volumes, the Cluster API MachineDeployments and their Machines, each deleted and waited
for, so the cloud controller and the CSI driver remove the cloud objects before the layers go.
What dhctl does, and the departures: docs/decisions/0057-destroy-clears-the-cluster-first.md.

Rules:
- Each of :data:`~cloudloop.messages.layout.CLEAR_STEPS` is one idempotent, crash-safe activity:
  a delete step deletes what is there (absent is success), a wait step lists until nothing is
  left; a retried step starts over from the cluster's state.
- The kubeconfig is read only from under ``layouts.source_dir`` (``KubeconfigRefused`` otherwise,
  non-retryable); a broken one is named without its content (``KubeconfigInvalid``).
- ``verify-cluster`` refuses (``WrongCluster``, non-retryable) unless
  ``kube-system/d8-cluster-uuid`` names this layout's cluster UUID.
- A wait gives up after ``wait_s`` with ``ClusterResourcesRemain`` naming what is left (a
  PersistentVolume whose reclaim policy is not ``Delete`` named as such); a missing Cluster API
  is nothing to delete.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeats import heartbeating
from cloudloop import mounted
from cloudloop.errortext import yaml_problem
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import BodyT, Pod, Service
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import (
    CONFIG_MAPS,
    PDBS,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    SERVICES,
    STORAGE_CLASSES,
    Resource,
)
from cloudloop.messages.layout import ClearClusterInput, ClearClusterResult, LayoutActivity
from cloudloop.settings import LAYOUTS_MOUNT

HEARTBEAT_S = 2.0
#: How often a wait step lists again.
POLL_S = 1.0

CAPI_GROUP = "cluster.x-k8s.io"
UUID_CONFIG_MAP = ("kube-system", "d8-cluster-uuid")


def _kubeconfig_problem(exc: Exception) -> str:
    """Why a kubeconfig did not load, without its content (YAML errors quote lines; a
    kubeconfig holds tokens and keys)."""
    if isinstance(exc, yaml.YAMLError):
        return yaml_problem(exc)
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return f"not a usable kubeconfig ({type(exc).__name__})"


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def _items(kube: Kube, resource: Resource[BodyT]) -> list[BodyT]:
    return kube.list(resource).get("items") or []


def _delete_all(
    kube: Kube, resource: Resource[Any], objects: Sequence[Mapping[str, Any]]
) -> list[str]:
    deleted = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        if kube.delete(resource, str(meta.get("name")), meta.get("namespace")):
            deleted.append(_name(obj))
    return deleted


def _load_balancers(kube: Kube) -> list[Service]:
    return [
        s for s in _items(kube, SERVICES) if (s.get("spec") or {}).get("type") == "LoadBalancer"
    ]


def _uses_claim(pod: Pod) -> bool:
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return any(v.get("persistentVolumeClaim") for v in volumes)


def _capi(kube: Kube) -> tuple[Resource, Resource] | None:
    """MachineDeployments and Machines of the served Cluster API version, or None."""
    groups = kube.request("GET", "/apis").get("groups") or []
    group = next((g for g in groups if g.get("name") == CAPI_GROUP), None)
    version = str(((group or {}).get("preferredVersion") or {}).get("version") or "")
    if not version:
        return None
    return (
        Resource(CAPI_GROUP, version, "machinedeployments", "MachineDeployment"),
        Resource(CAPI_GROUP, version, "machines", "Machine"),
    )


class ClusterResourceActivities:
    """``layout.clear_cluster``: one step of destroy's first phase."""

    def __init__(
        self, kube_factory: Callable[[str], Kube] | None = None, source_dir: Path = LAYOUTS_MOUNT
    ) -> None:
        self._kube_factory = kube_factory or (lambda path: Kube(api_client(Path(path))))
        self._source_dir = source_dir

    @activity.defn(name=LayoutActivity.CLEAR_CLUSTER)
    def clear_cluster(self, input: ClearClusterInput) -> ClearClusterResult:
        progress: dict[str, Any] = {"step": input.step}
        with heartbeating(HEARTBEAT_S, details=lambda: dict(progress)):
            try:
                path = mounted.resolve_under(self._source_dir, input.kubeconfig)
            except mounted.Refused as exc:
                activity.logger.warning("kubeconfig refused: %s", exc)
                raise ApplicationError(
                    f"kubeconfig {exc}", type="KubeconfigRefused", non_retryable=True
                ) from None
            try:
                kube = self._kube_factory(str(path))
            except Exception as exc:  # a missing or broken kubeconfig: fix and run again
                raise ApplicationError(
                    f"kubeconfig {input.kubeconfig}: {_kubeconfig_problem(exc)}",
                    type="KubeconfigInvalid",
                    non_retryable=True,
                ) from None
            try:
                objects = self._run(kube, input, progress)
            except KubeError as exc:
                if exc.status in (401, 403):
                    raise ApplicationError(
                        f"{input.step}: the cluster refused: {exc}",
                        type="Forbidden",
                        non_retryable=True,
                    ) from None
                raise  # transport or server error: retried
            activity.logger.info("%s: %s", input.step, ", ".join(objects) or "nothing")
            return ClearClusterResult(step=input.step, objects=objects)

    def _run(self, kube: Kube, input: ClearClusterInput, progress: dict[str, Any]) -> list[str]:
        step = input.step
        if step == "verify-cluster":
            return self._verify(kube, input)
        if step == "delete-services":
            return _delete_all(kube, SERVICES, _load_balancers(kube))
        if step == "wait-services":
            return self._wait(
                input,
                progress,
                "LoadBalancer Services",
                lambda: [_name(s) for s in _load_balancers(kube)],
            )
        if step == "delete-volumes":
            deleted = _delete_all(kube, PDBS, _items(kube, PDBS))
            deleted += _delete_all(kube, STORAGE_CLASSES, _items(kube, STORAGE_CLASSES))
            deleted += _delete_all(
                kube, PERSISTENT_VOLUME_CLAIMS, _items(kube, PERSISTENT_VOLUME_CLAIMS)
            )
            deleted += _delete_all(kube, PODS, [p for p in _items(kube, PODS) if _uses_claim(p)])
            return deleted
        if step == "wait-volumes":
            return self._wait(input, progress, "volumes", lambda: self._volumes_left(kube))
        if step == "delete-machines":
            capi = _capi(kube)
            return [] if capi is None else _delete_all(kube, capi[0], _items(kube, capi[0]))
        if step == "wait-machines":
            capi = _capi(kube)
            if capi is None:
                return []
            machines = capi[1]
            return self._wait(
                input,
                progress,
                "Cluster API Machines",
                lambda: [_name(m) for m in _items(kube, machines)],
            )
        raise ApplicationError(f"unknown step {step!r}", type="LayoutFailed", non_retryable=True)

    @staticmethod
    def _verify(kube: Kube, input: ClearClusterInput) -> list[str]:
        namespace, name = UUID_CONFIG_MAP
        config_map = kube.get(CONFIG_MAPS, name, namespace)
        found = str(((config_map or {}).get("data") or {}).get("cluster-uuid") or "")
        if found != input.cluster.uuid:
            what = f"names cluster {found!r}" if config_map else "is missing"
            raise ApplicationError(
                f"the kubeconfig's cluster is not {input.cluster.prefix} ({input.cluster.uuid}): "
                f"ConfigMap {namespace}/{name} {what}; nothing deleted",
                type="WrongCluster",
                non_retryable=True,
            )
        return [f"{namespace}/{name}"]

    @staticmethod
    def _volumes_left(kube: Kube) -> list[str]:
        claims = [
            f"PVC {_name(c)}"
            for c in _items(kube, PERSISTENT_VOLUME_CLAIMS)
            if (c.get("status") or {}).get("phase") != "Pending"
        ]
        volumes = []
        for pv in _items(kube, PERSISTENT_VOLUMES):
            policy = (pv.get("spec") or {}).get("persistentVolumeReclaimPolicy")
            note = "" if policy in (None, "Delete") else f" (reclaim policy {policy}: set Delete)"
            volumes.append(f"PV {_name(pv)}{note}")
        return claims + volumes

    @staticmethod
    def _wait(
        input: ClearClusterInput,
        progress: dict[str, Any],
        what: str,
        left: Callable[[], list[str]],
    ) -> list[str]:
        deadline = time.monotonic() + input.wait_s
        seen: list[str] = []
        while True:
            remaining = left()
            seen = sorted(set(seen) | set(remaining))
            progress["left"] = remaining
            if not remaining:
                return seen
            if time.monotonic() >= deadline:
                raise ApplicationError(
                    f"{len(remaining)} {what} still in the cluster after {input.wait_s:.0f} s "
                    f"(their cloud objects are not deleted yet): {', '.join(remaining)}",
                    type="ClusterResourcesRemain",
                    non_retryable=True,
                )
            time.sleep(POLL_S)

    def all(self) -> list[object]:
        return [self.clear_cluster]
