"""Start a layout action (``cloudloop layout plan|apply|destroy``) and follow it to its end.

:func:`run_layout` starts the ``Layout`` workflow and polls its and its module children's
``progress`` queries, reporting every resource's state change as one line; :func:`state_records`
reads an upstream Terraform state for ``adopt``; :func:`publish` writes an apply's results where
the cluster reads them (``kube-system/d8-provider-cluster-configuration``, the data device paths,
the state Secrets in dhctl's format). Why: docs/decisions/0055-one-layout-engine-for-every-cloud.md.

Rules:
- Conflict policy ``USE_EXISTING``: a second ``apply`` while one runs joins it; a different
  action, or other inputs (the input's digest is the run's memo), is refused with the running
  one's ID.
- The input holds only the config file's path, the cluster's identity and, for ``adopt``, the
  state's records reduced to IDs and identity attributes: nothing secret is sent to Temporal.
- :func:`publish` lists the IDs found, so a later adoption finds what was made.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from cloudloop import searchattrs
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import ObjectMeta, Secret
from cloudloop.kube.resources import CONFIG_MAPS, NAMESPACES, SECRETS
from cloudloop.layouts import tfstate
from cloudloop.layouts.model import ResourceDef
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
from cloudloop.rules.requests import fingerprint
from cloudloop.temporal import started_run
from workflows.layout import LayoutModuleWorkflow, LayoutWorkflow

Report = Callable[[str], None]
_SIGNS = {
    "created": "+",
    "updated": "~",
    "unchanged": "=",
    "deleted": "-",
    "absent": " ",
    "adopted": "@",
    "missing": "!",
}


class LayoutFailed(RuntimeError):
    """The action ended with an error (the cloud's message, or a refusal)."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


#: A progress query that fails (the server unreachable, or the worker's answer failed, say a
#: replay over the deadlock detector's 2 s on a loaded worker) skips one report, never the run.
_QUERY_ERRORS = (RPCError, WorkflowQueryFailedError)


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
        with contextlib.suppress(*_QUERY_ERRORS):
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
                with contextlib.suppress(*_QUERY_ERRORS):
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


#: The memo key of a run's input digest (a joining call with another digest is refused).
REQUEST_MEMO = "request"


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
    scope = input.id_scope
    wid = plan_workflow_id(prefix, scope) if input.action == "plan" else workflow_id(prefix, scope)
    request = fingerprint(input)
    handle = await client.start_workflow(
        LayoutWorkflow.run,
        input,
        id=wid,
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        memo={REQUEST_MEMO: request},
        search_attributes=searchattrs.for_object(
            cluster=prefix, provider=input.provider, kind="Layout", namespace="", name=prefix
        ),
    )
    with contextlib.suppress(*_QUERY_ERRORS):
        running: LayoutProgress = await handle.query(LayoutWorkflow.progress)
        if running.action != input.action:
            raise LayoutFailed(
                f"a {running.action} of {prefix} is running ({wid}); wait for it or cancel it",
                "Busy",
            )
    if started_run(handle) is False:
        theirs = (await (await handle.describe()).memo()).get(REQUEST_MEMO)
        if theirs is not None and theirs != request:  # a run from before the memo: join it
            raise LayoutFailed(
                f"a {input.action} of {prefix} with other inputs (file, cloud-config) is "
                f"running ({wid}); wait for it or cancel it, then run yours",
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
        result: LayoutResult = result_task.result()
        if result.action != input.action:  # the busy check's query failed: joined another
            raise LayoutFailed(
                f"a {result.action} of {prefix} was running ({wid}) and has ended; "
                f"run the {input.action} again",
                "Busy",
            )
        return result
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


#: The provider document's key in ``d8-provider-cluster-configuration`` (dhctl's).
PROVIDER_DOCUMENT_KEY = "cloud-provider-cluster-configuration.yaml"


def _upsert_secret_keys(
    kube: Kube,
    namespace: str,
    name: str,
    data: dict[str, str],
    labels: Mapping[str, str] | None = None,
) -> None:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    metadata: ObjectMeta = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    if kube.get(SECRETS, name, namespace) is None:
        try:
            kube.create(
                SECRETS, {"metadata": metadata, "type": "Opaque", "data": encoded}, namespace
            )
            return
        except KubeError as exc:
            if not exc.conflict:
                raise
    patch: Secret = {"data": encoded}
    if labels:
        patch["metadata"] = {"labels": dict(labels)}
    kube.patch(SECRETS, name, patch, namespace)


def ensure_namespace(kube: Kube, namespace: str) -> None:
    """Make ``namespace`` unless it is there (dhctl creates ``d8-system`` during bootstrap, so a
    cluster the layout's results go into before that has none)."""
    if kube.get(NAMESPACES, namespace) is not None:
        return
    try:
        kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    except KubeError as exc:
        if not exc.conflict:
            raise


#: dhctl's ConfigMap naming the cluster's UUID (key ``cluster-uuid``).
CLUSTER_UUID_CONFIG_MAP = ("kube-system", "d8-cluster-uuid")


def _create_cluster_uuid(kube: Kube, uuid: str) -> bool:
    """Make ``kube-system/d8-cluster-uuid`` unless the cluster has one (kept as it is)."""
    namespace, name = CLUSTER_UUID_CONFIG_MAP
    if kube.get(CONFIG_MAPS, name, namespace) is not None:
        return False
    try:
        kube.create(
            CONFIG_MAPS, {"metadata": {"name": name}, "data": {"cluster-uuid": uuid}}, namespace
        )
    except KubeError as exc:
        if not exc.conflict:
            raise
        return False
    return True


def _node_group(module_id: str) -> str:
    """``master-0`` → ``master``; ``static-front-1`` → ``front``."""
    head, _, rest = module_id.partition("-")
    return "master" if head == "master" else rest.rsplit("-", 1)[0]


def _state(steps: list[Any], types: tfstate.StateTypes) -> str:
    resources = []
    for step in steps:
        kind, _, name = step.key.partition("/")
        resources.append((ResourceDef(kind=kind, name=name), step.outputs))
    return json.dumps(tfstate.render_state(resources, types), indent=2, sort_keys=True)


def publish(
    kube: Kube,
    result: LayoutResult,
    *,
    state_types: tfstate.StateTypes | None = None,
    provider_document: str | None = None,
    cluster_uuid: str = "",
) -> list[str]:
    """Write an apply's results where the cluster reads them: ``cloud_discovery_data`` (and,
    given, the provider document as dhctl keeps it, credentials included: it is a Secret) into
    ``kube-system/d8-provider-cluster-configuration`` (keys ``cloud-provider-discovery-data.json``
    and ``cloud-provider-cluster-configuration.yaml``, other keys kept), each master's data device
    path into ``d8-system/d8-masters-kubernetes-data-device-path`` and, with the provider's
    ``state_types``, the state Secrets in dhctl's format (IDs and names only, ``terraform_version``
    ``cloudloop``): ``d8-system/d8-cluster-terraform-state`` and per node
    ``d8-system/d8-node-terraform-state-<node>``. Given ``cluster_uuid``, the ConfigMap
    ``kube-system/d8-cluster-uuid`` dhctl writes at bootstrap (``cluster-uuid``) is made when the
    cluster has none (one that exists is never changed: ``layout destroy --kubeconfig`` checks it
    names the layout's cluster). ``d8-system`` is made first when the cluster has none yet, so
    nothing is written unless every namespace is there. The objects written."""
    written: list[str] = []
    ensure_namespace(kube, DEVICE_PATH_SECRET[0])
    if cluster_uuid and _create_cluster_uuid(kube, cluster_uuid):
        written.append("kube-system/d8-cluster-uuid")
    provider: dict[str, str] = {}
    if result.cloud_discovery_data:
        provider[cloud_data.PROVIDER_DISCOVERY_KEY] = json.dumps(result.cloud_discovery_data)
    if provider_document:
        provider[PROVIDER_DOCUMENT_KEY] = provider_document
    if provider:
        _upsert_secret_keys(kube, "kube-system", cloud_data.PROVIDER_CONFIGURATION_SECRET, provider)
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
    if state_types is None:
        return written
    namespace, name = tfstate.CLUSTER_STATE_SECRET
    for module in result.modules:
        if not module.node_name:
            _upsert_secret_keys(
                kube,
                namespace,
                name,
                {tfstate.CLUSTER_STATE_KEY: _state(module.steps, state_types)},
            )
            written.append(f"{namespace}/{name}")
            continue
        group = _node_group(module.module)
        node_secret = tfstate.NODE_STATE_PREFIX + module.node_name
        _upsert_secret_keys(
            kube,
            namespace,
            node_secret,
            {
                tfstate.NODE_STATE_KEY: _state(module.steps, state_types),
                tfstate.NODE_GROUP_SETTINGS_KEY: json.dumps({"name": group}),
            },
            labels={
                tfstate.NODE_GROUP_LABEL: group,
                tfstate.NODE_NAME_LABEL: module.node_name,
                tfstate.STATE_LABEL: "",
            },
        )
        written.append(f"{namespace}/{node_secret}")
    return written


class StateUnreadable(ValueError):
    """A state source that is not there or not a Terraform state."""


def _secret_states(
    secret: Mapping[str, Any], types: tfstate.StateTypes
) -> list[tfstate.StateResource]:
    data = secret.get("data") or {}
    meta = secret.get("metadata") or {}
    records: list[tfstate.StateResource] = []
    for key, scope in (
        (tfstate.CLUSTER_STATE_KEY, tfstate.BASE_SCOPE),
        (
            tfstate.NODE_STATE_KEY,
            (meta.get("labels") or {}).get(tfstate.NODE_NAME_LABEL)
            or str(meta.get("name", "")).removeprefix(tfstate.NODE_STATE_PREFIX),
        ),
    ):
        if key in data:
            text = base64.b64decode(data[key]).decode()
            try:
                records += tfstate.parse_state(text, scope, types)
            except tfstate.InvalidState as exc:
                raise StateUnreadable(
                    f"Secret {meta.get('namespace')}/{meta.get('name')} {key}: {exc}"
                ) from None
    return records


def state_records(
    sources: list[str], types: tfstate.StateTypes, kube: Kube | None = None
) -> list[tfstate.StateResource]:
    """The records of every source: ``PATH`` (a cluster state file), ``NODE=PATH`` (a node's;
    ``*=PATH``: a state whose resources may be of any module),
    ``secret:NS/NAME`` (a dhctl state Secret), ``cluster`` (every state Secret in ``d8-system``);
    the Secret forms need ``kube``."""
    records: list[tfstate.StateResource] = []
    for source in sources:
        if source == "cluster" or source.startswith("secret:"):
            if kube is None:
                raise StateUnreadable(f"{source}: reading Secrets needs --kubeconfig")
            if source == "cluster":
                namespace, name = tfstate.CLUSTER_STATE_SECRET
                secrets = [s for s in [kube.get(SECRETS, name, namespace)] if s is not None]
                listed = kube.list(SECRETS, namespace, labelSelector=tfstate.STATE_LABEL)
                secrets += listed.get("items", [])
            else:
                namespace, _, name = source.removeprefix("secret:").partition("/")
                found = kube.get(SECRETS, name, namespace)
                if found is None:
                    raise StateUnreadable(f"{source}: no such Secret")
                secrets = [found]
            for secret in secrets:
                records += _secret_states(secret, types)
            continue
        scope, _, path = source.rpartition("=")
        scope = "" if scope == "*" else scope or tfstate.BASE_SCOPE
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise StateUnreadable(f"{path}: {exc.strerror or exc}") from None
        try:
            records += tfstate.parse_state(text, scope, types)
        except tfstate.InvalidState as exc:
            raise StateUnreadable(f"{path}: {exc}") from None
    return records
