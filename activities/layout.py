"""Layout activities: one per resource step, through the provider's layouts part.

``define``, ``plan_module``, ``ensure_resource``/``delete_resource``, ``check_apply``,
``check_destroy``, ``map_state`` and ``adopt_resource``: what each does, and why credentials stay
out of history: docs/decisions/0055-one-layout-engine-for-every-cloud.md.

Rules:
- Each activity reads the configuration from its :class:`~cloudloop.layouts.model.ConfigSource`,
  only from under ``layouts.source_dir`` (:mod:`cloudloop.mounted`): anything else is refused
  unread (``LayoutConfigRefused``, non-retryable). The session is kept while the file's mtime is.
- Credentials never enter an input, a result or a log: only the path does. A configuration error
  (``LayoutConfigInvalid``) names the file and the field, never a value.
- Bootstrap bytes are read only by the ``ensure_resource`` that makes the machine
  (:mod:`cloudloop.layouts.bootstrap`); ``define`` records a file's name and digest.
- ``plan_module``, ``check_apply``, ``check_destroy`` and ``map_state`` are read-only;
  ``adopt_resource`` creates nothing; ``ensure``/``delete`` find first and are idempotent.
- Every activity heartbeats from a side thread (:func:`activities.heartbeats.heartbeating`);
  errors become ``ApplicationError`` with the cloud error's kind
  (:func:`activities.cloud.cloud_errors`).
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from typing import Any

import yaml
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.cloud import cloud_errors
from activities.heartbeats import heartbeating
from activities.layout_checks import apply_refusals
from cloudloop import mounted
from cloudloop.cloud.layouts import (
    AdoptingPart,
    AdoptingResources,
    Drift,
    LayoutPart,
    LayoutResources,
)
from cloudloop.cloud.registry import PROVIDERS, Settings
from cloudloop.errortext import yaml_problem
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.resources import SECRETS
from cloudloop.layouts import bootstrap, tfstate
from cloudloop.layouts.config import DOCUMENTS, InvalidConfig, validate_document
from cloudloop.layouts.model import ConfigSource, LayoutDef, ResourceDef
from cloudloop.messages.errors import ErrorKind
from cloudloop.messages.layout import (
    CheckApplyInput,
    CheckDestroyInput,
    DefineInput,
    FieldChange,
    LayoutActivity,
    MapStateInput,
    PlanModuleInput,
    PlanModuleResult,
    ResourcePlan,
    StepInput,
    StepResult,
)
from cloudloop.rules import layout as rules

#: Heartbeat period of every layout activity (the workflow's timeout is 15 s).
HEARTBEAT_S = 2.0


def _why_not_repaired(drift: Drift) -> str:
    if drift.note:
        return f" ({drift.note})"
    return " (needs replacement; not repaired)" if drift.immutable else ""


def _changes(drift: list[Drift]) -> list[FieldChange]:
    return [
        FieldChange(
            field=d.field + _why_not_repaired(d),
            have=d.have,
            want=d.want,
            how="kept" if d.note else "replace" if d.immutable else "repair",
        )
        for d in drift
    ]


class _Session:
    def __init__(self, stamp: str, part: LayoutPart, config: Any, resources: LayoutResources):
        self.stamp, self.part, self.config, self.resources = stamp, part, config, resources


class LayoutActivities:
    def __init__(self, settings: Settings, kube: Kube | None = None) -> None:
        """``kube``: the worker's own cluster, where an in-cluster converge reads the node
        groups' bootstrap data (:func:`cloudloop.layouts.bootstrap.cluster_source`)."""
        self.settings = settings
        self.kube = kube
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._lock = threading.Lock()

    # -- the configuration and the session -------------------------------------------------
    def _read(self, source: ConfigSource) -> mounted.MountedFile:
        """The source's text and stamp, read only from under ``layouts.source_dir``."""
        return self._mounted(source.file, "configuration", mounted.read_under)

    def _read_bootstrap(self, name: str) -> bytes:
        """A bootstrap data file's bytes, read only from under ``layouts.source_dir``; an
        in-cluster source's from its Secret."""
        where = bootstrap.in_cluster(name)
        if where is None:
            return self._mounted(name, "bootstrap data", mounted.read_bytes_under).data
        data = self._cluster_bootstrap(name)
        if data is None:
            raise ApplicationError(
                f"bootstrap data {name}: no such Secret (or no {bootstrap.CLUSTER_SECRET_KEY})",
                type="LayoutConfigMissing",
                non_retryable=True,
            )
        return data

    def _cluster_bootstrap(self, name: str) -> bytes | None:
        """The ``cloud-config`` of the in-cluster source ``name``; None when it is not there."""
        where = bootstrap.in_cluster(name)
        if where is None or self.kube is None:
            return None
        namespace, secret_name = where
        try:
            secret = self.kube.get(SECRETS, secret_name, namespace)
        except KubeError as exc:
            raise ApplicationError(
                f"bootstrap data {name}: {exc}", type="KubeUnavailable"
            ) from None
        value = ((secret or {}).get("data") or {}).get(bootstrap.CLUSTER_SECRET_KEY)
        return base64.b64decode(value) if value else None

    def _mounted(
        self, name: str, what: str, read: Callable[..., mounted.MountedFile]
    ) -> mounted.MountedFile:
        where = self.settings.layouts
        try:
            return read(where.source_dir, name, max_bytes=where.max_file_bytes)
        except mounted.Refused as exc:
            activity.logger.warning("%s refused: %s", what, exc)
            raise ApplicationError(
                f"{what} {exc}", type="LayoutConfigRefused", non_retryable=True
            ) from None
        except mounted.Unreadable as exc:
            raise ApplicationError(
                f"{what} {exc}", type="LayoutConfigMissing", non_retryable=True
            ) from None

    def _session(self, provider: str, source: ConfigSource) -> _Session:
        read = self._read(source)
        text, stamp = read.text, read.stamp
        key = (provider, source.describe())
        with self._lock:
            session = self._sessions.get(key)
            if session is not None and session.stamp == stamp:
                return session
        record = PROVIDERS.get(provider)
        if record is None or record.layouts is None:
            raise ApplicationError(
                f"provider {provider!r} has no layouts",
                type=ErrorKind.NOT_SUPPORTED,
                non_retryable=True,
            )
        try:
            docs = [
                d
                for d in yaml.safe_load_all(text)
                if isinstance(d, dict) and isinstance(d.get("kind"), str) and d["kind"] in DOCUMENTS
            ]
            config = validate_document(docs[0] if len(docs) == 1 else None, source=source.file)
        except yaml.YAMLError as exc:
            raise ApplicationError(
                f"configuration {source.describe()}: {yaml_problem(exc)}",
                type="LayoutConfigInvalid",
                non_retryable=True,
            ) from None
        except InvalidConfig as exc:  # its messages name fields, never their values
            raise ApplicationError(
                f"configuration {exc}", type="LayoutConfigInvalid", non_retryable=True
            ) from None
        part = record.layouts()
        with cloud_errors():
            resources = part.connect(config, record.section(self.settings))
        session = _Session(stamp, part, config, resources)
        with self._lock:
            self._sessions[key] = session
        return session

    def _beating(self, details: Callable[[], Any] | None = None) -> Any:
        return heartbeating(HEARTBEAT_S, details=details)

    # -- activities ------------------------------------------------------------------------
    @activity.defn(name=LayoutActivity.DEFINE)
    def define(self, input: DefineInput) -> LayoutDef:
        with self._beating():
            session = self._session(input.provider, input.source)
            if session.config.layout not in session.part.layouts:
                raise ApplicationError(
                    f"layout {session.config.layout!r} is not supported for {input.provider} "
                    f"(supported: {', '.join(session.part.layouts)})",
                    type=ErrorKind.NOT_SUPPORTED,
                    non_retryable=True,
                )
            with cloud_errors():
                zones = session.resources.layout_zones()
            try:
                layout = session.part.define(session.config, input.cluster, zones)
            except ValueError as exc:
                raise ApplicationError(
                    f"{session.config.kind}: {exc}", type="LayoutConfigInvalid", non_retryable=True
                ) from None
            try:
                merges = getattr(session.part, "merges_user_data", False) is True
                check = bootstrap.merge_problem if merges else None
                selection = input.source.cloud_config
                found: dict[str, bytes] = {}  # read once: the define's digest is of these
                if input.bootstrap_from_cluster:

                    def exists(name: str) -> bool:
                        data = self._cluster_bootstrap(name)
                        if data:
                            found[name] = data
                        return bool(data)

                    selection = bootstrap.with_cluster_sources(layout, selection, exists)
                return bootstrap.attach(
                    layout,
                    selection,
                    lambda name: found[name] if name in found else self._read_bootstrap(name),
                    check,
                )
            except bootstrap.BootstrapInvalid as exc:
                raise ApplicationError(
                    str(exc), type="LayoutConfigInvalid", non_retryable=True
                ) from None

    @activity.defn(name=LayoutActivity.PLAN)
    def plan_module(self, input: PlanModuleInput) -> PlanModuleResult:
        progress: dict[str, Any] = {"looked_at": 0}
        with self._beating(lambda: dict(progress)):
            session = self._session(input.provider, input.source)
            known: dict[str, Any] = dict(input.external)
            plans: dict[str, ResourcePlan] = {}
            for wave in rules.waves(input.module.resources):
                for resource in wave:
                    plans[resource.key] = self._plan_one(session, resource, known, input.destroy)
                    if plans[resource.key].outputs:
                        known[resource.key] = plans[resource.key].outputs
                    progress["looked_at"] = len(plans)
            return PlanModuleResult(
                module=input.module.id,
                resources=[plans[r.key] for r in input.module.resources],
            )

    def _plan_one(
        self, session: _Session, resource: ResourceDef, known: dict[str, Any], destroy: bool
    ) -> ResourcePlan:
        plan = ResourcePlan(
            key=resource.key, kind=resource.kind, name=resource.name, action="create"
        )
        try:
            properties = rules.resolve(resource.properties, known)
        except rules.Unresolved:
            # something it needs does not exist: it cannot exist either (it would refer to it)
            plan.action = "no-op" if destroy else "create"
            return plan
        with cloud_errors():
            found = session.resources.inspect(resource, properties)
        if found is None:
            if resource.read_only and not destroy:
                raise ApplicationError(
                    f"{resource.key}: not found (it is looked up, never created)",
                    type=ErrorKind.NOT_FOUND,
                    non_retryable=True,
                )
            plan.action = "no-op" if destroy else "create"
            return plan
        plan.outputs = found.outputs
        if destroy:
            plan.action = "no-op" if resource.read_only else "delete"
        else:
            plan.changes = _changes(found.drift)
            plan.action = "update" if found.drift else "no-op"
        return plan

    @activity.defn(name=LayoutActivity.ENSURE)
    def ensure_resource(self, input: StepInput) -> StepResult:
        resource = input.resource
        with self._beating(lambda: {"key": resource.key}):
            session = self._session(input.provider, input.source)
            try:
                properties = rules.resolve(resource.properties, input.inputs)
            except rules.Unresolved as exc:
                raise ApplicationError(
                    f"{resource.key}: {exc} is not known", type="LayoutFailed", non_retryable=True
                ) from None
            if resource.read_only:
                with cloud_errors():
                    found = session.resources.inspect(resource, properties)
                if found is None:
                    raise ApplicationError(
                        f"{resource.key}: not found (it is looked up, never created)",
                        type=ErrorKind.NOT_FOUND,
                        non_retryable=True,
                    )
                return StepResult(key=resource.key, action="unchanged", outputs=found.outputs)
            try:
                properties = bootstrap.load(properties, self._read_bootstrap)
            except bootstrap.BootstrapInvalid as exc:
                raise ApplicationError(
                    f"{resource.key}: {exc}", type="LayoutConfigInvalid", non_retryable=True
                ) from None
            with activity.shield_thread_cancel_exception(), cloud_errors():
                ensured = session.resources.ensure(resource, properties)
            activity.logger.info("%s: %s", resource.key, ensured.action)
            return StepResult(
                key=resource.key,
                action=ensured.action,
                changes=_changes(ensured.drift),
                outputs=ensured.outputs,
            )

    @activity.defn(name=LayoutActivity.DELETE)
    def delete_resource(self, input: StepInput) -> StepResult:
        resource = input.resource
        with self._beating(lambda: {"key": resource.key}):
            session = self._session(input.provider, input.source)
            try:
                properties = rules.resolve(resource.properties, input.inputs)
            except rules.Unresolved:
                return StepResult(key=resource.key, action="absent")
            with activity.shield_thread_cancel_exception(), cloud_errors():
                deleted = session.resources.delete(resource, properties)
            activity.logger.info("%s: %s", resource.key, "deleted" if deleted else "absent")
            return StepResult(key=resource.key, action="deleted" if deleted else "absent")

    @activity.defn(name=LayoutActivity.CHECK_DESTROY)
    def check_destroy(self, input: CheckDestroyInput) -> list[str]:
        with self._beating():
            session = self._session(input.provider, input.source)
            with cloud_errors():
                blockers = session.resources.blockers(input.layout, input.found)
            if blockers:
                hint = (
                    " — left after the cluster's Services, volumes and Machines were deleted; "
                    "delete them yourself"
                    if input.cleared
                    else " — run destroy with --kubeconfig to delete them through the cluster "
                    "(LoadBalancer Services, PersistentVolumeClaims, ephemeral nodes), or "
                    "delete them yourself"
                )
                raise ApplicationError(
                    "the cluster still owns cloud resources the layout did not make: "
                    + "; ".join(blockers)
                    + hint,
                    type="DestroyBlocked",
                    non_retryable=True,
                )
            return blockers

    @activity.defn(name=LayoutActivity.CHECK_APPLY)
    def check_apply(self, input: CheckApplyInput) -> list[str]:
        with self._beating():
            session = self._session(input.provider, input.source)
            with cloud_errors():
                refusals = apply_refusals(session.resources, input.layout)
            if refusals:
                raise ApplicationError(
                    "; ".join(refusals) + " — nothing was made",
                    type=ErrorKind.NOT_FOUND,
                    non_retryable=True,
                )
            return refusals

    @activity.defn(name=LayoutActivity.MAP_STATE)
    def map_state(self, input: MapStateInput) -> tfstate.StateMap:
        with self._beating():
            session = self._session(input.provider, input.source)
            if not isinstance(session.part, AdoptingPart):
                raise ApplicationError(
                    f"{input.provider} layouts cannot adopt a Terraform state",
                    type=ErrorKind.NOT_SUPPORTED,
                    non_retryable=True,
                )
            return tfstate.map_state(input.layout, input.state, session.part.state_types)

    @activity.defn(name=LayoutActivity.ADOPT)
    def adopt_resource(self, input: StepInput) -> StepResult:
        resource = input.resource
        with self._beating(lambda: {"key": resource.key}):
            session = self._session(input.provider, input.source)
            try:
                properties = rules.resolve(resource.properties, input.inputs)
            except rules.Unresolved as exc:  # what it needs is not there: it cannot be either
                return StepResult(
                    key=resource.key,
                    action="missing" if input.cloud_id else "absent",
                    changes=[FieldChange(field="needs", want=str(exc))],
                )
            if not input.cloud_id or resource.read_only:
                with cloud_errors():
                    found = session.resources.inspect(resource, properties)
                if found is None and resource.read_only:
                    raise ApplicationError(
                        f"{resource.key}: not found (it is looked up, never created)",
                        type=ErrorKind.NOT_FOUND,
                        non_retryable=True,
                    )
                if found is None:
                    return StepResult(key=resource.key, action="absent")
                return StepResult(
                    key=resource.key,
                    action="unchanged",
                    changes=_changes(found.drift),
                    outputs=found.outputs,
                )
            if not isinstance(session.resources, AdoptingResources):
                raise ApplicationError(
                    f"{input.provider} layouts cannot adopt",
                    type=ErrorKind.NOT_SUPPORTED,
                    non_retryable=True,
                )
            with activity.shield_thread_cancel_exception(), cloud_errors():
                found = session.resources.adopt(resource, properties, input.cloud_id)
            activity.logger.info(
                "%s: %s %s", resource.key, "adopted" if found else "missing", input.cloud_id
            )
            if found is None:
                return StepResult(key=resource.key, action="missing")
            return StepResult(
                key=resource.key,
                action="adopted",
                changes=_changes(found.drift),
                outputs=found.outputs,
            )

    def all(self) -> list[object]:
        return [
            self.define,
            self.plan_module,
            self.ensure_resource,
            self.delete_resource,
            self.check_destroy,
            self.check_apply,
            self.map_state,
            self.adopt_resource,
        ]
