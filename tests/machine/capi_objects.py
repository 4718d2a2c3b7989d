"""Cluster API objects for stack tests: a control plane running the real CAPI core manager, and
the Cluster, Machine, bootstrap Secret and infrastructure objects the contract is about."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import CapiCluster, CapiMachine
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import SECRETS, Resource
from cloudloop.rules import machine as capi
from devstack.crds import CRD_DIR, apply_crds
from devstack.kube import CAPI, KubeOptions
from devstack.local import LocalStack, StackOptions

#: Machine phases that mean "the infrastructure provider delivered a machine".
PROVISIONED_PHASES = ("Provisioned", "Running")
# The Machine controller requeues after 30 s when its cache does not hold the infra machine yet
# (a write it has not seen): a wait for what it does with the infra machine outlasts one requeue.
MANAGER_REQUEUE_WAIT_S = 75.0


def capi_stack(state_dir: Path, *more_components: str) -> LocalStack:
    """Temporal + moto + a control plane with the Cluster API core manager and
    ``more_components`` (not started)."""
    components = (CAPI, *more_components)
    return LocalStack(
        StackOptions(state_dir=state_dir, kube=(KubeOptions(name="capi", components=components),))
    )


@contextlib.contextmanager
def running_capi_stack(state_dir: Path, *more_components: str) -> Iterator[LocalStack]:
    """:func:`capi_stack` started, with cloudloop's CRDs applied; stopped on exit."""
    local = capi_stack(state_dir, *more_components)
    local.start()
    try:
        apply_crds(Kube(api_client(local.kubeconfig)))
        yield local
    finally:
        local.stop()


@dataclass(frozen=True)
class InfraKind:
    """One infrastructure kind as the contract sees it: its resource and contract version."""

    resource: Resource
    #: ``v1beta2`` (``status.initialization.provisioned``) or ``v1beta1`` (``status.ready``).
    contract: str
    crd: dict[str, Any]

    @property
    def group(self) -> str:
        return self.resource.group

    @property
    def kind(self) -> str:
        return self.resource.kind

    def ref(self, name: str) -> dict[str, str]:
        """A v1beta2 ``ContractVersionedObjectReference`` to an object of this kind."""
        return {"apiGroup": self.group, "kind": self.kind, "name": name}

    def provisioned_status(self) -> dict[str, Any]:
        if self.contract == "v1beta2":
            return {"initialization": {"provisioned": True}}
        return {"ready": True}


def infra_kind_from_crd(crd: dict[str, Any]) -> InfraKind:
    """The served version named by the CRD's highest contract label (CAPI picks the last one)."""
    labels = crd["metadata"].get("labels") or {}
    contracts = sorted(k.split("/", 1)[1] for k in labels if k.startswith("cluster.x-k8s.io/v1"))
    if not contracts:
        raise ValueError(f"CRD {crd['metadata']['name']} has no cluster.x-k8s.io contract label")
    contract = contracts[-1]
    version = labels[f"cluster.x-k8s.io/{contract}"].split("_")[-1]
    names = crd["spec"]["names"]
    resource = Resource(crd["spec"]["group"], version, names["plural"], names["kind"])
    return InfraKind(resource, contract, crd)


def infra_kind(resource_kind: str) -> InfraKind:
    """The contract's view of one of our InfraMachine/InfraCluster kinds, from its CRD."""
    crd = project_crd(resource_kind)
    assert crd is not None, f"no {resource_kind} CRD in deploy/crds"
    return infra_kind_from_crd(crd)


def project_crd(kind: str) -> dict[str, Any] | None:
    """The CRD of ``kind`` shipped in deploy/crds, if one is there."""
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            is_crd = bool(doc) and doc.get("kind") == "CustomResourceDefinition"
            if is_crd and doc["spec"]["names"]["kind"] == kind:
                return dict(doc)
    return None


