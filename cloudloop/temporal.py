"""Temporal client and worker factory, and the one start / signal-with-start helper.

The client uses the pydantic converter with the payload codec (:mod:`cloudloop.codec`) and an
optional metrics runtime; workers build from the client, so they share its converter, and shut
down gracefully. :func:`signal_with_start` is how every starter starts or signals a workflow.
Also the namespace set-up (``cloudloop temporal setup``) and the guard that names it when the
server lacks a search attribute.

Rules:
- :func:`connect` is the one client factory: with the codec on and no key it raises
  :class:`~cloudloop.codec.CodecConfigError` at once; a ``payloads=False`` client (operator calls
  only) needs no key and refuses to encode or decode any payload.
- :func:`signal_with_start`: deterministic ID, ``USE_EXISTING``, a reuse policy per workflow
  kind, search attributes; ``cloudloop_workflows_started_total`` counts only real starts (the
  SDK's private ``_start_workflow_response`` is read in :func:`started_run` and nowhere else).
- Starters connect lazily (Temporal may run on nodes they initialize first); a worker retries
  :func:`connect_with_retry`. :func:`setup_namespace` only adds missing search attributes (one of
  another type is a conflict, never overwritten); a start refused for want of one logs one ERROR.
- ``temporalio.worker`` is imported only when a worker is built; a worker's build ID is the
  package version and a digest of its workflow modules' source (why: ``bench/README.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import importlib.metadata
import inspect
import logging
import re
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    StartWorkflowInput,
    TLSConfig,
    WorkflowHandle,
)
from temporalio.common import (
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.converter import PayloadCodec
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RPCError

from cloudloop import codec, searchattrs
from cloudloop.metrics import WORKFLOW_SIGNALS, WORKFLOWS_STARTED
from cloudloop.settings import TemporalSettings

if TYPE_CHECKING:
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

log = logging.getLogger(__name__)

#: The command that registers what a refused start was missing.
SETUP_COMMAND = "cloudloop temporal setup"
#: How the server words a start whose search attribute it does not know (dev/SQL and ES visibility).
_MISSING_ATTRIBUTE = re.compile(
    r"no mapping defined for search attribute (\w+)|search attribute (\w+) is not defined"
)


def new_runtime(metrics_bind: str | None) -> Runtime:
    """A Temporal SDK runtime exporting its metrics on ``metrics_bind`` (host:port), if given."""
    if not metrics_bind:
        return Runtime(telemetry=TelemetryConfig())
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=metrics_bind)))


def _tls(settings: TemporalSettings) -> TLSConfig | bool:
    tls = settings.tls
    if not tls.enabled:
        return False

    def read(path: Any) -> bytes | None:
        return path.read_bytes() if path is not None and path.exists() else None

    return TLSConfig(
        server_root_ca_cert=read(tls.ca_file),
        client_cert=read(tls.cert_file),
        client_private_key=read(tls.key_file),
    )


class _NoPayloads(PayloadCodec):
    """The codec of a client for operator calls only: it has no key, so it takes no payload."""

    async def encode(self, payloads: Sequence[Any]) -> list[Any]:
        return self._refuse(payloads)

    async def decode(self, payloads: Sequence[Any]) -> list[Any]:
        return self._refuse(payloads)

    @staticmethod
    def _refuse(payloads: Sequence[Any]) -> list[Any]:
        if payloads:
            raise codec.CodecError("this Temporal client is for operator calls only (no key)")
        return []


async def connect(
    settings: TemporalSettings,
    *,
    runtime: Runtime | None = None,
    lazy: bool = False,
    payloads: bool = True,
) -> Client:
    """A client of ``settings.namespace``; ``lazy`` connects at the first call instead of now;
    ``payloads=False``: for operator and listing calls only (no key needed, no payload taken)."""
    if payloads:
        converter = codec.data_converter(codec.key_ring(settings.codec))
    else:
        converter = dataclasses.replace(codec.data_converter(None), payload_codec=_NoPayloads())
    api_key = settings.api_key_file.read_text().strip() if settings.api_key_file else None
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        data_converter=converter,
        runtime=runtime,
        tls=_tls(settings),
        api_key=api_key,
        interceptors=[SearchAttributeGuard(settings.namespace)],
        lazy=lazy,
    )


async def connect_with_retry(
    settings: TemporalSettings,
    *,
    runtime: Runtime | None = None,
    stop: asyncio.Event | None = None,
    max_delay_s: float = 30.0,
) -> Client | None:
    """:func:`connect`, retried with backoff (one log line per attempt); ``None`` once stopped."""
    delay = 1.0
    while stop is None or not stop.is_set():
        try:
            return await connect(settings, runtime=runtime)
        except RuntimeError as exc:
            log.warning(
                "Temporal at %s unreachable (%s); retry in %.0fs", settings.address, exc, delay
            )
        if stop is None:
            await asyncio.sleep(delay)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
        delay = min(delay * 2, max_delay_s)
    return None


def missing_search_attribute(error: BaseException) -> str | None:
    """The search attribute a refused start named as unknown to the server, if that was why."""
    if not isinstance(error, RPCError):
        return None
    found = _MISSING_ATTRIBUTE.search(error.message)
    return (found.group(1) or found.group(2)) if found else None


class SearchAttributeGuard(Interceptor):
    """Names ``cloudloop temporal setup`` (once per client) when a start misses an attribute."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        #: The server names one missing attribute per refusal (any of them): one error in all.
        self.reported = False

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _GuardedOutbound(next, self)


