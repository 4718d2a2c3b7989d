"""Cluster API machines on DVP: the workflow path against the same calls made directly.

A parent DVP cluster (its own control plane with the simulator) is started for these figures.

- ``machine_provision_median_s``: median over N machines of DeckhouseMachine created (Machine
  and bootstrap Secret already there) → ``status.ready`` seen, through informer → starter →
  Temporal → activities (driver create, observe, status report).
- ``machine_direct_median_s``: the same object created, then the product's kube writes and cloud
  calls made directly (:func:`_direct`): finalizer, a "creating" condition, ``create_machine``,
  ``get_machine`` polled on the same schedule until provisioned, providerID, status, the
  ``Provisioned`` Event. What is left between the two is what Temporal costs (starts, tasks,
  history) and the activities' reads of the object (they keep no cache).
- ``machine_provision_overhead_ratio``: the first over the second (goal <= 1.3).
- ``machines_100_parallel_wall_s``: 100 DeckhouseMachines created at once → all ready.
- ``machines_100_delete_wall_s``: the same 100 deleted → all gone (VMs, disks, Secrets first).
- ``machines_100_direct_wall_s``: the same 100 machines made by :func:`_direct`, all at once (one
  thread each: the worker's activity slots run all 100 watches at once too).
- ``machines_100_parallel_wall_ratio``: ``machines_100_parallel_wall_s`` over it (goal ≤ 1.5).
- ``machines_100_parallel_cpu_s``, ``machines_100_direct_cpu_s``: CPU seconds the whole stack
  (this process, kube-apiservers, etcd, Temporal, emulators) spent during each of those walls
  (:mod:`bench.cpu`); ``machines_100_cpu_ratio`` the first over the second. Where the stack
  uses every core, the wall ratio follows the CPU ratio. Each process's share is printed on
  stderr (``machines_100_parallel cpu: kube-apiserver=… temporal=…``).
- ``machines_100_step_start_p50_s``, ``..._first_task_p50_s``: from the 100 histories, median
  time from the burst's start to ``WorkflowExecutionStarted`` (informer, starter) and from that
  to the first workflow task started (the task queue's backlog).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType

from bench.breakdown import Sample, cloud_seconds
from bench.context import BenchContext
from bench.cpu import cpu_spent, stack_cpu_by_command
from bench.overhead import overhead_ms
from cloudloop.cloud.capi import InfraKinds
from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.dvp.capi import INFRA_KINDS as DVP_KINDS
from cloudloop.cloud.dvp.driver import DvpDriver
from cloudloop.cloud.models import MachineSpec
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import InfraObject
from cloudloop.kube.conditions import set_condition
from cloudloop.kube.events import record_event
from cloudloop.kube.finalizers import add_finalizer
from cloudloop.kube.informer import Informer
from cloudloop.kube.resources import SECRETS, ObjectRef, Resource
from cloudloop.messages.machine import MachineTimings, workflow_id
from cloudloop.rules import machine as capi
from devstack import machine_fixtures
from devstack.backends.dvp import dvp_settings
from devstack.dvp_simulator import DvpParent
from starters.machine import MachineStarter
from workers.main import build_worker

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SAMPLES = 10
PARALLEL = 100
CLOUD_INIT = b"#cloud-config\n"
TIMINGS = MachineTimings()  # production defaults: the direct path polls on the same schedule


def _namespace(kube: Kube, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kube.create(NAMESPACES, {"metadata": {"name": name}})
    return name


def _prepare(
    kube: Kube,
    namespace: str,
    name: str,
    kinds: InfraKinds = DVP_KINDS,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Machine (owner) and bootstrap Secret; returns the InfraMachine (``kinds``, default
    DVP's, with ``spec``) to create."""
    machine_fixtures.create_bootstrap_secret(kube, namespace, f"{name}-data", CLOUD_INIT)
    machine = kube.create(
        capi.MACHINES,
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {capi.CLUSTER_NAME_LABEL: "c1"},
            },
            "spec": {
                "clusterName": "c1",
                "bootstrap": {"dataSecretName": f"{name}-data"},
                "infrastructureRef": {
                    "apiGroup": capi.INFRA_GROUP,
                    "kind": kinds.machine.kind,
                    "name": name,
                },
            },
        },
        namespace,
    )
    owner = {
        "apiVersion": machine["apiVersion"],
        "kind": "Machine",
        "name": name,
        "uid": machine["metadata"]["uid"],
        "controller": True,
    }
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {capi.CLUSTER_NAME_LABEL: "c1"},
            "ownerReferences": [owner],
        },
        "spec": spec if spec is not None else machine_fixtures.dvp_machine_spec(),
    }


