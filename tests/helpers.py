"""Small waiting helpers for tests against the live stack."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], T | None],
    *,
    timeout: float = 30,
    interval: float = 0.2,
    what: str = "condition",
) -> T:
    """Poll a blocking ``check`` (in a thread) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(check)
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


async def eventually_async(
    check: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = 30,
    interval: float = 0.2,
    what: str = "condition",
) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