class _GuardedOutbound(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, guard: SearchAttributeGuard) -> None:
        super().__init__(next)
        self.guard = guard

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        try:
            return await super().start_workflow(input)
        except RPCError as exc:
            name = missing_search_attribute(exc)
            if name is not None and not self.guard.reported:
                self.guard.reported = True
                log.error(
                    "Temporal namespace %r has no search attribute %s, so no workflow can start; "
                    "register the attributes with `%s` (the Helm chart's hook Job runs it)",
                    self.guard.namespace,
                    name,
                    SETUP_COMMAND,
                )
            raise


class SearchAttributeConflict(RuntimeError):
    """A search attribute cloudloop needs is registered with another type."""


async def setup_namespace(settings: TemporalSettings, *, wait_s: float = 120.0) -> list[str]:
    """Register the missing ``Cloudloop*`` search attributes of the namespace; return those added.

    Waits up to ``wait_s`` for the frontend to answer (a hook Job may start before Temporal).
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            client = await connect(settings, payloads=False)
            break
        except RuntimeError as exc:
            if time.monotonic() >= deadline:
                raise ConnectionError(f"{settings.address}: {exc}") from None
            log.info("waiting for Temporal at %s: %s", settings.address, exc)
            await asyncio.sleep(2)
    namespace = settings.namespace
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    known = {**dict(listed.system_attributes), **dict(listed.custom_attributes)}
    keyword = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
    conflicts = [
        f"{name} is {IndexedValueType.Name(known[name])}"
        for name in searchattrs.KEYWORDS
        if name in known and known[name] != keyword
    ]
    if conflicts:
        raise SearchAttributeConflict(
            f"namespace {namespace!r}: {'; '.join(conflicts)} (cloudloop needs Keyword)"
        )
    missing = [name for name in searchattrs.KEYWORDS if name not in known]
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace, search_attributes=dict.fromkeys(missing, keyword)
            )
        )
        log.info("namespace %r: added search attributes %s", namespace, ", ".join(missing))
    return missing


#: The project's own packages, passed through the workflow sandbox: workflow modules hold only
#: constants and definitions at module level, and import nothing but ``temporalio``, the standard
#: library, ``cloudloop.messages`` and ``cloudloop.rules`` (the import contracts of ``make lint``).
PASSTHROUGH_MODULES = ("workflows", "cloudloop")


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox every worker runs workflows in, with the project's packages passed through.

    The default sandbox re-imports each workflow's module (and every module it imports that is
    not passed through) for every run it builds: tens of milliseconds of the first workflow task
    of every run. Passed through, the modules are imported once per process; the sandbox still
    refuses non-deterministic calls (clock, random, I/O) inside workflow code.
    """
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


def worker_build_id(workflows: Sequence[type]) -> str:
    """``cloudloop-<version>-<digest>``: the digest covers the source of the modules that
    define ``workflows`` (what a workflow replays), in name order."""
    try:
        version = importlib.metadata.version("cloudloop")
    except importlib.metadata.PackageNotFoundError:
        version = "0+unknown"
    digest = hashlib.sha256()
    for name in sorted({workflow.__module__ for workflow in workflows}):
        digest.update(name.encode())
        with contextlib.suppress(KeyError, OSError, TypeError):  # no module or no source file
            digest.update(inspect.getsource(sys.modules[name]).encode())
    return f"cloudloop-{version}-{digest.hexdigest()[:16]}"


#: Local activity slots of a worker: short kube writes inside a workflow task.
MAX_CONCURRENT_LOCAL_ACTIVITIES = 32


