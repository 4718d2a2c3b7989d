"""vSphere machines and node groups against vcsim (``python -m bench vsphere-machines``).

- ``vsphere_machine_provision_median_s``: median over ``SAMPLES`` VSphereMachines of created →
  ready, through the starter → ``Machine`` workflow → activities → ``VsphereDriver`` (clone,
  reconfigure, power on, the guest's IP reported by :class:`devstack.vcsim_guest.GuestAgent`).
- ``vsphere_machine_direct_median_s``: the same steps and kube writes made directly
  (:func:`bench.machine._write_status`'s status, ``create_machine``, ``get_machine`` polled on the
  same schedule until provisioned, providerID, the ``Provisioned`` Event); samples alternate.
- ``vsphere_machine_provision_overhead_ratio``: the first over the second (goal ≤ 1.3).
- ``vsphere_nodegroup_scale_0_to_10_wall_s``: a MachineDeployment rendered from a
  VsphereInstanceClass with 0 replicas, scaled to 10 → all 10 CAPI Machines ``Provisioned`` with
  a providerID (the real Cluster API manager on its own control plane, as
  :mod:`bench.nodegroup`). Report only.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.context import BenchContext
from bench.machine import _write_status
from bench.nodegroup import _capi_plane, _scale_group
from bench.overhead import overhead_ms
from cloudloop.cloud.models import MachineSpec
from cloudloop.cloud.vsphere.capi import INFRA_KINDS, NODE_TEMPLATES
from cloudloop.cloud.vsphere.driver import VsphereDriver
from cloudloop.kube.api import Kube
from cloudloop.kube.events import record_event
from cloudloop.kube.finalizers import add_finalizer
from cloudloop.kube.resources import ObjectRef, Resource
from cloudloop.messages.machine import MachineTimings
from cloudloop.rules import machine as capi
from devstack import machine_fixtures
from devstack.backends.vsphere import (
    QUICK_TIMINGS,
    instance_class_spec,
    machine_spec,
    vcsim_server,
    vsphere_settings,
)
from devstack.vcsim_guest import GuestAgent
from starters.machine import MachineStarter
from workers.main import build_worker

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SAMPLES = 8
CLOUD_INIT = b"#cloud-config\n"
TIMINGS = MachineTimings()  # production defaults: the direct path polls on the same schedule


def _ready(kube: Kube, namespace: str, name: str) -> bool:
    obj = kube.get(INFRA_KINDS.machine, name, namespace) or {}
    status = obj.get("status") or {}
    return bool(status.get("ready") and (status.get("initialization") or {}).get("provisioned"))


def _make(kube: Kube, namespace: str, name: str) -> None:
    machine_fixtures.create_bootstrap_secret(kube, namespace, f"{name}-data", CLOUD_INIT)
    machine_fixtures.create_machine(
        kube,
        namespace,
        name,
        cluster="c1",
        kinds=INFRA_KINDS,
        spec=machine_spec(),
        bootstrap_secret=f"{name}-data",
    )


def _direct(kube: Kube, driver: VsphereDriver, namespace: str, name: str) -> MachineSpec:
    """The product's steps and kube writes, made directly (see :func:`bench.machine._direct`)."""
    obj = kube.create(
        INFRA_KINDS.machine,
        {"metadata": {"name": name, "namespace": namespace}, "spec": machine_spec()},
        namespace,
    )
    ref = ObjectRef.of(INFRA_KINDS.machine, obj)
    assert add_finalizer(kube, ref, INFRA_KINDS.finalizer, obj) is not None
    spec = MachineSpec(
        name=name,
        namespace=namespace,
        cluster="c1",
        machine_uid=obj["metadata"]["uid"],
        provider_spec=INFRA_KINDS.desired_spec(obj),
    )
    creating = capi.VmVerdict(
        reason=capi.REASON_VM_NOT_READY, status="Unknown", message="Creating the VM"
    )
    unready = {"ready": False, "initialization": {"provisioned": False}}
    conditions = _write_status(kube, ref, None, creating, unready)
    machine = driver.create_machine(spec, CLOUD_INIT)
    delay = TIMINGS.poll.initial_s
    while not machine.provisioned:
        time.sleep(delay)
        delay = TIMINGS.poll.after(delay)
        found = driver.get_machine(spec)
        assert found is not None
        machine = found
    kube.patch(INFRA_KINDS.machine, name, {"spec": {"providerID": machine.provider_id}}, namespace)
    ready = {
        "ready": True,
        "initialization": {"provisioned": True},
        "addresses": [a.model_dump() for a in machine.addresses],
    }
    _write_status(kube, ref, conditions, capi.classify(machine), ready)
    record_event(
        kube, ref, type="Normal", reason="Provisioned", message=f"VM {machine.provider_id} runs"
    )
    return spec


