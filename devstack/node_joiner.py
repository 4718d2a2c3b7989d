"""The kubelets of the dev stack: every Cluster API Machine's VM joins the cluster as a kwok Node.

On a real cloud a machine's VM boots its bootstrap data and its kubelet registers a Node; with
``--cloud-provider=external`` the Node carries the ``node.cloudprovider.kubernetes.io/
uninitialized`` taint until the cloud node controller (node sync) initializes it. No VM of an
emulator boots, so :class:`NodeJoiner` plays that kubelet: once a Machine has the providerID the
cloud reported for its VM (``spec.providerID``, copied by Cluster API from the infrastructure
machine), a Node named after the Machine (the hostname its bootstrap data sets, as Cluster API
providers do) is registered with that providerID, the kubelet's labels and the taint, and kwok
keeps it ``Ready`` with heartbeats. Cluster API then finds the Node by providerID (through the
``<cluster>-kubeconfig`` Secret, :func:`publish_workload_kubeconfig`) and the Machine runs.

When the VM goes (the Machine is gone: Cluster API removes it once its infrastructure machine,
and so its VM, is deleted) the kubelet stops: the Node leaves kwok and its ``Ready`` condition
turns ``Unknown``, as the node lifecycle controller writes once heartbeats stop; the cloud node
lifecycle then deletes it, since the cloud says its instance no longer exists.

Rules:
- A Node is registered only for a Machine with a providerID that is not being deleted, once
  (an existing Node of that name is left as it is).
- Only Nodes this joiner registered (its :data:`JOINED_BY` label) are ever stopped; it never
  deletes a Node.
- A joiner that starts late stops the Nodes of Machines that went while it was away.
- Devstack only: the product never registers Nodes.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.informer import Informer, WatchEvent
from cloudloop.kube.resources import NODES, SECRETS
from cloudloop.rules import machine as capi
from cloudloop.rules.node import UNINITIALIZED_TAINT
from devstack.kube import KWOK_NODE_ANNOTATION

log = logging.getLogger(__name__)

#: The label on every Node a joiner registered: the joiner's name.
JOINED_BY = "devstack.cloudloop.io/joined-by"
#: The annotation naming the Machine (``<namespace>/<name>``) a joined Node is the kubelet of.
MACHINE_ANNOTATION = "devstack.cloudloop.io/machine"
#: Reads of a stopped Node until kwok's last heartbeat is seen overwritten.
STOP_CHECKS = 5


def node_for(machine: Mapping[str, Any], joiner: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The Node a kubelet on ``machine``'s VM registers (kwok's to keep Ready)."""
    meta = machine["metadata"]
    name = str(meta["name"])
    return {
        "metadata": {
            "name": name,
            "annotations": {
                KWOK_NODE_ANNOTATION: "fake",
                MACHINE_ANNOTATION: f"{meta['namespace']}/{name}",
            },
            "labels": {
                **labels,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                JOINED_BY: joiner,
            },
        },
        "spec": {
            "providerID": machine["spec"]["providerID"],
            "taints": [{"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}],
        },
    }


def joinable(machine: Mapping[str, Any]) -> bool:
    """Its VM exists (the cloud reported a providerID) and the Machine is not going."""
    return bool((machine.get("spec") or {}).get("providerID")) and not machine["metadata"].get(
        "deletionTimestamp"
    )


class NodeJoiner:
    """Registers a kwok Node for each Machine's VM and stops it when the Machine is gone."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str | None = None,
        name: str = "devstack",
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """``namespace``: the Machines' (default: every namespace); ``name``: the joiner's, on
        its Nodes; ``labels``: more labels for every Node (a node selector of the test's)."""
        self.kube = kube
        self.name = name
        self.labels = dict(labels or {})
        self.informer: Informer[Any] = Informer(kube, capi.MACHINES.untyped, namespace=namespace)
        self.joined: set[str] = set()  # Node names registered or found registered
        self.stopped: set[str] = set()

    def stop(self) -> None:
        self.informer.stop()

    async def run(self) -> None:
        """Follow the Machines until :meth:`stop`; stop the Nodes of Machines gone meanwhile
        once the first listing is in."""
        swept = False
        async for event in self.informer.events():
            await asyncio.to_thread(self.handle, event)
            if not swept and self.informer.synced.is_set():
                swept = True
                await asyncio.to_thread(self.sweep)

    def handle(self, event: WatchEvent[Any]) -> None:
        machine = event.object
        name = str(machine["metadata"]["name"])
        try:
            if event.type == "DELETED":
                self.stop_kubelet(name)
            elif joinable(machine) and name not in self.joined:
                self.register(machine)
        except KubeError as exc:  # the next event of the Machine (or the sweep) tries again
            log.warning("node joiner: machine %s: %s", name, exc)

    def register(self, machine: Mapping[str, Any]) -> None:
        name = str(machine["metadata"]["name"])
        try:
            self.kube.create(NODES, node_for(machine, self.name, self.labels))
            log.info("node joiner: %s joined (%s)", name, machine["spec"]["providerID"])
        except KubeError as exc:
            if not exc.conflict:
                raise
        self.joined.add(name)

    def stop_kubelet(self, name: str) -> None:
        """The VM is gone: kwok lets the Node go and its Ready condition turns Unknown."""
        node = self.kube.get(NODES, name)
        if node is None or node["metadata"].get("labels", {}).get(JOINED_BY) != self.name:
            return
        self.kube.patch(NODES, name, {"metadata": {"annotations": {KWOK_NODE_ANNOTATION: None}}})
        unknown = {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "Unknown",
                        "reason": "NodeStatusUnknown",
                        "message": "Kubelet stopped posting node status.",
                    }
                ]
            }
        }
        for _ in range(STOP_CHECKS):  # a heartbeat kwok had in flight may land after ours
            node = self.kube.patch(
                NODES, name, unknown, subresource="status", patch_type="strategic"
            )
            time.sleep(0.2)
            node = self.kube.get(NODES, name) or node
            ready = [
                c for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"
            ]
            if ready and ready[0]["status"] == "Unknown":
                break
        self.joined.discard(name)
        self.stopped.add(name)
        log.info("node joiner: %s's VM is gone, its kubelet stopped", name)

    def sweep(self) -> None:
        """Stop the Nodes of this joiner whose Machine is no longer there."""
        machines = {
            f"{m['metadata']['namespace']}/{m['metadata']['name']}"
            for m in self.informer.store.values()
        }
        nodes = self.kube.list(NODES, labelSelector=f"{JOINED_BY}={self.name}").get("items", [])
        scope = self.informer.namespace
        for node in nodes:
            annotations = node["metadata"].get("annotations", {})
            machine = str(annotations.get(MACHINE_ANNOTATION, ""))
            if scope is not None and not machine.startswith(f"{scope}/"):
                continue
            if machine not in machines and KWOK_NODE_ANNOTATION in annotations:
                try:
                    self.stop_kubelet(node["metadata"]["name"])
                except KubeError as exc:
                    log.warning("node joiner: %s: %s", node["metadata"]["name"], exc)


def publish_workload_kubeconfig(kube: Kube, namespace: str, cluster: str, kubeconfig: Path) -> None:
    """``<cluster>-kubeconfig``: how Cluster API reaches the workload cluster, here the same
    API server (labelled, as Cluster API caches only Secrets with the cluster-name label); an
    existing one is kept."""
    try:
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
    except KubeError as exc:
        if not exc.conflict:
            raise