def _direct(
    kube: Kube,
    driver: CloudDriver,
    namespace: str,
    body: dict[str, Any],
    kinds: InfraKinds = DVP_KINDS,
) -> None:
    """The product's steps and kube writes, made directly: finalizer, a "creating" condition,
    the VM, polls on the same schedule, providerID, status, the ``Provisioned`` Event."""
    obj = kube.create(kinds.machine, body, namespace)
    name = obj["metadata"]["name"]
    ref = ObjectRef.of(kinds.machine, obj)
    written = add_finalizer(kube, ref, kinds.finalizer, obj)
    assert written is not None
    spec = MachineSpec(
        name=name,
        namespace=namespace,
        cluster="c1",
        machine_uid=obj["metadata"]["uid"],
        provider_spec=kinds.desired_spec(obj),
    )
    secret = kube.get(SECRETS, f"{name}-data", namespace) or {}
    assert secret.get("data")
    creating = capi.VmVerdict(
        reason=capi.REASON_VM_NOT_READY, status="Unknown", message="Creating the VM"
    )
    unready = {"ready": False, "initialization": {"provisioned": False}}
    conditions = _write_status(kube, ref, None, creating, unready)
    machines = driver.machines
    assert machines is not None
    machine = machines.create_machine(spec, CLOUD_INIT)
    delay = TIMINGS.poll.initial_s
    while not machine.provisioned:
        time.sleep(delay)
        delay = TIMINGS.poll.after(delay)
        found = machines.get_machine(spec)
        assert found is not None
        machine = found
    written_spec = {"providerID": machine.provider_id}
    if kinds.id_field:
        written_spec[kinds.id_field] = machine.id
    kube.patch(kinds.machine, name, {"spec": written_spec}, namespace)
    ready = {
        "ready": True,
        "initialization": {"provisioned": True},
        "addresses": [a.model_dump() for a in machine.addresses],
    }
    _write_status(kube, ref, conditions, capi.classify(machine), ready)
    record_event(
        kube, ref, type="Normal", reason="Provisioned", message=f"VM {machine.provider_id} runs"
    )


def _write_status(
    kube: Kube,
    ref: ObjectRef,
    conditions: list[dict[str, Any]] | None,
    verdict: capi.VmVerdict,
    fields: dict[str, Any],
) -> list[dict[str, Any]] | None:
    """The verdict's conditions (and ``Paused``) over ``conditions``, written with ``fields``."""
    for condition in capi.vm_conditions(verdict):
        conditions = set_condition(
            conditions,
            type=condition.type,
            status=condition.status,
            reason=condition.reason,
            message=condition.message,
        )
    conditions = set_condition(
        conditions, type=capi.PAUSED, status="False", reason=capi.REASON_NOT_PAUSED, message=""
    )
    status = {**fields, "conditions": conditions}
    kube.patch(ref.resource, ref.name, {"status": status}, ref.namespace, subresource="status")
    return conditions


async def _direct_parallel(kube: Kube, driver: DvpDriver, namespace: str) -> dict[str, float]:
    """``PARALLEL`` machines made directly at once, one thread each (bodies made beforehand)."""
    names = [f"dp{i}" for i in range(PARALLEL)]
    with ThreadPoolExecutor(16) as pool:
        bodies = list(pool.map(lambda n: _prepare(kube, namespace, n), names))
    started = time.monotonic()
    with ThreadPoolExecutor(PARALLEL) as pool:
        await asyncio.to_thread(
            lambda: list(pool.map(lambda b: _direct(kube, driver, namespace, b), bodies))
        )
    return {"machines_100_direct_wall_s": time.monotonic() - started}