async def _provision(ctx: BenchContext, driver: VsphereDriver) -> dict[str, float]:
    kube = ctx.kube
    machine_fixtures.ensure_capi_crds(kube)
    scope = uuid.uuid4().hex[:6]
    namespace, direct_namespace = f"bench-vsm-{scope}", f"bench-vsd-{scope}"
    for ns in (namespace, direct_namespace):
        kube.create(NAMESPACES, {"metadata": {"name": ns}})
    machine_fixtures.create_cluster(kube, namespace, "c1", INFRA_KINDS)
    task_queue = f"bench-vsphere-{scope}"
    starter = MachineStarter(
        kube,
        ctx.client,
        kinds=INFRA_KINDS,
        task_queue=task_queue,
        cluster=ctx.settings.cluster_name,
        namespace=namespace,
        timings=TIMINGS,
    )
    worker = build_worker(ctx.client, ctx.settings, driver=driver, kube=kube, task_queue=task_queue)
    through_workflow: list[float] = []
    direct: list[float] = []
    async with worker:
        task = asyncio.create_task(starter.run())
        try:
            for i in range(-1, SAMPLES):  # -1: warm-up
                name = f"w{i + 1}"
                started = time.monotonic()
                await asyncio.to_thread(_make, kube, namespace, name)
                while not await asyncio.to_thread(_ready, kube, namespace, name):
                    await asyncio.sleep(0.02)
                if i >= 0:
                    through_workflow.append(time.monotonic() - started)
                started = time.monotonic()
                made = await asyncio.to_thread(_direct, kube, driver, direct_namespace, f"d{i + 1}")
                if i >= 0:
                    direct.append(time.monotonic() - started)
                await asyncio.to_thread(driver.delete_machine, made)  # not timed
        finally:
            starter.stop()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            for ns in (namespace, direct_namespace):
                for obj in kube.list(INFRA_KINDS.machine, ns)["items"]:
                    kube.patch(
                        INFRA_KINDS.machine,
                        obj["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                        ns,
                    )
                kube.delete(NAMESPACES, ns)
    workflow_median, direct_median = statistics.median(through_workflow), statistics.median(direct)
    return {
        "vsphere_machine_provision_median_s": workflow_median,
        "vsphere_machine_direct_median_s": direct_median,
        "vsphere_machine_provision_overhead_ratio": workflow_median / direct_median,
        **overhead_ms("vsphere_machine_provision", through_workflow, direct),
    }


async def vsphere_machine_figures(ctx: BenchContext) -> dict[str, float]:
    figures: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="cloudloop-bench-vcsim-") as state,
        vcsim_server(Path(state)) as endpoint,
        GuestAgent(endpoint),
    ):
        driver = VsphereDriver(vsphere_settings(endpoint, **QUICK_TIMINGS))
        try:
            figures.update(await _provision(ctx, driver))
            with _capi_plane() as plane:
                figures["vsphere_nodegroup_scale_0_to_10_wall_s"] = await _scale_group(
                    ctx, plane, driver, INFRA_KINDS, NODE_TEMPLATES, instance_class_spec()
                )
        finally:
            driver.close()
    return figures
