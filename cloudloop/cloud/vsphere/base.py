"""The vSphere driver's base: one vCenter session, call counting, error translation, one read.

:class:`VsphereBase` keeps one pyvmomi session and one tagging session for the driver's life,
re-established when vCenter says the session is gone; :meth:`VsphereBase.inventory` reads every
VM and its ancestors in one property-collector retrieval; :meth:`VsphereBase.tags_by_object`
answers "which region/zone tags hang where" with one tag-association call per pass.

Rules:
- Every SOAP and REST request goes through ``cloud_call`` (counted in
  ``cloud_api_requests_total{provider="vsphere"}``, failures translated by :func:`translate`). Only
  ``ManagedObjectNotFound``/``NotFound``/HTTP 404 mean absent; ``InvalidLogin`` is "credentials
  rejected", never "not found".
- ``NotAuthenticated`` (an expired or terminated session) logs in again once and repeats the call;
  credentials are read again at each login, so a rotated Secret is picked up.
- The container view over the root folder is made once per session, not once per pass.
- The session's ``ServiceContent`` is read once at login (:class:`Service`): pyvmomi fetches a
  managed object's property with a request each time it is read (``bench/README.md``: a machine
  create's requests before and after).
- Tag category and tag names are cached (``tag_cache_s``); the per-pass association read asks
  only about the cached region/zone tags.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import requests

from cloudloop.cloud import errors
from cloudloop.cloud.calls import cloud_call
from cloudloop.cloud.vsphere.config import ConfigError
from cloudloop.cloud.vsphere.mapping import PROVIDER, Entity, GuestNic, Inventory, VmProps
from cloudloop.cloud.vsphere.settings import Connection, VsphereSettings, resolve
from cloudloop.cloud.vsphere.tagging import Category, Tag, TaggingClient, TaggingHTTPError
from cloudloop.cloud.vsphere.vmomi import PC, connect, disconnect, vim, vmodl

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Leaf paths only: vcsim at newer govmomi fails on whole ``summary``/``runtime`` objects.
VM_PATHS = [
    "name",
    "parent",
    "config.uuid",
    "config.guestId",
    "summary.config.numCpu",
    "summary.config.memorySizeMB",
    "runtime.powerState",
    "runtime.host",
    "resourcePool",
    "guest.hostName",
    "guest.net",
]
#: Ancestor types read with ``name`` and ``parent`` in the same retrieval.
ENTITY_TYPES = (
    "HostSystem",
    "ClusterComputeResource",
    "ComputeResource",
    "ResourcePool",
    "Folder",
    "Datacenter",
)


def _fault_name(exc: BaseException) -> str:
    return type(exc).__name__.rsplit(".", 1)[-1]


#: Fields of a vSphere fault that name what it is about (shown when it has no ``msg``).
_FAULT_FIELDS = ("name", "file", "datastore", "property", "reason", "details")


def _fault_detail(exc: BaseException) -> str:
    """A fault without ``msg`` (vcsim's are often bare) told by its localized messages or the
    fields naming its object, instead of pyVmomi's multi-line dump."""
    if not isinstance(exc, vmodl.MethodFault):
        return ""
    parts = [str(m.message) for m in (getattr(exc, "faultMessage", None) or []) if m.message]
    for field in _FAULT_FIELDS:
        value = getattr(exc, field, None)
        if isinstance(value, str) and value:
            parts.append(f"{field} {value!r}")
    return "; ".join(parts)


def translate(operation: str, exc: BaseException) -> errors.CloudError:
    """Map a pyvmomi, tagging or transport failure onto the contract's error classes."""
    if isinstance(exc, errors.CloudError):
        return exc
    message = (getattr(exc, "msg", None) or _fault_detail(exc) or str(exc)).strip()
    message = message or type(exc).__name__
    message = message.splitlines()[0][:300]
    if isinstance(exc, ConfigError):
        return errors.InvalidRequest(PROVIDER, operation, message)
    if isinstance(exc, TaggingHTTPError):
        if exc.status in (401, 403):
            return errors.CloudAuthFailed(PROVIDER, operation, message)
        if exc.status == 404:
            return errors.NotFound(PROVIDER, operation, message)
        if exc.status == 429:
            return errors.CloudThrottled(PROVIDER, operation, message)
        if exc.status in (502, 503, 504):
            return errors.CloudUnreachable(PROVIDER, operation, message)
        if exc.status == 409 or exc.error_type == "already_exists":
            return errors.AlreadyExists(PROVIDER, operation, message)
        if 400 <= exc.status < 500:
            return errors.InvalidRequest(PROVIDER, operation, message)
        return errors.CloudError(PROVIDER, operation, message)
    if isinstance(exc, requests.RequestException | ssl.SSLError | socket.error):
        return errors.CloudUnreachable(PROVIDER, operation, f"{type(exc).__name__}: {message}")
    if isinstance(exc, http.client.HTTPException):
        return errors.CloudUnreachable(PROVIDER, operation, f"{type(exc).__name__}: {message}")
    if isinstance(exc, vmodl.MethodFault):
        name = _fault_name(exc)
        if isinstance(exc, vim.fault.InvalidLogin | vim.fault.NoPermission):
            return errors.CloudAuthFailed(PROVIDER, operation, f"{name}: {message}")
        if isinstance(exc, vim.fault.NotAuthenticated):
            return errors.CloudAuthFailed(PROVIDER, operation, f"{name}: {message}")
        if isinstance(exc, vmodl.fault.ManagedObjectNotFound | vim.fault.NotFound):
            return errors.NotFound(PROVIDER, operation, f"{name}: {message}")
        if isinstance(exc, vim.fault.FileNotFound):
            return errors.NotFound(PROVIDER, operation, f"{name}: {message}")
        if isinstance(exc, vim.fault.DuplicateName | vim.fault.AlreadyExists):
            return errors.AlreadyExists(PROVIDER, operation, f"{name}: {message}")
        if isinstance(exc, vim.fault.InvalidState | vim.fault.ResourceInUse):
            return errors.FailedPrecondition(PROVIDER, operation, f"{name}: {message}")
        if isinstance(exc, vim.fault.InsufficientResourcesFault | vim.fault.OutOfBounds):
            return errors.ResourceExhausted(PROVIDER, operation, f"{name}: {message}")
        if isinstance(
            exc,
            vmodl.fault.InvalidArgument
            | vmodl.fault.InvalidRequest
            | vmodl.fault.InvalidType
            | vim.fault.InvalidName,
        ):
            return errors.InvalidRequest(PROVIDER, operation, f"{name}: {message}")
        if isinstance(exc, vmodl.fault.HostCommunication | vmodl.fault.RequestCanceled):
            return errors.CloudUnreachable(PROVIDER, operation, f"{name}: {message}")
        return errors.CloudError(PROVIDER, operation, f"{name}: {message}")
    return errors.CloudError(PROVIDER, operation, f"{type(exc).__name__}: {message}")


def _is_session_gone(exc: BaseException) -> bool:
    return isinstance(exc, vmodl.MethodFault) and isinstance(exc, vim.fault.NotAuthenticated)


class Service:
    """A logged-in ``ServiceInstance`` whose ``content`` was read once, at login (the
    ``ServiceContent``: fixed for the session); everything else is the instance's own
    (``_stub``, ``CurrentTime``...)."""

    def __init__(self, instance: Any) -> None:
        self.instance = instance
        self.content = instance.RetrieveContent()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.instance, name)


