"""The layout CLI's progress follower skips a report when a query fails; the run goes on."""

from __future__ import annotations

from typing import Any, cast

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import LayoutInput, LayoutResult
from starters.layout import LayoutFailed, _Follower, run_layout


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


class JoinedHandle(FailingHandle):
    """A run of another action, joined because the busy check's query failed."""

    async def result(self) -> LayoutResult:
        return LayoutResult(action="destroy", layout="Standard", prefix="p")


class StartingClient:
    def __init__(self, handle: FailingHandle) -> None:
        self.handle = handle

    async def start_workflow(self, *_: Any, **__: Any) -> FailingHandle:
        return self.handle


async def test_an_apply_that_joined_another_action_is_refused_as_busy() -> None:
    handle = JoinedHandle(WorkflowQueryFailedError("[TMPRL1101] Potential deadlock detected"))
    input = LayoutInput(
        action="apply",
        provider="aws",
        source=ConfigSource(file="/m/cluster.yaml"),
        cluster=ClusterIdentity(prefix="p", uuid="u"),
    )
    with pytest.raises(LayoutFailed, match="a destroy of p was running") as refused:
        await run_layout(cast(Client, StartingClient(handle)), "q", input, poll_s=0.01)
    assert refused.value.kind == "Busy"
