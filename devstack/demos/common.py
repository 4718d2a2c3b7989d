"""What every demo shares: the Kubernetes resources the demos create beyond the product's own,
and the objects a demo seeds the same way on every cloud (its kwok Nodes, its CloudProbe, its
node group rendered from an InstanceClass).

Rules: no cloud names here; a demo passes its cloud's kinds and values.
"""

from __future__ import annotations

from typing import Any

from cloudloop.cloud.capi import InfraKinds, NodeTemplates
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.resources import CLOUD_PROBES, NAMESPACES, NODE_GROUPS, NODES, Resource
from cloudloop.rules import machine as capi
from cloudloop.rules.node import UNINITIALIZED_TAINT
from devstack import machine_fixtures
from devstack.kube import KWOK_NODE_ANNOTATION

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
MACHINE_DEPLOYMENTS = capi.MACHINE_DEPLOYMENTS
#: The label every demo Node carries (``kubectl get nodes -l cloudloop.io/demo=true``).
DEMO_LABEL = "cloudloop.io/demo"


def create_demo_node(kube: Kube, name: str) -> None:
    """A kwok Node as kubelet on the VM registers it: named like the VM (its guest's host name),
    no providerID, tainted until the cloud controller initializes it."""
    kube.create(
        NODES,
        {
            "metadata": {
                "name": name,
                "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                "labels": {DEMO_LABEL: "true", "kubernetes.io/hostname": name},
            },
            "spec": {
                "taints": [{"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]
            },
        },
    )


def create_probe(kube: Kube, provider: str) -> None:
    """The CloudProbe ``default/<provider>`` (kept when a kept state already has it)."""
    try:
        kube.create(
            CLOUD_PROBES,
            {
                "metadata": {"name": provider, "namespace": "default"},
                "spec": {"provider": provider},
            },
            "default",
        )
    except KubeError as exc:
        if not exc.conflict:
            raise


def seed_node_group(
    kube: Kube,
    *,
    instance_class: dict[str, Any],
    kinds: InfraKinds,
    templates: NodeTemplates,
    namespace: str,
    size: int,
    zones: tuple[str, ...] = (),
    cluster: str = "demo",
) -> None:
    """A node group as a user makes one without Deckhouse: ``instance_class``, the Cluster
    ``cluster`` (with its InfraCluster), a bootstrap Secret, and a ``cloudloop.io`` NodeGroup of
    ``size`` machines per zone (``zones``; none: one default zone) naming the class. The starter
    renders its templates and MachineDeployments (change ``maxPerZone``, then scale them)."""
    group_name = str(instance_class["metadata"]["name"])
    if kube.get(NAMESPACES, namespace) is None:
        kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    kube.create(templates.instance_class, instance_class)
    machine_fixtures.create_cluster(kube, namespace, cluster, kinds)
    bootstrap = f"{group_name}-bootstrap"
    machine_fixtures.create_bootstrap_secret(
        kube, namespace, bootstrap, b"#cloud-config\nruncmd: [echo demo-worker]\n"
    )
    zoned: dict[str, Any] = {"zones": list(zones)} if zones else {}
    group = machine_fixtures.node_group_body(
        group_name,
        cluster=cluster,
        class_kind=templates.instance_class.kind,
        class_name=group_name,
        bootstrap_secret=bootstrap,
        **zoned,
        minPerZone=size,
        maxPerZone=size,
        # A rollout replaces one machine at a time, never more than the group size.
        maxSurgePerZone=0,
        maxUnavailablePerZone=1,
    )
    kube.create(NODE_GROUPS, group, namespace)
