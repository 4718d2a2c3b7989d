"""The zVirt driver's base: ``ovirtsdk4`` connections, call counting, error translation, views.

``ovirtsdk4`` has no type hints, so every SDK object is ``Any`` here and nowhere else: the
mixins call the SDK through :meth:`ZvirtBase.call` and read its answers through the view
builders below, which return the typed views of :mod:`cloudloop.cloud.zvirt.mapping`.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import ovirtsdk4 as sdk
import ovirtsdk4.types as sdk_types

from cloudloop.cloud import errors
from cloudloop.cloud.calls import cloud_call
from cloudloop.cloud.zvirt.mapping import (
    NAME,
    AttachmentView,
    DeviceView,
    DiskView,
    NicView,
    StorageDomainView,
    VmView,
)
from cloudloop.cloud.zvirt.settings import ZvirtSettings

log = logging.getLogger(__name__)
T = TypeVar("T")

#: SDK errors raised before any HTTP answer was read (transport failures, non-API answers).
_TRANSPORT_MESSAGES = re.compile(
    r"Failed to read response|Error while sending HTTP request|isn't the expected (XML|JSON)"
)
_UNREACHABLE_CODES = frozenset({502, 503, 504})


def translate(operation: str, exc: BaseException) -> errors.CloudError:
    """Map an ``ovirtsdk4`` failure onto the contract's error classes.

    Authentication never becomes :class:`NotFound`; only an HTTP 404 does.
    """
    message = str(exc).strip() or type(exc).__name__
    if isinstance(exc, sdk.AuthError):
        return errors.CloudAuthFailed(NAME, operation, message)
    if isinstance(exc, sdk.ConnectionError | sdk.TimeoutError):
        return errors.CloudUnreachable(NAME, operation, message)
    if isinstance(exc, sdk.NotFoundError):
        return errors.NotFound(NAME, operation, message)
    if isinstance(exc, sdk.Error):
        code = exc.code
        if code is None:
            if _TRANSPORT_MESSAGES.search(message):
                return errors.CloudUnreachable(NAME, operation, message)
            return errors.CloudError(NAME, operation, message)
        if code in (401, 403):
            return errors.CloudAuthFailed(NAME, operation, message)
        if code == 429:
            return errors.CloudThrottled(NAME, operation, message)
        if code in _UNREACHABLE_CODES:
            return errors.CloudUnreachable(NAME, operation, message)
        if code == 409:  # the engine's validation refused it for now (locked, running...)
            return errors.CloudError(NAME, operation, message)
        if 400 <= code < 500:
            return errors.InvalidRequest(NAME, operation, message)
        return errors.CloudError(NAME, operation, message)
    return errors.CloudError(NAME, operation, f"{type(exc).__name__}: {message}")


def is_conflict(error: errors.CloudError) -> bool:
    """The engine answered 409: a command's validation refused it (name taken, VM locked...)."""
    cause = error.__cause__
    return isinstance(cause, sdk.Error) and cause.code == 409


