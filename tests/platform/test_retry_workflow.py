"""``cloudloop retry workflow|drain|layout|volume`` against the real Temporal: a run that failed
is started again with its input (encrypted in history both times), memo, search attributes and
queue; a completed, running, unknown or other cluster's run is refused, named."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from cloudloop import searchattrs
from cloudloop.cloud.registry import Settings
from cloudloop.codec import ENCODING
from cloudloop.messages.scope import scoped_id
from starters.rerun import RetryRefused, drain_id, layout_id, rerun, volume_id

pytestmark = pytest.mark.stack

NAME_KEY = searchattrs.NAME


@activity.defn(name="retry-test-step")
async def step(flag: str) -> str:
    if Path(flag).exists():
        raise ApplicationError("the cloud said no", non_retryable=True)
    return f"done {Path(flag).name}"


@workflow.defn(name="RetryTestFlaky")
class Flaky:
    @workflow.run
    async def run(self, flag: str) -> str:
        return str(
            await workflow.execute_activity(
                step, flag, start_to_close_timeout=timedelta(seconds=10)
            )
        )


@workflow.defn(name="DrainNode")
class FlakyDrain:
    """A stand-in under the drain's type name, so ``retry drain`` finds it by its ID."""

    @workflow.run
    async def run(self, flag: str) -> str:
        return await Flaky().run(flag)


@pytest.fixture
async def worker(client: Client, settings: Settings) -> AsyncIterator[Worker]:
    async with Worker(
        client,
        task_queue=settings.temporal.task_queue,
        workflows=[Flaky, FlakyDrain],
        activities=[step],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ) as running:
        yield running


async def failed_run(
    client: Client, settings: Settings, flag: Path, wf_id: str, kind: str = "RetryTestFlaky"
) -> str:
    flag.touch()
    handle = await client.start_workflow(
        kind,
        str(flag),
        id=wf_id,
        task_queue=settings.temporal.task_queue,
        memo={"operation": "retry-test"},
        search_attributes=TypedSearchAttributes([SearchAttributePair(NAME_KEY, flag.name)]),
        static_summary=f"retry test {flag.name}",
        retry_policy=RetryPolicy(maximum_attempts=1),
    )
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    flag.unlink()
    return handle.result_run_id or ""


@pytest.mark.usefixtures("worker")
async def test_a_failed_run_starts_again_as_it_was(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    wf_id = f"retry-test/{uuid.uuid4().hex[:8]}"
    old_run = await failed_run(client, settings, tmp_path / "flag-a", wf_id)

    again = await rerun(client, settings, wf_id)

    assert (again.old_run_id, again.old_status) == (old_run, "FAILED")
    handle = client.get_workflow_handle(wf_id, run_id=again.new_run_id)
    assert await handle.result() == "done flag-a"
    described = await handle.describe()
    assert await described.memo() == {"operation": "retry-test"}
    assert described.typed_search_attributes.get(NAME_KEY) == "flag-a"
    assert await described.static_summary() == "retry test flag-a"
    assert described.task_queue == settings.temporal.task_queue
    async for event in handle.fetch_history_events():  # the input is encrypted again
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        assert [p.metadata["encoding"] for p in payloads] == [ENCODING]
        assert b"flag-a" not in payloads[0].data  # plaintext nowhere
        break


@pytest.mark.usefixtures("worker")
async def test_what_is_not_a_failed_run_of_this_cluster_is_refused(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    done = f"retry-test/{uuid.uuid4().hex[:8]}"
    await client.execute_workflow(
        Flaky.run, str(tmp_path / "none"), id=done, task_queue=settings.temporal.task_queue
    )
    with pytest.raises(RetryRefused, match="is completed: nothing to retry"):
        await rerun(client, settings, done)
    with pytest.raises(RetryRefused, match="no workflow retry-test/unknown"):
        await rerun(client, settings, "retry-test/unknown")
    elsewhere = settings.model_copy(
        update={"temporal": settings.temporal.model_copy(update={"task_queue": "other-queue"})}
    )
    failed = f"retry-test/{uuid.uuid4().hex[:8]}"
    await failed_run(client, settings, tmp_path / "flag-b", failed)
    with pytest.raises(RetryRefused, match="another cluster's work"):
        await rerun(client, elsewhere, failed)
    await rerun(client, settings, failed)
    with pytest.raises(RetryRefused, match=r"is running|is completed"):
        await rerun(client, settings, failed)  # the retry's own run: not doubled


@pytest.mark.usefixtures("worker")
async def test_the_kinds_are_found_by_their_names(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    node = f"n-{uuid.uuid4().hex[:8]}"
    scope = settings.temporal.id_scope  # the cluster's: its task queue here
    older = scoped_id(scope, f"drain/{node}/i-1/20260101T000000Z")
    newer = scoped_id(scope, f"drain/{node}/i-2/20260102T000000Z")
    await failed_run(client, settings, tmp_path / "d1", older, kind="DrainNode")
    await failed_run(client, settings, tmp_path / "d2", newer, kind="DrainNode")

    # The list is Temporal's visibility store, which sees a closed run a moment after it closes.
    found = ""
    for _ in range(50):
        try:
            found = await drain_id(client, settings, node)
        except RetryRefused:  # neither run seen closed yet
            found = ""
        if found == newer:
            break
        await asyncio.sleep(0.1)
    assert found == newer
    with pytest.raises(RetryRefused, match="no drain of node nowhere"):
        await drain_id(client, settings, "nowhere")
    scoped = settings.model_copy(
        update={"temporal": settings.temporal.model_copy(update={"workflow_id_scope": "c1"})}
    )
    assert layout_id(scoped, "p1") == "c1/layout/p1"
    assert volume_id(scoped, "vol-1") == "c1/volume/vol-1"
