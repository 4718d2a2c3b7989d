"""OpenStack Cluster API machines against the OpenStack API emulator (its own process).

- ``openstack_machine_provision_median_s``: median over ``SAMPLES`` OpenStackMachines (Machine
  and bootstrap Secret already there; a 1 GiB root volume, one port, the server) of object
  created → ``status.ready`` seen, through informer → starter → Temporal → activities (driver
  create, observe, status report).
- ``openstack_machine_direct_median_s``: the same object, the product's kube writes and the same
  SDK calls made directly (:func:`bench.machine._direct`: finalizer, a "creating" condition,
  ``create_machine``, ``get_machine`` on the same poll schedule, providerID and instanceID,
  status, the ``Provisioned`` Event). Samples alternate between the two paths.
- ``openstack_machine_provision_overhead_ratio``: the first over the second (goal ≤ 1.3).
- ``openstack_nodegroup_scale_0_to_10_wall_s``: a MachineDeployment rendered from an
  OpenStackInstanceClass (``render_node_group``) with 0 replicas, scaled to 10 → all 10
  Machines ``Running`` with their Nodes ``Ready`` (the dev stack's kubelet); the real Cluster
  API manager on its own control plane, our starter and worker in this process. Report only.

The emulator's delays are :data:`devstack.backends.openstack.QUICK` (server BUILD 0.2 s, volume
creating 0.1 s).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from bench.context import BenchContext
from bench.machine import NAMESPACES, TIMINGS, ReadyWatch, _direct, _prepare
from bench.nodegroup import _capi_plane, _scale_group
from bench.overhead import overhead_ms
from cloudloop.cloud.openstack.capi import INFRA_KINDS as OPENSTACK_KINDS
from cloudloop.cloud.openstack.capi import NODE_TEMPLATES as OPENSTACK_TEMPLATES
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.kube.api import Kube
from devstack import machine_fixtures
from devstack.backends.openstack import (
    QUICK_TIMINGS,
    machine_spec,
    openstack_emulator,
    openstack_settings,
)
from starters.machine import MachineStarter
from workers.main import build_worker

SAMPLES = 10


async def openstack_machine_figures(ctx: BenchContext) -> dict[str, float]:
    kube = ctx.kube
    machine_fixtures.ensure_capi_crds(kube)
    figures: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="cloudloop-bench-openstack-") as state,
        openstack_emulator(Path(state)) as endpoint,
    ):
        driver = OpenStackDriver(openstack_settings(endpoint, router=False, **QUICK_TIMINGS))
        try:
            figures |= await _provision(ctx, kube, driver)
            with _capi_plane() as plane:
                figures["openstack_nodegroup_scale_0_to_10_wall_s"] = await _scale_group(
                    ctx,
                    plane,
                    driver,
                    OPENSTACK_KINDS,
                    OPENSTACK_TEMPLATES,
                    {
                        "flavorName": "m1.small",
                        "imageName": "cirros-0.6.2-x86_64-disk",
                        "mainNetwork": "private",
                        "rootDiskSize": 1,
                    },
                    zones=("nova",),
                )
        finally:
            driver.close()
    return figures


async def _provision(ctx: BenchContext, kube: Kube, driver: OpenStackDriver) -> dict[str, float]:
    spec = machine_spec(rootVolume={"sizeGiB": 1})
    namespace = _namespace(kube, "bench-os")
    direct_namespace = _namespace(kube, "bench-os-direct")
    machine_fixtures.create_cluster(kube, namespace, "c1", OPENSTACK_KINDS)
    task_queue = f"bench-os-{uuid.uuid4().hex[:6]}"
    starter = MachineStarter(
        kube,
        ctx.client,
        kinds=OPENSTACK_KINDS,
        task_queue=task_queue,
        cluster=ctx.settings.cluster_name,
        namespace=namespace,
        timings=TIMINGS,
    )
    worker = build_worker(ctx.client, ctx.settings, driver=driver, kube=kube, task_queue=task_queue)
    through_workflow: list[float] = []
    direct: list[float] = []
    async with worker, ReadyWatch(kube, namespace, OPENSTACK_KINDS) as watch:
        task = asyncio.create_task(starter.run())
        try:
            for i in range(-1, SAMPLES):  # -1: warm-up
                name = f"o{i + 1}"
                body = await asyncio.to_thread(
                    _prepare, kube, namespace, name, OPENSTACK_KINDS, spec
                )
                started = time.monotonic()
                await asyncio.to_thread(kube.create, OPENSTACK_KINDS.machine, body, namespace)
                ready_at = await watch.until([name])
                if i >= 0:
                    through_workflow.append(ready_at - started)

                body = await asyncio.to_thread(
                    _prepare, kube, direct_namespace, f"d{i + 1}", OPENSTACK_KINDS, spec
                )
                started = time.monotonic()
                await asyncio.to_thread(
                    _direct, kube, driver, direct_namespace, body, OPENSTACK_KINDS
                )
                if i >= 0:
                    direct.append(time.monotonic() - started)
        finally:
            starter.stop()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            for ns in (namespace, direct_namespace):
                for obj in kube.list(OPENSTACK_KINDS.machine, ns)["items"]:
                    kube.patch(
                        OPENSTACK_KINDS.machine,
                        obj["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                        ns,
                    )
    for ns in (namespace, direct_namespace):
        kube.delete(NAMESPACES, ns)
    workflow_median = statistics.median(through_workflow)
    direct_median = statistics.median(direct)
    return {
        "openstack_machine_provision_median_s": workflow_median,
        "openstack_machine_direct_median_s": direct_median,
        "openstack_machine_provision_overhead_ratio": workflow_median / direct_median,
        **overhead_ms("openstack_machine_provision", through_workflow, direct),
    }


def _namespace(kube: Kube, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kube.create(NAMESPACES, {"metadata": {"name": name}})
    return name
