"""Kill a real ``cloudloop worker`` at every resource step of ONE layout apply (and of one
destroy), whatever the cloud: a :class:`LayoutRig` per cloud says how to run its worker and how
to look at its cloud; :func:`kill_every_step` does the rest.

The worker is :mod:`tests.support.step_fault_worker`: each activity blocks right after its first
mutating cloud call (the cloud did the work, the step has not reported it), once per step. The
next worker is always started ahead, imported and waiting (its go file) without polling, so a
kill costs no worker start. When a step blocks, the harness waits until the blocked steps stop
growing (so the steps of one wave are killed together, one kill per wave), lets the spare poll,
SIGKILLs the blocked worker (the next one passes the steps already killed in; a step that blocks
in it is killed in the next round), warms the next spare, and repeats until the action ends.
Each kill costs one heartbeat timeout before Temporal retries the steps elsewhere; the retried
step must find what the killed one made.

:func:`prove_kill_every_step` is the whole proof for one rig: apply killed at every step
converges with no resource twice and every step but a lookup killed once; a re-apply makes no
mutating call; destroy killed at every step converges with nothing left; the config's secret is
in no history and no worker log.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client

from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource, LayoutDef
from cloudloop.messages.layout import LayoutInput, LayoutResult, LayoutTimings
from starters.layout import run_layout
from tests.support.workers import CLI, WorkerProcess, Workers

FAULT_WORKER = "tests.support.step_fault_worker"


@dataclass
class LayoutRig:
    """What the harness needs of one cloud."""

    provider: str
    #: The Temporal frontend the workers and the harness use.
    temporal_address: str
    #: ``(folder, prefix)`` → the cluster's config file (with a secret that must not leak).
    config: Callable[[Path, str], Path]
    #: ``(task queue, folder)`` → the worker's environment (Temporal, the cloud's endpoint).
    env: Callable[[str, Path], dict[str, str]]
    #: ``(prefix, cluster uuid)`` → every live resource of the cluster, repeats included
    #: (``kind/name``).
    resources: Callable[[str, str], list[str]]
    #: The mutating cloud calls since the last ``reset`` (``operation`` → count).
    mutating: Callable[[], dict[str, int]]
    reset: Callable[[], None]
    #: Prefixes of the operation names (as the driver counts them) that change nothing:
    #: ``Describe``, ``Get``, ``List``, and session calls such as ``Authenticate``.
    read_only: tuple[str, ...]
    #: The value in the config that must never reach a history or a log.
    secret: str = ""
    #: Exact operation names that change something, when the cloud's read-only calls share no
    #: prefixes (vSphere); empty: every operation not in ``read_only`` changes something.
    mutating_operations: frozenset[str] = frozenset()
    #: ``prefix`` → resources that rightly exist more than once (``kind/name`` → count).
    repeats: Callable[[str], dict[str, int]] = lambda prefix: {}
    heartbeat_timeout_s: float = 5.0
    #: Destroy steps that make no mutating call (AWS: a rule set with no group rules to revoke
    #: before its group goes), so are never killed.
    quiet_destroy_steps: int = 0


@dataclass
class KillReport:
    result: LayoutResult
    #: ``<workflow id>/<activity id> <operation>`` of every step killed, in order.
    killed: list[str] = field(default_factory=list)
    kills: int = 0
    seconds: float = 0.0


async def kill_every_step(
    rig: LayoutRig,
    client: Client,
    queue: str,
    folder: Path,
    workers: Workers,
    input: LayoutInput,
    *,
    settle_s: float = 2.0,
    timeout_s: float = 900.0,
) -> KillReport:
    """Run ``input`` with a fault worker killed at every step; the result and what was killed."""
    seen = folder / f"killed-{input.action}-{uuid.uuid4().hex[:6]}.txt"
    env = {
        **rig.env(queue, folder),
        "STEP_FAULT_SEEN": str(seen),
        "STEP_FAULT_READ_ONLY": ",".join(rig.read_only),
        "STEP_FAULT_MUTATING": ",".join(sorted(rig.mutating_operations)),
    }
    started = time.monotonic()

    def blocked_in(worker: WorkerProcess) -> int:
        """How many steps are blocked in ``worker`` now."""
        popen = worker.process.popen if worker.process is not None else None
        pid = str(popen.pid if popen is not None else -1)
        lines = seen.read_text().splitlines() if seen.exists() else []
        return sum(1 for line in lines if line.rsplit(" ", 1)[-1] == pid)

    def warm() -> tuple[WorkerProcess, Path]:
        """The next worker: started and imported, waiting for its go file to poll."""
        go = folder / f"go-{uuid.uuid4().hex[:8]}"
        spare = workers.start({**env, "STEP_FAULT_GO": str(go)}, module=FAULT_WORKER, wait=False)
        return spare, go

    async def take_over(spare: WorkerProcess, go: Path) -> WorkerProcess:
        """``spare`` polling; a fresh worker instead if it died starting (a port taken by
        another process on a busy machine)."""
        go.touch()
        assert spare.process is not None
        try:
            await asyncio.to_thread(spare.process.wait_ready, 60.0)
        except RuntimeError:
            spare = workers.start({**env, "STEP_FAULT_GO": str(go)}, module=FAULT_WORKER)
        return spare

    worker = await take_over(*warm())
    spare, spare_go = warm()
    action = asyncio.ensure_future(run_layout(client, queue, input, poll_s=0.5))
    kills = 0
    try:
        while not action.done():
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{input.action} not done after {timeout_s:.0f}s")
            count = blocked_in(worker)
            if not count:
                await asyncio.wait({action}, timeout=0.3)
                continue
            # a step is blocked: wait until the wave's other steps have blocked too, then hand
            # over to the warm spare and kill
            while not action.done():
                await asyncio.wait({action}, timeout=settle_s)
                if blocked_in(worker) == count:
                    break
                count = blocked_in(worker)
            spare = await take_over(spare, spare_go)
            worker.kill()
            kills += 1
            worker = spare
            spare, spare_go = warm()
        result = action.result()
    finally:
        action.cancel()
        worker.stop()
        spare.stop()
    killed = seen.read_text().splitlines() if seen.exists() else []
    return KillReport(result=result, killed=killed, kills=kills, seconds=time.monotonic() - started)


def history_payloads(history_json: str) -> str:
    """Every payload of a history (base64 ``data`` next to ``metadata``) decoded, one text."""

    def walk(value: object) -> list[str]:
        if isinstance(value, dict):
            own = []
            if isinstance(value.get("data"), str) and "metadata" in value:
                own.append(base64.b64decode(value["data"]).decode(errors="replace"))
            return own + [t for v in value.values() for t in walk(v)]
        if isinstance(value, list):
            return [t for v in value for t in walk(v)]
        return []

    return "\n".join(walk(json.loads(history_json)))


async def lookups(client: Client, workflow_id: str) -> set[str]:
    """Keys of the read-only resources (data lookups: no mutating call, so never killed) of the
    layout the run ``workflow_id`` defined (its first completed activity, ``layout.define``)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    for event in history.events:
        if event.HasField("activity_task_completed_event_attributes"):
            payloads = event.activity_task_completed_event_attributes.result.payloads
            [layout] = await client.data_converter.decode(payloads, [LayoutDef])
            assert isinstance(layout, LayoutDef)
            return {r.key for m in layout.modules for r in m.resources if r.read_only}
    raise AssertionError(f"{workflow_id} defined no layout")