class VsphereBase:
    """The vSphere session (one vCenter): a kept SOAP session, a kept tagging session, a
    container view, counted calls; every capability object takes it."""

    provider = PROVIDER

    def __init__(self, settings: VsphereSettings) -> None:
        self.settings = settings
        self._lock = threading.RLock()
        self._login_lock = threading.Lock()
        self._si: Any = None
        self._view: Any = None
        self._tagging: TaggingClient | None = None
        self._connection: Connection | None = None
        self._tag_names: dict[str, tuple[str, str]] = {}  # tag id → (category, tag)
        self._tag_categories: frozenset[str] = frozenset()  # what _tag_names covers
        self._category_ids: dict[str, str] = {}  # category name → id
        self._tags_read_at = 0.0
        self._last_snapshot: tuple[float, Inventory, dict[str, list[tuple[str, str]]]] | None = None

    # -- configuration -------------------------------------------------------------------------
    def connection(self) -> Connection:
        if self._connection is None:
            try:
                self._connection = resolve(self.settings)
            except ConfigError as exc:
                raise errors.InvalidRequest(PROVIDER, "Configure", str(exc)) from None
            except OSError as exc:
                raise errors.InvalidRequest(
                    PROVIDER, "Configure", f"cannot read the configuration: {exc.strerror}"
                ) from None
        return self._connection

    def _ssl_context(self, conn: Connection) -> ssl.SSLContext:
        if conn.thumbprint or conn.insecure:
            return ssl._create_unverified_context()  # the thumbprint is checked by pyvmomi
        if conn.ca_file is not None:
            return ssl.create_default_context(cafile=str(conn.ca_file))
        return ssl.create_default_context()

    # -- sessions ------------------------------------------------------------------------------
    def _login(self) -> Any:
        conn = self.connection()
        try:
            username, password = conn.credentials()
        except (ConfigError, OSError) as exc:
            raise errors.CloudAuthFailed(
                PROVIDER, "Login", f"cannot read the credentials: {exc}"
            ) from None
        instance = connect(
            conn.host,
            conn.port,
            username,
            password,
            context=self._ssl_context(conn),
            thumbprint=conn.thumbprint.replace(":", "").lower() or None,
            timeout_s=self.settings.timeout_s,
        )
        try:
            return Service(instance)
        except BaseException:
            with contextlib.suppress(Exception):
                disconnect(instance)
            raise

    def _service(self) -> Any:
        """The kept session; a login holds only the login lock (bounded by ``timeout_s``), so
        tagging calls and the session's other state never wait for a vCenter that hangs."""
        si = self._si
        if si is not None:
            return si
        with self._login_lock:
            if self._si is None:
                made = self._counted("Login", self._login)
                with self._lock:
                    self._si = made
            return self._si

    def _drop_session(self, si: Any) -> None:
        with self._lock:
            if self._si is si:
                self._si = None
                self._view = None

    def tagging(self) -> TaggingClient:
        with self._lock:
            if self._tagging is None:
                conn = self.connection()
                self._tagging = TaggingClient(
                    conn.url,
                    conn.credentials,
                    ca_file=conn.ca_file,
                    thumbprint=conn.thumbprint,
                    insecure=conn.insecure,
                    timeout_s=self.settings.timeout_s,
                )
            return self._tagging

    def close(self) -> None:
        with self._lock:
            si, self._si, self._view = self._si, None, None
            tagging, self._tagging = self._tagging, None
        if si is not None:
            try:
                disconnect(si.instance)
            except Exception:
                log.debug("vsphere: logout failed", exc_info=True)
        if tagging is not None:
            tagging.logout()

    # -- calls -----------------------------------------------------------------------------------
    def _counted(self, operation: str, request: Callable[[], T]) -> T:
        """One request, counted and translated by :func:`~cloudloop.cloud.calls.cloud_call`."""
        with cloud_call(PROVIDER, operation, translate):
            return request()

    def call(self, operation: str, request: Callable[[Any], T]) -> T:
        """One SOAP request on the kept session (``request(service_instance)``), counted and
        translated; an expired session is re-established once."""
        for attempt in (1, 2):
            si = self._service()
            try:
                return self._counted(operation, functools.partial(request, si))
            except errors.CloudAuthFailed as exc:
                if attempt == 1 and exc.__cause__ is not None and _is_session_gone(exc.__cause__):
                    log.info("vsphere: session expired; logging in again")
                    self._drop_session(si)
                    continue
                raise
            except errors.CloudUnreachable:
                self._drop_session(si)
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def tag_call(self, operation: str, request: Callable[[TaggingClient], T]) -> T:
        client = self.tagging()
        return self._counted(operation, lambda: request(client))

    def keepalive(self) -> None:
        """Keep both sessions from expiring while idle (``CurrentTime``, session ``get``)."""
        self.call("CurrentTime", lambda si: si.CurrentTime())
        self.tag_call("KeepAlive", lambda client: client.keepalive())

    # -- tasks -------------------------------------------------------------------------------
    def task_state(self, task_moref: str) -> tuple[str, Any, Any]:
        """``(state, result, error)`` of a task, read through the property collector (vcsim's
        ``Task.info.entity`` breaks pyvmomi's ``task.info``)."""

        def read(si: Any) -> tuple[str, Any, Any]:
            task = vim.Task(task_moref, si._stub)
            spec = PC.FilterSpec(
                objectSet=[PC.ObjectSpec(obj=task)],
                propSet=[
                    PC.PropertySpec(
                        type=vim.Task, pathSet=["info.state", "info.result", "info.error"]
                    )
                ],
            )
            found = si.content.propertyCollector.RetrieveContents([spec])
            props = {p.name: p.val for p in found[0].propSet} if found else {}
            return (
                str(props.get("info.state", "")),
                props.get("info.result"),
                props.get("info.error"),
            )

        return self.call("TaskInfo", read)

    def wait_task(self, operation: str, task_moref: str) -> Any:
        """The task's result; its fault translated; a retryable error after ``wait_timeout_s``."""
        deadline = time.monotonic() + self.settings.wait_timeout_s
        while True:
            state, result, fault = self.task_state(task_moref)
            if state == "success":
                return result
            if state == "error":
                raise translate(operation, fault) from fault
            if time.monotonic() >= deadline:
                raise errors.CloudError(PROVIDER, operation, "task still running; retry resumes")
            time.sleep(self.settings.poll_interval_s)

    # -- the one inventory read ---------------------------------------------------------------
    def _container_view(self, si: Any) -> Any:
        with self._lock:
            if self._view is None or self._si is not si:
                types = [vim.VirtualMachine, *(getattr(vim, t) for t in ENTITY_TYPES)]
                self._view = self._counted(
                    "CreateContainerView",
                    lambda: si.content.viewManager.CreateContainerView(
                        si.content.rootFolder, types, True
                    ),
                )
            return self._view

    def inventory(self) -> Inventory:
        """Every VM (leaf paths) and every ancestor (name, parent) in one retrieval."""

        def read(si: Any) -> list[Any]:
            try:
                return retrieve(si, self._container_view(si))
            except vmodl.fault.ManagedObjectNotFound as exc:
                if getattr(exc.obj, "_moId", None) != getattr(self._view, "_moId", ""):
                    raise
                # The view went with its session (logged out, expired): make a new one; a
                # session that is gone fails CreateContainerView with NotAuthenticated.
                with self._lock:
                    self._view = None
                return retrieve(si, self._container_view(si))

        def retrieve(si: Any, view: Any) -> list[Any]:
            prop_set = [PC.PropertySpec(type=vim.VirtualMachine, pathSet=VM_PATHS)]
            prop_set += [
                PC.PropertySpec(type=getattr(vim, t), pathSet=["name", "parent"])
                for t in ENTITY_TYPES
            ]
            spec = PC.FilterSpec(
                objectSet=[
                    PC.ObjectSpec(
                        obj=view,
                        skip=True,
                        selectSet=[
                            PC.TraversalSpec(
                                name="view", path="view", skip=False, type=vim.view.ContainerView
                            )
                        ],
                    )
                ],
                propSet=prop_set,
            )
            collector = si.content.propertyCollector
            page = collector.RetrievePropertiesEx([spec], PC.RetrieveOptions())
            objects = list(page.objects) if page is not None else []
            while page is not None and page.token:
                page = collector.ContinueRetrievePropertiesEx(page.token)
                objects += list(page.objects)
            return objects

        return _inventory_from(self.call("RetrieveProperties", read))

    # -- tags ----------------------------------------------------------------------------------
    def _refresh_tags(self, categories: frozenset[str]) -> None:
        """Read the names of every tag in ``categories`` (a category vCenter lacks has none)."""
        if any(c not in self._category_ids for c in categories):
            listed: list[Category] = self.tag_call("ListCategories", TaggingClient.list_categories)
            for found in listed:
                self._category_ids[found.name] = found.id
        names: dict[str, tuple[str, str]] = {}
        for name in sorted(categories):
            category_id = self._category_ids.get(name)
            if category_id is None:
                continue
            ids: list[str] = self.tag_call(
                "ListTags",
                functools.partial(TaggingClient.tag_ids_in_category, category_id=category_id),
            )
            for tag_id in ids:
                known = self._tag_names.get(tag_id)
                if known is None:
                    tag: Tag = self.tag_call(
                        "GetTag", functools.partial(TaggingClient.get_tag, tag_id=tag_id)
                    )
                    known = (name, tag.name)
                names[tag_id] = known
        self._tag_names = names
        self._tag_categories = categories
        self._tags_read_at = time.monotonic()

    def tags_by_object(self, categories: list[str]) -> dict[str, list[tuple[str, str]]]:
        """``moref → [(category, tag)]`` for the tags of ``categories``: one association call
        per pass (tag names are cached for ``tag_cache_s``, for every category asked so far)."""
        wanted = [c for c in categories if c]
        if not wanted:
            return {}
        stale = time.monotonic() - self._tags_read_at > self.settings.tag_cache_s
        if stale or not set(wanted) <= self._tag_categories:
            self._refresh_tags(self._tag_categories | frozenset(wanted))
        tag_ids = [t for t, (c, _) in self._tag_names.items() if c in wanted]
        if not tag_ids:
            return {}
        attached = self.tag_call("ListAttachedObjects", lambda c: c.attached_objects(tag_ids))
        found: dict[str, list[tuple[str, str]]] = {}
        for tag_id, objects in attached.items():
            name = self._tag_names.get(tag_id)
            if name is None:
                continue
            for obj in objects:
                found.setdefault(obj.id, []).append(name)
        return found


