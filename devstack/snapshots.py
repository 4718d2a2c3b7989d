"""VolumeSnapshots in the stack's Kubernetes: the snapshot CRDs and the real snapshot-controller.

Both come from kubernetes-csi/external-snapshotter at the version ``gotools`` builds: the
controller is ``cmd/snapshot-controller`` of its main module, the CRDs are read at run time from
the Go module cache (``client/config/crd`` of its ``client/v8`` module, downloaded when missing),
so nothing upstream is copied into the repository. Only the three ``snapshot.storage.k8s.io``
CRDs are installed; volume group snapshots are off (the driver has no GroupController service),
in the controller (``--feature-gates=CSIVolumeGroupSnapshot=false``) as in the csi-snapshotter
sidecar. The controller runs with the admin kubeconfig, leader election off (one of it), short
retry intervals, and serves metrics on a free port (its readiness check). Test stack and
benchmarks only: in a cluster the snapshot-controller and the CRDs are the cluster's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cloudloop.kube.api import Kube
from cloudloop.kube.resources import Resource
from devstack import gotools
from devstack.crds import apply_crds
from devstack.process import ManagedProcess, free_port, http_ok

CONTROLLER = "snapshot-controller"
_WRAPPER_MODULE = "external-snapshotter"
_CLIENT_MODULE = "github.com/kubernetes-csi/external-snapshotter/client/v8"
GROUP = "snapshot.storage.k8s.io"
#: The CRD files of ``client/config/crd`` the stack installs (no volume group snapshots).
CRD_FILES = (
    "snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
    "snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
    "snapshot.storage.k8s.io_volumesnapshots.yaml",
)
#: Volume group snapshots off: the driver has no GroupController service.
NO_GROUP_SNAPSHOTS = "--feature-gates=CSIVolumeGroupSnapshot=false"

VOLUME_SNAPSHOT_CLASSES = Resource(
    GROUP, "v1", "volumesnapshotclasses", "VolumeSnapshotClass", namespaced=False
)
VOLUME_SNAPSHOTS = Resource(GROUP, "v1", "volumesnapshots", "VolumeSnapshot")
VOLUME_SNAPSHOT_CONTENTS = Resource(
    GROUP, "v1", "volumesnapshotcontents", "VolumeSnapshotContent", namespaced=False
)
DEFAULT_SNAPSHOT_CLASS_ANNOTATION = "snapshot.storage.kubernetes.io/is-default-class"


def crd_paths() -> list[Path]:
    """The snapshot CRDs, from the client module of the version the tools are built at."""
    folder = gotools.module_source(_WRAPPER_MODULE, _CLIENT_MODULE) / "config" / "crd"
    return [folder / name for name in CRD_FILES]


def install_crds(kube: Kube) -> list[str]:
    """Create or update the three snapshot CRDs and wait until they are served."""
    return apply_crds(kube, crd_paths(), timeout_s=60)


def controller_process(kubeconfig: Path, log_dir: Path) -> ManagedProcess:
    """The snapshot-controller (not started); install the CRDs first, it checks them at start."""
    binary = gotools.ensure_built([CONTROLLER])[CONTROLLER]
    endpoint = f"127.0.0.1:{free_port()}"
    return ManagedProcess(
        CONTROLLER,
        [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            "--leader-election=false",
            f"--http-endpoint={endpoint}",
            "--retry-interval-start=500ms",
            "--retry-interval-max=5s",
            NO_GROUP_SNAPSHOTS,
            "--v=4",
        ],
        log_dir=log_dir,
        ready=lambda: http_ok(f"http://{endpoint}/metrics"),
    )


def snapshot_class(
    name: str, driver: str, *, default: bool = True, parameters: dict[str, str] | None = None
) -> dict[str, Any]:
    """A VolumeSnapshotClass of ``driver`` (deletionPolicy Delete), as the chart ships it."""
    body: dict[str, Any] = {
        "metadata": {
            "name": name,
            "annotations": {DEFAULT_SNAPSHOT_CLASS_ANNOTATION: "true" if default else "false"},
        },
        "driver": driver,
        "deletionPolicy": "Delete",
    }
    if parameters:
        body["parameters"] = dict(parameters)
    return body


def volume_snapshot(name: str, claim: str, snapshot_class_name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "volumeSnapshotClassName": snapshot_class_name,
            "source": {"persistentVolumeClaimName": claim},
        },
    }