async def prove_kill_every_step(
    rig: LayoutRig,
    client: Client,
    queue: str,
    folder: Path,
    workers: Workers,
) -> tuple[KillReport, KillReport]:
    """The whole proof (see the module docstring); the apply's and the destroy's reports."""
    prefix, cluster_uuid = f"k{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = rig.config(folder, prefix)
    input = LayoutInput(
        action="apply",
        provider=rig.provider,
        source=ConfigSource(file=str(path)),
        cluster=ClusterIdentity(prefix=prefix, uuid=cluster_uuid),
        timings=LayoutTimings(heartbeat_timeout_s=rig.heartbeat_timeout_s),
    )
    applied = await kill_every_step(rig, client, queue, folder, workers, input)
    steps = [s for m in applied.result.modules for s in m.steps]
    looked_up = await lookups(client, f"layout/{prefix}")
    # a fresh cluster: every step but a lookup makes something, so each was killed once, right
    # after its first change
    made = [s.key for s in steps if s.key not in looked_up]
    assert len(applied.killed) == len(made), (applied.killed, made)
    counted = Counter(rig.resources(prefix, cluster_uuid))
    assert {n: c for n, c in counted.items() if c > 1} == rig.repeats(prefix), "duplicated"
    assert counted, "nothing made"

    if rig.secret:
        ids = [f"layout/{prefix}"] + [f"layout/{prefix}/{m.module}" for m in applied.result.modules]
        for wid in ids:
            history = await client.get_workflow_handle(wid).fetch_history()
            assert rig.secret not in history_payloads(history.to_json())
        assert all(rig.secret not in w.log.read_text() for w in workers.started if w.log.exists())

    plain = workers.start(rig.env(queue, folder), module=CLI)
    try:
        rig.reset()
        again = await run_layout(client, queue, input, poll_s=0.5)
        assert rig.mutating() == {}, rig.mutating()
        assert {s.action for m in again.modules for s in m.steps} == {"unchanged"}
    finally:
        plain.stop()

    destroy = input.model_copy(update={"action": "destroy"})
    destroyed = await kill_every_step(rig, client, queue, folder, workers, destroy)
    left = rig.resources(prefix, cluster_uuid)
    assert left == [], left
    deleted = [s for m in destroyed.result.modules for s in m.steps]
    assert len(destroyed.killed) == len(deleted) - rig.quiet_destroy_steps, destroyed.killed
    return applied, destroyed
