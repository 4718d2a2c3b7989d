"""The OpenStack driver's base: openstacksdk connections, counted calls, errors, paged JSON.

One ``openstack.connection.Connection`` per thread (a keystoneauth session with a password or
application-credential plugin, the configured region and interface) is made on first use and
re-made after an authentication or transport failure, so a rotated Secret is read again. Every
request goes through :func:`cloudloop.cloud.calls.cloud_call` (``provider="openstack"``); every
SDK or keystoneauth failure becomes a :mod:`cloudloop.cloud.errors` class.

Rules:
- Only an HTTP 404 from the resource's own URL is :class:`NotFound`; a missing catalog entry,
  region or service is an :class:`InvalidRequest` naming the region, interface and service; a
  refused or timed-out connection and 502/503/504 are :class:`CloudUnreachable`, 401/403
  :class:`CloudAuthFailed`, 413 :class:`ResourceExhausted`, 429 :class:`CloudThrottled`,
  Octavia's 409 "immutable" a retryable :class:`CloudError`.
- A password login needs a project (``tenant-id`` or ``tenant-name``): Keystone's unscoped token
  carries no catalog, so such a configuration is an :class:`InvalidRequest` before any request.
- Lists that may be long (servers, ports, volumes) are read as raw JSON through the SDK's service
  proxies and paged by the services' ``*_links``: SDK resource objects are too slow to build for
  a thousand servers every few seconds (the figure: ``bench/README.md``).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import openstack
import openstack.exceptions as sdk_exc
import requests
from keystoneauth1 import exceptions as ksa_exc
from keystoneauth1 import session as ksa_session
from keystoneauth1.identity import v3
from pydantic import BaseModel

from cloudloop.cloud import errors
from cloudloop.cloud.calls import CallResult, cloud_call
from cloudloop.cloud.openstack.config import resolve
from cloudloop.cloud.openstack.settings import OpenStackSettings

log = logging.getLogger(__name__)
T = TypeVar("T")

NAME = "openstack"
_UNREACHABLE_STATUS = frozenset({502, 503, 504})
_INVALID_STATUS = frozenset({400, 405, 406, 412, 415, 422})
#: Services, as the SDK's connection attributes.
SERVICES = ("compute", "network", "load_balancer", "block_storage", "image", "identity")


def status_of(exc: BaseException) -> int:
    for name in ("status_code", "http_status"):
        value = getattr(exc, name, None)
        if isinstance(value, int):
            return value
    response = getattr(exc, "response", None)
    return int(getattr(response, "status_code", 0) or 0)


def _message(exc: BaseException) -> str:
    details = getattr(exc, "details", None)
    text = str(details or exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]


_CATALOG_ERRORS = (
    ksa_exc.EndpointNotFound,
    ksa_exc.EmptyCatalog,
    sdk_exc.EndpointNotFound,
    sdk_exc.ServiceDisabledException,
)
_SERVICE_IN_MESSAGE = re.compile(r"Service '([^']+)'|for ([\w-]+) service")


def _catalog_miss(exc: BaseException) -> str:
    """The service a catalog failure names (``?`` when the message does not say)."""
    found = _SERVICE_IN_MESSAGE.search(str(exc))
    return next((g for g in found.groups() if g), "?") if found is not None else "?"


def translate(
    operation: str, exc: BaseException, *, region: str = "", interface: str = ""
) -> errors.CloudError:
    """Map an openstacksdk / keystoneauth / requests failure onto the contract's errors
    (``region``/``interface``: the connection's, named when the catalog lacks an endpoint)."""
    message = _message(exc)
    if isinstance(exc, _CATALOG_ERRORS):
        where = f"region {region!r}" if region else "any region"
        return errors.InvalidRequest(
            NAME,
            operation,
            f"the service catalog has no {interface or 'public'} endpoint for service "
            f"{_catalog_miss(exc)!r} in {where} ([Global] region, os-endpoint-type): {message}",
        )
    if isinstance(exc, ksa_exc.SSLError):
        return errors.CloudUnreachable(NAME, operation, f"TLS: {message}")
    if isinstance(
        exc,
        ksa_exc.ConnectFailure
        | ksa_exc.ConnectTimeout
        | ksa_exc.UnknownConnectionError
        | ksa_exc.RetriableConnectionFailure
        | requests.ConnectionError
        | requests.Timeout,
    ):
        return errors.CloudUnreachable(NAME, operation, message)
    if isinstance(exc, ksa_exc.MissingRequiredOptions | ksa_exc.AuthPluginException):
        return errors.CloudAuthFailed(NAME, operation, message)
    status = status_of(exc)
    if isinstance(exc, sdk_exc.HttpException | ksa_exc.HttpError) or status:
        if status == 404:
            return errors.NotFound(NAME, operation, message)
        if status in (401, 403):
            return errors.CloudAuthFailed(NAME, operation, message)
        if status == 413:
            return errors.ResourceExhausted(NAME, operation, message)
        if status == 429:
            return errors.CloudThrottled(NAME, operation, message)
        if status in _UNREACHABLE_STATUS:
            return errors.CloudUnreachable(NAME, operation, f"{status}: {message}")
        if status in _INVALID_STATUS:
            return errors.InvalidRequest(NAME, operation, message)
        return errors.CloudError(NAME, operation, f"{status or 'HTTP'}: {message}")
    if isinstance(exc, ksa_exc.DiscoveryFailure):
        return errors.CloudUnreachable(NAME, operation, message)
    return errors.CloudError(NAME, operation, f"{type(exc).__name__}: {message}")


class ConnectionScope(BaseModel):
    """Whom a configuration logs in as: the token's scope and the region's compute endpoint."""

    user_id: str
    project_id: str
    project_name: str
    project_domain_id: str
    project_domain_name: str
    application_credential_id: str = ""
    region: str
    #: The compute endpoint of the configured region and interface (every capability needs it).
    compute_url: str
    #: Every region the token's catalog has an endpoint in.
    catalog_regions: list[str]


def is_conflict(error: errors.CloudError) -> bool:
    """The cloud answered 409 (Octavia "immutable", Neutron "in use", Nova task state)."""
    return status_of(error.__cause__) == 409 if error.__cause__ is not None else False


def next_link(body: Mapping[str, Any], key: str) -> str | None:
    """The ``next`` page of a list answer (``<key>_links``, ``links``, or Glance's ``next``)."""
    for links_key in (f"{key}_links", "links"):
        links = body.get(links_key)
        if isinstance(links, list):
            for link in links:
                if isinstance(link, dict) and link.get("rel") == "next" and link.get("href"):
                    return str(link["href"])
    glance = body.get("next")
    return str(glance) if isinstance(glance, str) and glance else None


class OpenStackBase:
    """The OpenStack session: connections per thread, counted calls, waits; every capability
    object takes it."""

    provider = NAME

    def __init__(self, settings: OpenStackSettings) -> None:
        self.raw_settings = settings
        self.settings = resolve(settings)
        self._local = threading.local()
        self._connections: list[Any] = []
        self._lock = threading.Lock()

    # -- connections -----------------------------------------------------------------------
    def _auth(self, settings: OpenStackSettings) -> Any:
        c = settings.connection
        if not c.auth_url:
            raise errors.InvalidRequest(NAME, "Connect", "[Global] auth-url is not set")
        user_domain_id = c.user_domain_id or c.domain_id or None
        user_domain_name = c.user_domain_name or c.domain_name or None
        try:
            if c.uses_application_credential:
                return v3.ApplicationCredential(
                    auth_url=c.auth_url,
                    application_credential_id=c.application_credential_id or None,
                    application_credential_name=c.application_credential_name or None,
                    application_credential_secret=c.application_credential_secret_value(),
                    username=c.username or None,
                    user_id=c.user_id or None,
                    user_domain_id=user_domain_id,
                    user_domain_name=user_domain_name,
                )
            if not (c.tenant_id or c.tenant_name):
                raise errors.InvalidRequest(
                    NAME,
                    "Connect",
                    "[Global] tenant-id or tenant-name is required with a password login "
                    "(Keystone gives an unscoped token no service catalog); or use an "
                    "application credential",
                )
            return v3.Password(
                auth_url=c.auth_url,
                username=c.username or None,
                user_id=c.user_id or None,
                password=c.password_value(),
                project_id=c.tenant_id or None,
                project_name=c.tenant_name or None,
                project_domain_id=c.tenant_domain_id or c.domain_id or None,
                project_domain_name=c.tenant_domain_name or c.domain_name or None,
                user_domain_id=user_domain_id,
                user_domain_name=user_domain_name,
            )
        except OSError as exc:
            raise errors.CloudAuthFailed(
                NAME, "Connect", f"cannot read a credentials file: {exc.strerror}"
            ) from None

    def _connect(self) -> Any:
        # Files (cloud.conf, password files) are read again for every new connection.
        settings = resolve(self.raw_settings)
        c = settings.connection
        verify: bool | str = True
        if c.tls_insecure:
            verify = False
        elif c.ca_file is not None:
            if not c.ca_file.exists():
                raise errors.InvalidRequest(NAME, "Connect", f"CA file {c.ca_file} does not exist")
            verify = str(c.ca_file)
        session = ksa_session.Session(
            auth=self._auth(settings),
            verify=verify,
            timeout=settings.request_timeout_s,
            app_name="cloudloop",
        )
        connection = openstack.connection.Connection(
            session=session,
            region_name=c.region or None,
            interface=c.os_endpoint_type or "public",
        )
        with self._lock:
            self._connections.append(connection)
        return connection

    @property
    def conn(self) -> Any:
        """This thread's connection (made on first use)."""
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._connect()
            self._local.connection = connection
        return connection

    def _drop_connection(self) -> None:
        connection = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            with self._lock:
                if connection in self._connections:
                    self._connections.remove(connection)
            try:
                connection.close()
            except Exception:
                log.debug("openstack: closing a connection failed", exc_info=True)

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            try:
                connection.close()
            except Exception:
                log.debug("openstack: closing a connection failed", exc_info=True)

    def _translate(self, operation: str, exc: BaseException) -> errors.CloudError:
        c = self.settings.connection
        return translate(operation, exc, region=c.region, interface=c.os_endpoint_type)

    @contextmanager
    def calling(self, operation: str) -> Iterator[CallResult]:
        """One counted cloud request; a broken connection is dropped for the next call."""
        try:
            with cloud_call(NAME, operation, self._translate) as result:
                yield result
        except (errors.CloudUnreachable, errors.CloudAuthFailed):
            self._drop_connection()
            raise

    def call(self, operation: str, request: Callable[[Any], T]) -> T:
        """Run ``request(connection)`` as one counted cloud request."""
        with self.calling(operation):
            return request(self.conn)

    def connection_scope(self) -> ConnectionScope:
        """Log in as configured (one counted ``Authenticate`` call) and say as whom: the token's
        project and the compute endpoint of ``[Global] region``. A region or interface the
        catalog lacks is an :class:`InvalidRequest`, a refused login a :class:`CloudAuthFailed`.
        Only Keystone is asked: the endpoint is read from the catalog, not probed."""
        c = self.settings.connection
        interface = c.os_endpoint_type or "public"

        def read(connection: Any) -> ConnectionScope:
            session = connection.session
            access = session.auth.get_access(session)
            url = session.get_endpoint(
                service_type="compute", interface=interface, region_name=c.region or None
            )
            if not url:
                raise ksa_exc.EndpointNotFound(
                    f"{interface} endpoint for compute service in {c.region} region not found"
                )
            catalog = access.service_catalog.get_endpoints() if access.has_service_catalog() else {}
            regions = {
                str(e.get("region_id") or e.get("region"))
                for endpoints in catalog.values()
                for e in endpoints
                if e.get("region_id") or e.get("region")
            }
            return ConnectionScope(
                user_id=str(access.user_id or ""),
                project_id=str(access.project_id or ""),
                project_name=str(access.project_name or ""),
                project_domain_id=str(access.project_domain_id or ""),
                project_domain_name=str(access.project_domain_name or ""),
                application_credential_id=str(
                    getattr(access, "application_credential_id", None) or ""
                ),
                region=c.region,
                compute_url=str(url),
                catalog_regions=sorted(regions),
            )

        return self.call("Authenticate", read)

    # -- raw JSON through the service proxies ----------------------------------------------
    def _proxy(self, service: str) -> Any:
        return getattr(self.conn, service)

    def request(
        self,
        operation: str,
        service: str,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        microversion: str | None = None,
    ) -> Any:
        """One request through ``conn.<service>``; the parsed JSON body (``None`` if empty)."""
        with self.calling(operation):
            kwargs: dict[str, Any] = {"raise_exc": False}
            if json is not None:
                kwargs["json"] = json
            if params:
                kwargs["params"] = dict(params)
            if microversion:
                kwargs["microversion"] = microversion
            response = self._proxy(service).request(url, method, **kwargs)
            sdk_exc.raise_from_response(response)
            if not response.content:
                return None
            return response.json()

    def list_all(
        self,
        operation: str,
        service: str,
        url: str,
        key: str,
        *,
        params: Mapping[str, Any] | None = None,
        microversion: str | None = None,
    ) -> list[dict[str, Any]]:
        """Every item of a paged list, one counted request per page."""
        items: list[dict[str, Any]] = []
        query: dict[str, Any] | None = dict(params or {})
        seen: set[str] = set()
        while True:
            body = self.request(
                operation, service, "GET", url, params=query, microversion=microversion
            )
            page = list((body or {}).get(key) or [])
            items.extend(page)
            link = next_link(body or {}, key)
            if not link or not page:
                return items
            parts = urlsplit(link)
            url = parts.path
            query = dict(parse_qsl(parts.query))
            marker = str(query.get("marker", ""))
            if marker in seen:  # an endless loop in a buggy service: stop
                return items
            seen.add(marker)
            url = self._relative(service, url)

    def _relative(self, service: str, path: str) -> str:
        """A link's path relative to the service endpoint (links carry the version prefix)."""
        endpoint = urlsplit(str(self._proxy(service).get_endpoint() or ""))
        prefix = endpoint.path.rstrip("/")
        return path[len(prefix) :] if prefix and path.startswith(prefix) else path

    # -- waiting ---------------------------------------------------------------------------
    def wait_until(
        self,
        what: str,
        read: Callable[[], T],
        done: Callable[[T], bool],
        *,
        deadline: float | None = None,
    ) -> T:
        """Poll ``read`` until ``done``; a retryable :class:`CloudError` after the deadline."""
        deadline = (
            deadline if deadline is not None else time.monotonic() + self.settings.wait_timeout_s
        )
        delay = self.settings.poll_interval_s
        while True:
            value = read()
            if done(value):
                return value
            if time.monotonic() >= deadline:
                raise errors.CloudError(NAME, what, "still waiting; the next call resumes")
            time.sleep(delay)
            delay = min(delay * 1.2, 5.0)
