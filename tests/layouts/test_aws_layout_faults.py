"""A real ``cloudloop worker`` SIGKILLed in the middle of an AWS layout apply, at resource steps:
the apply converges, with no resource made twice, and a re-apply makes no mutating call; killed
again in the middle of the destroy, the destroy converges with nothing of the cluster left.

The worker process is :mod:`tests.loadbalancer.fault_worker`: it blocks right after the named
AWS call returned (the resource exists, the step has not reported), so the kill lands between
the cloud's answer and the workflow's record of it; the retried step must find the resource by
its name. One stack for the module (Temporal, moto behind the AWS front, no control plane).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path

import pytest
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import LayoutInput, LayoutResult, LayoutTimings
from cloudloop.settings import TemporalSettings
from devstack.backends.aws_layouts import cluster_resources
from devstack.local import LocalStack
from starters.layout import run_layout
from tests.helpers import eventually_async
from tests.layouts.support import SECRET, Front, config_file
from tests.support.workers import Workers

KILL_AT = ("after-call.ec2.CreateSubnet", "after-call.ec2.RunInstances")
KILL_DESTROY_AT = "after-call.ec2.TerminateInstances"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""

pytestmark = [pytest.mark.stack, pytest.mark.fault]


def worker_env(stack: LocalStack, queue: str, folder: Path, fault: str = "") -> dict[str, str]:
    """A worker for ``queue`` on the stack; no cluster to talk to (layouts need none)."""
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    env = {
        "CLOUDLOOP_PROVIDER": "aws",
        "CLOUDLOOP_KUBECONFIG": str(kubeconfig),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": queue,
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "1",
        "CLOUDLOOP_AWS__ENDPOINT_URL": stack.aws_endpoint,
        "CLOUDLOOP_AWS__TIMEOUT_S": "5",
    }
    if fault:
        env["LB_FAULT_AT"] = fault
        env["LB_FAULT_MARKER"] = str(folder / f"reached-{fault.rsplit('.', 1)[-1]}")
    return env


async def test_sigkill_at_resource_steps_converges_without_duplicates(
    aws_stack: LocalStack, tmp_path: Path
) -> None:
    queue = f"layout-kill-{uuid.uuid4().hex[:8]}"
    client: Client = await temporal.connect(
        TemporalSettings(address=aws_stack.temporal_address, task_queue=queue)
    )
    prefix, cluster_uuid = f"k{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = config_file(tmp_path, "aws-without-nat", prefix)
    workers = Workers(tmp_path)
    input = LayoutInput(
        action="apply",
        provider="aws",
        source=ConfigSource(file=str(path)),
        cluster=ClusterIdentity(prefix=prefix, uuid=cluster_uuid),
        timings=LayoutTimings(heartbeat_timeout_s=5),
    )
    try:
        worker = workers.start(
            worker_env(aws_stack, queue, tmp_path, KILL_AT[0]),
            module="tests.loadbalancer.fault_worker",
        )
        apply = asyncio.ensure_future(run_layout(client, queue, input, poll_s=0.5))
        for index, fault in enumerate(KILL_AT):
            marker = tmp_path / f"reached-{fault.rsplit('.', 1)[-1]}"

            async def reached(marker: Path = marker) -> bool:
                assert not apply.done(), apply.result()
                return marker.exists()

            await eventually_async(reached, timeout=120)
            worker.kill()
            following = KILL_AT[index + 1] if index + 1 < len(KILL_AT) else ""
            worker = workers.start(
                worker_env(aws_stack, queue, tmp_path, following),
                module="tests.loadbalancer.fault_worker" if following else "cloudloop.cli",
            )
        result: LayoutResult = await asyncio.wait_for(apply, timeout=300)
        assert result.cloud_discovery_data["keyName"] == prefix

        counted = Counter(cluster_resources(aws_stack.moto_endpoint, prefix))
        assert {n: c for n, c in counted.items() if c > 1} == {}
        assert counted[f"Subnets/{prefix}-public-0"] == 1
        assert counted[f"Instances/{prefix}-master-0"] == 1

        # the credentials stayed in the file: no history, no worker log has them
        histories = [
            await client.get_workflow_handle(wid).fetch_history()
            for wid in [f"layout/{prefix}"]
            + [f"layout/{prefix}/{m.module}" for m in result.modules]
        ]
        assert all(SECRET not in h.to_json() for h in histories)
        assert all(SECRET not in w.log.read_text() for w in workers.started)

        front = Front(aws_stack.aws_endpoint)
        front.reset()
        await run_layout(client, queue, input, poll_s=0.5)
        assert front.mutating() == {}

        # destroy, killed right after an instance's termination was asked for
        worker.kill()
        worker = workers.start(
            worker_env(aws_stack, queue, tmp_path, KILL_DESTROY_AT),
            module="tests.loadbalancer.fault_worker",
        )
        destroy = input.model_copy(update={"action": "destroy"})
        destroying = asyncio.ensure_future(run_layout(client, queue, destroy, poll_s=0.5))
        marker = tmp_path / f"reached-{KILL_DESTROY_AT.rsplit('.', 1)[-1]}"

        async def terminating() -> bool:
            assert not destroying.done(), destroying.result()
            return marker.exists()

        await eventually_async(terminating, timeout=120)
        worker.kill()
        worker = workers.start(worker_env(aws_stack, queue, tmp_path), module="cloudloop.cli")
        await asyncio.wait_for(destroying, timeout=300)
        assert cluster_resources(aws_stack.moto_endpoint, prefix) == []  # nothing left
    finally:
        workers.stop_all()
