"""A real ``cloudloop worker`` SIGKILLed in the middle of a DVP layout apply, right after the
parent made a VirtualMachine (``CreateVirtualMachine`` answered, the step not reported): the
retried step finds the VM by its name and cluster label and waits for it, so the apply converges
with nothing made twice, a re-apply makes no mutating request, and destroy leaves nothing (one
stack for the module: Temporal and a parent DVP cluster with the simulator).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path

import pytest
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.cloud.dvp import resources as r
from cloudloop.messages.layout import LayoutResult, LayoutTimings
from cloudloop.settings import TemporalSettings
from devstack.backends.dvp_layouts import NETWORK_POLICIES, cluster_resources
from devstack.dvp_simulator import DvpParent
from devstack.local import LocalStack
from starters.layout import run_layout
from tests.helpers import eventually_async
from tests.layouts.dvp_support import dvp_config, dvp_stack, layout_input
from tests.support.workers import Workers

__all__ = ["dvp_stack"]

KILL_AT = "CreateVirtualMachine"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""

pytestmark = [pytest.mark.stack, pytest.mark.fault]


def _versions(parent: DvpParent, namespace: str, prefix: str) -> dict[str, str]:
    """``<Kind>/<name>`` → ``resourceVersion`` of the cluster's objects (a write changes it)."""
    found: dict[str, str] = {}
    for resource in (r.VIRTUAL_MACHINES, r.VIRTUAL_DISKS, r.SECRETS, NETWORK_POLICIES):
        for obj in parent.kube.list(resource, namespace).get("items") or []:
            meta = obj["metadata"]
            if meta["name"].startswith(f"{prefix}-") or meta["name"] == f"isolated-{prefix}":
                found[f"{resource.kind}/{meta['name']}"] = meta["resourceVersion"]
    return found


def worker_env(stack: LocalStack, queue: str, folder: Path, fault: str = "") -> dict[str, str]:
    """A DVP worker for ``queue``; no cluster of its own to talk to (layouts need none; the
    parent comes from the configuration)."""
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    env = {
        "CLOUDLOOP_PROVIDER": "dvp",
        "CLOUDLOOP_KUBECONFIG": str(kubeconfig),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": queue,
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "1",
        "CLOUDLOOP_DVP__TIMEOUT_S": "5",
    }
    if fault:
        env["LAYOUT_FAULT_AT"] = fault
        env["LAYOUT_FAULT_MARKER"] = str(folder / f"reached-{fault}")
    return env


async def test_sigkill_after_create_vm_converges_without_duplicates(
    dvp_stack: tuple[LocalStack, DvpParent], tmp_path: Path
) -> None:
    stack, parent = dvp_stack
    queue = f"dvp-layout-kill-{uuid.uuid4().hex[:8]}"
    client: Client = await temporal.connect(
        TemporalSettings(address=stack.temporal_address, task_queue=queue)
    )
    namespace = parent.new_namespace("layout-kill")
    prefix, cluster_uuid = f"k{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = dvp_config(tmp_path, parent, namespace, prefix)
    input = layout_input("apply", path, prefix, cluster_uuid).model_copy(
        update={"timings": LayoutTimings(heartbeat_timeout_s=5)}
    )
    workers = Workers(tmp_path)
    try:
        worker = workers.start(
            worker_env(stack, queue, tmp_path, KILL_AT), module="tests.layouts.virt_fault_worker"
        )
        apply = asyncio.ensure_future(run_layout(client, queue, input, poll_s=0.5))
        marker = tmp_path / f"reached-{KILL_AT}"

        async def reached() -> bool:
            assert not apply.done(), apply.result()
            return marker.exists()

        await eventually_async(reached, timeout=120)
        worker.kill()
        worker = workers.start(worker_env(stack, queue, tmp_path), module="cloudloop.cli")
        result: LayoutResult = await asyncio.wait_for(apply, timeout=300)
        assert result.cloud_discovery_data["kind"] == "DVPCloudProviderDiscoveryData"

        counted = Counter(
            f.split("/")[0] for f in cluster_resources(parent.kube, namespace, prefix)
        )
        assert counted == {"VirtualMachine": 2, "VirtualDisk": 3, "Secret": 2, "NetworkPolicy": 1}

        # the kubeconfig stayed in the file: no history, no worker log has it
        secret = path.read_text().split("kubeconfigDataBase64: ")[1].split()[0][:40]
        histories = [
            await client.get_workflow_handle(wid).fetch_history()
            for wid in [f"layout/{prefix}"]
            + [f"layout/{prefix}/{m.module}" for m in result.modules]
        ]
        assert all(secret not in h.to_json() for h in histories)
        assert all(secret not in w.log.read_text() for w in workers.started)

        # a re-apply (in the worker process) writes nothing: every object keeps its version
        versions = _versions(parent, namespace, prefix)
        await run_layout(client, queue, input, poll_s=0.5)
        assert _versions(parent, namespace, prefix) == versions

        destroy = input.model_copy(update={"action": "destroy"})
        await asyncio.wait_for(run_layout(client, queue, destroy, poll_s=0.5), timeout=300)
        assert cluster_resources(parent.kube, namespace, prefix) == []
    finally:
        workers.stop_all()
