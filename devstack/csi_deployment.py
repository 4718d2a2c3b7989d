"""The CSI driver inside the stack's Kubernetes: the ``cloudloop csi-controller`` process and the
real sidecars, a kwok Node with its CSINode, and the PVC and Pod bodies a user would write.

:class:`CsiDeployment` runs what the chart's controller Deployment runs (the controller command
and the three sidecars, plus csi-snapshotter with ``snapshots``, on one socket); the worker runs
beside it (a test, the benchmark). Each user gets a driver name, a Lease and a discovery
namespace of its own, and removes its StorageClasses, CSIDriver and CSINode when it ends. Test
stack and benchmarks only.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudloop import codec
from cloudloop.cloud.registry import Settings, provider_for
from cloudloop.csi.objects import CSI_DRIVERS, DRIVER_LABEL
from cloudloop.csi.spec import ZONE_KEY
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.resources import (
    NODES,
    PODS,
    SECRETS,
    STORAGE_CLASSES,
    Resource,
)
from cloudloop.rules.discovery import DISCOVERY_KEY, DISCOVERY_SECRET
from devstack.backends import section_env
from devstack.csi_sidecars import sidecar_processes
from devstack.kube import KWOK_NODE_ANNOTATION
from devstack.process import ManagedProcess, stop_all

CSI_NODES = Resource("storage.k8s.io", "v1", "csinodes", "CSINode", namespaced=False)
ATTACH_DETACH_ANNOTATION = "volumes.kubernetes.io/controller-managed-attach-detach"


def controller_env(settings: Settings, kubeconfig: Path, endpoint: str) -> dict[str, str]:
    """The environment of ``cloudloop csi-controller`` for ``settings`` (what a chart sets)."""
    csi = settings.csi
    env = {
        **os.environ,
        "CLOUDLOOP_PROVIDER": settings.provider,
        "CLOUDLOOP_CLUSTER_NAME": settings.cluster_name,
        "CLOUDLOOP_KUBECONFIG": str(kubeconfig),
        "CLOUDLOOP_TEMPORAL__ADDRESS": settings.temporal.address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": settings.temporal.task_queue,
        **codec.process_env(settings.temporal.codec),
        "CLOUDLOOP_CSI__ENDPOINT": endpoint,
        "CLOUDLOOP_CSI__DRIVER_NAME": csi.driver_name,
        "CLOUDLOOP_CSI__STORAGE_CLASSES": "true" if csi.storage_classes else "false",
        "CLOUDLOOP_CSI__STORAGE_CLASS_INTERVAL_S": "2",
        "CLOUDLOOP_DISCOVERY__NAMESPACE": settings.discovery.namespace,
        "CLOUDLOOP_LEADER_ELECTION__NAME": settings.leader_election.name,
        "CLOUDLOOP_LEADER_ELECTION__NAMESPACE": settings.leader_election.namespace,
    }
    return {**env, **provider_env(settings)}


def provider_env(settings: Settings) -> dict[str, str]:
    """``CLOUDLOOP_<NAME>__<FIELD>`` for every set field of the provider's section (nested
    sections, e.g. OpenStack's ``connection``, as ``..._<SECTION>__<FIELD>``)."""
    record = provider_for(settings)
    return section_env(record.name, record.section(settings))


