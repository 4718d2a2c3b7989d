"""vSphere node-sync cloud-call figures against vcsim, counted from ``cloud_api_requests_total``.

- ``vsphere_lifecycle_cloud_calls_per_pass_1000_nodes``: 1,000 initialized, all NotReady Nodes
  backed by 1,000 vcsim VMs (50 powered off, 50 Nodes whose VM is gone); vCenter round trips of
  one lifecycle pass (one property-collector read and one tag listing; budget 3).
- ``vsphere_init_cloud_calls_per_node_100_burst``: 100 tainted Nodes named after 100 customized
  guests, created at once; round trips until all are initialized, divided by 100 (budget 0.05).
Both are measured after a warm-up pass (login, container view and tag names are per session).
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.context import BenchContext
from bench.node import cloud_requests
from cloudloop.cloud.vsphere.driver import VsphereDriver
from cloudloop.cloud.vsphere.vmomi import vim
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import NODES
from cloudloop.rules import node as rules
from devstack.backends.vsphere import vsphere_settings
from devstack.local import LocalStack, StackOptions
from devstack.vcsim import VcsimOptions
from devstack.vcsim_inventory import NodeVm, ZoneLayout, connect, disconnect, seed, wait_task
from starters.node import NodeSync

FLEET = 1000
BURST = 100


def _fleet(si: Any) -> list[tuple[str, Any]]:
    """``(BIOS UUID, VM)`` of every VM vcsim made at start-up."""
    vms = si.content.viewManager.CreateContainerView(
        si.content.rootFolder, [vim.VirtualMachine], True
    )
    try:
        return [(vm.config.uuid, vm) for vm in vms.view]
    finally:
        vms.DestroyView()


async def vsphere_figures(ctx: BenchContext) -> dict[str, float]:
    kube, settings = ctx.kube, ctx.settings
    scope = uuid.uuid4().hex[:8]
    local = LocalStack(
        StackOptions(
            state_dir=Path(tempfile.mkdtemp(prefix="bench-vcsim-")),
            temporal=False,
            moto=False,
            kube=(),
            vcsim=VcsimOptions(
                clusters=2,
                hosts_per_cluster=2,
                vms=FLEET // 2,
                standalone_hosts=0,
                ready_timeout_s=300,
            ),
        )
    )
    await asyncio.to_thread(local.start)
    figures: dict[str, float] = {}
    informers = Informers(kube)
    selector, burst_selector = f"cloudloop-bench-vs={scope}", f"cloudloop-bench-vsb={scope}"
    try:
        assert local.vcsim is not None
        endpoint = local.vcsim
        si = connect(endpoint)
        try:
            fleet = _fleet(si)[:FLEET]
            for _, vm in fleet[:50]:
                wait_task(si, vm.PowerOffVM_Task())
        finally:
            disconnect(si)
        burst = [
            NodeVm(f"burst-{i:03d}", f"10.20.{i // 200}.{10 + i % 200}", cluster="DC0_C1")
            for i in range(BURST)
        ]
        await asyncio.to_thread(seed, endpoint, burst, ZoneLayout())
        driver = VsphereDriver(vsphere_settings(endpoint))

        def create(name: str, provider_id: str = "", label: str = selector) -> None:
            key, value = label.split("=")
            spec: dict[str, Any] = {"providerID": provider_id} if provider_id else {}
            if not provider_id:
                spec["taints"] = [
                    {"key": rules.UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}
                ]
            kube.create(NODES, {"metadata": {"name": name, "labels": {key: value}}, "spec": spec})

        targets = [f"vsphere://{u}" for u, _ in fleet[50:]] + [
            f"vsphere://{uuid.uuid4()}" for _ in range(50)
        ]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda p: create(f"vs-{scope}-{p[0]}", p[1]), enumerate(targets)))
        ccm = settings.ccm.model_copy(update={"node_selector": selector})
        fleet_sync = NodeSync(kube, driver.instances, informers.nodes(label_selector=selector), ccm)
        fleet_sync.informer.start()
        await fleet_sync.informer.wait_synced(60)
        while len(fleet_sync.informer.store) < FLEET:
            await asyncio.sleep(0.1)
        await asyncio.to_thread(driver.instances.list_instances, [fleet[60][0]])  # warm the session
        before = cloud_requests()
        await fleet_sync.lifecycle_pass()
        figures["vsphere_lifecycle_cloud_calls_per_pass_1000_nodes"] = cloud_requests() - before

        burst_ccm = ccm.model_copy(update={"node_selector": burst_selector})
        burst_sync = NodeSync(
            kube, driver.instances, informers.nodes(label_selector=burst_selector), burst_ccm
        )
        task = asyncio.create_task(burst_sync.run())
        await burst_sync.informer.wait_synced(60)
        before = cloud_requests()
        with ThreadPoolExecutor(16) as pool:
            await asyncio.to_thread(
                lambda: list(pool.map(lambda n: create(n.name, label=burst_selector), burst))
            )

        def initialized() -> bool:
            store = burst_sync.informer.store
            return all(n.name in store and not rules.needs_init(store[n.name]) for n in burst)

        while not initialized():
            await asyncio.sleep(0.1)
        figures["vsphere_init_cloud_calls_per_node_100_burst"] = (cloud_requests() - before) / BURST
        burst_sync.stop()
        await asyncio.gather(task, return_exceptions=True)
        driver.close()
    finally:
        informers.stop()
        for label in (selector, burst_selector):
            await asyncio.to_thread(
                kube.request, "DELETE", NODES.path(), query={"labelSelector": label}
            )
        await asyncio.to_thread(local.stop)
    return figures
