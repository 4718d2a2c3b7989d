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


class FakeHandle:
    def __init__(self, client: FakeClient, run_id: str | None = None) -> None:
        self.client = client
        self.run_id = run_id

    async def signal(self, signal: str, *, args: list[Any]) -> None:
        self.client.signals.append((self.run_id, signal, args))


class FakeClient:
    def __init__(self, started: bool | None) -> None:
        self.started = started
        self.calls: list[dict[str, Any]] = []
        self.signals: list[tuple[str | None, str, list[Any]]] = []

    async def start_workflow(self, *args: Any, **kwargs: Any) -> object:
        self.calls.append(kwargs)
        if self.started is None:
            raise WorkflowAlreadyStartedError(kwargs["id"], "W")
        return SimpleNamespace(
            _start_workflow_response=SimpleNamespace(started=self.started),
            result_run_id="run-1",
        )

    def get_workflow_handle(self, id: str, *, run_id: str | None = None) -> FakeHandle:
        return FakeHandle(self, run_id)


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


@pytest.mark.parametrize(
    ("started", "signals"),
    [
        pytest.param(True, [], id="started-input-says-it"),
        pytest.param(False, [("run-1", "go", [1])], id="joined-then-signalled"),
        pytest.param(None, [], id="completed-blocks-reuse"),
    ],
)
async def test_eager_is_a_plain_eager_start_and_a_signal_only_when_joined(
    started: bool | None, signals: list[tuple[str, str, list[Any]]]
) -> None:
    client = FakeClient(started)
    result = await signal_with_start(
        cast(Client, client),
        run,
        "x",
        kind="Test",
        id="w/3",
        task_queue="q",
        search_attributes=TypedSearchAttributes.empty,
        signal="go",
        signal_args=[1],
        summary="s",
        eager=True,
    )
    (call,) = client.calls
    assert call["request_eager_start"] is True and "start_signal" not in call
    assert call["static_summary"] == "s"
    assert call["id_conflict_policy"] is WorkflowIDConflictPolicy.USE_EXISTING
    assert client.signals == signals
    assert (None if result is None else result.started) is started


async def test_the_summary_goes_with_a_signal_too() -> None:
    client = FakeClient(True)
    await signal_with_start(
        cast(Client, client),
        run,
        "x",
        kind="Test",
        id="w/4",
        task_queue="q",
        search_attributes=TypedSearchAttributes.empty,
        signal="go",
        summary="s",
    )
    assert client.calls[0]["static_summary"] == "s"
    assert client.calls[0]["start_signal"] == "go"
