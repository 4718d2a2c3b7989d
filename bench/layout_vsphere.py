"""vSphere layout figures: apply, re-apply and destroy of ``Standard`` on vcsim
(``python -m bench layouts-vsphere``).

The ``vsphere-standard`` example made for vcsim (:func:`devstack.backends.vsphere_layouts.
layout_config`: 2 zones, the folder, a nested resource pool per zone, 1 master with its data
disk, 1 static node), the region and zone tags seeded, a guest agent reporting the VMs' IPs:

- ``vsphere_layout_apply_wall_s``: ``Layout`` apply started → result, through the module
  children and one activity per resource (worker in the bench process);
- ``vsphere_layout_apply_cloud_calls``: vSphere requests of that apply
  (``cloud_api_requests_total{provider="vsphere"}``: SOAP and tagging);
- ``vsphere_layout_converge_pass_cloud_calls``: vSphere requests of one plan-only
  ``LayoutConverge`` pass with nothing changed, after the re-apply;
- ``layout_reapply_mutating_calls_vsphere``: requests of a second apply whose operation changes
  vCenter (:data:`~cloudloop.cloud.vsphere.layout_resources.MUTATING`) plus the tasks vcsim ran
  meanwhile (its task list; goal 0);
- ``layout_destroy_leftover_resources_vsphere``: after destroy, the cluster's VMs, pools, folder
  and data disks still in vcsim (goal 0).
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

from prometheus_client import REGISTRY

from bench.context import BenchContext
from bench.converge import layout_worker, plan_only_pass
from cloudloop.cloud.vsphere.layout_resources import MUTATING
from cloudloop.cloud.vsphere.settings import VsphereSettings
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import LayoutInput
from devstack.backends.vsphere import QUICK_TIMINGS, vcsim_server
from devstack.backends.vsphere_layouts import (
    TaskLog,
    cluster_resources,
    layout_config,
    seed_layout_tags,
)
from devstack.vcsim_guest import GuestAgent
from starters.layout import run_layout


def _vsphere_requests() -> dict[str, float]:
    counts: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name != "cloud_api_requests":
            continue
        for sample in metric.samples:
            if sample.name == "cloud_api_requests_total" and sample.labels["provider"] == "vsphere":
                operation = sample.labels["operation"]
                counts[operation] = counts.get(operation, 0.0) + sample.value
    return counts


def _since(before: dict[str, float]) -> dict[str, float]:
    return {
        k: v - before.get(k, 0.0) for k, v in _vsphere_requests().items() if v > before.get(k, 0)
    }


async def vsphere_layout_figures(ctx: BenchContext) -> dict[str, float]:
    queue = f"bench-vs-layout-{uuid.uuid4().hex[:6]}"
    prefix = f"bv{uuid.uuid4().hex[:6]}"
    cluster = ClusterIdentity(prefix=prefix, uuid=str(uuid.uuid4()))
    settings = ctx.settings.model_copy(update={"vsphere": VsphereSettings(**QUICK_TIMINGS)})
    with (
        tempfile.TemporaryDirectory(prefix="bench-vs-layout-") as folder,
        vcsim_server(Path(folder) / "vcsim") as endpoint,
    ):
        seed_layout_tags(endpoint)
        source = ConfigSource(file=str(layout_config(Path(folder), endpoint, prefix)))

        def input(action: str) -> LayoutInput:
            return LayoutInput(action=action, provider="vsphere", source=source, cluster=cluster)

        worker = layout_worker(ctx.client, queue, settings, Path(folder))
        with GuestAgent(endpoint):
            async with worker:
                before = _vsphere_requests()
                started = time.monotonic()
                await run_layout(ctx.client, queue, input("apply"), poll_s=0.5)
                wall = time.monotonic() - started
                apply_calls = sum(_since(before).values())
                tasks = TaskLog(endpoint)
                tasks.mark()
                before = _vsphere_requests()
                await run_layout(ctx.client, queue, input("apply"), poll_s=0.5)
                mutating = sum(v for k, v in _since(before).items() if k in MUTATING)
                mutating += len(tasks.since())
                before = _vsphere_requests()
                await plan_only_pass(ctx.client, queue, "vsphere", source, cluster)
                converge_calls = sum(_since(before).values())
                await run_layout(ctx.client, queue, input("destroy"), poll_s=0.5)
        left = len(cluster_resources(endpoint, prefix, cluster.uuid))
    return {
        "vsphere_layout_apply_wall_s": wall,
        "vsphere_layout_apply_cloud_calls": apply_calls,
        "vsphere_layout_converge_pass_cloud_calls": converge_calls,
        "layout_reapply_mutating_calls_vsphere": mutating,
        "layout_destroy_leftover_resources_vsphere": float(left),
    }
