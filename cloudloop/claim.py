"""One cluster, one set of queues: a process claims its task queues before it uses them.

A worker (before it polls), a starter and the CSI controller (before their first start or
signal) claim each queue of their cluster's set (:meth:`TemporalSettings.all_queues`): they
start the queue's ``ClusterClaim`` workflow (:mod:`cloudloop.messages.claim`) with their
cluster's identity in its search attributes, or find the running one, and refuse when it names
another cluster. The identity is the cluster's ``clusterName`` and the UID of its
``kube-system`` Namespace, read from the cluster's own API server: two clusters that share a
name (a rebuilt cluster, a copied values file) still differ.

Rules:
- Fail closed: nothing is started, signalled or polled before every queue of the set is claimed
  (:class:`QueueClaim.ensure`; the starters' client is gated by :func:`gated`). Temporal or the
  API server not answering is an error to retry (the caller's backoff), never a pass.
- A refusal (:class:`ClaimRefused`) names both clusters (names and UIDs, nothing secret) and
  how to release the other's claim; the process logs it and exits with an error.
- A claim found terminated or released is made again by the next check (the cluster that
  checks first holds it); a running worker re-checks every ``recheck_s`` (:meth:`QueueClaim.keep`)
  and stops when its claim now names another cluster.
- Claims run on the cluster's general queue (its own worker runs their one workflow task).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    CreateScheduleInput,
    Interceptor,
    OutboundInterceptor,
    ScheduleHandle,
    SignalWorkflowInput,
    StartWorkflowInput,
    StartWorkflowUpdateInput,
    StartWorkflowUpdateWithStartInput,
    WorkflowHandle,
    WorkflowUpdateHandle,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from cloudloop import searchattrs
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import NAMESPACES
from cloudloop.messages.claim import CLAIM_WORKFLOW, ClaimInput, claim_workflow_id
from cloudloop.settings import CoreSettings, TemporalSettings

log = logging.getLogger(__name__)

#: The Namespace whose UID identifies a cluster (it exists from the first API server start and
#: is never deleted; upstream tools such as Cilium and Istio use it the same way).
IDENTITY_NAMESPACE = "kube-system"
#: The command that releases a claim.
RELEASE_COMMAND = "cloudloop temporal release-claim"
#: Each claim call's deadline (the API server calls have the kube client's own).
RPC_TIMEOUT = timedelta(seconds=10)


@dataclass(frozen=True)
class ClusterIdentity:
    """Who claims: ``name`` is the cluster's ``clusterName``, ``uid`` its kube-system UID."""

    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.name} (kube-system {self.uid or 'unknown'})"

    @classmethod
    def named_by(cls, settings: CoreSettings) -> ClusterIdentity:
        """The identity ``settings`` name (``cluster_name``, and ``cluster_uid`` when set)."""
        return cls(name=settings.cluster_name, uid=settings.cluster_uid)


def read_identity(kube: Kube, cluster_name: str) -> ClusterIdentity:
    """This cluster's identity, from its API server (a ``KubeError`` when it does not answer)."""
    namespace = kube.get(NAMESPACES, IDENTITY_NAMESPACE)
    uid = str((namespace or {}).get("metadata", {}).get("uid") or "")
    if not uid:
        raise LookupError(f"the API server has no {IDENTITY_NAMESPACE} Namespace to identify by")
    return ClusterIdentity(name=cluster_name, uid=uid)


class ClaimRefused(RuntimeError):
    """A queue of this cluster's set is claimed by another cluster."""

    def __init__(self, queue: str, mine: ClusterIdentity, holder: ClusterIdentity) -> None:
        self.queue, self.mine, self.holder = queue, mine, holder
        super().__init__(
            f"task queue {queue!r} is served by cluster {holder}; this is cluster {mine}: "
            f"refusing to run another cluster's work with this cluster's credentials. Give "
            f"this cluster its own queues (clusterName, or temporal.task_queue), or, if cluster "
            f"{holder.name} no longer uses them, release its claim with "
            f"`{RELEASE_COMMAND} --task-queue {queue}`"
        )


@dataclass(frozen=True)
class Claim:
    """A queue's claim as the server has it."""

    queue: str
    holder: ClusterIdentity
    provider: str
    workflow_id: str
    run_id: str