def bootstrap_secret(kube: Kube, namespace: str, name: str, cloud_init: str) -> None:
    """The bootstrap data a bootstrap provider would write: key ``value`` holds cloud-init."""
    kube.create(
        SECRETS,
        {
            "metadata": {"name": name, "namespace": namespace},
            "type": "cluster.x-k8s.io/secret",
            "data": {
                "value": base64.b64encode(cloud_init.encode()).decode(),
                "format": base64.b64encode(b"cloud-config").decode(),
            },
        },
        namespace,
    )


def workload_kubeconfig_secret(kube: Kube, namespace: str, cluster: str, kubeconfig: Path) -> None:
    """``<cluster>-kubeconfig``: how CAPI reaches a workload cluster (labelled, as CAPI caches
    only Secrets with the cluster-name label)."""
    kube.create(
        SECRETS,
        {
            "metadata": {
                "name": f"{cluster}-kubeconfig",
                "namespace": namespace,
                "labels": {capi.CLUSTER_NAME_LABEL: cluster},
            },
            "type": "cluster.x-k8s.io/secret",
            "data": {"value": base64.b64encode(kubeconfig.read_bytes()).decode()},
        },
        namespace,
    )


def cluster(
    kube: Kube, namespace: str, name: str, infra: InfraKind, infra_spec: dict[str, Any]
) -> CapiCluster:
    """An infrastructure cluster object and the CAPI Cluster that references it."""
    kube.create(
        infra.resource,
        {"metadata": {"name": name, "namespace": namespace}, "spec": infra_spec},
        namespace,
    )
    return kube.create(
        capi.CLUSTERS,
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"infrastructureRef": infra.ref(name)},
        },
        namespace,
    )


def machine(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    cluster_name: str,
    infra: InfraKind,
    infra_spec: dict[str, Any],
    data_secret: str,
) -> CapiMachine:
    """An infrastructure machine object and the CAPI Machine that references it.

    Neither gets the cluster-name label: CAPI's defaulting webhook labels the Machine, and the
    Machine controller labels and owns the infra machine.
    """
    kube.create(
        infra.resource,
        {"metadata": {"name": name, "namespace": namespace}, "spec": infra_spec},
        namespace,
    )
    return kube.create(
        capi.MACHINES,
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "clusterName": cluster_name,
                "bootstrap": {"dataSecretName": data_secret},
                "infrastructureRef": infra.ref(name),
            },
        },
        namespace,
    )


def machine_status(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """What CAPI writes of a Machine's status (untyped: the product reads none of it)."""
    return dict(((kube.get(capi.MACHINES.untyped, name, namespace) or {}).get("status")) or {})


def provisioned_machine(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The CAPI Machine once its phase is Provisioned or Running, else ``None``."""
    obj = kube.get(capi.MACHINES.untyped, name, namespace)
    if obj and (obj.get("status") or {}).get("phase") in PROVISIONED_PHASES:
        return obj
    return None


@contextlib.contextmanager
def explained(kube: Kube, namespace: str, stack: LocalStack, plane: str = "capi") -> Iterator[None]:
    """On a failed assertion, add the namespace's CAPI objects and the manager's log tail."""
    try:
        yield
    except AssertionError as exc:
        exc.add_note(diagnostics(kube, namespace, stack, plane))
        raise


def diagnostics(kube: Kube, namespace: str, stack: LocalStack, plane: str = "capi") -> str:
    lines: list[str] = []
    for resource in (capi.CLUSTERS, capi.MACHINES):
        try:
            items = kube.list(resource, namespace).get("items", [])
        except KubeError as err:
            lines.append(f"{resource.kind}s: {err}")
            continue
        for obj in items:
            summary = {k: obj.get(k) for k in ("metadata", "spec", "status")}
            summary["metadata"] = {
                k: obj["metadata"].get(k)
                for k in ("name", "finalizers", "deletionTimestamp", "labels")
            }
            lines.append(f"{resource.kind}: {json.dumps(summary, default=str)}")
    manager = stack.clusters[plane].process(CAPI)
    lines.append(f"Cluster API manager log ({manager.log_path}), last lines:")
    lines.append(manager.tail(40))
    return "\n".join(lines)
