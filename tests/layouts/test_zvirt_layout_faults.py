"""A real ``cloudloop worker`` SIGKILLed in the middle of a zVirt layout apply, right after the
engine made a VM (``AddVm`` answered, the step not reported): the retried step finds the VM by
its name and description and goes on, so the apply converges with nothing made twice, a
re-apply makes no mutating request, and destroy leaves nothing (one stack for the module:
Temporal and the oVirt Engine emulator).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path

import pytest
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.messages.layout import LayoutResult, LayoutTimings
from cloudloop.settings import TemporalSettings
from devstack.backends.zvirt import QUICK_TIMINGS
from devstack.backends.zvirt_layouts import cluster_resources, mutating_calls
from devstack.local import LocalStack
from devstack.ovirt_emulator import OvirtEmulatorAdmin
from starters.layout import run_layout
from tests.helpers import eventually_async
from tests.layouts.zvirt_support import SECRET, engine, layout_input, zvirt_config, zvirt_stack
from tests.support.workers import Workers

__all__ = ["zvirt_stack"]

KILL_AT = "AddVm"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""

pytestmark = [pytest.mark.stack, pytest.mark.fault]


def worker_env(stack: LocalStack, queue: str, folder: Path, fault: str = "") -> dict[str, str]:
    """A zVirt worker for ``queue``; no cluster to talk to (layouts need none)."""
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    env = {
        "CLOUDLOOP_PROVIDER": "zvirt",
        "CLOUDLOOP_KUBECONFIG": str(kubeconfig),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": queue,
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "1",
        **{f"CLOUDLOOP_ZVIRT__{k.upper()}": f"{v:g}" for k, v in QUICK_TIMINGS.items()},
    }
    if fault:
        env["LAYOUT_FAULT_AT"] = fault
        env["LAYOUT_FAULT_MARKER"] = str(folder / f"reached-{fault}")
    return env


async def test_sigkill_after_add_vm_converges_without_duplicates(
    zvirt_stack: LocalStack, tmp_path: Path
) -> None:
    queue = f"zv-layout-kill-{uuid.uuid4().hex[:8]}"
    client: Client = await temporal.connect(
        TemporalSettings(address=zvirt_stack.temporal_address, task_queue=queue)
    )
    prefix, cluster_uuid = f"k{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = zvirt_config(tmp_path, zvirt_stack, prefix)
    ovirt = engine(zvirt_stack)
    input = layout_input("apply", path, prefix, cluster_uuid).model_copy(
        update={"timings": LayoutTimings(heartbeat_timeout_s=5)}
    )
    workers = Workers(tmp_path)
    try:
        worker = workers.start(
            worker_env(zvirt_stack, queue, tmp_path, KILL_AT),
            module="tests.layouts.virt_fault_worker",
        )
        apply = asyncio.ensure_future(run_layout(client, queue, input, poll_s=0.5))
        marker = tmp_path / f"reached-{KILL_AT}"

        async def reached() -> bool:
            assert not apply.done(), apply.result()
            return marker.exists()

        await eventually_async(reached, timeout=120)
        worker.kill()
        worker = workers.start(worker_env(zvirt_stack, queue, tmp_path), module="cloudloop.cli")
        result: LayoutResult = await asyncio.wait_for(apply, timeout=300)
        assert result.cloud_discovery_data["kind"] == "ZvirtCloudProviderDiscoveryData"

        counted = Counter(cluster_resources(ovirt.admin_url, prefix))
        assert {n: c for n, c in counted.items() if c > 1} == {}
        assert counted[f"VM/{prefix}-master-0"] == 1
        assert counted[f"Disk/{prefix}-master-0-kubernetes-data"] == 1
        master = OvirtEmulatorAdmin(ovirt.admin_url).vm(f"{prefix}-master-0")
        assert master is not None and master["status"] == "up"

        # the password stayed in the file: no history, no worker log has it
        histories = [
            await client.get_workflow_handle(wid).fetch_history()
            for wid in [f"layout/{prefix}"]
            + [f"layout/{prefix}/{m.module}" for m in result.modules]
        ]
        assert all(SECRET not in h.to_json() for h in histories)
        assert all(SECRET not in w.log.read_text() for w in workers.started)

        OvirtEmulatorAdmin(ovirt.admin_url).clear_requests()
        await run_layout(client, queue, input, poll_s=0.5)
        assert mutating_calls(ovirt.admin_url) == {}

        destroy = input.model_copy(update={"action": "destroy"})
        await asyncio.wait_for(run_layout(client, queue, destroy, poll_s=0.5), timeout=300)
        assert cluster_resources(ovirt.admin_url, prefix) == []
    finally:
        workers.stop_all()