def claim_of(queue: str, attributes: Any, workflow_id: str, run_id: str) -> Claim:
    """The claim recorded in a claim workflow's search attributes."""
    return Claim(
        queue=queue,
        holder=ClusterIdentity(
            name=attributes.get(searchattrs.CLUSTER) or "",
            uid=attributes.get(searchattrs.CLUSTER_UID) or "",
        ),
        provider=attributes.get(searchattrs.PROVIDER) or "",
        workflow_id=workflow_id,
        run_id=run_id,
    )


async def claim_queue(
    client: Client, queue: str, identity: ClusterIdentity, *, provider: str, run_on: str
) -> Claim:
    """Start ``queue``'s claim for ``identity`` (or join the running one) and return it as
    recorded: the holder may be another cluster (the caller compares)."""
    workflow_id = claim_workflow_id(queue)
    handle: WorkflowHandle[Any, Any] = await client.start_workflow(
        CLAIM_WORKFLOW,
        ClaimInput(queue=queue, cluster=identity.name, cluster_uid=identity.uid),
        id=workflow_id,
        task_queue=run_on,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        search_attributes=searchattrs.for_claim(
            cluster=identity.name, cluster_uid=identity.uid, provider=provider, queue=queue
        ),
        static_summary=f"task queue {queue} is cluster {identity.name}'s",
        rpc_timeout=RPC_TIMEOUT,
    )
    described = await client.get_workflow_handle(workflow_id, run_id=handle.result_run_id).describe(
        rpc_timeout=RPC_TIMEOUT
    )
    return claim_of(queue, described.typed_search_attributes, workflow_id, described.run_id)


async def read_claim(client: Client, queue: str) -> Claim | None:
    """``queue``'s running claim, or ``None`` when no running claim holds it."""
    from temporalio.client import WorkflowExecutionStatus

    workflow_id = claim_workflow_id(queue)
    try:
        described = await client.get_workflow_handle(workflow_id).describe(rpc_timeout=RPC_TIMEOUT)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    if described.status != WorkflowExecutionStatus.RUNNING:
        return None
    return claim_of(queue, described.typed_search_attributes, workflow_id, described.run_id)


async def refuse_if_claimed_elsewhere(
    client: Client, queues: list[str], mine: ClusterIdentity
) -> None:
    """For a one-off start from outside the cluster (the CLI: it holds no claim of its own):
    raise :class:`ClaimRefused` when a running claim of one of ``queues`` names another cluster
    (another name, or another UID when both are known). An unclaimed queue passes: its work
    waits for a worker, and a worker claims before it polls."""
    for queue in queues:
        claim = await read_claim(client, queue)
        if claim is None:
            continue
        holder = claim.holder
        if holder.name != mine.name or (holder.uid and mine.uid and holder.uid != mine.uid):
            raise ClaimRefused(queue, mine, holder)


async def release_claim(client: Client, queue: str, *, by: str, reason: str = "") -> Claim | None:
    """End ``queue``'s running claim by terminating it (no worker needed: the holder's may be
    gone for good); ``None``: none was running. ``by`` and ``reason`` stay in its history."""
    claim = await read_claim(client, queue)
    if claim is None:
        return None
    await client.get_workflow_handle(claim.workflow_id, run_id=claim.run_id).terminate(
        reason=f"claim released by {by or 'an operator'}" + (f": {reason}" if reason else ""),
        rpc_timeout=RPC_TIMEOUT,
    )
    return claim


