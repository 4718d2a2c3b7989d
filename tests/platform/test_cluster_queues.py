"""One cluster, one set of queues, against the real stack: two clusters (two kube-apiservers,
each with its own AWS endpoint as its "account") on ONE Temporal namespace.

Each cluster has its own ``cloudloop worker`` process (queues derived from its clusterName) and
its own CloudProbe starter on a claim-gated client. A probe in each cluster is answered by that
cluster's worker only: every cloud request of a cluster's probe reaches that cluster's endpoint,
its activities were scheduled on that cluster's queue and started by that cluster's worker
process. Then the refusals: a worker of cluster beta configured onto alpha's queue exits with
the error naming both clusters; a cluster that copied alpha's name (another kube-system UID)
is refused alpha's queues, its gated starter starts nothing; and after
``release-claim`` the queues can be claimed by the other cluster. A one-off start from outside
(the CLI) is refused a queue another cluster claims.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.claim import (
    ClaimRefused,
    ClusterIdentity,
    for_process,
    gated,
    read_claim,
    refuse_if_claimed_elsewhere,
    release_claim,
)
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.conditions import get_condition
from cloudloop.kube.resources import CLOUD_PROBES, NAMESPACES
from cloudloop.settings import TemporalSettings
from devstack.crds import apply_crds
from devstack.kube import KubeOptions
from devstack.local import LocalStack, StackOptions
from starters.probe import CloudProbeStarter
from tests.helpers import eventually
from tests.holding_proxy import HoldingProxy
from tests.layouts.support import cli, config_file
from tests.support.workers import WorkerProcess, worker_env

pytestmark = pytest.mark.stack

CLUSTERS = ("alpha", "beta")
#: A secret that must never reach a log line (the refusal names clusters, not credentials).
SECRET = "s3cr3t-of-the-account"


@dataclass
class Cluster:
    name: str
    kubeconfig: Path
    kube: Kube
    account: HoldingProxy
    settings: Settings


@pytest.fixture(scope="module")
def two_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One Temporal, one moto, two control planes (API server and etcd only)."""
    local = LocalStack(
        StackOptions(
            state_dir=tmp_path_factory.mktemp("two-clusters"),
            kube=tuple(KubeOptions(name=name) for name in CLUSTERS),
        )
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


def cluster_settings(stack: LocalStack, name: str, kubeconfig: Path, endpoint: str) -> Settings:
    return Settings(
        cluster_name=name,
        provider="aws",
        kubeconfig=kubeconfig,
        temporal=TemporalSettings(
            address=stack.temporal_address, graceful_shutdown_s=2, codec=stack.codec
        ),
        aws=AwsSettings(
            endpoint_url=endpoint,
            region="us-east-1",
            access_key_id=SecretStr("testing"),
            secret_access_key=SecretStr(SECRET),
            timeout_s=5,
            max_attempts=2,
        ),
    )


@pytest.fixture(scope="module")
def clusters(two_clusters: LocalStack) -> Iterator[dict[str, Cluster]]:
    made: dict[str, Cluster] = {}
    with contextlib.ExitStack() as stack:
        for name in CLUSTERS:
            plane = two_clusters.clusters[name]
            kube = Kube(api_client(plane.kubeconfig))
            apply_crds(kube)
            account = stack.enter_context(HoldingProxy(two_clusters.aws_endpoint))
            settings = cluster_settings(two_clusters, name, plane.kubeconfig, account.url)
            made[name] = Cluster(name, plane.kubeconfig, kube, account, settings)
        yield made


def process_env(cluster: Cluster, stack: LocalStack, **extra: str) -> dict[str, str]:
    return worker_env(
        cluster.settings,
        stack,
        {
            "CLOUDLOOP_KUBECONFIG": str(cluster.kubeconfig),
            "CLOUDLOOP_PROVIDER": "aws",
            "CLOUDLOOP_AWS__ENDPOINT_URL": cluster.account.url,
            "CLOUDLOOP_AWS__REGION": "us-east-1",
            "CLOUDLOOP_AWS__ACCESS_KEY_ID": "testing",
            "CLOUDLOOP_AWS__SECRET_ACCESS_KEY": SECRET,
        },
        extra,
    )


@contextlib.asynccontextmanager
async def probe_starter(cluster: Cluster, client: Client, namespace: str) -> AsyncIterator[None]:
    """The cluster's CloudProbe starter on a client gated by the cluster's claim."""
    claim = for_process(client, cluster.settings, cluster.kube)
    starter = CloudProbeStarter(
        cluster.kube,
        gated(client, claim),
        task_queue=cluster.settings.temporal.task_queue,
        cluster=cluster.name,
        namespace=namespace,
    )
    task = asyncio.create_task(starter.run())
    try:
        yield
    finally:
        starter.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def make_namespace(kube: Kube, name: str) -> None:
    if kube.get(NAMESPACES, name) is None:
        kube.create(NAMESPACES, {"metadata": {"name": name}})


def ready(kube: Kube, namespace: str, name: str) -> dict[str, object] | None:
    return get_condition(kube.get(CLOUD_PROBES, name, namespace) or {}, "Ready")


async def activity_placements(client: Client, workflow_id: str) -> list[tuple[str, str]]:
    """(task queue, worker identity) of every activity the workflow ran."""
    scheduled: dict[int, str] = {}
    placements = []
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attributes.task_queue.name
        if event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            placements.append((scheduled[started.scheduled_event_id], started.identity))
    return placements


async def test_two_clusters_on_one_namespace_never_cross(
    two_clusters: LocalStack, clusters: dict[str, Cluster], tmp_path: Path
) -> None:
    alpha, beta = clusters["alpha"], clusters["beta"]
    assert alpha.settings.temporal.task_queue == "cloudloop-alpha"
    assert beta.settings.temporal.task_queue == "cloudloop-beta"
    client = await temporal.connect(alpha.settings.temporal)
    workers = {
        c.name: WorkerProcess(
            process_env(c, two_clusters),
            tmp_path,
            name=f"worker-{c.name}",
            ready_timeout_s=180,  # a shared 2-core machine
        )
        for c in (alpha, beta)
    }
    try:
        for worker in workers.values():
            worker.start()
        pids = {name: w.process.popen.pid for name, w in workers.items()}  # type: ignore[union-attr]
        namespace = f"probes-{os.getpid()}"
        ids: dict[str, str] = {}
        for c in (alpha, beta):
            await asyncio.to_thread(make_namespace, c.kube, namespace)
        async with probe_starter(alpha, client, namespace), probe_starter(beta, client, namespace):
            for c in (alpha, beta):
                # The same namespace and name in both clusters (only the UIDs differ).
                await asyncio.to_thread(
                    c.kube.create,
                    CLOUD_PROBES,
                    {"metadata": {"name": "zones"}, "spec": {"provider": "aws"}},
                    namespace,
                )
            for c in (alpha, beta):
                condition = await eventually(
                    lambda c=c: ready(c.kube, namespace, "zones"),  # type: ignore[misc]
                    what=f"Ready on {c.name}'s CloudProbe",
                    timeout=60,
                )
                assert condition["status"] == "True", condition
                obj = await asyncio.to_thread(c.kube.get, CLOUD_PROBES, "zones", namespace)
                assert obj is not None
                ids[c.name] = obj["status"]["workflowID"]

        for c in (alpha, beta):
            placements = await activity_placements(client, ids[c.name])
            assert placements, ids[c.name]
            for queue, identity in placements:
                assert queue == c.settings.temporal.task_queue
                assert identity.startswith(f"{pids[c.name]}@"), (c.name, identity, pids)
            # Each probe's cloud calls went to its own cluster's account only.
            assert "DescribeAvailabilityZones" in c.account.actions(), c.name
        print(
            f"\nCLUSTER-QUEUES requests per account: alpha {len(alpha.account.actions())}, "
            f"beta {len(beta.account.actions())}"
        )

        # The claims record each cluster's identity (readable without the payloads).
        for c in (alpha, beta):
            kube_system = await asyncio.to_thread(c.kube.get, NAMESPACES, "kube-system")
            assert kube_system is not None
            uid = kube_system["metadata"]["uid"]
            for queue in c.settings.temporal.all_queues():
                claim = await read_claim(client, queue)
                assert claim is not None, queue
                assert (claim.holder.name, claim.holder.uid) == (c.name, uid)

        # A worker of cluster beta pointed at alpha's queue refuses to start, naming both.
        before = len(beta.account.actions())
        crossed = WorkerProcess(
            process_env(beta, two_clusters, CLOUDLOOP_TEMPORAL__TASK_QUEUE="cloudloop-alpha"),
            tmp_path,
            name="worker-beta-on-alpha",
        ).start(wait=False)
        process = crossed.process
        assert process is not None and process.popen is not None
        code = await asyncio.to_thread(process.popen.wait, 60)
        log = process.log_path.read_text()
        assert code == 1, log
        assert "task queue 'cloudloop-alpha' is served by cluster alpha" in log, log
        assert "this is cluster beta" in log and "release-claim" in log, log
        assert SECRET not in log
        assert len(beta.account.actions()) == before  # it never reached the cloud

        # A cluster that copied alpha's name (beta's API server, another kube-system UID) is
        # refused alpha's queues; its gated starter starts nothing.
        copied = beta.settings.model_copy(
            update={"cluster_name": "alpha", "temporal": alpha.settings.temporal}
        )
        twin = for_process(client, copied, beta.kube)
        with pytest.raises(ClaimRefused, match="served by cluster alpha") as refused:
            await twin.ensure()
        assert refused.value.mine.uid != refused.value.holder.uid
        with pytest.raises(ClaimRefused):
            await gated(client, twin).start_workflow(
                "CloudProbe", id=f"never-{os.getpid()}", task_queue="cloudloop-alpha"
            )

        # A one-off start from outside (the CLI's termination install) is refused another
        # cluster's queues by name or by UID, and passes its own and an unclaimed queue.
        queues = alpha.settings.temporal.all_queues()
        with pytest.raises(ClaimRefused, match="served by cluster alpha"):
            await refuse_if_claimed_elsewhere(client, queues, ClusterIdentity("beta", ""))
        with pytest.raises(ClaimRefused):
            await refuse_if_claimed_elsewhere(client, queues, refused.value.mine)
        await refuse_if_claimed_elsewhere(client, queues, refused.value.holder)
        await refuse_if_claimed_elsewhere(client, queues, ClusterIdentity("alpha", ""))
        await refuse_if_claimed_elsewhere(client, ["never-claimed"], ClusterIdentity("beta", ""))

        # The layout CLI run by beta's operator on alpha's queue is refused before it starts
        # anything (exit 1, both clusters named); alpha's own name passes the check.
        config = str(config_file(tmp_path, "aws-without-nat", "crossed"))
        code, out = await cli(
            two_clusters,
            "cloudloop-alpha",
            *("plan", "--config", config, "--cluster-uuid", "0d2d7a3e-5c1b-4a33-9b6e-3a8f0f0c1a11"),
            env={"CLOUDLOOP_CLUSTER_NAME": "beta"},
            timeout_s=120,
        )
        assert code == 1 and "served by cluster alpha" in out and "Plan:" not in out, out
        assert SECRET not in out

        # Released (alpha's worker stopped first), the queues go to whoever claims next.
        workers["alpha"].process.stop()  # type: ignore[union-attr]
        for queue in alpha.settings.temporal.all_queues():
            released = await release_claim(client, queue, by="test")
            assert released is not None and released.holder.name == "alpha"
        started = time.monotonic()
        await for_process(client, copied, beta.kube).ensure()
        print(f"CLUSTER-QUEUES claimed after release in {time.monotonic() - started:.2f}s")
        claim = await read_claim(client, "cloudloop-alpha")
        assert claim is not None and claim.holder.uid == refused.value.mine.uid
    finally:
        for worker in workers.values():
            if worker.process is not None and worker.process.running:
                worker.process.stop()
