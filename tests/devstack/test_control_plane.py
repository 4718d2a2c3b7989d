"""The stack's Kubernetes parts behave like a cluster: kwok kubelets, scheduling, PDB status,
kubectl with the written kubeconfig, a second control plane, cached Go builds."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Node
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import NODES, Resource
from devstack import gotools
from devstack.kube import KWOK_NODE_ANNOTATION, KubeOptions
from devstack.local import LocalStack, StackOptions
from tests.helpers import eventually

pytestmark = pytest.mark.stack

PODS = Resource("", "v1", "pods", "Pod")
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")


def kwok_node(kube: Kube) -> str:
    name = f"kwok-{uuid.uuid4().hex[:8]}"
    kube.create(
        NODES,
        {
            "metadata": {
                "name": name,
                "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                "labels": {"kubernetes.io/hostname": name},
            }
        },
    )
    return name


def is_ready(obj: Node | None) -> bool:
    conditions = (obj or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def test_kubectl_get_nodes_with_written_kubeconfig(stack: LocalStack, kube: Kube) -> None:
    name = kwok_node(kube)
    await eventually(lambda: is_ready(kube.get(NODES, name)), what="kwok node Ready")
    out = subprocess.run(
        [
            str(gotools.binary_path("kubectl")),
            "--kubeconfig",
            str(stack.kubeconfig),
            "get",
            "nodes",
            "-o",
            "name",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"node/{name}" in out.stdout.split()
    kube.delete(NODES, name)


async def test_scheduler_and_kwok_run_pods(kube: Kube, namespace: str) -> None:
    node = kwok_node(kube)
    kube.create(
        PODS,
        {
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "tolerations": [{"operator": "Exists"}],
                "nodeSelector": {"kubernetes.io/hostname": node},
            },
        },
        namespace,
    )

    def running() -> dict[str, Any] | None:
        pod = kube.get(PODS, "web", namespace) or {}
        return pod if pod.get("status", {}).get("phase") == "Running" else None

    pod = await eventually(running, what="pod scheduled and running on the kwok node")
    assert pod["spec"]["nodeName"] == node  # placed by kube-scheduler
    kube.delete(NODES, node)


async def test_controller_manager_computes_pdb_status(kube: Kube, namespace: str) -> None:
    kube.create(
        PDBS,
        {
            "metadata": {"name": "pdb", "namespace": namespace},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "x"}}},
        },
        namespace,
    )

    def observed() -> dict[str, Any] | None:
        pdb = kube.get(PDBS, "pdb", namespace) or {}
        return pdb if pdb.get("status", {}).get("observedGeneration") == 1 else None

    pdb = await eventually(observed, what="PDB status from the disruption controller")
    assert "disruptionsAllowed" in pdb["status"]


def test_second_control_plane_runs_beside_the_first(stack: LocalStack, tmp_path: Path) -> None:
    started = time.monotonic()
    with LocalStack(
        StackOptions(
            state_dir=tmp_path, temporal=False, moto=False, kube=(KubeOptions(name="parent"),)
        )
    ) as parent:
        assert parent.kubeconfig != stack.kubeconfig
        other = Kube(api_client(parent.kubeconfig))
        other.create(NODES, {"metadata": {"name": "only-in-parent"}})
        assert Kube(api_client(stack.kubeconfig)).get(NODES, "only-in-parent") is None
        assert other.request("GET", "/version")["gitVersion"] == gotools.K8S_VERSION
    assert time.monotonic() - started < 60  # cached binaries: no rebuild


def test_cached_tools_are_not_rebuilt() -> None:
    before = {name: gotools.binary_path(name).stat().st_mtime for name in gotools.DEFAULT_TOOLS}
    gotools.ensure_built(gotools.DEFAULT_TOOLS)
    after = {name: gotools.binary_path(name).stat().st_mtime for name in gotools.DEFAULT_TOOLS}
    assert before == after
