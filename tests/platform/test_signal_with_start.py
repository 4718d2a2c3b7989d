"""The one start / signal-with-start helper: started, joined, or refused by the reuse policy."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from temporalio.client import Client
from temporalio.common import TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from cloudloop.metrics import WORKFLOWS_STARTED
from cloudloop.temporal import signal_with_start


class FakeClient:
    def __init__(self, started: bool | None) -> None:
        self.started = started
        self.calls: list[dict[str, Any]] = []

    async def start_workflow(self, *args: Any, **kwargs: Any) -> object:
        self.calls.append(kwargs)
        if self.started is None:
            raise WorkflowAlreadyStartedError(kwargs["id"], "W")
        return SimpleNamespace(_start_workflow_response=SimpleNamespace(started=self.started))


async def run(arg: str) -> None:
    del arg


def started_count() -> float:
    return WORKFLOWS_STARTED.labels("Test")._value.get()  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("started", "outcome", "counted"),
    [
        pytest.param(True, True, 1, id="started"),
        pytest.param(False, False, 0, id="joined-running"),
        pytest.param(None, None, 0, id="completed-blocks-reuse"),
    ],
)
async def test_outcomes(started: bool | None, outcome: bool | None, counted: int) -> None:
    client = FakeClient(started)
    before = started_count()
    result = await signal_with_start(
        cast(Client, client),
        run,
        "x",
        kind="Test",
        id="w/1",
        task_queue="q",
        search_attributes=TypedSearchAttributes.empty,
        signal="go",
        signal_args=[1],
    )
    assert (None if result is None else result.started) is outcome
    assert started_count() - before == counted
    (call,) = client.calls
    assert call["id_conflict_policy"] is WorkflowIDConflictPolicy.USE_EXISTING
    assert call["start_signal"] == "go" and call["start_signal_args"] == [1]


async def test_without_a_signal_it_is_a_plain_start() -> None:
    client = FakeClient(True)
    await signal_with_start(
        cast(Client, client),
        run,
        "x",
        kind="Test",
        id="w/2",
        task_queue="q",
        search_attributes=TypedSearchAttributes.empty,
    )
    assert "start_signal" not in client.calls[0]
