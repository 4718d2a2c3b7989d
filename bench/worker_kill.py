"""The worker-kill drill (``python -m bench worker-kill``): what a SIGKILLed worker costs.

Two ``cloudloop worker`` processes (AWS on moto, through the stack's AWS front) serve one task
queue; the starter runs in the bench process. ``SERVICES`` Services ``type: LoadBalancer`` are
created, then deleted, while one of the two workers is SIGKILLed every ``KILL_EVERY_S`` (16 s, the
first ``FIRST_KILL_S`` after the first round starts) and started again at once (as a kubelet
restarts a container). Figures:

- ``worker_kill_recovery_s_p50`` / ``_p95``: per activity a killed worker held, from the kill to
  the attempt that took it over starting on a live worker (read from the histories: an
  ``ActivityTaskStarted`` whose attempt's last failure is a timeout, minus the first kill after
  the activity was scheduled). The rule of :mod:`workflows.timeouts` bounds it by the 10-15 s
  timeout plus the retry interval.
- ``worker_kill_recovered_activities``: how many activities were taken over that way.
- ``worker_kill_kills``, ``worker_kill_rounds``: SIGKILLs made, rounds run (a round: the
  Services created → all have an ingress → all deleted with their finalizers off; rounds go on
  until ``MIN_KILLS`` kills); ``worker_kill_converge_s``: the slowest round.
- ``worker_kill_duplicate_elbs`` (goal 0): Classic ELBs of the cluster beyond one per Service
  once a round's all have an ingress (the most of any round); ``worker_kill_orphan_elbs``
  (goal 0): ELBs left after the last deletes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType

from bench.context import BenchContext
from bench.loadbalancer import NAMESPACES, _has_ingress, _make_nodes, _make_world, _service
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.kube.api import Kube
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import SERVICES, ObjectRef
from cloudloop.messages.loadbalancer import LB_FINALIZER, workflow_id
from cloudloop.net import free_port
from devstack.process import ManagedProcess, http_ok
from starters.loadbalancer import ServiceStarter

REPO = Path(__file__).resolve().parents[1]
SERVICES_COUNT = 40
#: More than the longest recovery the rule allows (15 s), so each takeover has one kill.
KILL_EVERY_S = 16.0
#: The first kill: once the first round's ensures are in flight (its 40 creates take < 1 s).
FIRST_KILL_S = 5.0
#: Rounds of creates and deletes go on until this many kills were made.
MIN_KILLS = 4
CONVERGE_TIMEOUT_S = 600.0


class _Worker:
    """``cloudloop worker`` as a process, started again after each kill."""

    def __init__(self, name: str, env: dict[str, str], log_dir: Path) -> None:
        self.name, self.env, self.log_dir = name, env, log_dir
        self.starts = 0
        self.process: ManagedProcess | None = None

    def start(self, *, wait: bool) -> None:
        port = free_port()
        self.starts += 1
        self.process = ManagedProcess(
            f"{self.name}-{self.starts}",
            [sys.executable, "-m", "cloudloop.cli", "worker"],
            log_dir=self.log_dir,
            env={**self.env, "CLOUDLOOP_METRICS_PORT": str(port)},
            cwd=REPO,
            ready=lambda: http_ok(f"http://127.0.0.1:{port}/readyz"),
        )
        self.process.start()
        if wait:
            self.process.wait_ready(120)

    def kill(self) -> None:
        if self.process is not None and self.process.running:
            self.process.kill()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=5)


def _worker_env(ctx: BenchContext, cluster: str, task_queue: str) -> dict[str, str]:
    stack = ctx.stack
    return {
        **os.environ,
        "CLOUDLOOP_PROVIDER": "aws",
        "CLOUDLOOP_CLUSTER_NAME": cluster,
        "CLOUDLOOP_KUBECONFIG": str(stack.kubeconfig),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": task_queue,
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "1",
        **stack.codec_env(),
        "CLOUDLOOP_AWS__ENDPOINT_URL": stack.aws_endpoint,
        "CLOUDLOOP_AWS__ACCESS_KEY_ID": "testing",
        "CLOUDLOOP_AWS__SECRET_ACCESS_KEY": "testing",
        "CLOUDLOOP_AWS__REGION": "us-east-1",
        "CLOUDLOOP_AWS__TIMEOUT_S": "10",
        "CLOUDLOOP_DISCOVERY__ENABLED": "false",
    }


def _elbs(driver: AwsDriver, cluster: str) -> int:
    """Classic ELBs tagged for ``cluster``."""
    elb = driver.session.client("elb")
    names = [
        d["LoadBalancerName"] for d in elb.describe_load_balancers()["LoadBalancerDescriptions"]
    ]
    count = 0
    for start in range(0, len(names), 20):
        tags = elb.describe_tags(LoadBalancerNames=names[start : start + 20])["TagDescriptions"]
        for described in tags:
            keys = {t["Key"] for t in described.get("Tags", [])}
            count += f"kubernetes.io/cluster/{cluster}" in keys
    return count


async def _recoveries(ctx: BenchContext, ids: list[str], kills: list[float]) -> list[float]:
    """Per activity taken over after a timeout: seconds from the kill that took its worker (the
    first kill after the activity was scheduled: kills are ``KILL_EVERY_S`` apart, more than a
    recovery may take, so no later kill is mistaken for it) to the start of the attempt that
    took it over."""
    found: list[float] = []
    for wf_id in ids:
        handle = ctx.client.get_workflow_handle(wf_id)
        with contextlib.suppress(Exception):
            history = await handle.fetch_history()
            scheduled: dict[int, float] = {}
            for event in history.events:
                at = event.event_time.ToDatetime().timestamp()
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                    scheduled[event.event_id] = at
                if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                    continue
                attrs = event.activity_task_started_event_attributes
                if attrs.attempt < 2 or not attrs.last_failure.HasField("timeout_failure_info"):
                    continue
                since = scheduled.get(attrs.scheduled_event_id, 0.0)
                after = [k for k in kills if since <= k < at]
                if after:
                    found.append(at - after[0])
    return found


async def _round(
    kube: Kube, driver: AwsDriver, store: Any, cluster: str, namespace: str, prefix: str
) -> tuple[list[ObjectRef], float, int]:
    """``SERVICES_COUNT`` Services created → all with an ingress → deleted → finalizers off:
    their references, the round's wall time and the ELBs beyond one per Service."""
    names = [f"{prefix}-k{i}" for i in range(SERVICES_COUNT)]
    keys = [f"{namespace}/{n}" for n in names]
    started = time.monotonic()
    deadline = started + CONVERGE_TIMEOUT_S
    for name in names:
        await asyncio.to_thread(kube.create, SERVICES, _service(name), namespace)
    while not all(_has_ingress(store.get(key)) for key in keys):
        if time.monotonic() > deadline:
            raise TimeoutError("the Services did not all get an ingress")
        await asyncio.sleep(0.1)
    duplicates = await asyncio.to_thread(_elbs, driver, cluster) - SERVICES_COUNT
    refs = [ObjectRef.of(SERVICES, store.get(key) or {}) for key in keys]
    for name in names:
        await asyncio.to_thread(kube.delete, SERVICES, name, namespace)

    def gone() -> bool:
        """Every Service deleted (its finalizer off: the workflow deleted the ELB)."""
        for name in names:
            obj = kube.get(SERVICES, name, namespace)
            if obj is not None and LB_FINALIZER in (obj["metadata"].get("finalizers") or []):
                return False
        return True

    while not await asyncio.to_thread(gone):
        if time.monotonic() > deadline:
            raise TimeoutError("the Services were not all deleted")
        await asyncio.sleep(0.5)
    return refs, time.monotonic() - started, duplicates


