"""SIGKILL at every resource step of one layout apply and of one destroy, per cloud: a real
``cloudloop worker`` stops dead right after each step's first mutating cloud call and is killed
there (:mod:`tests.support.kill_every_step`). The apply converges with no resource twice, a
re-apply makes no mutating call, the destroy converges with nothing left, and the config's
secret is in no history and no log.

A cloud joins with one :data:`RIGS` entry: how its worker runs and how its cloud is looked at.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from cloudloop import temporal
from cloudloop.settings import TemporalSettings
from devstack.backends.aws_layouts import cluster_resources
from devstack.local import LocalStack
from tests.layouts.support import READ_ONLY, SECRET, Front, config_file
from tests.support.kill_every_step import LayoutRig, prove_kill_every_step
from tests.support.workers import Workers

pytestmark = [pytest.mark.stack, pytest.mark.fault]

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def aws_rig(stack: LocalStack, example: str) -> LayoutRig:
    front = Front(stack.aws_endpoint)

    def env(queue: str, folder: Path) -> dict[str, str]:
        kubeconfig = folder / "kubeconfig"  # layouts need no cluster
        kubeconfig.write_text(KUBECONFIG)
        return {
            "CLOUDLOOP_PROVIDER": "aws",
            "CLOUDLOOP_KUBECONFIG": str(kubeconfig),
            "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
            "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
            "CLOUDLOOP_TEMPORAL__TASK_QUEUE": queue,
            "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "1",
            "CLOUDLOOP_AWS__ENDPOINT_URL": stack.aws_endpoint,
            "CLOUDLOOP_AWS__TIMEOUT_S": "5",
        }

    return LayoutRig(
        provider="aws",
        temporal_address=stack.temporal_address,
        config=lambda folder, prefix: config_file(folder, example, prefix),
        env=env,
        resources=lambda prefix: cluster_resources(stack.moto_endpoint, prefix),
        mutating=front.mutating,
        reset=front.reset,
        read_only=READ_ONLY,
        secret=SECRET,
        quiet_destroy_steps=1,  # the ssh-accessible rule set names no other group
    )


#: One entry per cloud (and layout): its rig, from the test's fixtures.
RIGS: dict[str, Callable[[pytest.FixtureRequest], LayoutRig]] = {
    "aws-with-nat": lambda request: aws_rig(request.getfixturevalue("aws_stack"), "aws-with-nat"),
}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("rig_name", sorted(RIGS))
async def test_sigkill_at_every_resource_step(
    rig_name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    rig = RIGS[rig_name](request)
    queue = f"layout-kill-{uuid.uuid4().hex[:8]}"
    client = await temporal.connect(
        TemporalSettings(address=rig.temporal_address, task_queue=queue)
    )
    workers = Workers(tmp_path)
    try:
        applied, destroyed = await prove_kill_every_step(rig, client, queue, tmp_path, workers)
    finally:
        workers.stop_all()
    print(
        f"\n{rig_name}: apply killed at {len(applied.killed)} steps in {applied.kills} kills "
        f"({applied.seconds:.0f}s); destroy at {len(destroyed.killed)} steps in "
        f"{destroyed.kills} kills ({destroyed.seconds:.0f}s)"
    )
    assert destroyed.killed, "the destroy was never killed"
