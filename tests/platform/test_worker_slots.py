"""The project's workers: local activities keep running while every activity slot is busy.

A burst of long regular activities (VMs being watched) takes every activity slot; a workflow
task's local activity (a status write) must still get a thread at once, on the real Temporal
dev server. And a task-queue rate limit is never bypassed by eager dispatch; workers carry the
project's build ID.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import threading
import uuid
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.client import Client

from cloudloop.temporal import MAX_CONCURRENT_LOCAL_ACTIVITIES, make_worker, worker_build_id
from workflows.loadbalancer import LoadBalancerWorkflow

SLOTS = 2
released = threading.Event()


@activity.defn(name="TestHoldSlot")
def hold_slot() -> str:
    """A long regular activity: holds its slot (and its thread) until released."""
    released.wait(30)
    return "held"


@activity.defn(name="TestQuickWrite")
def quick_write() -> str:
    return "written"


@workflow.defn(name="TestHoldSlot")
class HoldSlotWorkflow:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(  # type: ignore[no-any-return]
            "TestHoldSlot", start_to_close_timeout=timedelta(seconds=60), result_type=str
        )


@workflow.defn(name="TestLocalWrite")
class LocalWriteWorkflow:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_local_activity(  # type: ignore[no-any-return]
            "TestQuickWrite", start_to_close_timeout=timedelta(seconds=5), result_type=str
        )


async def test_local_activity_runs_while_every_activity_slot_is_busy(client: Client) -> None:
    task_queue = f"slots-{uuid.uuid4().hex[:8]}"
    released.clear()
    worker = make_worker(
        client,
        task_queue,
        workflows=[HoldSlotWorkflow, LocalWriteWorkflow],
        activities=[hold_slot, quick_write],
        max_concurrent_activities=SLOTS,
        graceful_shutdown_s=1,
    )
    async with worker:
        holders = [
            await client.start_workflow(
                HoldSlotWorkflow.run, id=f"hold-{i}-{task_queue}", task_queue=task_queue
            )
            for i in range(SLOTS)
        ]
        try:
            for holder in holders:  # both regular activities run, and so hold both slots
                await _wait_activity_started(client, holder.id)
            result = await client.execute_workflow(
                LocalWriteWorkflow.run,
                id=f"local-{task_queue}",
                task_queue=task_queue,
                execution_timeout=timedelta(seconds=8),  # well under the slots' release
            )
            assert result == "written"
        finally:
            released.set()
        assert [await h.result() for h in holders] == ["held"] * SLOTS


async def _wait_activity_started(client: Client, workflow_id: str) -> None:
    for _ in range(100):
        description = await client.get_workflow_handle(workflow_id).describe()
        pending = description.raw_description.pending_activities
        if pending and pending[0].HasField("last_started_time"):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id}: its activity never started")


@pytest.mark.parametrize(
    ("per_second", "eager"),
    [pytest.param(None, True, id="unlimited-eager"), pytest.param(5.0, False, id="rate-limited")],
)
async def test_eager_dispatch_only_without_a_task_queue_rate_limit(
    client: Client, per_second: float | None, eager: bool
) -> None:
    worker = make_worker(
        client,
        f"config-{uuid.uuid4().hex[:8]}",
        workflows=[LocalWriteWorkflow],
        activities=[quick_write],
        activities_per_second=per_second,
    )
    config = worker.config()
    assert config.get("disable_eager_activity_execution") is not eager
    executor = config.get("activity_executor")
    assert executor is not None
    assert executor._max_workers == 100 + MAX_CONCURRENT_LOCAL_ACTIVITIES  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("workflows", "other"),
    [
        ([HoldSlotWorkflow], [LoadBalancerWorkflow]),
        ([HoldSlotWorkflow, LocalWriteWorkflow], [LoadBalancerWorkflow, HoldSlotWorkflow]),
    ],
    ids=["another-module", "more-modules"],
)
def test_build_id_names_the_version_and_the_workflow_modules(
    workflows: list[type], other: list[type]
) -> None:
    """Stable for the same workflow modules, different for others (the SDK's default hashes
    every loaded module's bytecode instead, 0.7 s of CPU at each worker start)."""
    build_id = worker_build_id(workflows)
    assert build_id.startswith(f"cloudloop-{importlib.metadata.version('cloudloop')}-")
    assert build_id == worker_build_id(list(reversed(workflows)))
    assert build_id != worker_build_id(other)


async def test_workers_run_under_the_project_build_id(client: Client) -> None:
    worker = make_worker(
        client, f"build-{uuid.uuid4().hex[:8]}", workflows=[HoldSlotWorkflow], activities=[]
    )
    assert worker.config()["build_id"] == worker_build_id([HoldSlotWorkflow])
