"""Health: supervised starters restart with backoff and a crash loop fails liveness; stale
informers fail readiness; a leader whose Lease went unrenewed fails liveness."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from cloudloop.health import Health
from cloudloop.kube.informer import Informer, Informers
from cloudloop.kube.leader import ReleasableLeaseLock, lease_liveness
from cloudloop.kube.resources import NODES
from cloudloop.metrics import STARTER_RESTARTS
from starters.supervisor import PartEnded, Supervisor, run_parts


async def test_a_failing_starter_is_restarted_and_counted() -> None:
    health = Health()
    health.set_started()
    supervisor = Supervisor(health, backoff_min_s=0.01, backoff_max_s=0.02, crash_loop_after=3)
    stop = asyncio.Event()
    runs = 0

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 5:
            raise RuntimeError("boom")
        await stop.wait()

    before = STARTER_RESTARTS.labels("Flaky")._value.get()
    task = asyncio.create_task(supervisor.run("Flaky", flaky, stop))
    for _ in range(200):
        if runs >= 5:
            break
        await asyncio.sleep(0.01)
    assert runs == 5
    assert STARTER_RESTARTS.labels("Flaky")._value.get() - before == 4
    assert health.live() == ["starters: crash-looping: Flaky"]  # running, but not for long yet
    stop.set()
    await asyncio.wait_for(task, 1)


async def test_a_part_that_ends_ends_the_starter() -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    async def short() -> None:
        return None

    with pytest.raises(PartEnded):
        await run_parts(asyncio.Event(), a=forever(), b=short())


def test_stale_and_dead_informers_fail_readiness() -> None:
    informers = Informers(cast(Any, None))
    nodes = informers.get(NODES)
    assert informers.staleness(60) is None
    nodes._failing_since = time.monotonic() - 120
    assert "no list or watch for" in (informers.staleness(60) or "")
    nodes._failing_since = None
    nodes._thread = threading.Thread(target=lambda: None)
    nodes._thread.start()
    nodes._thread.join()
    assert "thread ended" in (informers.staleness(60) or "")
    assert isinstance(nodes, Informer)


def test_a_leader_that_stopped_renewing_fails_liveness() -> None:
    lock = ReleasableLeaseLock("n", "ns", "me")  # type: ignore[no-untyped-call]
    holding = threading.Event()
    check = lease_liveness(lock, holding, lease_duration_s=15)
    assert check() is None  # not leading
    holding.set()
    lock.renewed_at = time.monotonic()
    assert check() is None
    lock.renewed_at = time.monotonic() - 20
    assert "not renewed" in (check() or "")
    lock.released = True
    assert check() is None


def test_health_answers() -> None:
    health = Health()
    assert health.ready() == ["starting: not ready yet"]
    health.set_started()
    health.add_readiness("informers", lambda: "nodes: stale")
    assert health.live() == [] and health.ready() == ["informers: nodes: stale"]
    health.add_liveness("broken", lambda: cast(Any, SimpleNamespace()).missing)
    assert health.live()[0].startswith("broken: check failed")


def test_a_worker_that_stopped_polling_fails_liveness() -> None:
    from workers.main import stopped_workers

    running = SimpleNamespace(task_queue="q", is_running=True)
    dead = SimpleNamespace(task_queue="q-drain", is_running=False)
    assert stopped_workers(cast(Any, [running])) is None
    assert stopped_workers(cast(Any, [running, dead])) == "worker stopped polling q-drain"
