"""Cluster API objects as CAPI core would make them, for stacks that do not run its manager.

Without the Cluster API manager nobody sets owners, labels and status: these helpers create the
Cluster, the Machine and the infrastructure objects already wired the way CAPI core wires them
(owner references, ``cluster.x-k8s.io/cluster-name``, ``spec.infrastructureRef``, the Cluster's
``status.initialization.infrastructureProvisioned``), and install minimal v1beta2 Cluster and
Machine CRDs when the real ones are missing. Test stack and benchmarks only.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import CapiCluster, InfraObject
from cloudloop.kube.resources import SECRETS
from cloudloop.rules import machine as capi
from devstack.crds import CRDS, apply_crds

MINIMAL_CAPI_CRDS = Path(__file__).parent / "capi-minimal-crds.yaml"
CAPI_API_VERSION = f"{capi.CAPI_GROUP}/{capi.MACHINES.version}"


def ensure_capi_crds(kube: Kube) -> bool:
    """Install the minimal Cluster and Machine CRDs unless CAPI's own are there; True if done."""
    names = (f"{r.plural}.{r.group}" for r in (capi.CLUSTERS, capi.MACHINES))
    if all(kube.get(CRDS, name) is not None for name in names):
        return False
    apply_crds(kube, [MINIMAL_CAPI_CRDS])
    return True


def dvp_machine_spec(**overrides: Any) -> dict[str, Any]:
    """A DeckhouseMachine spec the stack's parent cluster can run (see ``dvp_simulator``)."""
    spec: dict[str, Any] = {
        "vmClassName": "generic",
        "cpu": {"cores": 2, "cpuFraction": "50%"},
        "memory": "4Gi",
        "rootDiskSize": "20Gi",
        "rootDiskStorageClass": "linstor-thin-r1",
        "bootDiskImageRef": {"kind": "ClusterVirtualImage", "name": "ubuntu-24-04"},
    }
    spec.update(overrides)
    return spec


def _owner(obj: Mapping[str, Any], *, controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def create_cluster(
    kube: Kube,
    namespace: str,
    name: str,
    kinds: capi.InfraKinds,
    *,
    infrastructure_ready: bool = True,
    paused: bool = False,
) -> CapiCluster:
    """The Cluster and its InfraCluster (owned by it, as the Cluster controller does)."""
    spec: dict[str, Any] = {
        "infrastructureRef": {
            "apiGroup": kinds.cluster.group,
            "kind": kinds.cluster.kind,
            "name": name,
        }
    }
    if paused:
        spec["paused"] = True
    cluster = kube.create(
        capi.CLUSTERS, {"metadata": {"name": name, "namespace": namespace}, "spec": spec}, namespace
    )
    kube.create(
        kinds.cluster,
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {capi.CLUSTER_NAME_LABEL: name},
                "ownerReferences": [_owner(cluster)],
            },
            "spec": {},
        },
        namespace,
    )
    if infrastructure_ready:
        set_infrastructure_ready(kube, namespace, name)
    return cluster


def set_infrastructure_ready(kube: Kube, namespace: str, name: str) -> None:
    """What the Cluster controller writes once the InfraCluster is provisioned."""
    kube.patch(
        capi.CLUSTERS,
        name,
        {"status": {"initialization": {"infrastructureProvisioned": True}}},
        namespace,
        subresource="status",
    )


def node_group_body(
    name: str,
    *,
    cluster: str,
    class_kind: str,
    class_name: str,
    bootstrap_secret: str,
    **instances: Any,
) -> dict[str, Any]:
    """A ``cloudloop.io/v1alpha1`` NodeGroup naming the InstanceClass ``class_name`` and the
    bootstrap Secret; ``instances`` are more ``cloudInstances`` fields (``zones``, ...)."""
    return {
        "metadata": {"name": name},
        "spec": {
            "clusterName": cluster,
            "cloudInstances": {
                "classReference": {"kind": class_kind, "name": class_name},
                **instances,
            },
            "bootstrap": {"dataSecretName": bootstrap_secret},
        },
    }


def create_bootstrap_secret(kube: Kube, namespace: str, name: str, cloud_init: bytes) -> None:
    """The bootstrap data a bootstrap provider writes: key ``value`` holds the cloud-init."""
    kube.create(
        SECRETS,
        {
            "metadata": {"name": name, "namespace": namespace},
            "type": "cluster.x-k8s.io/secret",
            "data": {
                capi.BOOTSTRAP_DATA_KEY: base64.b64encode(cloud_init).decode(),
                "format": base64.b64encode(b"cloud-config").decode(),
            },
        },
        namespace,
    )


def create_machine(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    cluster: str,
    kinds: capi.InfraKinds,
    spec: dict[str, Any],
    bootstrap_secret: str | None,
    annotations: dict[str, str] | None = None,
    control_plane: bool = False,
) -> InfraObject:
    """The Machine and its InfraMachine, owned and labelled as the Machine controller does.

    ``bootstrap_secret=None`` leaves the Machine waiting for its bootstrap provider.
    """
    labels = {capi.CLUSTER_NAME_LABEL: cluster}
    if control_plane:
        labels[capi.CONTROL_PLANE_LABEL] = ""
    bootstrap: dict[str, Any] = (
        {"dataSecretName": bootstrap_secret}
        if bootstrap_secret
        else {
            "configRef": {
                "apiGroup": "bootstrap.cluster.x-k8s.io",
                "kind": "KubeadmConfig",
                "name": name,
            }
        }
    )
    machine = kube.create(
        capi.MACHINES,
        {
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "clusterName": cluster,
                "bootstrap": bootstrap,
                "infrastructureRef": {
                    "apiGroup": kinds.machine.group,
                    "kind": kinds.machine.kind,
                    "name": name,
                },
            },
        },
        namespace,
    )
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {capi.CLUSTER_NAME_LABEL: cluster},
        "ownerReferences": [_owner(machine)],
    }
    if annotations:
        meta["annotations"] = annotations
    return kube.create(kinds.machine, {"metadata": meta, "spec": spec}, namespace)


def set_bootstrap_secret(kube: Kube, namespace: str, machine: str, secret: str) -> None:
    """What CAPI writes once the bootstrap provider made the data Secret."""
    kube.patch(
        capi.MACHINES,
        machine,
        {"spec": {"bootstrap": {"dataSecretName": secret, "configRef": None}}},
        namespace,
    )