@dataclass
class CsiDeployment:
    """The controller command and the sidecars on one socket (the chart's Deployment)."""

    settings: Settings
    kubeconfig: Path
    log_dir: Path
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="csi-", dir="/tmp")))
    controller: ManagedProcess | None = None
    sidecars: list[ManagedProcess] = field(default_factory=list)
    #: Run csi-snapshotter too (the chart does for a cloud whose driver has snapshots).
    snapshots: bool = False

    @property
    def socket(self) -> Path:
        return self.folder / "csi.sock"

    def start_controller(self) -> ManagedProcess:
        self.socket.unlink(missing_ok=True)
        self.controller = ManagedProcess(
            f"csi-controller-{uuid.uuid4().hex[:6]}",
            [sys.executable, "-m", "cloudloop.cli", "csi-controller"],
            log_dir=self.log_dir,
            env=controller_env(self.settings, self.kubeconfig, f"unix://{self.socket}"),
            ready=self.socket.exists,
        )
        self.controller.start()
        self.controller.wait_ready(60)
        return self.controller

    def start(self) -> CsiDeployment:
        self.start_controller()
        self.sidecars = sidecar_processes(
            self.socket, self.kubeconfig, self.log_dir, snapshots=self.snapshots
        )
        for sidecar in self.sidecars:
            sidecar.start()
        for sidecar in self.sidecars:
            sidecar.wait_ready(60)
        return self

    def stop(self) -> None:
        stop_all([*self.sidecars, *([self.controller] if self.controller else [])])
        self.socket.unlink(missing_ok=True)
        with_suppressed(self.folder.rmdir)


def with_suppressed(call: Any) -> None:
    with suppress(OSError):
        call()


def write_discovery(kube: Kube, namespace: str, document: dict[str, Any]) -> None:
    value = base64.b64encode(json.dumps(document).encode()).decode()
    body = {
        "metadata": {"name": DISCOVERY_SECRET, "namespace": namespace},
        "data": {DISCOVERY_KEY: value},
    }
    try:
        kube.create(SECRETS, body, namespace)
    except KubeError as exc:
        if not exc.conflict:
            raise
        kube.patch(SECRETS, DISCOVERY_SECRET, {"data": body["data"]}, namespace)


def kwok_node(
    kube: Kube,
    name: str,
    *,
    provider_id: str,
    zone: str,
    driver: str,
    node_id: str,
    topology_key: str = ZONE_KEY,
) -> None:
    """A kwok Node the attach/detach controller manages, with the CSINode the registrar
    would have written (driver, node ID, topology key) and the label it would have set."""
    labels = {"kubernetes.io/hostname": name, "cloudloop.io/csi-test": "true"}
    if zone:
        labels[ZONE_KEY] = zone
        labels[topology_key] = zone
    kube.create(
        NODES,
        {
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {KWOK_NODE_ANNOTATION: "fake", ATTACH_DETACH_ANNOTATION: "true"},
            },
            "spec": {"providerID": provider_id},
        },
    )
    csi_node(
        kube, name, driver=driver, node_id=node_id, topology_keys=[topology_key] if zone else []
    )


def csi_node(kube: Kube, name: str, *, driver: str, node_id: str, topology_keys: list[str]) -> None:
    """The CSINode node-driver-registrar writes for ``driver`` on Node ``name`` (kwok runs no
    node plugin): its node ID (the instance) and topology keys."""
    kube.create(
        CSI_NODES,
        {
            "metadata": {"name": name},
            "spec": {
                "drivers": [
                    {
                        "name": driver,
                        "nodeID": node_id,
                        "topologyKeys": topology_keys,
                        "allocatable": {"count": 25},
                    }
                ]
            },
        },
    )


def remove_node(kube: Kube, name: str) -> None:
    for resource in (CSI_NODES, NODES):
        with suppress(KubeError):
            kube.delete(resource, name)


def remove_driver_objects(kube: Kube, driver: str) -> None:
    for sc in kube.list(STORAGE_CLASSES, labelSelector=f"{DRIVER_LABEL}={driver}")["items"]:
        kube.delete(STORAGE_CLASSES, sc["metadata"]["name"])
    kube.delete(CSI_DRIVERS, driver)


def pvc(name: str, storage_class: str, size: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
        },
    }


def pod(name: str, claim: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


@contextmanager
def objects_removed(kube: Kube, driver: str, node: str) -> Iterator[None]:
    try:
        yield
    finally:
        remove_node(kube, node)
        remove_driver_objects(kube, driver)


def delete_pod(kube: Kube, namespace: str, name: str) -> None:
    kube.request("DELETE", PODS.path(namespace, name), body={"gracePeriodSeconds": 0})