def make_worker(
    client: Client,
    task_queue: str,
    *,
    workflows: Sequence[type],
    activities: Sequence[Callable[..., Any]],
    graceful_shutdown_s: float = 30.0,
    max_concurrent_activities: int = 100,
    max_concurrent_local_activities: int = MAX_CONCURRENT_LOCAL_ACTIVITIES,
    activities_per_second: float | None = None,
    poller_autoscaling: bool = True,
) -> Worker:
    """A worker whose sync activities run in a thread pool sized to the activity slots;
    ``activities_per_second`` caps the whole task queue's activity rate (server-side);
    ``poller_autoscaling`` lets the SDK scale its pollers with the queue's backlog.

    Activities go eagerly to the worker whose workflow task scheduled them (when the server has
    ``system.enableActivityEagerExecution``), except under a task-queue rate limit. Local
    activities run in the same pool as the regular ones: the pool has a thread for every
    slot of both, so a full set of long regular activities (a burst of VMs being watched) never
    holds back a workflow task's local activity (which would time the workflow task out).
    """
    from temporalio.worker import PollerBehaviorAutoscaling, Worker

    pollers: dict[str, Any] = {}
    if poller_autoscaling:
        pollers = {
            "workflow_task_poller_behavior": PollerBehaviorAutoscaling(),
            "activity_task_poller_behavior": PollerBehaviorAutoscaling(),
        }
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(workflows),
        activities=list(activities),
        workflow_runner=workflow_runner(),
        build_id=worker_build_id(workflows),
        activity_executor=ThreadPoolExecutor(
            max_workers=max_concurrent_activities + max_concurrent_local_activities,
            thread_name_prefix=f"activity-{task_queue}",
        ),
        max_concurrent_activities=max_concurrent_activities,
        max_concurrent_local_activities=max_concurrent_local_activities,
        max_task_queue_activities_per_second=activities_per_second,
        # An eagerly dispatched activity skips the task queue, and so its rate limit.
        disable_eager_activity_execution=activities_per_second is not None,
        graceful_shutdown_timeout=timedelta(seconds=graceful_shutdown_s),
        **pollers,
    )


def stop_on_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGTERM or SIGINT (Kubernetes pod termination, Ctrl-C)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


@dataclass(frozen=True)
class Start:
    """What :func:`signal_with_start` came to: the workflow's handle, and whether this call
    started the run (``False``: it joined, or signalled, one already running)."""

    handle: WorkflowHandle[Any, Any]
    started: bool


async def signal_with_start(
    client: Client,
    run: Callable[..., Any],
    arg: Any,
    *,
    kind: str,
    id: str,
    task_queue: str,
    search_attributes: TypedSearchAttributes,
    signal: str | None = None,
    signal_args: Sequence[Any] = (),
    reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
    summary: str | None = None,
    eager: bool = False,
) -> Start | None:
    """Start the workflow ``id`` (or join the running one) and deliver ``signal``, if any.

    ``None`` when the reuse policy refuses a new run (a run of that ID completed); ``kind``
    labels ``cloudloop_workflows_started_total``; ``summary`` is the run's one-line title in the
    Temporal UI (what it does to which object). RPC errors propagate (callers retry).

    ``eager`` (when the run most likely does not exist yet, and ``arg`` already says what the
    signal says): a plain start that asks for eager start, so a worker of this process runs the
    first workflow task from the start's answer (no task-queue round trip; signal-with-start
    cannot be eager); the signal follows only when the call joined a running workflow.
    """
    extra: dict[str, Any] = {}
    if summary:
        extra["static_summary"] = summary
    eager_start = eager and signal is not None
    if eager_start:
        extra["request_eager_start"] = True
    elif signal is not None:
        extra.update(start_signal=signal, start_signal_args=list(signal_args))
    try:
        handle: WorkflowHandle[Any, Any] = await client.start_workflow(
            run,
            arg,
            id=id,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=reuse_policy,
            search_attributes=search_attributes,
            **extra,
        )
    except WorkflowAlreadyStartedError:
        log.debug("workflow %s: a completed run blocks a new one", id)
        return None
    started = started_run(handle) is not False
    if eager_start and not started:
        assert signal is not None
        joined = client.get_workflow_handle(id, run_id=handle.result_run_id)
        await joined.signal(signal, args=list(signal_args))
    if signal is not None:
        WORKFLOW_SIGNALS.labels(kind, signal).inc()
    if started:
        WORKFLOWS_STARTED.labels(kind).inc()
        log.info("started workflow %s", id)
    return Start(handle=handle, started=started)


def started_run(handle: WorkflowHandle[Any, Any]) -> bool | None:
    """Whether the start call that made ``handle`` began a new run (``None``: not known).

    The SDK keeps the start response in a private field (every start and signal-with-start
    response has ``started``); it is read here only.
    """
    response = getattr(handle, "_start_workflow_response", None)
    started = getattr(response, "started", None)
    return None if started is None else bool(started)
