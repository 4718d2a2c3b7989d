"""Leader election on a real Lease: one leader at a time, fast hand-over on release."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from cloudloop.kube.client import api_client
from cloudloop.kube.leader import run_as_leader
from cloudloop.settings import LeaderElectionSettings
from devstack.local import LocalStack

pytestmark = pytest.mark.stack


async def test_one_leader_then_handover(stack: LocalStack, namespace: str) -> None:
    lease = f"lease-{uuid.uuid4().hex[:6]}"

    def candidate(identity: str) -> LeaderElectionSettings:
        return LeaderElectionSettings(
            namespace=namespace,
            name=lease,
            identity=identity,
            lease_duration_s=15,
            renew_deadline_s=10,
            retry_period_s=1,
        )

    leading: list[str] = []
    release_first = asyncio.Event()

    async def body(identity: str) -> None:
        leading.append(identity)
        if identity == "first":
            await release_first.wait()
        else:
            await asyncio.sleep(0.1)

    first = asyncio.create_task(
        run_as_leader(api_client(stack.kubeconfig), candidate("first"), lambda: body("first"))
    )
    while not leading:
        await asyncio.sleep(0.05)
    second = asyncio.create_task(
        run_as_leader(api_client(stack.kubeconfig), candidate("second"), lambda: body("second"))
    )
    await asyncio.sleep(3)
    assert leading == ["first"]  # the second candidate waits while the Lease is held

    released_at = time.monotonic()
    release_first.set()
    await asyncio.wait_for(first, timeout=10)
    await asyncio.wait_for(second, timeout=10)
    assert leading == ["first", "second"]
    # Released, not expired: the hand-over took about a retry period, not the 15 s lease.
    assert time.monotonic() - released_at < 8


async def test_disabled_election_runs_body_directly(stack: LocalStack) -> None:
    ran = asyncio.Event()

    async def body() -> None:
        ran.set()

    await run_as_leader(api_client(stack.kubeconfig), LeaderElectionSettings(enabled=False), body)
    assert ran.is_set()
