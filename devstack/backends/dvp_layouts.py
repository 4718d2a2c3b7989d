"""What a layout left in the parent DVP cluster: the cluster's objects in its namespace (tests,
bench), and this process's count of the requests that change something.

Rules: read-only; an object counts when its name starts with the cluster's prefix (the
NetworkPolicy: ``isolated-<prefix>``), so a duplicate shows as two entries and a clean destroy as
none. Kinds: VirtualMachine, VirtualDisk, VirtualMachineBlockDeviceAttachment, the cloud-init
Secrets, NetworkPolicy.
"""

from __future__ import annotations

from prometheus_client import REGISTRY

from cloudloop.cloud.dvp import resources as r
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import Resource

NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
READ_ONLY = ("Get", "List")


def cluster_resources(kube: Kube, namespace: str, prefix: str) -> list[str]:
    """``<Kind>/<name>`` of every object of the cluster ``prefix`` in ``namespace``."""
    found: list[str] = []
    for resource in (
        r.VIRTUAL_MACHINES,
        r.VIRTUAL_DISKS,
        r.VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS,
        r.SECRETS,
        NETWORK_POLICIES,
    ):
        for obj in kube.list(resource, namespace).get("items") or []:
            name = str(obj["metadata"]["name"])
            if name.startswith(f"{prefix}-") or name == f"isolated-{prefix}":
                found.append(f"{resource.kind}/{name}")
    return sorted(found)


def dvp_requests() -> dict[str, float]:
    """``cloud_api_requests_total{provider="dvp"}`` by operation, as this process counted them."""
    counts: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name != "cloud_api_requests":
            continue
        for sample in metric.samples:
            if sample.name == "cloud_api_requests_total" and sample.labels["provider"] == "dvp":
                operation = sample.labels["operation"]
                counts[operation] = counts.get(operation, 0.0) + sample.value
    return counts


def mutating_since(before: dict[str, float]) -> dict[str, float]:
    """Requests since ``before`` (a :func:`dvp_requests`) that are not a Get or a List."""
    return {
        k: v - before.get(k, 0.0)
        for k, v in dvp_requests().items()
        if v > before.get(k, 0.0) and not k.startswith(READ_ONLY)
    }
