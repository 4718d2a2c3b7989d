"""The chart's rendered processes at work on DVP, zVirt, OpenStack and vSphere, RBAC audited.

As ``test_chart_live.py`` does for AWS: a release of each cloud's values file, pointed at that
cloud's emulator (the DVP parent cluster with its simulator, the oVirt Engine emulator, the
OpenStack emulator, vcsim with Deckhouse's zone tags), is applied without its Deployments; then
``cloudloop worker`` and ``cloudloop starter`` run with the rendered Deployments' args, env and
mounted files (the credentials Secret's files), each with a token of its own ServiceAccount.
The cloud's VMs registered as uninitialized Nodes get initialized, a CloudProbe answers, and
on the clouds with load balancers (DVP, OpenStack) a Service gets its ingress and is deleted
again (finalizer removed). Every request the two processes made is one the rendered rules allow
and the audited apiserver allowed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cloudloop.kube.conditions import get_condition
from cloudloop.kube.resources import CLOUD_PROBES, NODES, SERVICES
from devstack.process import free_port
from tests.helpers import eventually
from tests.install.chart import (
    Helm,
    PodProcess,
    Rules,
    documents,
    find,
    provider_values,
    running,
)
from tests.install.test_chart_live import (
    NAMESPACE,
    NAMESPACES,
    RELEASE,
    UNINITIALIZED,
    InstallStack,
    install,
)
from tests.loadbalancer.support import ingress, make_service

__all__ = ["install"]  # the audited control plane (a module-scoped fixture)

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]


@dataclass
class LiveCloud:
    """One cloud's release inputs and what it has to initialize."""

    #: ``--set`` values beside the provider's values file (its emulator's endpoint).
    sets: dict[str, str]
    #: ``--set-file`` credential files.
    files: dict[str, Path]
    #: The cloud's VMs, by the name their kubelet registers (the Node's name).
    nodes: list[str]
    #: The scheme of the providerIDs node sync writes.
    provider_id_prefix: str
    #: The cloud has Service load balancers.
    load_balancers: bool = False
    #: Extra ``--set`` values the test adds (timeouts).
    extra: dict[str, str] = field(default_factory=dict)


