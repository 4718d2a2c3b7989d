"""zVirt and DVP ``Standard`` layout figures: apply, re-apply and destroy of each example (one
master with its data disk, one static node) on the oVirt Engine emulator and on a parent DVP
cluster with the simulator in its own process.

- ``<cloud>_layout_apply_wall_s``: ``Layout`` apply started → result, through the workflow, its
  module children and one activity per resource (worker in this process);
- ``<cloud>_layout_apply_cloud_calls``: requests of that apply (``cloud_api_requests_total`` of
  the cloud, as this process counted them);
- ``<cloud>_layout_converge_pass_cloud_calls``: requests of one plan-only ``LayoutConverge``
  pass with nothing changed, after the re-apply;
- ``layout_reapply_mutating_calls``: this module's contribution, over both clouds: requests of a
  second apply that change something (zVirt: every engine request but a GET, counted by the
  emulator; DVP: every request but a Get/List, counted here) (goal 0);
- ``layout_destroy_leftover_resources``: this module's contribution: after destroy, the
  cluster's VMs, NICs and disks left in the engine, and its objects left in the parent's
  namespace (goal 0).
"""

from __future__ import annotations

import base64
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

from bench.context import BenchContext
from bench.converge import layout_worker, plan_only_pass
from cloudloop.cloud.dvp.settings import DvpSettings
from cloudloop.cloud.registry import Settings
from cloudloop.cloud.zvirt.settings import ZvirtSettings
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import LayoutInput
from devstack.backends.dvp_layouts import cluster_resources as dvp_resources
from devstack.backends.zvirt import QUICK_TIMINGS, ovirt_engine
from devstack.backends.zvirt_layouts import cluster_resources as zvirt_resources
from devstack.backends.zvirt_layouts import mutating_calls as zvirt_mutating
from devstack.dvp_simulator import CLUSTER_IMAGE, VM_CLASS, DvpParent
from devstack.ovirt_emulator import OvirtEmulatorAdmin, OvirtEmulatorEndpoint
from devstack.ovirt_emulator.engine import seed_id
from starters.layout import run_layout

EXAMPLES = Path(__file__).resolve().parents[1] / "deploy" / "layouts" / "examples"
READ_ONLY = ("Get", "List")


def _requests(provider: str) -> dict[str, float]:
    """``cloud_api_requests_total`` of ``provider`` by operation, as this process counted them."""
    counts: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name != "cloud_api_requests":
            continue
        for sample in metric.samples:
            if sample.name == "cloud_api_requests_total" and sample.labels["provider"] == provider:
                operation = sample.labels["operation"]
                counts[operation] = counts.get(operation, 0.0) + sample.value
    return counts


def _since(provider: str, before: dict[str, float]) -> dict[str, float]:
    return {
        k: v - before.get(k, 0.0) for k, v in _requests(provider).items() if v > before.get(k, 0)
    }


def _zvirt_config(folder: Path, endpoint: OvirtEmulatorEndpoint, prefix: str) -> Path:
    docs = list(yaml.safe_load_all((EXAMPLES / "zvirt-standard.yaml").read_text()))
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            doc["cloud"]["prefix"] = prefix
            continue
        assert endpoint.ca_file is not None
        doc["clusterID"] = endpoint.cluster_id
        doc["provider"] = {
            "server": endpoint.api_url,
            "username": endpoint.username,
            "password": endpoint.password,
            "caBundle": endpoint.ca_file.read_text(),
        }
        master = doc["masterNodeGroup"]["instanceClass"]
        master.update(
            numCPUs=2,
            memory=2048,
            template=endpoint.template,
            vnicProfileID=endpoint.vnic_profile_id,
            storageDomainID=seed_id("storagedomain", "nfs-shared"),
            rootDiskSizeGb=20,
        )
        doc["nodeGroups"] = [
            {
                "name": "worker",
                "replicas": 1,
                "instanceClass": {
                    "numCPUs": 1,
                    "memory": 1024,
                    "template": endpoint.template,
                    "vnicProfileID": endpoint.vnic_profile_id,
                },
            }
        ]
    path = folder / "zvirt.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


async def _cycle(
    ctx: BenchContext,
    settings: Settings,
    provider: str,
    path: Path,
    prefix: str,
    reapplied: Callable[[dict[str, float]], float],
    before_reapply: Callable[[], None] = lambda: None,
) -> tuple[float, float, float, float]:
    """(apply wall s, apply requests, mutating requests of the re-apply as ``reapplied`` counts
    them from this process's counts of the re-apply, requests of a plan-only converge pass
    after it); then destroy."""
    queue = f"bench-layout-{provider}-{uuid.uuid4().hex[:6]}"
    cluster = ClusterIdentity(prefix=prefix, uuid=str(uuid.uuid4()))

    source = ConfigSource(file=str(path))

    def input(action: str) -> LayoutInput:
        return LayoutInput(action=action, provider=provider, source=source, cluster=cluster)

    async with layout_worker(ctx.client, queue, settings, path.parent):
        before = _requests(provider)
        started = time.monotonic()
        await run_layout(ctx.client, queue, input("apply"), poll_s=0.5)
        wall = time.monotonic() - started
        calls = sum(_since(provider, before).values())
        before_reapply()
        before = _requests(provider)
        await run_layout(ctx.client, queue, input("apply"), poll_s=0.5)
        mutating = reapplied(_since(provider, before))
        before = _requests(provider)
        await plan_only_pass(ctx.client, queue, provider, source, cluster)
        converge = sum(_since(provider, before).values())
        await run_layout(ctx.client, queue, input("destroy"), poll_s=0.5)
    return wall, calls, mutating, converge


