"""Long lives: Load balancer and Machine workflows continue as new in every loop, carrying
their retry state, on a Temporal dev server whose history-count suggestion is lowered."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from cloudloop import temporal
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.models import InstanceState, Machine, MachineSpec, NodeAddress
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import SERVICES, ObjectRef
from cloudloop.messages.loadbalancer import (
    LoadBalancerQuery,
    LoadBalancerState,
)
from cloudloop.messages.loadbalancer import (
    workflow_id as lb_workflow_id,
)
from cloudloop.messages.machine import (
    CreateMachineInput,
    DeleteMachineInput,
    DeleteMachineResult,
    MachineActivity,
    MachineDesired,
    MachineInput,
    MachineProgress,
    MachineQuery,
    MachineResult,
    MachineSignal,
    MachineTimings,
    ObserveMachineInput,
    ObserveMachineResult,
    PollSchedule,
    RemoveFinalizerInput,
    ReportMachineInput,
)
from devstack.backends.aws import create_cluster_network
from devstack.local import LocalStack
from starters.loadbalancer import ServiceStarter
from tests.faults.conftest import own_settings, own_stack
from tests.helpers import eventually, eventually_async
from workers.main import build_worker
from workflows.machine import MachineWorkflow

pytestmark = [pytest.mark.stack, pytest.mark.fault]

#: The dev server suggests continue-as-new past this many history events (default 10,240).
SUGGEST_AFTER = 40


@pytest.fixture(scope="module")
def long_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with own_stack(
        tmp_path_factory.mktemp("long-lives"),
        temporal_dynamic_config=(f"limit.historyCount.suggestContinueAsNew={SUGGEST_AFTER}",),
    ) as local:
        yield local


@pytest.fixture
async def long_client(long_stack: LocalStack) -> Client:
    return await temporal.connect(own_settings(long_stack, "x").temporal)


async def runs_of(client: Client, wf_id: str) -> list[Any]:
    return [wf async for wf in client.list_workflows(f"WorkflowId = '{wf_id}'")]


# -- Machine: fake cloud activities, registered by name --------------------------------------
class FakeCloud:
    """A VM Pending for ``pending_polls`` observations, a delete failing ``delete_failures``
    times: long loops, each of which must continue as new."""

    def __init__(self, pending_polls: int, delete_failures: int) -> None:
        self.pending_polls = pending_polls
        self.delete_failures = delete_failures
        self.calls: Counter[str] = Counter()

    def machine(self) -> Machine:
        running = self.calls[MachineActivity.OBSERVE] >= self.pending_polls
        return Machine(
            id="vm-1",
            provider_id="zvirt://vm-1",
            state=InstanceState.RUNNING if running else InstanceState.PENDING,
            phase="up" if running else "wait_for_launch",
            addresses=[NodeAddress(type="InternalIP", address="10.0.0.9")] if running else [],
        )

    def activities(self) -> list[Any]:
        @activity.defn(name=MachineActivity.CREATE)
        async def create(input: CreateMachineInput) -> ObserveMachineResult:
            self.calls[MachineActivity.CREATE] += 1
            return ObserveMachineResult(machine=self.machine(), reason="")

        @activity.defn(name=MachineActivity.OBSERVE)
        async def observe(input: ObserveMachineInput) -> ObserveMachineResult:
            self.calls[MachineActivity.OBSERVE] += 1
            return ObserveMachineResult(machine=self.machine(), reason="")

        @activity.defn(name=MachineActivity.REPORT)
        async def report(input: ReportMachineInput) -> bool:
            return True

        @activity.defn(name=MachineActivity.DELETE)
        async def delete(input: DeleteMachineInput) -> DeleteMachineResult:
            self.calls[MachineActivity.DELETE] += 1
            if self.calls[MachineActivity.DELETE] <= self.delete_failures:
                raise ApplicationError("the engine refused", type="CloudError", non_retryable=True)
            return DeleteMachineResult(attempts=1)

        @activity.defn(name=MachineActivity.REMOVE_FINALIZER)
        async def remove_finalizer(input: RemoveFinalizerInput) -> bool:
            return True

        return [create, observe, report, delete, remove_finalizer]


async def test_machine_continues_as_new_while_pending_and_while_deleting(
    long_client: Client,
) -> None:
    from temporalio.worker import Worker

    cloud = FakeCloud(pending_polls=25, delete_failures=12)
    queue = f"long-machine-{uuid.uuid4().hex[:6]}"
    ref = ObjectRef(
        group="infrastructure.cluster.x-k8s.io",
        version="v1",
        plural="zvirtmachines",
        kind="ZvirtMachine",
        namespace="capi",
        name="m1",
        uid=uuid.uuid4().hex,
    )
    desired = MachineDesired(
        spec=MachineSpec(name="m1", namespace="capi", cluster="c1", machine_uid=ref.uid),
        infrastructure_ready=True,
        bootstrap_secret="m1-data",
    )
    timings = MachineTimings(
        heartbeat_timeout_s=10,
        observe_window_s=0.0,
        poll=PollSchedule(initial_s=0.05, max_s=0.05),
        refresh_interval_s=3600,
        retry_backoff_s=0.2,
        retry_backoff_max_s=0.5,
    )
    wf_id = f"machine/capi/m1/{ref.uid}"
    async with Worker(
        long_client, task_queue=queue, workflows=[MachineWorkflow], activities=cloud.activities()
    ):
        handle = await long_client.start_workflow(
            MachineWorkflow.run,
            MachineInput(
                object=ref, provider="zvirt", finalizer="f", desired=desired, timings=timings
            ),
            id=wf_id,
            task_queue=queue,
        )

        async def provisioned() -> MachineProgress | None:
            progress: MachineProgress = await long_client.get_workflow_handle(wf_id).query(
                MachineQuery.PROGRESS, result_type=MachineProgress
            )
            return progress if progress.phase == "Provisioned" else None

        progress = await eventually_async(provisioned, timeout=120, what="provisioned")
        assert progress.attempts == 1  # continued as new mid-attempt: the same attempt
        pending_runs = len(await runs_of(long_client, wf_id))
        assert pending_runs >= 2, "no continue-as-new while the VM was Pending"

        await handle.signal(MachineSignal.DESIRED, desired.model_copy(update={"deleting": True}))
        result = await long_client.get_workflow_handle(wf_id, result_type=MachineResult).result()
        assert result.attempts == 1
        assert cloud.calls[MachineActivity.DELETE] == cloud.delete_failures + 1
        assert cloud.calls[MachineActivity.CREATE] >= 1
        runs = await eventually_async(
            lambda: _more_runs(long_client, wf_id, pending_runs),
            timeout=30,
            what="continue-as-new while the deletion kept failing",
        )
        assert len(runs) > pending_runs


async def _more_runs(client: Client, wf_id: str, than: int) -> list[Any] | None:
    runs = await runs_of(client, wf_id)
    return runs if len(runs) > than else None


# -- Load balancer: the real activities, an ensure that fails until the subnets exist --------
async def test_failing_load_balancer_continues_as_new_with_its_backoff(
    long_stack: LocalStack, long_client: Client, tmp_path: Path
) -> None:
    settings = own_settings(long_stack, f"long-lb-{uuid.uuid4().hex[:6]}")
    kube = Kube(api_client(long_stack.kubeconfig))
    namespace = "default"
    name = f"web-{uuid.uuid4().hex[:6]}"
    informers = Informers(kube)
    starter = ServiceStarter(
        kube,
        long_client,
        services=informers.services(namespace=namespace),
        nodes=informers.nodes(label_selector=f"none-{name}"),
        task_queue=settings.temporal.task_queue,
        cluster=settings.cluster_name,
        provider=settings.provider,
    )
    worker = build_worker(long_client, settings, driver=AwsDriver(AWS.section(settings)), kube=kube)
    service = kube.create(
        SERVICES,
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]},
        },
        namespace,
    )
    wf_id = lb_workflow_id(ObjectRef.of(SERVICES, service))
    task = asyncio.create_task(starter.run())
    try:
        async with worker:
            # No cluster-tagged subnet: every ensure fails and backs off (5 s, 10 s, ...).
            runs = await eventually_async(
                lambda: _more_runs(long_client, wf_id, 1), timeout=150, what="continued as new"
            )
            state: LoadBalancerState = await long_client.get_workflow_handle(wf_id).query(
                LoadBalancerQuery.STATE, result_type=LoadBalancerState
            )
            assert state.failures >= 1 and state.retry_pending, state
            assert len(runs) >= 2

            ec2 = boto3.client(
                "ec2",
                region_name="us-east-1",
                endpoint_url=long_stack.aws_endpoint,
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
            )
            await asyncio.to_thread(create_cluster_network, ec2, settings.cluster_name)
            await asyncio.to_thread(
                kube.patch,
                SERVICES,
                name,
                {"metadata": {"annotations": {"cloudloop.io/nudge": "1"}}},
                namespace,
            )

            def ingress() -> list[Any]:
                found = kube.get(SERVICES, name, namespace) or {}
                return list(
                    ((found.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
                )

            await eventually(ingress, timeout=90, what="ingress once the subnets exist")
            await asyncio.to_thread(kube.delete, SERVICES, name, namespace)
            await eventually(
                lambda: kube.get(SERVICES, name, namespace) is None, timeout=90, what="deleted"
            )
    finally:
        starter.stop()
        informers.stop()
        await asyncio.wait_for(task, 10)