class QueueClaim:
    """This process's claim of its cluster's queue set (see the module's rules)."""

    def __init__(
        self,
        client: Client,
        temporal: TemporalSettings,
        identify: Callable[[], ClusterIdentity],
        *,
        provider: str,
        recheck_s: float = 60.0,
        on_refused: Callable[[ClaimRefused], None] | None = None,
    ) -> None:
        self.client = client
        self.queues = temporal.all_queues()
        self.run_on = temporal.task_queue
        self.identify = identify
        self.provider = provider
        self.recheck_s = recheck_s
        #: Called once, when a check finds another cluster holding a queue (stop the process).
        self.on_refused = on_refused
        self.identity: ClusterIdentity | None = None
        #: Set once every queue was found claimed by this cluster.
        self.claimed = False
        #: The refusal, once one happened (a refused process never claims again).
        self.refused: ClaimRefused | None = None
        self._lock = asyncio.Lock()

    async def ensure(self, *, again: bool = False) -> None:
        """Claim (or confirm) every queue of the set; raise :class:`ClaimRefused`, or what
        Temporal or the API server raised (retry later). ``again``: check even when claimed."""
        if self.refused is not None:
            raise self.refused
        if self.claimed and not again:
            return
        async with self._lock:
            if self.refused is not None:
                raise self.refused
            if self.claimed and not again:
                return
            if self.identity is None:
                self.identity = await asyncio.to_thread(self.identify)
            for queue in self.queues:
                claim = await claim_queue(
                    self.client, queue, self.identity, provider=self.provider, run_on=self.run_on
                )
                if claim.holder != self.identity:
                    self.claimed = False
                    self.refused = ClaimRefused(queue, self.identity, claim.holder)
                    log.error("%s", self.refused)
                    if self.on_refused is not None:
                        self.on_refused(self.refused)
                    raise self.refused
            if not self.claimed:
                log.info(
                    "task queues %s claimed for cluster %s", ", ".join(self.queues), self.identity
                )
            self.claimed = True

    async def hold(self, stop: asyncio.Event) -> None:
        """:meth:`first`, then :meth:`keep`, until ``stop`` or a refusal (``on_refused``)."""
        with contextlib.suppress(ClaimRefused):
            if await self.first(stop):
                await self.keep(stop)

    async def first(self, stop: asyncio.Event, *, max_delay_s: float = 30.0) -> bool:
        """:meth:`ensure`, retried with backoff while Temporal or the API server does not
        answer; ``True`` once claimed, ``False`` when stopped first; raises a refusal."""
        delay = 1.0
        while not stop.is_set():
            try:
                await self.ensure()
                return True
            except ClaimRefused:
                raise
            except Exception as exc:  # Temporal or the API server unreachable: retry
                log.warning("claiming task queues: %s; retry in %.0fs", exc, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, max_delay_s)
        return False

    async def keep(self, stop: asyncio.Event) -> None:
        """Re-check the claim every ``recheck_s`` until ``stop`` (a terminated claim is made
        again); return once another cluster holds a queue (``on_refused`` was called)."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.recheck_s)
            if stop.is_set():
                return
            try:
                await self.ensure(again=True)
            except ClaimRefused:
                return
            except Exception as exc:  # unreachable for now: the next round checks again
                log.warning("re-checking the task-queue claim: %s", exc)


def for_process(
    client: Client,
    settings: CoreSettings,
    kube: Kube,
    *,
    on_refused: Callable[[ClaimRefused], None] | None = None,
) -> QueueClaim:
    """The claim of a process of ``settings``' cluster, identified through ``kube`` (or by
    ``settings.cluster_uid`` when set: a worker serving a cluster that does not exist yet, such as
    the layouts that bootstrap it, names the identity itself)."""
    return QueueClaim(
        client,
        settings.temporal,
        (
            (lambda: ClusterIdentity.named_by(settings))
            if settings.cluster_uid
            else (lambda: read_identity(kube, settings.cluster_name))
        ),
        provider=settings.provider,
        on_refused=on_refused,
    )


def gated(client: Client, claim: QueueClaim) -> Client:
    """``client`` (the same connection) whose starts, signals, updates and schedules first make
    sure of ``claim``: nothing reaches the queues before this cluster holds them. ``claim``
    itself keeps the ungated client (its own starts are the check)."""
    config = client.config()
    config["interceptors"] = [*config["interceptors"], _ClaimGate(claim)]
    return Client(**config)


class _ClaimGate(Interceptor):
    def __init__(self, claim: QueueClaim) -> None:
        self.claim = claim

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _GatedOutbound(next, self.claim)


class _GatedOutbound(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, claim: QueueClaim) -> None:
        super().__init__(next)
        self.claim = claim

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        await self.claim.ensure()
        return await super().start_workflow(input)

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        await self.claim.ensure()
        await super().signal_workflow(input)

    async def start_workflow_update(
        self, input: StartWorkflowUpdateInput
    ) -> WorkflowUpdateHandle[Any]:
        await self.claim.ensure()
        return await super().start_workflow_update(input)

    async def start_update_with_start_workflow(
        self, input: StartWorkflowUpdateWithStartInput
    ) -> WorkflowUpdateHandle[Any]:
        await self.claim.ensure()
        return await super().start_update_with_start_workflow(input)

    async def create_schedule(self, input: CreateScheduleInput) -> ScheduleHandle:
        await self.claim.ensure()
        return await super().create_schedule(input)