def _moref(value: Any) -> str:
    return str(value._moId) if value is not None else ""


def _inventory_from(objects: list[Any]) -> Inventory:
    inventory = Inventory()
    for obj in objects:
        props = {p.name: p.val for p in obj.propSet}
        moref = _moref(obj.obj)
        kind = obj.obj._wsdlName
        if kind == "VirtualMachine":
            uuid = str(props.get("config.uuid") or "").lower()
            if not uuid:
                continue  # not a fully created VM (no config yet)
            nics = tuple(
                GuestNic(
                    network=str(n.network or ""),
                    device_config_id=int(n.deviceConfigId if n.deviceConfigId is not None else 0),
                    ips=tuple(str(ip) for ip in (n.ipAddress or [])),
                )
                for n in (props.get("guest.net") or [])
            )
            inventory.vms[moref] = VmProps(
                moref=moref,
                name=str(props.get("name", "")),
                uuid=uuid,
                power_state=str(props.get("runtime.powerState", "")),
                host=_moref(props.get("runtime.host")),
                resource_pool=_moref(props.get("resourcePool")),
                parent=_moref(props.get("parent")),
                num_cpu=int(props.get("summary.config.numCpu") or 0),
                memory_mb=int(props.get("summary.config.memorySizeMB") or 0),
                guest_id=str(props.get("config.guestId") or ""),
                hostname=str(props.get("guest.hostName") or ""),
                nics=nics,
            )
        else:
            inventory.entities[moref] = Entity(
                moref=moref,
                type=kind,
                name=str(props.get("name", "")),
                parent=_moref(props.get("parent")),
            )
    return inventory
