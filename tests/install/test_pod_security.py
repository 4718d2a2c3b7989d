"""The chart's pods against the real kube-apiserver's PodSecurity admission.

A namespace labelled ``pod-security.kubernetes.io/enforce=restricted`` receives, as Pods (server
side, dry-run: admission runs, nothing is stored), the pod template of every workload the chart
renders for every provider: every pod but the node agents is accepted. The node agents are
refused there and in a ``baseline`` namespace, and accepted in a ``privileged`` one: the CSI
node plugin mounts the kubelet's directories and ``/dev`` with bidirectional propagation
(privileged, hostPath), the IMDS agent reaches the instance metadata service through the host's
network (hostNetwork). The chart is installed into a namespace that admits them (Deckhouse's
``d8-*`` module namespaces and ``kube-system`` are privileged); the test proves what the rest
would pass under ``restricted``. The worker and starter on the host network (the vsphere CPI's
layout) are refused under ``restricted`` too (deploy/SECURITY.md).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import Resource
from devstack import gotools
from devstack.local import LocalStack, StackOptions
from tests.install.chart import Helm, provider_values, render

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
LEVELS = ("restricted", "baseline", "privileged")
NODE_AGENTS = {"csi-node", "nth-imds"}
PROVIDER_NAMES = sorted(provider_values())


@dataclass
class PodSecurityStack:
    stack: LocalStack
    kube: Kube
    kubectl: Path

    def namespace(self, level: str) -> str:
        return f"pss-{level}"

    def admit(self, pod: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        """Create ``pod`` server-side with dry-run (admission runs, nothing is stored)."""
        return subprocess.run(
            [
                str(self.kubectl),
                "--kubeconfig",
                str(self.stack.kubeconfig),
                "create",
                "--dry-run=server",
                "-o",
                "name",
                "-f",
                "-",
            ],
            input=yaml.safe_dump(pod),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


@pytest.fixture(scope="module")
def pss(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodSecurityStack]:
    stack = LocalStack(
        StackOptions(state_dir=tmp_path_factory.mktemp("pss-stack"), temporal=False, moto=False)
    )
    stack.start()
    try:
        kube = Kube(api_client(stack.kubeconfig))
        for level in LEVELS:
            kube.create(
                NAMESPACES,
                {
                    "metadata": {
                        "name": f"pss-{level}",
                        "labels": {
                            "pod-security.kubernetes.io/enforce": level,
                            "pod-security.kubernetes.io/enforce-version": "latest",
                        },
                    }
                },
            )
        kubectl = gotools.ensure_built(["kubectl"])["kubectl"]
        yield PodSecurityStack(stack, kube, kubectl)
    finally:
        stack.stop()


def pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """component -> a Pod made of its rendered workload's template, as its controller makes it."""
    found = {}
    for doc in docs:
        if doc["kind"] not in ("Deployment", "DaemonSet", "Job"):
            continue
        template = doc["spec"]["template"]
        component = template["metadata"]["labels"]["app.kubernetes.io/component"]
        found[component] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{doc['metadata']['name']}-pss",
                "namespace": doc["metadata"]["namespace"],
                "labels": template["metadata"]["labels"],
            },
            "spec": template["spec"],
        }
    return found


def verdicts(pss: PodSecurityStack, docs: list[dict[str, Any]]) -> dict[str, str]:
    """component -> "" (admitted) or the apiserver's refusal."""
    found = {}
    for component, pod in pods(docs).items():
        result = pss.admit(pod)
        found[component] = "" if result.returncode == 0 else result.stderr.strip()
    return found


@pytest.mark.parametrize("provider", PROVIDER_NAMES, ids=PROVIDER_NAMES)
def test_every_pod_but_the_node_agents_is_admitted_as_restricted(
    pss: PodSecurityStack, helm: Helm, provider: str
) -> None:
    # the converge install Job too: on with a configuration key named
    converge = {
        "layouts.converge.enabled": "true",
        "layouts.existingSecret": "cluster-layouts",
        "layouts.converge.install.configKey": "cluster.yaml",
    }
    docs = render(helm, provider, converge, namespace=pss.namespace("restricted"))

    found = verdicts(pss, docs)

    assert {"worker", "starter", "csi-controller", "temporal-setup"} <= set(found)
    assert "layout-converge-install" in found
    assert {c: v for c, v in found.items() if c not in NODE_AGENTS} == {
        c: "" for c in found if c not in NODE_AGENTS
    }
    for agent in set(found) & NODE_AGENTS:
        assert 'violates PodSecurity "restricted:latest"' in found[agent], found[agent]


@pytest.mark.parametrize(
    "level, admitted", [("restricted", False), ("baseline", False), ("privileged", True)]
)
def test_the_node_agents_need_a_privileged_namespace(
    pss: PodSecurityStack, helm: Helm, level: str, admitted: bool
) -> None:
    docs = render(helm, "aws", namespace=pss.namespace(level))
    found = {c: v for c, v in verdicts(pss, docs).items() if c in NODE_AGENTS}

    assert set(found) == NODE_AGENTS
    if admitted:
        assert found == {c: "" for c in NODE_AGENTS}
        return
    # What each needs of the node, in the apiserver's words.
    assert "privileged" in found["csi-node"] and "hostPath" in found["csi-node"], found
    assert "host namespaces" in found["nth-imds"], found


def test_the_host_network_layout_is_refused_as_restricted(
    pss: PodSecurityStack, helm: Helm
) -> None:
    sets = {"worker.kind": "DaemonSet", "starter.kind": "DaemonSet", "hostNetwork": "true"}
    docs = render(helm, "vsphere", sets, namespace=pss.namespace("restricted"))

    found = verdicts(pss, docs)

    for component in ("worker", "starter"):
        assert "host namespaces (hostNetwork=true)" in found[component], found[component]
    assert found["csi-controller"] == ""