async def _zvirt(ctx: BenchContext) -> tuple[dict[str, float], float, float]:
    """The engine counts the re-apply's mutating requests itself (every method but GET)."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-layout-zvirt-") as folder,
        ovirt_engine(Path(folder), password="bench") as endpoint,
    ):
        prefix = f"bz{uuid.uuid4().hex[:6]}"
        path = _zvirt_config(Path(folder), endpoint, prefix)
        settings = ctx.settings.model_copy(update={"zvirt": ZvirtSettings(**QUICK_TIMINGS)})
        admin = OvirtEmulatorAdmin(endpoint.admin_url)
        wall, calls, mutating, converge = await _cycle(
            ctx,
            settings,
            "zvirt",
            path,
            prefix,
            lambda _: float(sum(zvirt_mutating(endpoint.admin_url).values())),
            admin.clear_requests,
        )
        left = float(len(zvirt_resources(endpoint.admin_url, prefix)))
    figures = {
        "zvirt_layout_apply_wall_s": wall,
        "zvirt_layout_apply_cloud_calls": calls,
        "zvirt_layout_converge_pass_cloud_calls": converge,
    }
    return figures, mutating, left


def _dvp_config(folder: Path, parent: DvpParent, namespace: str, prefix: str) -> Path:
    docs = list(yaml.safe_load_all((EXAMPLES / "dvp-standard.yaml").read_text()))
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            doc["cloud"]["prefix"] = prefix
            continue
        doc["provider"] = {
            "kubeconfigDataBase64": base64.b64encode(parent.kubeconfig.read_bytes()).decode(),
            "namespace": namespace,
        }
        master = doc["masterNodeGroup"]["instanceClass"]
        master["virtualMachine"]["virtualMachineClassName"] = VM_CLASS
        master["rootDisk"]["image"] = {"kind": "ClusterVirtualImage", "name": CLUSTER_IMAGE}
        doc["nodeGroups"] = [
            {
                "name": "worker",
                "replicas": 1,
                "instanceClass": {
                    "virtualMachine": {
                        "cpu": {"cores": 1},
                        "memory": {"size": "1Gi"},
                        "virtualMachineClassName": VM_CLASS,
                    },
                    "rootDisk": {
                        "size": "10Gi",
                        "image": {"kind": "ClusterVirtualImage", "name": CLUSTER_IMAGE},
                    },
                },
            }
        ]
    path = folder / "dvp.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


async def _dvp(ctx: BenchContext) -> tuple[dict[str, float], float, float]:
    """This process counts the re-apply's requests (its worker runs here): every one that is
    not a Get or a List changes something."""
    with tempfile.TemporaryDirectory(prefix="bench-layout-dvp-") as folder:
        parent = DvpParent.start(Path(folder), apart=True)  # the emulated cloud apart
        try:
            namespace = parent.new_namespace("bench-layout")
            prefix = f"bd{uuid.uuid4().hex[:6]}"
            path = _dvp_config(Path(folder), parent, namespace, prefix)
            settings = ctx.settings.model_copy(update={"dvp": DvpSettings(timeout_s=10)})
            wall, calls, mutating, converge = await _cycle(
                ctx,
                settings,
                "dvp",
                path,
                prefix,
                lambda since: float(
                    sum(v for k, v in since.items() if not k.startswith(READ_ONLY))
                ),
            )
            left = float(len(dvp_resources(parent.kube, namespace, prefix)))
        finally:
            parent.stop()
    figures = {
        "dvp_layout_apply_wall_s": wall,
        "dvp_layout_apply_cloud_calls": calls,
        "dvp_layout_converge_pass_cloud_calls": converge,
    }
    return figures, mutating, left


async def layout_virt_figures(ctx: BenchContext) -> dict[str, float]:
    zvirt, zvirt_mutating_calls, zvirt_left = await _zvirt(ctx)
    dvp, dvp_mutating_calls, dvp_left = await _dvp(ctx)
    return {
        **zvirt,
        **dvp,
        "layout_reapply_mutating_calls": zvirt_mutating_calls + dvp_mutating_calls,
        "layout_destroy_leftover_resources": zvirt_left + dvp_left,
    }