async def _burst_steps(
    ctx: BenchContext, kube: Kube, namespace: str, names: list[str], wall_started: float
) -> dict[str, float]:
    """Medians over the burst's histories: start → workflow started → first task started."""
    items = await asyncio.to_thread(kube.list, DVP_KINDS.machine, namespace)
    uids = {o["metadata"]["name"]: o["metadata"]["uid"] for o in items["items"]}
    started_s: list[float] = []
    first_task_s: list[float] = []
    for name in names:
        handle = ctx.client.get_workflow_handle(workflow_id(namespace, name, uids[name]))
        marks: dict[int, float] = {}
        async for event in handle.fetch_history_events():
            marks.setdefault(event.event_type, event.event_time.ToDatetime().timestamp())
            if EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED in marks:
                break
        begun = marks[EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED]
        started_s.append(begun - wall_started)
        first_task_s.append(marks[EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED] - begun)
    return {
        "machines_100_step_start_p50_s": statistics.median(started_s),
        "machines_100_step_first_task_p50_s": statistics.median(first_task_s),
    }


class ReadyWatch:
    """Sees InfraMachines (default DeckhouseMachines) turn ready through a watch (no polling
    load on the process)."""

    def __init__(self, kube: Kube, namespace: str, kinds: InfraKinds = DVP_KINDS) -> None:
        self.informer = Informer(kube, kinds.machine, namespace=namespace)
        self.ready: dict[str, float] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ReadyWatch:
        self._task = asyncio.create_task(self._follow())
        await self.informer.wait_synced(30)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.informer.stop()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _follow(self) -> None:
        async for event in self.informer.events():
            obj = event.object
            if _is_ready(obj):
                self.ready.setdefault(obj["metadata"]["name"], time.monotonic())
                self._changed.set()

    async def until(self, names: list[str], timeout: float = 600.0) -> float:
        """Wait until every name is ready; the monotonic time the last one was seen ready."""
        deadline = time.monotonic() + timeout
        while not all(n in self.ready for n in names):
            self._changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("benchmark machines did not become ready")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=remaining)
        return max(self.ready[n] for n in names)


async def workflow_sample(
    kube: Kube, watch: ReadyWatch, kinds: InfraKinds, namespace: str, body: dict[str, Any]
) -> tuple[float, float, Sample]:
    """One workflow-path sample: the prepared InfraMachine (:func:`_prepare`) created → seen
    ready by ``watch``; (created, ready) on the monotonic clock and the sample's history
    reference for :mod:`bench.breakdown`."""
    started, requested, cloud_before = time.monotonic(), time.time(), cloud_seconds()
    made = await asyncio.to_thread(kube.create, kinds.machine, body, namespace)
    meta = made["metadata"]
    ready_at = await watch.until([meta["name"]])
    sample = Sample(
        workflow_id(namespace, meta["name"], meta["uid"]),
        requested=requested,
        seen=requested + ready_at - started,
        cloud_s=cloud_seconds() - cloud_before,
    )
    return started, ready_at, sample


def _is_ready(obj: InfraObject) -> bool:
    status = obj.get("status") or {}
    return bool(status.get("ready") and (status.get("initialization") or {}).get("provisioned"))


