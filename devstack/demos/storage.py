"""Storage in a ``cloudloop dev`` demo: the CSI controller with its real sidecars, as the chart
runs them, and a Deployment whose pod mounts a PVC of the cloud's default StorageClass.

:class:`DemoStorage` starts :class:`~devstack.csi_deployment.CsiDeployment` (``cloudloop
csi-controller`` behind external-provisioner, -attacher, -resizer and the livenessprobe, on the
stack's kube-apiserver; the sidecars are built on first use) with the chart's driver name; the
controller writes the ``CSIDriver`` and the StorageClasses from discovery (the starter's
discoverer writes the document), the default one marked. The demo's claim names that default.

kwok Nodes run no kubelet, so no node plugin and no node-driver-registrar: the demo writes what
the registrar would (the Node's CSINode with the instance as node ID and the topology key, the
topology label) and marks the Node attach/detach controller-managed, as a kubelet does. Then the
scheduler places the pod, the provisioner creates the volume (a ``CreateVolume`` workflow) and
binds the claim, and the attach/detach controller's VolumeAttachment is attached by the attacher
(an ``AttachVolume`` workflow). Nothing is mounted: kwok reports the pod Running without one.

Identity: one claim and one Deployment named :data:`CLAIM` in ``default``; the controller takes
the ``<starter Lease>-csi`` Lease, as in a cluster. The CSI processes stop with the demo (Ctrl-C),
before the stack; the volume stays in the demo's moto, which ends with the stack. Departure from
the chart: no csi-snapshotter (the demo has no VolumeSnapshot CRDs and takes no snapshot).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import NODES, PERSISTENT_VOLUME_CLAIMS
from devstack.csi_deployment import (
    ATTACH_DETACH_ANNOTATION,
    CsiDeployment,
    csi_node,
    pvc,
)
from devstack.demos.common import DEPLOYMENTS

#: The demo's claim and the Deployment that mounts it.
CLAIM = "demo-data"
SIZE = "4Gi"


def default_storage_class(driver: CloudDriver) -> str:
    """The StorageClass ``cloudloop csi-controller`` marks default for ``driver``'s cloud: the
    driver's own pick for the discovery document its discoverer part returns."""
    from cloudloop.rules.discovery import discovery_document

    volumes, discovery = driver.volumes, driver.discovery
    if volumes is None or discovery is None:
        raise RuntimeError(f"{driver.provider} has no volumes or discovery")
    classes = volumes.storage_classes(discovery_document(None, discovery.discovery_data()))
    if not classes:
        raise RuntimeError(f"{driver.provider}: discovery offers no StorageClass")
    return next((c.name for c in classes if c.default), classes[0].name)


def registered_node(
    kube: Kube, node: str, *, driver: str, node_id: str, topology: dict[str, str]
) -> None:
    """What kubelet and node-driver-registrar would do for ``driver`` on a kwok Node: the
    CSINode, the topology labels and the controller-managed attach/detach annotation."""
    kube.patch(
        NODES,
        node,
        {
            "metadata": {
                "labels": topology,
                "annotations": {ATTACH_DETACH_ANNOTATION: "true"},
            }
        },
    )
    csi_node(kube, node, driver=driver, node_id=node_id, topology_keys=sorted(topology))


def claim_deployment(node_selector: dict[str, str]) -> dict[str, object]:
    """One pod mounting :data:`CLAIM` at ``/data``, on the Nodes ``node_selector`` picks (those
    with a CSINode)."""
    return {
        "metadata": {"name": CLAIM, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": CLAIM}},
            "template": {
                "metadata": {"labels": {"app": CLAIM}},
                "spec": {
                    "nodeSelector": node_selector,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.k8s.io/pause:3.10",
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        }
                    ],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": CLAIM}}],
                },
            },
        },
    }


@dataclass
class DemoStorage:
    """The CSI deployment of a demo, and its claim."""

    settings: Settings
    kubeconfig: Path
    log_dir: Path
    deployment: CsiDeployment | None = None

    def start(self, kube: Kube, storage_class: str, node_selector: dict[str, str]) -> None:
        """Start the controller and sidecars, then create the claim and its Deployment."""
        self.deployment = CsiDeployment(self.settings, self.kubeconfig, self.log_dir)
        self.deployment.start()
        kube.create(PERSISTENT_VOLUME_CLAIMS, pvc(CLAIM, storage_class, SIZE), "default")
        kube.create(DEPLOYMENTS, claim_deployment(node_selector), "default")

    def stop(self) -> None:
        if self.deployment is not None:
            self.deployment.stop()
            self.deployment = None
