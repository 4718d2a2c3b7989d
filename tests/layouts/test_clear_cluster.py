"""``layout.clear_cluster`` step by step against a faked API server (no stack, milliseconds): what
each step deletes, what a wait names when it gives up, the identity check, Cluster API found
through discovery or absent. The stack test (``test_destroy_cluster.py``) runs it for real."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.layout_cluster import ClusterResourceActivities
from cloudloop.kube.api import KubeError
from cloudloop.kube.resources import (
    CONFIG_MAPS,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    SERVICES,
    STORAGE_CLASSES,
    Resource,
)
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.messages.layout import ClearClusterInput, ClearClusterResult

CLUSTER = ClusterIdentity(prefix="demo", uuid="6f1c0c52-0000-4000-8000-000000000001")


class FakeKube:
    """Objects by API path prefix; ``delete`` removes at once (no finalizers)."""

    def __init__(self, groups: list[dict[str, Any]] | None = None) -> None:
        self.objects: dict[str, list[dict[str, Any]]] = {}
        self.groups = groups or []
        self.deleted: list[str] = []

    def add(
        self, resource: Resource[Any], name: str, namespace: str | None = None, **extra: Any
    ) -> None:
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        self.objects.setdefault(resource.path(), []).append({"metadata": meta, **extra})

    def list(
        self, resource: Resource[Any], namespace: str | None = None, **_: Any
    ) -> dict[str, Any]:
        return {"items": list(self.objects.get(resource.path(), []))}

    def get(self, resource: Resource[Any], name: str, namespace: str | None = None) -> Any:
        for obj in self.objects.get(resource.path(), []):
            if obj["metadata"]["name"] == name and obj["metadata"].get("namespace") == namespace:
                return obj
        return None

    def delete(self, resource: Resource[Any], name: str, namespace: str | None = None) -> bool:
        found = self.get(resource, name, namespace)
        if found is None:
            return False
        self.objects[resource.path()].remove(found)
        self.deleted.append(f"{resource.kind} {name}")
        return True

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert (method, path) == ("GET", "/apis")
        return {"groups": self.groups}


def step(kube: FakeKube, name: str, wait_s: float = 0.0) -> ClearClusterResult:
    activities = ClusterResourceActivities(kube_factory=lambda _: kube)  # type: ignore[arg-type,return-value]
    result: ClearClusterResult = ActivityEnvironment().run(
        activities.clear_cluster,
        ClearClusterInput(kubeconfig="k", cluster=CLUSTER, step=name, wait_s=wait_s),
    )
    return result


def failure(kube: FakeKube, name: str) -> ApplicationError:
    with pytest.raises(ApplicationError) as raised:
        step(kube, name)
    return raised.value


def test_verify_refuses_another_cluster_and_a_cluster_without_its_uuid() -> None:
    kube = FakeKube()
    assert failure(kube, "verify-cluster").type == "WrongCluster"
    kube.add(CONFIG_MAPS, "d8-cluster-uuid", "kube-system", data={"cluster-uuid": "x"})
    refused = failure(kube, "verify-cluster")
    assert refused.type == "WrongCluster" and "names cluster 'x'" in refused.message
    assert refused.non_retryable
    kube.objects.clear()
    kube.add(
        CONFIG_MAPS,
        "d8-cluster-uuid",
        "kube-system",
        data={"cluster-uuid": CLUSTER.uuid},
    )
    assert step(kube, "verify-cluster").objects == ["kube-system/d8-cluster-uuid"]


def test_services_only_load_balancers_and_the_wait_names_what_is_left() -> None:
    kube = FakeKube()
    kube.add(SERVICES, "web", "a", spec={"type": "LoadBalancer"})
    kube.add(SERVICES, "api", "a", spec={"type": "ClusterIP"})
    left = failure(kube, "wait-services")
    assert left.type == "ClusterResourcesRemain" and "a/web" in left.message
    assert step(kube, "delete-services").objects == ["a/web"]
    assert step(kube, "delete-services").objects == []  # idempotent
    assert kube.get(SERVICES, "api", "a") is not None
    assert step(kube, "wait-services").objects == []


def test_volumes_claims_pods_and_a_retained_volume_named() -> None:
    kube = FakeKube()
    kube.add(PERSISTENT_VOLUME_CLAIMS, "data", "a", status={"phase": "Bound"})
    kube.add(PERSISTENT_VOLUME_CLAIMS, "never", "a", status={"phase": "Pending"})
    kube.add(STORAGE_CLASSES, "fast")
    kube.add(
        PODS,
        "db",
        "a",
        spec={"volumes": [{"persistentVolumeClaim": {"claimName": "data"}}]},
    )
    kube.add(PODS, "web", "a", spec={"volumes": [{"emptyDir": {}}]})
    kube.add(PERSISTENT_VOLUMES, "pv-1", spec={"persistentVolumeReclaimPolicy": "Retain"})
    left = failure(kube, "wait-volumes")
    assert "PVC a/data" in left.message and "PVC a/never" not in left.message  # Pending: skipped
    assert "PV pv-1 (reclaim policy Retain: set Delete)" in left.message
    deleted = step(kube, "delete-volumes").objects
    assert deleted == ["fast", "a/data", "a/never", "a/db"]
    assert kube.get(PODS, "web", "a") is not None


def test_machines_through_the_served_cluster_api_version_or_nothing() -> None:
    assert step(FakeKube(), "delete-machines").objects == []
    assert step(FakeKube(), "wait-machines").objects == []
    kube = FakeKube(
        groups=[{"name": "cluster.x-k8s.io", "preferredVersion": {"version": "v1beta2"}}]
    )
    deployments = Resource("cluster.x-k8s.io", "v1beta2", "machinedeployments", "MachineDeployment")
    machines = Resource("cluster.x-k8s.io", "v1beta2", "machines", "Machine")
    kube.add(deployments, "workers", "d8-cloud-instance-manager")
    kube.add(machines, "workers-abc", "d8-cloud-instance-manager")
    assert step(kube, "delete-machines").objects == ["d8-cloud-instance-manager/workers"]
    left = failure(kube, "wait-machines")
    assert "d8-cloud-instance-manager/workers-abc" in left.message
    kube.objects[machines.path()].clear()
    assert step(kube, "wait-machines").objects == []


def test_a_refusal_of_the_api_is_not_retried() -> None:
    class Forbidden(FakeKube):
        def list(self, resource: Resource[Any], namespace: str | None = None, **_: Any) -> Any:
            raise KubeError(403, "Forbidden", {"message": "no"})

    refused = failure(Forbidden(), "delete-services")
    assert refused.type == "Forbidden" and refused.non_retryable