async def _wait(check: Any, *, interval: float, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark machines did not converge")
        await asyncio.sleep(interval)


async def machine_figures(ctx: BenchContext) -> dict[str, float]:
    kube, settings = ctx.kube, ctx.settings
    machine_fixtures.ensure_capi_crds(kube)
    with tempfile.TemporaryDirectory(prefix="cloudloop-bench-dvp-") as state:
        # From this (main) thread: children die with it. The simulator runs apart: the emulated
        # cloud must not share the interpreter whose work (starter, worker) is measured.
        parent = DvpParent.start(Path(state), apart=True)
        try:
            return await _figures(ctx, kube, parent, settings.cluster_name)
        finally:
            parent.stop()


async def _figures(
    ctx: BenchContext, kube: Kube, parent: DvpParent, cluster: str
) -> dict[str, float]:
    parent_namespace = parent.new_namespace("bench")
    driver = DvpDriver(dvp_settings(parent, parent_namespace, cluster_uuid="bench"))
    task_queue = f"bench-machines-{uuid.uuid4().hex[:6]}"
    namespace = _namespace(kube, "bench-machines")
    direct_namespace = _namespace(kube, "bench-direct")
    machine_fixtures.create_cluster(kube, namespace, "c1", DVP_KINDS)
    starter = MachineStarter(
        kube,
        ctx.client,
        kinds=DVP_KINDS,
        task_queue=task_queue,
        cluster=cluster,
        namespace=namespace,
        timings=TIMINGS,
    )
    worker = build_worker(ctx.client, ctx.settings, driver=driver, kube=kube, task_queue=task_queue)
    through_workflow: list[float] = []
    direct: list[float] = []
    figures: dict[str, float] = {}
    async with worker, ReadyWatch(kube, namespace) as watch:
        task = asyncio.create_task(starter.run())
        try:
            for i in range(-1, SAMPLES):  # -1: warm-up
                name = f"w{i + 1}"
                body = await asyncio.to_thread(_prepare, kube, namespace, name)
                started = time.monotonic()
                await asyncio.to_thread(kube.create, DVP_KINDS.machine, body, namespace)
                ready_at = await watch.until([name])
                if i >= 0:
                    through_workflow.append(ready_at - started)

                body = await asyncio.to_thread(_prepare, kube, direct_namespace, f"d{i + 1}")
                started = time.monotonic()
                await asyncio.to_thread(_direct, kube, driver, direct_namespace, body)
                if i >= 0:
                    direct.append(time.monotonic() - started)

            names = [f"p{i}" for i in range(PARALLEL)]
            with ThreadPoolExecutor(16) as pool:
                bodies = list(pool.map(lambda n: _prepare(kube, namespace, n), names))
                cpu_before, wall_started = stack_cpu_by_command(), time.time()
                started = time.monotonic()
                await asyncio.gather(
                    *(
                        asyncio.get_running_loop().run_in_executor(
                            pool, kube.create, DVP_KINDS.machine, b, namespace
                        )
                        for b in bodies
                    )
                )

                ready_at = await watch.until(names)
                figures["machines_100_parallel_wall_s"] = ready_at - started
                cpu_after = stack_cpu_by_command()
                figures["machines_100_parallel_cpu_s"] = sum(cpu_after.values()) - sum(
                    cpu_before.values()
                )
                print(
                    f"machines_100_parallel cpu: {cpu_spent(cpu_before, cpu_after)}",
                    file=sys.stderr,
                )
                figures |= await _burst_steps(ctx, kube, namespace, names, wall_started)

                started = time.monotonic()
                await asyncio.gather(
                    *(
                        asyncio.get_running_loop().run_in_executor(
                            pool, kube.delete, DVP_KINDS.machine, n, namespace
                        )
                        for n in names
                    )
                )

                def all_gone() -> bool:
                    items = kube.list(DVP_KINDS.machine, namespace)["items"]
                    return not any(o["metadata"]["name"].startswith("p") for o in items)

                await _wait(all_gone, interval=0.1)
                figures["machines_100_delete_wall_s"] = time.monotonic() - started

            cpu_before = stack_cpu_by_command()
            figures |= await _direct_parallel(kube, driver, direct_namespace)
            cpu_after = stack_cpu_by_command()
            figures["machines_100_direct_cpu_s"] = sum(cpu_after.values()) - sum(
                cpu_before.values()
            )
            print(f"machines_100_direct cpu: {cpu_spent(cpu_before, cpu_after)}", file=sys.stderr)
            figures["machines_100_cpu_ratio"] = (
                figures["machines_100_parallel_cpu_s"] / figures["machines_100_direct_cpu_s"]
            )
            figures["machines_100_parallel_wall_ratio"] = (
                figures["machines_100_parallel_wall_s"] / figures["machines_100_direct_wall_s"]
            )
        finally:
            starter.stop()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            for ns in (namespace, direct_namespace):
                for obj in kube.list(DVP_KINDS.machine, ns)["items"]:
                    kube.patch(
                        DVP_KINDS.machine,
                        obj["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                        ns,
                    )
    for ns in (namespace, direct_namespace):
        kube.delete(NAMESPACES, ns)

    workflow_median = statistics.median(through_workflow)
    direct_median = statistics.median(direct)
    return {
        "machine_provision_median_s": workflow_median,
        "machine_direct_median_s": direct_median,
        "machine_provision_overhead_ratio": workflow_median / direct_median,
        **overhead_ms("machine_provision", through_workflow, direct),
        **figures,
    }
