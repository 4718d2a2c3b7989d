"""Replay the committed history of every workflow type against today's workflow code.

A change that would make a running workflow take another path than its history says (a new
activity, a removed timer, another order) fails here instead of in a cluster, where the load
balancer and machine workflows live as long as their objects. How to re-record an intended change,
and when to guard it with ``workflow.patched`` instead: ``histories/README.md``.

The committed histories are plaintext (as runs written before the codec was on); they replay
through the workers' converter with the codec on, and so does each one encrypted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from cloudloop.codec import KeyRing, data_converter
from cloudloop.temporal import workflow_runner
from tests.support.histories import encrypt_json, encrypted, payloads_of
from tests.workflows.histories import ALL_WORKFLOWS, recorded

#: The keys of a worker with the codec on.
KEYS = KeyRing.generate("replay")


def workflow_type(workflow: type) -> str:
    name: str = getattr(workflow, "__temporal_workflow_definition").name
    return name


def test_every_workflow_type_has_a_recorded_history() -> None:
    types = {name.split(".", 1)[0] for name in recorded()}
    assert types == {workflow_type(w) for w in ALL_WORKFLOWS}


@pytest.mark.parametrize(
    ("name", "path"), [pytest.param(n, p, id=n) for n, p in recorded().items()]
)
@pytest.mark.parametrize("form", ["plaintext", "encrypted"])
async def test_history_replays(name: str, path: Path, form: str) -> None:
    data = json.loads(path.read_text())
    if form == "encrypted":
        data = encrypt_json(data, KEYS)
        assert any(encrypted(p) for p in payloads_of(data))
    history = WorkflowHistory.from_json(name.split(".", 1)[0], data)
    replayer = Replayer(
        workflows=ALL_WORKFLOWS,
        data_converter=data_converter(KEYS),
        workflow_runner=workflow_runner(),  # the workers' sandbox
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{name}: {result.replay_failure}"
