"""Fault tests of the node termination handler: a worker SIGKILLed in the middle of a drain, and
a PodDisruptionBudget that never allows the drain."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import NODES
from cloudloop.messages.termination import TAINT_KEYS, DrainResult, EventKind
from devstack.audit import eviction_audit_log, read_evictions
from devstack.backends.aws import NthCloud, asg_terminate, spot_itn
from devstack.local import LocalStack
from tests.helpers import eventually, eventually_async
from tests.support.workers import Workers
from tests.termination.support import (
    delete_nodes,
    drain_workflows,
    kwok_node,
    metric,
    node_events,
    node_ready,
    nth_settings,
    nth_worker_env,
    pdb,
    processor,
    replica_set,
    running,
    running_pods,
    spare_node,
    taints,
    token_calls,
    workload,
)
from workers.main import build_worker

pytestmark = [pytest.mark.stack, pytest.mark.fault]


async def test_worker_sigkill_during_drain_converges(
    stack: LocalStack,
    aws: NthCloud,
    kube: Kube,
    client: Client,
    settings: Settings,
    namespace: str,
    workers: Workers,
) -> None:
    queue = aws.queue()
    asg, hook, instance, dns = aws.asg_instance()
    token = str(uuid.uuid4())
    source = kwok_node(kube, dns, namespace)
    spare = ""
    pods = 8
    audit = eviction_audit_log(stack.state_dir)
    try:
        # No spare Node yet: one eviction is allowed, then the PDB blocks the drain.
        await workload(kube, namespace, source, namespace, replicas=pods, spare=False)
        config = nth_settings(
            settings, stack, queue, eviction_retry_interval_s=1.0, activity_heartbeat_timeout_s=2.0
        )
        env = nth_worker_env(config, stack)
        first = await asyncio.to_thread(workers.start, env, ready_timeout_s=120)
        async with running(processor(config, kube, client)):
            aws.send(queue, asg_terminate(asg, hook, instance, token))

            def evicted() -> list[str]:
                return [e.name for e in read_evictions(audit, namespace) if 200 <= e.code < 300]

            await eventually(
                lambda: node_events(kube, source, "EvictionBlocked"),
                timeout=60,
                what="drain under way",
            )
            first.kill()  # SIGKILL mid-round: no graceful shutdown
            killed_at = time.time()
            assert len(evicted()) == 1
            spare = await spare_node(kube, namespace)
            await asyncio.to_thread(workers.start, env, ready_timeout_s=120)
            await eventually(lambda: aws.depth(queue) == 0, timeout=120, what="drain converged")

        # Every pod evicted exactly once, across both workers; the drain went on after the kill.
        successes = Counter(evicted())
        assert len(successes) == pods and set(successes.values()) == {1}, successes
        assert len(running_pods(kube, namespace, spare)) == pods
        assert running_pods(kube, namespace, source) == []
        # The lifecycle action completed once, after the drain; heartbeats outlived the worker.
        completes = token_calls(stack, token, "CompleteLifecycleAction")
        assert [c["status"] for c in completes if c["status"] == 200] == [200], completes
        heartbeats = token_calls(stack, token, "RecordLifecycleActionHeartbeat")
        assert any(h["time"] > killed_at for h in heartbeats), heartbeats
        assert all(h["time"] < completes[-1]["time"] for h in heartbeats)
        (run,) = await drain_workflows(client, config, source)
        result = await client.get_workflow_handle(run.id, result_type=DrainResult).result()
        assert result.lifecycle_actions_completed == [token]
    finally:
        delete_nodes(kube, source, *([spare] if spare else []))


async def test_pdb_that_never_allows_disruption(
    stack: LocalStack, aws: NthCloud, kube: Kube, client: Client, settings: Settings, namespace: str
) -> None:
    """The drain retries within its timeout, then fails: the message stays, the node stays
    cordoned, and the Node's Events and the metrics say why; redelivery tries again."""
    queue = aws.queue()
    instance, dns = aws.plain_instance()
    source = kwok_node(kube, dns, namespace)
    config = nth_settings(
        settings,
        stack,
        queue,
        node_termination_grace_period_s=4.0,
        eviction_retry_interval_s=0.5,
        visibility_timeout_s=3,
    )
    blocked_before = metric("nth_evictions_total", {"outcome": "blocked"})
    errors_before = metric(
        "actions_total", {"node_action": "cordon-and-drain", "node_status": "error"}
    )
    wf_id = ""
    try:
        await eventually(lambda: node_ready(kube, source), what="node Ready", timeout=60)
        replica_set(kube, namespace, "web", 2, namespace)
        pdb(kube, namespace, "web", max_unavailable=0)
        await eventually(lambda: len(running_pods(kube, namespace, source)) == 2, timeout=60)
        worker = build_worker(client, config, driver=AwsDriver(AWS.section(config)), kube=kube)
        async with worker, running(processor(config, kube, client)):
            aws.send(queue, spot_itn(instance))
            await eventually(
                lambda: node_events(kube, source, "EvictionBlocked"),
                what="EvictionBlocked Event",
                timeout=60,
            )
            assert metric("nth_drain_blocked_pods", {"node": source}) >= 1
            found = await eventually_async(
                lambda: drain_workflows(client, config, source), timeout=60
            )
            wf_id = found[0].id
            first = client.get_workflow_handle(wf_id, run_id=found[0].run_id)
            with pytest.raises(WorkflowFailureError) as failure:
                await first.result()
            cause = failure.value.cause
            assert isinstance(cause, ApplicationError) and cause.type == "DrainTimeout"
            assert "global timeout reached: 4s; 2 pod(s)" in cause.message

            # The message was not deleted: it comes back and a new run drains again.
            async def second_run() -> list[str] | None:
                runs = [wf.run_id async for wf in client.list_workflows(f"WorkflowId='{wf_id}'")]
                return runs if len(runs) >= 2 else None

            await eventually_async(second_run, timeout=30, what="redelivered message, new run")
            assert aws.depth(queue) == 1

        node = kube.get(NODES, source) or {}
        assert node["spec"].get("unschedulable") is True
        assert TAINT_KEYS[EventKind.SPOT_ITN] in taints(kube, source)
        assert len(running_pods(kube, namespace, source)) == 2  # nothing evicted
        codes = [e.code for e in read_evictions(eviction_audit_log(stack.state_dir), namespace)]
        assert codes and set(codes) == {429} and len(codes) >= 4, codes
        assert metric("nth_evictions_total", {"outcome": "blocked"}) >= blocked_before + 4
        assert (
            metric("actions_total", {"node_action": "cordon-and-drain", "node_status": "error"})
            >= errors_before + 1
        )
        errors = node_events(kube, source, "CordonAndDrainError")
        assert any("DrainTimeout" in e["message"] and wf_id in e["message"] for e in errors)
        assert all(e["type"] == "Warning" for e in node_events(kube, source, "EvictionBlocked"))
    finally:
        if wf_id:
            handle = client.get_workflow_handle(wf_id)
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await handle.terminate("test over")
        delete_nodes(kube, source)
