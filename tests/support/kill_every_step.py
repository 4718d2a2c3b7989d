"""Kill a real ``cloudloop worker`` at every resource step of ONE layout apply (or of a few at
once) and of one destroy, whatever the cloud: a :class:`LayoutRig` per cloud says how to run its
worker and how to look at its cloud; :func:`kill_every_step` does the rest.

The worker is :mod:`tests.support.step_fault_worker`: each activity blocks right after its first
mutating cloud call (the cloud did the work, the step has not reported it), once per step. The
next worker is always started ahead, imported and waiting (its go file) without polling, so a
kill costs no worker start. When a step blocks, the harness waits until the blocked steps stop
growing (so the steps of one wave are killed together, one kill per wave), lets the spare poll,
SIGKILLs the blocked worker (the next one passes the steps already killed in; a step that blocks
in it is killed in the next round), warms the next spare, and repeats until the action ends.
Each kill costs one heartbeat timeout before Temporal retries the steps elsewhere; the retried
step must find what the killed one made.

:func:`prove_kill_every_step` is the whole proof for one rig (or for several layouts of one
cloud, run at once so they share the kills and the workers' starts): apply killed at every step
(every chosen one, :attr:`LayoutRig.only`) converges with no resource twice and every step but a
lookup (every chosen one) killed once; a re-apply makes no mutating call; destroy killed at
every step converges with nothing left; the config's secret is in no history and no worker
log.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client

from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource, LayoutDef
from cloudloop.messages.layout import LayoutInput, LayoutTimings
from cloudloop.settings import CodecSettings
from starters.layout import run_layout
from tests.support.histories import plain_json
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
    #: ``prefix`` → the keys of the only resources whose steps are killed (each makes a
    #: mutating call in the apply and in the destroy); empty: every step's.
    only: Callable[[str], frozenset[str]] = lambda prefix: frozenset()
    #: The payload codec of the rig's stack (the harness's client and every worker use it).
    codec: CodecSettings = field(default_factory=CodecSettings)


@dataclass
class KillReport:
    #: One per input, in order (what ``run`` gave, for :func:`kill_during`).
    results: list[Any]
    #: ``<workflow id>/<activity id> <resource key> <operation> <pid>`` of every step killed,
    #: in order.
    killed: list[str] = field(default_factory=list)
    kills: int = 0
    seconds: float = 0.0


async def kill_every_step(
    rig: LayoutRig,
    client: Client,
    queue: str,
    folder: Path,
    workers: Workers,
    inputs: Sequence[LayoutInput],
    only: Sequence[str] = (),
    *,
    settle_s: float = 2.0,
    timeout_s: float = 900.0,
) -> KillReport:
    """Run ``inputs`` (layouts of the rig's cloud, at once) with a fault worker killed at every
    step (every one of the resources ``only`` names, when it names any); the results and what
    was killed."""

    def run() -> Awaitable[Sequence[Any]]:
        return asyncio.gather(*(run_layout(client, queue, i, poll_s=0.5) for i in inputs))

    return await kill_during(
        rig,
        queue,
        folder,
        workers,
        run,
        only,
        name=inputs[0].action,
        settle_s=settle_s,
        timeout_s=timeout_s,
    )


async def kill_during(
    rig: LayoutRig,
    queue: str,
    folder: Path,
    workers: Workers,
    run: Callable[[], Awaitable[Sequence[Any]]],
    only: Sequence[str] = (),
    *,
    name: str,
    settle_s: float = 2.0,
    timeout_s: float = 900.0,
) -> KillReport:
    """Await ``run()`` (what drives the workflows on ``queue``: layout actions, a converge pass)
    with a fault worker killed at every step; its results and what was killed (``name`` names
    the run in the kill file and in a timeout)."""
    seen = folder / f"killed-{name}-{uuid.uuid4().hex[:6]}.txt"
    env = {
        **rig.env(queue, folder),
        "STEP_FAULT_SEEN": str(seen),
        "STEP_FAULT_READ_ONLY": ",".join(rig.read_only),
        "STEP_FAULT_MUTATING": ",".join(sorted(rig.mutating_operations)),
        "STEP_FAULT_ONLY": ",".join(sorted(only)),
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
    action = asyncio.ensure_future(run())
    kills = 0
    try:
        while not action.done():
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{name} not done after {timeout_s:.0f}s")
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
    return KillReport(
        results=list(result), killed=killed, kills=kills, seconds=time.monotonic() - started
    )


def killed_keys(report: KillReport) -> list[str]:
    """The resource keys of the steps ``report`` killed."""
    return [line.split(" ")[1] for line in report.killed]


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
    rigs: Sequence[LayoutRig],
    client: Client,
    queue: str,
    folder: Path,
    workers: Workers,
) -> tuple[KillReport, KillReport]:
    """The whole proof (see the module docstring) for one layout of each of ``rigs`` (one
    cloud's: the first's worker runs them all), applied and destroyed at once; the apply's and
    the destroy's reports."""
    rig = rigs[0]
    inputs = []
    for each in rigs:
        prefix, cluster_uuid = f"k{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
        inputs.append(
            LayoutInput(
                action="apply",
                provider=each.provider,
                source=ConfigSource(file=str(each.config(folder, prefix))),
                cluster=ClusterIdentity(prefix=prefix, uuid=cluster_uuid),
                timings=LayoutTimings(heartbeat_timeout_s=each.heartbeat_timeout_s),
            )
        )
    chosen = sorted(
        k for each, i in zip(rigs, inputs, strict=True) for k in each.only(i.cluster.prefix)
    )
    applied = await kill_every_step(rig, client, queue, folder, workers, inputs, chosen)
    made: list[str] = []
    for each, input, result in zip(rigs, inputs, applied.results, strict=True):
        prefix, cluster_uuid = input.cluster.prefix, input.cluster.uuid
        looked_up = await lookups(client, f"layout/{prefix}")
        # a fresh cluster: every step but a lookup makes something, so each (each chosen) was
        # killed once, right after its first change
        only = each.only(prefix)
        made += [
            s.key
            for m in result.modules
            for s in m.steps
            if s.key not in looked_up and (not only or s.key in only)
        ]
        counted = Counter(each.resources(prefix, cluster_uuid))
        repeated = {n: c for n, c in counted.items() if c > 1}
        assert repeated == each.repeats(prefix), f"duplicated in {prefix}: {repeated}"
        assert counted, f"nothing made in {prefix}"
        if each.secret:
            ids = [f"layout/{prefix}"] + [f"layout/{prefix}/{m.module}" for m in result.modules]
            for wid in ids:
                history = await client.get_workflow_handle(wid).fetch_history()
                assert each.secret not in history_payloads(json.dumps(plain_json(history, client)))
    assert len(applied.killed) == len(made), (applied.killed, made)
    if chosen:
        assert sorted(killed_keys(applied)) == chosen, (applied.killed, chosen)
    secrets = {each.secret for each in rigs if each.secret}
    for w in workers.started:
        if w.log.exists():
            assert not any(secret in w.log.read_text() for secret in secrets), w.log

    plain = workers.start(rig.env(queue, folder), module=CLI)
    try:
        rig.reset()
        again = await asyncio.gather(*(run_layout(client, queue, i, poll_s=0.5) for i in inputs))
        assert rig.mutating() == {}, rig.mutating()
        assert {s.action for r in again for m in r.modules for s in m.steps} == {"unchanged"}
    finally:
        plain.stop()

    destroys = [i.model_copy(update={"action": "destroy"}) for i in inputs]
    destroyed = await kill_every_step(rig, client, queue, folder, workers, destroys, chosen)
    for each, input in zip(rigs, inputs, strict=True):
        left = each.resources(input.cluster.prefix, input.cluster.uuid)
        assert left == [], left
    if chosen:
        assert sorted(killed_keys(destroyed)) == chosen, (destroyed.killed, chosen)
    else:
        deleted = [s for r in destroyed.results for m in r.modules for s in m.steps]
        quiet = sum(each.quiet_destroy_steps for each in rigs)
        assert len(destroyed.killed) == len(deleted) - quiet, destroyed.killed
    return applied, destroyed
