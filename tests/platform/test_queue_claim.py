"""The claim of a cluster's queue set on a real Temporal dev server (the ``temporal`` CLI of the
venv, no kube): who claims first holds it, another identity is refused with an error naming
both, a gated client starts nothing before the claim, a terminated claim is made again, a
released one goes to the next claimant, and a running holder notices it lost its claim."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from cloudloop import searchattrs, temporal
from cloudloop.claim import (
    ClaimRefused,
    ClusterIdentity,
    QueueClaim,
    gated,
    read_claim,
    release_claim,
)
from cloudloop.messages.claim import claim_workflow_id
from cloudloop.settings import TemporalSettings, derived_task_queue
from workflows.claim import ClusterClaimWorkflow

ALPHA = ClusterIdentity("alpha", "uid-alpha")
IMPOSTOR = ClusterIdentity("alpha", "uid-rebuilt")  # the same name, another kube-system


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    server = Path(sys.executable).parent / "temporal"
    environment = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(server),
        dev_server_startup_timeout=timedelta(seconds=60),  # a loaded 2-core machine
        search_attributes=[
            searchattrs.CLUSTER,
            searchattrs.CLUSTER_UID,
            searchattrs.PROVIDER,
            searchattrs.KIND,
            searchattrs.NAMESPACE,
            searchattrs.NAME,
        ],
    )
    async with environment:
        yield environment


def queues(name: str) -> TemporalSettings:
    """``name``'s derived queue set, made unique to the test run."""
    return TemporalSettings(task_queue=derived_task_queue(f"{name}-{uuid.uuid4().hex[:6]}"))


def claim(
    client: Client, settings: TemporalSettings, who: ClusterIdentity, **kw: object
) -> QueueClaim:
    return QueueClaim(client, settings, lambda: who, provider="aws", **kw)  # type: ignore[arg-type]


async def test_first_claimant_holds_and_another_is_refused(env: WorkflowEnvironment) -> None:
    client = env.client
    settings = queues("alpha")
    worker = temporal.make_worker(
        client, settings.task_queue, workflows=[ClusterClaimWorkflow], activities=[]
    )
    async with worker:
        await claim(client, settings, ALPHA).ensure()
        for queue in settings.all_queues():
            held = await read_claim(client, queue)
            assert held is not None and held.holder == ALPHA, queue

        refusals: list[ClaimRefused] = []
        other = claim(client, settings, IMPOSTOR, on_refused=refusals.append)
        with pytest.raises(ClaimRefused) as refused:
            await other.ensure()
        text = str(refused.value)
        assert f"task queue '{settings.task_queue}' is served by cluster alpha" in text
        assert "uid-alpha" in text and "uid-rebuilt" in text
        assert f"release-claim --task-queue {settings.task_queue}" in text
        assert refusals == [refused.value]

        # Its gated client starts nothing on the queues.
        never = f"never-{uuid.uuid4().hex}"
        with pytest.raises(ClaimRefused):
            await gated(client, other).start_workflow(
                "CloudProbe", id=never, task_queue=settings.task_queue
            )
        with pytest.raises(RPCError, match="not found"):
            await client.get_workflow_handle(never).describe()

        # The claim ran its one workflow task on the general queue and waits (cheap).
        handle = client.get_workflow_handle(claim_workflow_id(settings.task_queue))
        events = [e async for e in handle.fetch_history_events()]
        assert len(events) <= 5, [e.event_type for e in events]
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING


async def test_a_domain_queue_is_never_another_cluster_s_general_queue(
    env: WorkflowEnvironment,
) -> None:
    """Cluster ``x-machine``'s general queue is cluster ``x``'s machine queue: refused."""
    x = queues("x")
    x_machine = TemporalSettings(task_queue=x.queue_for("machine"))
    await claim(env.client, x, ClusterIdentity("x", "uid-x")).ensure()
    with pytest.raises(ClaimRefused, match="served by cluster x "):
        await claim(env.client, x_machine, ClusterIdentity("x-machine", "uid-y")).ensure()


async def test_terminated_claims_are_made_again_and_released_ones_change_hands(
    env: WorkflowEnvironment,
) -> None:
    client = env.client
    settings = queues("alpha")
    holder = claim(client, settings, ALPHA)
    await holder.ensure()

    # Terminated behind its back: the holder's next check makes it again.
    await client.get_workflow_handle(claim_workflow_id(settings.task_queue)).terminate("oops")
    assert await read_claim(client, settings.task_queue) is None
    await holder.ensure(again=True)
    held = await read_claim(client, settings.task_queue)
    assert held is not None and held.holder == ALPHA

    # Released by the operator (no worker needed), the next claimant gets the set.
    for queue in settings.all_queues():
        released = await release_claim(client, queue, by="test", reason="cluster rebuilt")
        assert released is not None and released.holder == ALPHA
    assert await release_claim(client, settings.task_queue, by="test") is None  # none left
    await claim(client, settings, IMPOSTOR).ensure()
    held = await read_claim(client, settings.task_queue)
    assert held is not None and held.holder == IMPOSTOR


async def test_a_running_holder_stops_when_its_claim_changed_hands(
    env: WorkflowEnvironment,
) -> None:
    client = env.client
    settings = queues("alpha")
    lost: list[ClaimRefused] = []
    holder = claim(client, settings, ALPHA, recheck_s=0.2, on_refused=lost.append)
    stop = asyncio.Event()
    await holder.ensure()
    for queue in settings.all_queues():
        await release_claim(client, queue, by="test")
    # Another cluster claims before the holder re-checks; the holder's next check finds it.
    await claim(client, settings, IMPOSTOR).ensure()
    await asyncio.wait_for(holder.keep(stop), 10)
    assert lost and lost[0].holder == IMPOSTOR
    stop.set()
