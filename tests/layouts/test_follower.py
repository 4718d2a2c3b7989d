"""The layout CLI's progress follower skips a report when a query fails; the run goes on."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import LayoutInput, LayoutResult
from cloudloop.rules.requests import fingerprint
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


class JoinedRequest(FailingHandle):
    """A running apply this call joined (the start did not begin a run), made from ``memo``."""

    def __init__(self, memo: dict[str, str]) -> None:
        super().__init__(WorkflowQueryFailedError("no progress yet"))
        self._start_workflow_response = SimpleNamespace(started=False)
        self.memo = memo

    async def describe(self) -> Any:
        async def memo() -> dict[str, str]:
            return self.memo

        return SimpleNamespace(memo=memo)

    async def result(self) -> LayoutResult:
        return LayoutResult(action="apply", layout="Standard", prefix="p")


def apply_input(**cloud_config: str) -> LayoutInput:
    return LayoutInput(
        action="apply",
        provider="aws",
        source=ConfigSource(file="/m/cluster.yaml", cloud_config=cloud_config),
        cluster=ClusterIdentity(prefix="p", uuid="u"),
    )


async def test_an_apply_with_other_inputs_does_not_join_a_running_one() -> None:
    """A second apply with its own --cloud-config is refused, not silently joined."""
    mine = apply_input(master="/m/boot-v2.yaml")
    theirs = apply_input(master="/m/boot-v1.yaml")
    other = JoinedRequest({"request": fingerprint(theirs)})
    with pytest.raises(LayoutFailed, match="with other inputs") as refused:
        await run_layout(cast(Client, StartingClient(other)), "q", mine, poll_s=0.01)
    assert refused.value.kind == "Busy"

    same = JoinedRequest({"request": fingerprint(mine)})
    joined = await run_layout(cast(Client, StartingClient(same)), "q", mine, poll_s=0.01)
    assert joined.action == "apply"
