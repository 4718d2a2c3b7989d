"""The starters' work queue: dedupe, one worker per key, re-queue after a change, backoff."""

from __future__ import annotations

import asyncio

import pytest

from cloudloop.kube.workqueue import WorkQueue


async def test_a_key_is_queued_once() -> None:
    queue = WorkQueue("t")
    for _ in range(3):
        queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert [await queue.get(), await queue.get()] == ["a", "b"]


async def test_a_key_added_while_processed_runs_again_after() -> None:
    queue = WorkQueue("t")
    queue.add("a")
    key = await queue.get()
    queue.add("a")
    assert len(queue) == 0  # not handed to a second worker meanwhile
    queue.done(key)
    assert len(queue) == 1


@pytest.mark.parametrize(
    ("failures", "expected"),
    [
        pytest.param(1, 0.5, id="first"),
        pytest.param(3, 2.0, id="third"),
        pytest.param(10, 60.0, id="capped"),
    ],
)
async def test_retry_backs_off_per_key(failures: int, expected: float) -> None:
    queue = WorkQueue("t", backoff_min_s=0.5, backoff_max_s=60.0)
    delays = [queue.retry("a") for _ in range(failures)]
    assert delays[-1] == expected
    assert queue.failures("a") == failures
    assert queue.retry("b") == 0.5  # another key has its own backoff
    queue.forget("a")
    assert queue.retry("a") == 0.5
    queue.shut_down()


async def test_retry_queues_the_key_after_the_delay() -> None:
    queue = WorkQueue("t", backoff_min_s=0.05)
    queue.retry("a")
    assert queue.tracked("a") and len(queue) == 0
    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_discard_drops_a_pending_retry() -> None:
    queue = WorkQueue("t", backoff_min_s=0.05)
    queue.retry("a")
    queue.discard("a")
    await asyncio.sleep(0.1)
    assert not queue.tracked("a") and len(queue) == 0


async def test_workers_retry_failures_and_forget_successes() -> None:
    queue = WorkQueue("t", backoff_min_s=0.01)
    calls: list[str] = []

    async def reconcile(key: str) -> None:
        calls.append(key)
        if calls.count(key) < 3:
            raise RuntimeError("not yet")

    runner = asyncio.create_task(queue.run(reconcile, workers=2))
    queue.add("a")
    for _ in range(200):
        if calls.count("a") >= 3:
            break
        await asyncio.sleep(0.01)
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)
    assert calls.count("a") == 3
    assert queue.failures("a") == 0


async def test_get_batch_takes_a_burst() -> None:
    queue = WorkQueue("t")

    async def burst() -> None:
        for i in range(5):
            queue.add(f"n{i}")
            await asyncio.sleep(0.01)

    feeder = asyncio.create_task(burst())
    keys = await queue.get_batch(window_s=0.05, max_wait_s=1.0)
    await feeder
    assert keys == [f"n{i}" for i in range(5)]
