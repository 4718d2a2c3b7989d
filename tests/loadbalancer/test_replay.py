"""Recorded ``LoadBalancer`` histories replay without a non-determinism error on today's code.

``before-drift-repair.json`` was recorded with the workflow as it was before drift repair, its
``apply`` signals already carrying ``resync_period_s`` (a mixed deployment: new starter, old
worker): today's code replays it (the drift-check timer sits behind ``workflow.patched``).
``drift-repair.json`` was recorded with drift repair (two checks, one repairing), so a later
change to the workflow that breaks running histories fails here. Both are made by
``histories/record.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.loadbalancer import LoadBalancerWorkflow

HISTORIES = Path(__file__).parent / "histories"


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("before-drift-repair.json", id="before-drift-repair"),
        pytest.param("drift-repair.json", id="drift-repair"),
    ],
)
async def test_history_replays(name: str) -> None:
    history = WorkflowHistory.from_json("lb/shop/web", (HISTORIES / name).read_text())
    replayer = Replayer(workflows=[LoadBalancerWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)
