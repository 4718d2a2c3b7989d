"""Scripted answers for fake activities: each call takes the next answer its test wrote down.

A :class:`Script` holds, per activity name, a list of answers (a value, an exception, or an
``async`` callable for a step that blocks, hangs or watches for its cancellation); the last answer
repeats. It records every call (input, attempt, server time) so a test asserts what the workflow
asked for, how often and when. The fake activities of :mod:`tests.workflows.fakes` are registered
under the product's stable names and answer through a script.

Rules: a call nobody scripted fails the activity with a non-retryable ``Unscripted`` error, so a
workflow that takes an unexpected branch is a failing test, never a hang. Timers and timeouts run
on the test server's clock, which stands still while an activity runs; a :class:`Gate`
heartbeats, so cancellation reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, cast

from temporalio import activity
from temporalio.exceptions import ApplicationError

T = TypeVar("T")

Step = Callable[["Call"], Awaitable[Any]]
#: A value to return, an exception to raise, or a step to await.
Answer = Any


@dataclass
class Call:
    """One attempt of one activity."""

    name: str
    input: Any
    attempt: int
    #: When this attempt started: the test server's clock (a local attempt: the worker's).
    at: datetime
    cancelled: bool = False
    #: Run as a local activity (inside a workflow task) rather than as an activity task.
    local: bool = False


def fail(
    kind: str, message: str = "", *, non_retryable: bool = False, details: Any = None
) -> ApplicationError:
    """The error a driver's ``CloudError`` of ``kind`` becomes (see ``activities/errors.py``)."""
    extra = () if details is None else (details,)
    return ApplicationError(
        message or f"scripted {kind}", *extra, type=kind, non_retryable=non_retryable
    )


@dataclass
class Gate:
    """A step that blocks until the test opens it, heartbeating so a cancel reaches it.

    ``entered`` is set when the activity starts waiting; ``cancelled`` when its cancellation
    arrived (the workflow asked for it, or the worker shut down).
    """

    answer: Answer = None
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)

    def open(self) -> None:
        self.opened.set()

    async def __call__(self, call: Call) -> Any:
        self.entered.set()
        try:
            while not self.opened.is_set():
                activity.heartbeat()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.opened.wait(), 0.05)
        except asyncio.CancelledError:
            call.cancelled = True
            self.cancelled.set()
            raise
        return await _resolve(self.answer, call)


async def _resolve(answer: Answer, call: Call) -> Any:
    if isinstance(answer, BaseException):
        raise copy.copy(answer).with_traceback(None)  # a fresh one each time
    if callable(answer) and not isinstance(answer, type):
        return await answer(call)
    return answer


class Script:
    """Per activity name, the answers in order (the last repeats) and the calls made."""

    def __init__(self) -> None:
        self._answers: dict[str, list[Answer]] = {}
        self.calls: list[Call] = []
        self._changed = asyncio.Condition()
        self._taken: dict[str, int] = defaultdict(int)

    def on(self, name: str, *answers: Answer) -> Script:
        """Answer ``name`` with ``answers`` in order, the last one from then on."""
        assert answers, "at least one answer"
        self._answers[name] = list(answers)
        self._taken[name] = 0
        return self

    def then(self, name: str, *answers: Answer) -> Script:
        """Append answers for ``name`` after the ones not yet taken."""
        pending = self._answers.get(name, [])[self._taken[name] :]
        return self.on(name, *pending, *answers)

    def of(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    def inputs(self, name: str) -> list[Any]:
        return [c.input for c in self.of(name)]

    def names(self) -> list[str]:
        return [c.name for c in self.calls]

    async def called(self, name: str, times: int = 1, *, timeout: float = 30) -> list[Call]:
        """Wait (real time) until ``name`` has been called ``times`` times."""
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.of(name)) >= times), timeout
            )
        return self.of(name)

    async def answer(self, name: str, input: Any, result: type[T]) -> T:
        info = activity.info()
        call = Call(
            name=name,
            input=input,
            attempt=info.attempt,
            at=info.started_time,
            local=info.is_local,
        )
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()
        answers = self._answers.get(name)
        if not answers:
            raise fail("Unscripted", f"no answer scripted for {name}", non_retryable=True)
        index = min(self._taken[name], len(answers) - 1)
        self._taken[name] += 1
        return cast(T, await _resolve(answers[index], call))


def gaps(calls: list[Call]) -> list[float]:
    """Seconds (server time) between consecutive calls: the retry interval, plus the real time
    the attempt took (the server's clock runs in real time while an activity is in flight)."""
    return [(b.at - a.at).total_seconds() for a, b in itertools.pairwise(calls)]
