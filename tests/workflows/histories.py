"""Recorded workflow histories: where they live, how a test records one, which types they cover.

``histories/<WorkflowType>.json`` holds one history per workflow type, in the JSON that
``temporal workflow show --output json`` prints. ``test_replay.py`` replays all of them against
today's workflow code; a test re-records its history when ``CLOUDLOOP_RECORD_HISTORIES=1`` (see
``histories/README.md``). Identity: the file name is the workflow type (and the ID replays run
under); recording overwrites the file, so an intended change shows as a diff of it. The
workflow tests run with the product's codec under :data:`TEST_KEYS`; a recorded history is
written decrypted (plaintext, readable in review), which replays as well: the codec passes
payloads it did not encrypt through.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle

from cloudloop.codec import KeyRing
from tests.support.histories import decrypt_json
from workflows.layout import LAYOUT_WORKFLOWS
from workflows.loadbalancer import LoadBalancerWorkflow
from workflows.machine import MachineWorkflow
from workflows.probe import CloudProbeWorkflow
from workflows.termination import DRAIN_WORKFLOWS
from workflows.volume import VOLUME_WORKFLOWS

HISTORIES = Path(__file__).parent / "histories"
#: The codec keys of the workflow tests' environment (fresh for each test session).
TEST_KEYS = KeyRing.generate("workflow-tests")
#: Every workflow type a worker registers (``workers/main.py``).
ALL_WORKFLOWS: list[type] = [
    CloudProbeWorkflow,
    LoadBalancerWorkflow,
    MachineWorkflow,
    *DRAIN_WORKFLOWS,
    *VOLUME_WORKFLOWS,
    *LAYOUT_WORKFLOWS,
]


def recording() -> bool:
    return os.environ.get("CLOUDLOOP_RECORD_HISTORIES") == "1"


async def record(handle: WorkflowHandle[Any, Any], workflow_type: str) -> None:
    """Write ``handle``'s history as the one of ``workflow_type`` (only when recording)."""
    if not recording():
        return
    history = await handle.fetch_history()
    data = decrypt_json(json.loads(history.to_json()), TEST_KEYS)
    path = HISTORIES / f"{workflow_type}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")


def recorded() -> dict[str, Path]:
    """File stem → path; the stem is the type, or ``<type>.<note>`` for a kept older history."""
    return {path.stem: path for path in sorted(HISTORIES.glob("*.json"))}