async def worker_kill_figures(ctx: BenchContext) -> dict[str, float]:
    kube = ctx.kube
    scope = uuid.uuid4().hex[:8]
    cluster, task_queue = f"bench-kill-{scope}", f"bench-kill-{scope}"
    namespace = f"bench-kill-{scope}"
    ccm = ctx.settings.ccm.model_copy(update={"node_selector": f"cloudloop-bench-lb={scope}"})
    settings = ctx.settings.model_copy(
        update={
            "cluster_name": cluster,
            "ccm": ccm,
            "temporal": ctx.settings.temporal.model_copy(update={"task_queue": task_queue}),
        }
    )
    driver = AwsDriver(AWS.section(settings))
    world = _make_world(driver, cluster)
    _make_nodes(ctx, scope, world)
    kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    informers = Informers(kube)
    starter = ServiceStarter(
        kube,
        ctx.client,
        services=informers.services(namespace=namespace),
        nodes=informers.nodes(label_selector=ccm.node_selector),
        task_queue=task_queue,
        cluster=cluster,
        provider=settings.provider,
        concurrency=8,
    )
    store = starter.services.store
    env = _worker_env(ctx, cluster, task_queue)
    kills: list[float] = []
    refs: list[ObjectRef] = []
    walls: list[float] = []
    most_duplicates = 0
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="cloudloop-bench-kill-") as logs:
        steady, victim = _Worker("steady", env, Path(logs)), _Worker("victim", env, Path(logs))
        await asyncio.to_thread(steady.start, wait=True)
        await asyncio.to_thread(victim.start, wait=True)
        stop = asyncio.Event()

        async def killer() -> None:
            wait_s = FIRST_KILL_S
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait_s)
                wait_s = KILL_EVERY_S
                if stop.is_set():
                    return
                victim.kill()
                kills.append(time.time())
                await asyncio.to_thread(victim.start, wait=False)

        task = asyncio.create_task(starter.run())
        kill_task = asyncio.create_task(killer())
        try:
            while len(kills) < MIN_KILLS or not refs:
                round_refs, converge_s, duplicates = await _round(
                    kube, driver, store, cluster, namespace, f"r{len(walls)}"
                )
                refs += round_refs
                walls.append(converge_s)
                most_duplicates = max(most_duplicates, duplicates)
        finally:
            stop.set()
            await asyncio.gather(kill_task, return_exceptions=True)
            starter.stop()
            informers.stop()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await asyncio.to_thread(victim.stop)
            await asyncio.to_thread(steady.stop)
    figures["worker_kill_duplicate_elbs"] = float(most_duplicates)
    figures["worker_kill_converge_s"] = max(walls)
    figures["worker_kill_rounds"] = float(len(walls))
    figures["worker_kill_orphan_elbs"] = float(await asyncio.to_thread(_elbs, driver, cluster))
    ids = [workflow_id(ref) for ref in refs]
    recoveries = await _recoveries(ctx, ids, kills)
    figures["worker_kill_kills"] = float(len(kills))
    figures["worker_kill_recovered_activities"] = float(len(recoveries))
    if recoveries:
        figures["worker_kill_recovery_s_p50"] = statistics.median(recoveries)
        figures["worker_kill_recovery_s_p95"] = (
            statistics.quantiles(recoveries, n=20, method="inclusive")[18]
            if len(recoveries) > 1
            else recoveries[0]
        )
    with contextlib.suppress(Exception):
        kube.delete(NAMESPACES, namespace)
    return figures