class ZvirtBase:
    """The zVirt session: a small pool of SDK connections shared by the driver's threads, the
    call wrapper (counted, errors translated) and the waits; every capability object takes it.

    An ``ovirtsdk4.Connection`` holds one SSO token and one curl multi handle; it is used by one
    call at a time. A connection that failed at the transport or authentication level is closed
    (without logout) rather than reused, so the next call logs in afresh (a rotated password
    file is read again).
    """

    provider = NAME

    def __init__(self, settings: ZvirtSettings) -> None:
        self.settings = settings
        self._idle: list[Any] = []
        self._pool_lock = threading.Lock()

    # -- connections -----------------------------------------------------------------------
    def _connect(self) -> Any:
        settings = self.settings
        if not settings.api_url:
            raise errors.InvalidRequest(NAME, "Connect", "zvirt.api_url is not set")
        ca_file = None
        if settings.ca_bundle is not None and not settings.insecure:
            if not settings.ca_bundle.exists():
                raise errors.InvalidRequest(
                    NAME, "Connect", f"CA bundle {settings.ca_bundle} does not exist"
                )
            ca_file = str(settings.ca_bundle)
        try:
            password = settings.password_value()
        except OSError as exc:
            raise errors.CloudAuthFailed(
                NAME, "Connect", f"cannot read the password file: {exc.strerror}"
            ) from None
        return sdk.Connection(
            url=settings.api_url,
            username=settings.username,
            password=password,
            insecure=settings.insecure,
            ca_file=ca_file,
            timeout=max(1, math.ceil(settings.timeout_s)),
        )

    def _acquire(self) -> Any:
        with self._pool_lock:
            if self._idle:
                return self._idle.pop()
        return self._connect()

    def _release(self, connection: Any, *, broken: bool) -> None:
        if broken:
            self._discard(connection)
            return
        with self._pool_lock:
            self._idle.append(connection)

    @staticmethod
    def _discard(connection: Any) -> None:
        try:
            connection.close(logout=False)
        except Exception:  # closing a broken connection must not hide the real error
            log.debug("zvirt: closing a broken connection failed", exc_info=True)

    def close(self) -> None:
        """Log out and close every pooled connection."""
        with self._pool_lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            try:
                connection.close()
            except Exception:
                log.debug("zvirt: logout failed", exc_info=True)

    def call(self, operation: str, request: Callable[[Any], T]) -> T:
        """Run one SDK request on a pooled connection's ``system_service()``.

        The request is counted in ``cloud_api_requests_total{provider="zvirt",operation,outcome}``
        and its failure translated into a :mod:`cloudloop.cloud.errors` class.
        """
        connection = self._acquire()
        broken = False
        try:
            with cloud_call(NAME, operation, translate):
                return request(connection.system_service())
        except (errors.CloudUnreachable, errors.CloudAuthFailed):
            broken = True
            raise
        finally:
            self._release(connection, broken=broken)

    def wait_until(
        self,
        what: str,
        read: Callable[[], T],
        done: Callable[[T], bool],
        *,
        deadline: float,
    ) -> T:
        """Poll ``read`` until ``done``; a retryable :class:`CloudError` after ``deadline``."""
        while True:
            value = read()
            if done(value):
                return value
            if time.monotonic() >= deadline:
                raise errors.CloudError(NAME, what, "still waiting; the next call resumes")
            time.sleep(self.settings.poll_interval_s)

    def deadline(self) -> float:
        return time.monotonic() + self.settings.wait_timeout_s


# -- views of SDK objects ---------------------------------------------------------------------
def _enum_value(value: Any) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))


def _list(value: Any) -> list[Any]:
    return list(value) if value is not None else []


def nic_view(nic: Any) -> NicView:
    mac = nic.mac.address if nic.mac is not None else ""
    profile = nic.vnic_profile.id if nic.vnic_profile is not None else None
    return NicView(
        id=str(nic.id), name=str(nic.name or ""), mac=str(mac or ""), vnic_profile_id=profile
    )


def device_view(device: Any) -> DeviceView:
    mac = device.mac.address if device.mac is not None else ""
    ips = tuple(str(ip.address) for ip in _list(device.ips) if ip.address)
    return DeviceView(name=str(device.name or ""), mac=str(mac or ""), ips=ips)


def attachment_view(attachment: Any) -> AttachmentView:
    disk_id = attachment.disk.id if attachment.disk is not None else attachment.id
    return AttachmentView(
        disk_id=str(disk_id),
        bootable=bool(attachment.bootable),
        active=attachment.active is not False,
    )


def _cpus(cpu: Any) -> int:
    """vCPUs of a VM's CPU topology (sockets * cores * threads; 0 when not shown)."""
    topology = getattr(cpu, "topology", None) if cpu is not None else None
    if topology is None:
        return 0
    return int(topology.sockets or 1) * int(topology.cores or 1) * int(topology.threads or 1)


def vm_view(vm: Any) -> VmView:
    """A VM as returned by ``GET /vms`` (followed links are inlined, others stay empty)."""
    return VmView(
        id=str(vm.id),
        name=str(vm.name or ""),
        status=_enum_value(vm.status) or "unknown",
        description=str(vm.description or ""),
        cpus=_cpus(vm.cpu),
        memory_bytes=int(vm.memory or 0),
        nics=tuple(nic_view(n) for n in _list(vm.nics) if n.id is not None),
        devices=tuple(device_view(d) for d in _list(vm.reported_devices) if d.name is not None),
        attachments=tuple(
            attachment_view(a) for a in _list(vm.disk_attachments) if a.id is not None
        ),
        started_once=getattr(vm, "start_time", None) is not None,
    )


def disk_view(disk: Any) -> DiskView:
    return DiskView(
        id=str(disk.id),
        provisioned_size=int(disk.provisioned_size or 0),
        status=_enum_value(disk.status) or "",
    )


def storage_domain_view(domain: Any) -> StorageDomainView:
    return StorageDomainView(
        name=str(domain.name or ""),
        status=_enum_value(domain.status),
        external_status=_enum_value(domain.external_status),
        type=_enum_value(domain.type),
    )


#: Re-exported so mixins build request bodies without importing the SDK themselves.
types = sdk_types
