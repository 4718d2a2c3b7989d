"""A real ``cloudloop worker`` SIGKILLed in the middle of an OpenStack layout apply, right after
the cloud answered a port's and then a server's create: the apply converges with no resource
made twice, a re-apply makes no mutating request, and the password is in no history or log.

The worker is :mod:`tests.layouts.openstack_fault_worker` (it blocks after the named request, so
the kill lands between the cloud's answer and the workflow's record of it; the retried step must
find the resource by its name). One stack for the module (Temporal and the OpenStack emulator).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import LayoutInput, LayoutResult, LayoutTimings
from cloudloop.settings import TemporalSettings
from devstack.backends.openstack_layouts import cluster_resources
from devstack.local import LocalStack
from starters.layout import run_layout
from tests.helpers import eventually_async
from tests.layouts.openstack_support import (
    SECRET,
    Requests,
    config_file,
    endpoint_of,
    openstack_layout_stack,
)
from tests.support.workers import Workers

KILL_AT = ("CreatePort", "CreateServer")
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""

pytestmark = [pytest.mark.stack, pytest.mark.fault]


@pytest.fixture(scope="module")
def os_fault_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with openstack_layout_stack(tmp_path_factory.mktemp("os-layout-faults")) as stack:
        yield stack


def worker_env(stack: LocalStack, queue: str, folder: Path, fault: str = "") -> dict[str, str]:
    """A worker for ``queue``; no cluster to talk to (layouts need none)."""
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    env = {
        "CLOUDLOOP_PROVIDER": "openstack",
        "CLOUDLOOP_KUBECONFIG": str(kubeconfig),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": queue,
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "1",
        "CLOUDLOOP_OPENSTACK__REQUEST_TIMEOUT_S": "10",
        "CLOUDLOOP_OPENSTACK__POLL_INTERVAL_S": "0.1",
    }
    if fault:
        env["OS_FAULT_AT"] = fault
        env["OS_FAULT_MARKER"] = str(folder / f"reached-{fault}")
    return env


async def test_sigkill_after_port_and_server_creates_converges_without_duplicates(
    os_fault_stack: LocalStack, tmp_path: Path
) -> None:
    endpoint = endpoint_of(os_fault_stack)
    queue = f"os-layout-kill-{uuid.uuid4().hex[:8]}"
    client: Client = await temporal.connect(
        TemporalSettings(address=os_fault_stack.temporal_address, task_queue=queue)
    )
    prefix = f"k{uuid.uuid4().hex[:6]}"
    path = config_file(tmp_path, "openstack-standard", prefix, endpoint)
    workers = Workers(tmp_path)
    input = LayoutInput(
        action="apply",
        provider="openstack",
        source=ConfigSource(file=str(path)),
        cluster=ClusterIdentity(prefix=prefix, uuid=str(uuid.uuid4())),
        timings=LayoutTimings(heartbeat_timeout_s=5),
    )
    fault_worker = "tests.layouts.openstack_fault_worker"
    try:
        worker = workers.start(
            worker_env(os_fault_stack, queue, tmp_path, KILL_AT[0]), module=fault_worker
        )
        apply = asyncio.ensure_future(run_layout(client, queue, input, poll_s=0.5))
        for index, fault in enumerate(KILL_AT):
            marker = tmp_path / f"reached-{fault}"

            async def reached(marker: Path = marker) -> bool:
                assert not apply.done(), apply.result()
                return marker.exists()

            await eventually_async(reached, timeout=120)
            worker.kill()
            following = KILL_AT[index + 1] if index + 1 < len(KILL_AT) else ""
            worker = workers.start(
                worker_env(os_fault_stack, queue, tmp_path, following),
                module=fault_worker if following else "cloudloop.cli",
            )
        result: LayoutResult = await asyncio.wait_for(apply, timeout=300)
        assert result.cloud_discovery_data["instances"]["sshKeyPairName"] == prefix

        counted = Counter(cluster_resources(endpoint.admin_url, prefix))
        assert {n: c for n, c in counted.items() if c > 1} == {}
        assert counted[f"Server/{prefix}-master-0"] == 1
        assert counted[f"Port/{prefix}-master-0"] == 1
        assert counted[f"Server/{prefix}-front-0"] == 1

        # the password stayed in the file: no history, no worker log has it
        histories = [
            await client.get_workflow_handle(wid).fetch_history()
            for wid in [f"layout/{prefix}"]
            + [f"layout/{prefix}/{m.module}" for m in result.modules]
        ]
        assert all(SECRET not in h.to_json() for h in histories)
        assert all(SECRET not in w.log.read_text() for w in workers.started)

        requests = Requests(endpoint)
        requests.reset()
        await run_layout(client, queue, input, poll_s=0.5)
        assert requests.mutating() == {}

        destroy = input.model_copy(update={"action": "destroy"})
        await asyncio.wait_for(run_layout(client, queue, destroy, poll_s=0.5), timeout=300)
        assert cluster_resources(endpoint.admin_url, prefix) == []
    finally:
        workers.stop_all()