@contextmanager
def zvirt_cloud(folder: Path) -> Iterator[LiveCloud]:
    from devstack.backends.zvirt import ovirt_engine, seed_node_vms

    with ovirt_engine(folder / "ovirt", password="chart-zvirt-pw") as endpoint:
        assert endpoint.ca_file is not None
        nodes = [f"chart-zv-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
        seed_node_vms(endpoint, nodes)
        password = folder / "engine-password"
        password.write_text(endpoint.password)
        yield LiveCloud(
            sets={
                "cloud.settings.api_url": endpoint.api_url,
                "cloud.settings.username": endpoint.username,
                "cloud.settings.cluster_id": endpoint.cluster_id,
            },
            files={
                "cloud.credentials.files.password": password,
                "cloud.credentials.files.ca\\.crt": endpoint.ca_file,
            },
            nodes=nodes,
            provider_id_prefix="zvirt://",
        )


@contextmanager
def dvp_cloud(folder: Path) -> Iterator[LiveCloud]:
    from cloudloop.cloud.dvp import resources as dvp
    from devstack.backends.dvp import create_node_vms
    from devstack.dvp_simulator import DvpParent

    parent = DvpParent.start(folder / "parent")
    try:
        namespace = parent.new_namespace("chart")
        cluster_uuid = str(uuid.uuid4())
        nodes = [f"chart-dvp-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
        labels = {dvp.MANAGED_BY_LABEL: dvp.MANAGED_BY_VALUE, dvp.CLUSTER_UUID_LABEL: cluster_uuid}
        create_node_vms(parent, namespace, labels, nodes)
        yield LiveCloud(
            sets={
                "cloud.settings.namespace": namespace,
                "cloud.settings.cluster_uuid": cluster_uuid,
            },
            files={"cloud.credentials.files.kubeconfig": parent.kubeconfig},
            nodes=nodes,
            provider_id_prefix="dvp://",
            load_balancers=True,
        )
    finally:
        parent.stop()


@contextmanager
def openstack_cloud(folder: Path) -> Iterator[LiveCloud]:
    from devstack.backends.openstack import openstack_emulator
    from devstack.demos.openstack import cloud_conf
    from devstack.openstack_emulator import OpenStackEmulatorAdmin

    with openstack_emulator(folder / "openstack") as endpoint:
        prefix = f"chart-os-{uuid.uuid4().hex[:6]}"
        servers = OpenStackEmulatorAdmin(endpoint.admin_url).seed_servers(
            2, prefix=prefix, zones=["nova"]
        )
        conf = folder / "cloud.conf"
        conf.write_text(cloud_conf(endpoint))
        yield LiveCloud(
            sets={},
            files={"cloud.credentials.files.cloud\\.conf": conf},
            nodes=[s["name"] for s in servers],
            provider_id_prefix="openstack://",
            load_balancers=True,
        )


@contextmanager
def vsphere_cloud(folder: Path) -> Iterator[LiveCloud]:
    from devstack.backends.vsphere import vcsim_server
    from devstack.vcsim_inventory import NodeVm, ZoneLayout, seed

    with vcsim_server(folder / "vcsim") as endpoint:
        assert endpoint.ca_file is not None
        layout = ZoneLayout()
        names = [f"chart-vs-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
        clusters = sorted(layout.zones.values())
        vms = [NodeVm(n, f"10.66.7.{10 + i}", cluster=clusters[i]) for i, n in enumerate(names)]
        seed(endpoint, vms, layout)
        password = folder / "vcenter-password"
        password.write_text(endpoint.password)
        yield LiveCloud(
            sets={
                "cloud.settings.server": endpoint.server,
                "cloud.settings.username": endpoint.username,
                "cloud.settings.region": layout.region,
            },
            files={
                "cloud.credentials.files.password": password,
                "cloud.credentials.files.ca\\.crt": endpoint.ca_file,
            },
            nodes=names,
            provider_id_prefix="vsphere://",
        )


CLOUDS = {
    "dvp": dvp_cloud,
    "openstack": openstack_cloud,
    "vsphere": vsphere_cloud,
    "zvirt": zvirt_cloud,
}


def pod_process(
    install: InstallStack, docs: list[dict[str, Any]], folder: Path, component: str
) -> PodProcess:
    """``component``'s rendered Deployment as a process with its own ServiceAccount's token."""
    deployment = find(docs, "Deployment", f"-{component}")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    root = folder / component
    root.mkdir(exist_ok=True)
    return PodProcess(
        deployment,
        docs,
        root,
        install.token_kubeconfig(account, folder),
        overrides={"CLOUDLOOP_METRICS_PORT": str(free_port())},
    )


def initialized(install: InstallStack, names: list[str], prefix: str) -> bool:
    nodes = [install.kube.get(NODES, name) or {} for name in names]
    return all(
        n.get("spec", {}).get("providerID", "").startswith(prefix)
        and UNINITIALIZED not in [t["key"] for t in n["spec"].get("taints") or []]
        for n in nodes
    )


@pytest.mark.parametrize("provider", sorted(CLOUDS))
async def test_the_rendered_processes_run_on_the_cloud_with_the_rendered_rbac(
    install: InstallStack, helm: Helm, tmp_path: Path, provider: str
) -> None:
    cluster = f"live-{provider}-{uuid.uuid4().hex[:6]}"
    with CLOUDS[provider](tmp_path) as cloud:
        docs = documents(
            helm.template(
                [provider_values()[provider]],
                {
                    "clusterName": cluster,
                    "temporal.address": install.stack.temporal_address,
                    "logFormat": "text",
                    **cloud.sets,
                },
                files=cloud.files,
                namespace=NAMESPACE,
                release=RELEASE,
            ).stdout
        )
        applied = [
            d for d in docs if d["kind"] not in ("Deployment", "Job", "CustomResourceDefinition")
        ]
        result = install.apply(applied, "--server-side", "--force-conflicts")
        assert result.returncode == 0, result.stderr
        audited_from = install.audit_log.stat().st_size
        worker = pod_process(install, docs, tmp_path, "worker")
        starter = pod_process(install, docs, tmp_path, "starter")
        web = f"web-{uuid.uuid4().hex[:6]}"
        install.kube.create(NAMESPACES, {"metadata": {"name": web}})
        for name in cloud.nodes:
            install.kube.create(
                NODES,
                {
                    "metadata": {"name": name, "labels": {"cloudloop-install": cluster}},
                    "spec": {
                        "taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]
                    },
                },
            )
        try:
            with running(worker, starter):
                try:
                    await eventually(
                        lambda: initialized(install, cloud.nodes, cloud.provider_id_prefix),
                        timeout=120,
                        what="node init",
                    )
                    probe = {
                        "metadata": {"name": "cloud", "namespace": web},
                        "spec": {"provider": provider},
                    }
                    install.kube.create(CLOUD_PROBES, probe, web)
                    await eventually(
                        lambda: get_condition(
                            install.kube.get(CLOUD_PROBES, "cloud", web) or {}, "Ready"
                        ),
                        timeout=120,
                        what="CloudProbe Ready",
                    )
                    if cloud.load_balancers:
                        make_service(install.kube, web, "frontend")
                        await eventually(
                            lambda: ingress(install.kube, web, "frontend"),
                            timeout=240,
                            what="LB ingress",
                        )
                        install.kube.delete(SERVICES, "frontend", web)
                        await eventually(
                            lambda: install.kube.get(SERVICES, "frontend", web) is None,
                            timeout=240,
                            what="Service deleted (finalizer removed)",
                        )
                except AssertionError as exc:
                    raise AssertionError(
                        f"{exc}\n--- worker:\n{worker.tail()}\n--- starter:\n{starter.tail()}"
                    ) from None
        finally:
            for name in cloud.nodes:
                install.kube.delete(NODES, name)
            install.kube.delete(NAMESPACES, web)

    for component in ("worker", "starter"):
        account = find(docs, "ServiceAccount", f"-{component}")["metadata"]["name"]
        rules = Rules.bound_to(docs, NAMESPACE, account)
        made = install.requests_of(account, since=audited_from)
        refused = sorted({r for r, code in made if code == 403}, key=str)
        not_allowed = sorted({r for r, _ in made if not rules.allows(r)}, key=str)
        assert made, f"no request of {account} in the audit log"
        assert refused == [], f"{provider} {component}: the apiserver refused {refused}"
        assert not_allowed == [], f"{provider} {component}: rules do not allow {not_allowed}"
