"""The layout CLI's progress follower skips a report when a query fails; the run goes on."""

from __future__ import annotations

from typing import Any, cast

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from starters.layout import _Follower


class FailingHandle:
    def __init__(self, error: Exception) -> None:
        self.error = error
        self.queries = 0

    async def query(self, *_: Any, **__: Any) -> Any:
        self.queries += 1
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        WorkflowQueryFailedError("[TMPRL1101] Potential deadlock detected"),
        RPCError("unavailable", RPCStatusCode.UNAVAILABLE, b""),
    ],
    ids=["query-failed", "rpc"],
)
async def test_a_failed_progress_query_is_one_skipped_report(error: Exception) -> None:
    reports: list[str] = []
    follower = _Follower(cast(Client, None), reports.append)
    handle = FailingHandle(error)
    await follower.poll(cast(WorkflowHandle[Any, Any], handle))
    assert handle.queries == 1 and reports == []
