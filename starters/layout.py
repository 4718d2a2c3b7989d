"""Start a layout action (``cloudloop layout plan|apply|destroy``) and follow it to its end.

:func:`run_layout` starts the ``Layout`` workflow (``layout/<prefix>``, or
``layout/<prefix>/plan`` for a plan) with conflict policy ``USE_EXISTING``: a second
``apply`` while one runs joins it (and follows it) instead of starting another; a different
action while one runs is refused with the running one's ID. It then polls the workflow's and
its module children's ``progress`` queries and reports every resource's state change as one
line, so the user sees each step as it happens (and the Temporal UI shows the same history).

The input holds only the config file's path (the workers read credentials from it) and the
cluster's identity; nothing secret is sent to Temporal.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Callable

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from cloudloop import searchattrs
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.resources import SECRETS
from cloudloop.messages.layout import (
    LayoutInput,
    LayoutProgress,
    LayoutResult,
    ModuleProgress,
    ResourceStatus,
    plan_workflow_id,
    workflow_id,
)
from cloudloop.rules import discovery as cloud_data
from workflows.layout import LayoutModuleWorkflow, LayoutWorkflow

Report = Callable[[str], None]
_SIGNS = {"created": "+", "updated": "~", "unchanged": "=", "deleted": "-", "absent": " "}


class LayoutFailed(RuntimeError):
    """The action ended with an error (the cloud's message, or a refusal)."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


def _line(module: str, status: ResourceStatus) -> str:
    if status.state == "failed":
        return f"  ! {status.key} ({module}): {status.error}"
    if status.state == "running":
        return f"  … {status.key} ({module})"
    sign = _SIGNS.get(status.action or "", "?")
    changed = ", ".join(c.field for c in status.changes)
    return f"  {sign} {status.key} {status.action}" + (f" ({changed})" if changed else "")


class _Follower:
    def __init__(self, client: Client, report: Report) -> None:
        self.client, self.report = client, report
        self.seen: dict[str, tuple[str, str]] = {}
        self.finished: set[str] = set()
        self.phase = ""

    async def poll(self, handle: WorkflowHandle[LayoutWorkflow, LayoutResult]) -> None:
        with contextlib.suppress(RPCError):
            progress: LayoutProgress = await handle.query(LayoutWorkflow.progress)
            for module in progress.modules:
                if module.state == "pending" or module.module in self.finished:
                    continue
                child: WorkflowHandle[LayoutModuleWorkflow, object] = (
                    self.client.get_workflow_handle_for(
                        LayoutModuleWorkflow.run,
                        module.workflow_id,
                    )
                )
                with contextlib.suppress(RPCError):
                    detail: ModuleProgress = await child.query(LayoutModuleWorkflow.progress)
                    self._resources(module.module, detail.resources)
                if module.state in ("done", "failed"):
                    self.finished.add(module.module)
            if progress.phase != self.phase:  # after the steps that led to it
                self.phase = progress.phase
                self.report(f"{progress.action}: {progress.phase}")

    def _resources(self, module: str, resources: list[ResourceStatus]) -> None:
        for status in resources:
            mark = (status.state, status.action or "")
            if status.state == "pending" or self.seen.get(status.key) == mark:
                continue
            self.seen[status.key] = mark
            self.report(_line(module, status))


async def run_layout(
    client: Client,
    task_queue: str,
    input: LayoutInput,
    *,
    report: Report | None = None,
    poll_s: float = 0.5,
) -> LayoutResult:
    """Start (or join) the action and wait for its result, reporting progress."""
    prefix = input.cluster.prefix
    wid = plan_workflow_id(prefix) if input.action == "plan" else workflow_id(prefix)
    handle = await client.start_workflow(
        LayoutWorkflow.run,
        input,
        id=wid,
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        search_attributes=searchattrs.for_object(
            cluster=prefix, provider=input.provider, kind="Layout", namespace="", name=prefix
        ),
    )
    with contextlib.suppress(RPCError):
        running: LayoutProgress = await handle.query(LayoutWorkflow.progress)
        if running.action != input.action:
            raise LayoutFailed(
                f"a {running.action} of {prefix} is running ({wid}); wait for it or cancel it",
                "Busy",
            )
    follower = _Follower(client, report or (lambda _: None))
    result_task = asyncio.ensure_future(handle.result())
    try:
        while True:
            done, _ = await asyncio.wait({result_task}, timeout=poll_s)
            await follower.poll(handle)
            if done:
                break
        return result_task.result()
    except WorkflowFailureError as exc:
        cause: BaseException | None = exc.cause
        while cause is not None and not isinstance(cause, ApplicationError):
            cause = cause.__cause__
        if isinstance(cause, ApplicationError):
            raise LayoutFailed(cause.message, cause.type or "") from None
        raise LayoutFailed(str(exc.cause or exc)) from None
    finally:
        result_task.cancel()


#: Where dhctl keeps the per-master data device paths (key = node name).
DEVICE_PATH_SECRET = ("d8-system", "d8-masters-kubernetes-data-device-path")


def _upsert_secret_keys(kube: Kube, namespace: str, name: str, data: dict[str, str]) -> None:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    if kube.get(SECRETS, name, namespace) is None:
        try:
            kube.create(
                SECRETS, {"metadata": {"name": name}, "type": "Opaque", "data": encoded}, namespace
            )
            return
        except KubeError as exc:
            if not exc.conflict:
                raise
    kube.patch(SECRETS, name, {"data": encoded}, namespace)


def publish(kube: Kube, result: LayoutResult) -> list[str]:
    """Write an apply's results where the cluster reads them: ``cloud_discovery_data`` into
    ``kube-system/d8-provider-cluster-configuration`` (key ``cloud-provider-discovery-data.json``,
    other keys kept) and each master's data device path into
    ``d8-system/d8-masters-kubernetes-data-device-path``; the Secrets written."""
    written: list[str] = []
    if result.cloud_discovery_data:
        _upsert_secret_keys(
            kube,
            "kube-system",
            cloud_data.PROVIDER_CONFIGURATION_SECRET,
            {cloud_data.PROVIDER_DISCOVERY_KEY: json.dumps(result.cloud_discovery_data)},
        )
        written.append(f"kube-system/{cloud_data.PROVIDER_CONFIGURATION_SECRET}")
    devices = {
        m.node_name: str(m.outputs["kubernetes_data_device_path"])
        for m in result.modules
        if m.node_name and m.outputs.get("kubernetes_data_device_path")
    }
    if devices:
        namespace, name = DEVICE_PATH_SECRET
        _upsert_secret_keys(kube, namespace, name, devices)
        written.append(f"{namespace}/{name}")
    return written
