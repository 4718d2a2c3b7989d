"""What every emulated OpenStack service shares: requests, replies, routes, paging, microversions.

A :class:`Service` is a route table plus the service's error body and microversion header; the
HTTP layer (:mod:`.server`) authenticates, negotiates the microversion and calls the handler
under the cloud's lock. Paging follows the APIs: ``limit`` (capped at the service's max limit)
and ``marker`` (an ID; unknown → 400), a ``<collection>_links`` ``next`` link when a page is full.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from devstack.openstack_emulator.cloud import ApiFault, Cloud, Resource, bad_request


@dataclass(frozen=True)
class Token:
    """An issued Keystone token: who, for which project, until when (cloud clock)."""

    id: str
    user_id: str
    user_name: str
    project_id: str
    project_name: str
    domain_id: str
    expires_at: float
    methods: tuple[str, ...] = ("password",)
    roles: tuple[str, ...] = ("member", "reader")
    application_credential_id: str = ""


@dataclass
class Request:
    method: str
    path: str  # below the service's root, e.g. "/v2.1/servers/detail"
    query: dict[str, list[str]]
    headers: Mapping[str, str]
    body: Any
    base_url: str  # the service's root URL, e.g. "http://127.0.0.1:1234"
    token: Token | None = None
    microversion: tuple[int, int] | None = None

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default

    def args(self, name: str) -> list[str]:
        return list(self.query.get(name, []))

    def flag(self, name: str) -> bool:
        value = self.arg(name)
        return value is not None and value.lower() in ("true", "1", "yes", "on", "")

    def at_least(self, major: int, minor: int) -> bool:
        return self.microversion is not None and self.microversion >= (major, minor)

    def json_body(self, key: str | None = None) -> Any:
        """The request body (or its ``key`` member); a missing one is a 400."""
        if not isinstance(self.body, dict):
            raise bad_request("The request body is missing or is not a JSON object.")
        if key is None:
            return self.body
        inner = self.body.get(key)
        if not isinstance(inner, dict):
            raise bad_request(f"Missing '{key}' in the request body.")
        return inner

    @property
    def project_id(self) -> str:
        assert self.token is not None
        return self.token.project_id


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[..., Reply]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: str  # regex over Request.path; groups are passed to the handler
    handler: Handler
    public: bool = False  # no token needed (version documents, token issue)


_UUID = re.compile(
    r"/[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
)
_NUMERIC = re.compile(r"/\d+(?=/|$)")
ID = r"([^/]+)"


def route_label(path: str) -> str:
    """The path with IDs replaced by ``{id}`` (request counting)."""
    return _NUMERIC.sub("/{id}", _UUID.sub("/{id}", path.rstrip("/") or "/"))


class Service:
    """One emulated API: its catalog type, root path and routes."""

    #: Catalog type, e.g. ``compute``.
    type: str = ""
    #: Microversion header service name (``compute``, ``volume``, ``load-balancer``), if any.
    microversion_service: str = ""
    min_version: tuple[int, int] = (0, 0)
    max_version: tuple[int, int] = (0, 0)
    #: Largest page a list returns without a ``limit`` (Nova ``max_limit``); 0: unlimited.
    max_limit: int = 1000

    def __init__(self, cloud: Cloud) -> None:
        self.cloud = cloud
        self._compiled = [(route, re.compile(f"^{route.pattern}/?$")) for route in self.routes()]

    def routes(self) -> list[Route]:
        raise NotImplementedError

    def match(self, method: str, path: str) -> tuple[Route, tuple[str, ...]]:
        allowed = False
        for route, pattern in self._compiled:
            found = pattern.match(path)
            if found is None:
                continue
            if route.method == method:
                return route, found.groups()
            allowed = True
        if allowed:
            raise ApiFault(405, f"The method {method} is not allowed for {path}.")
        raise ApiFault(404, f"The resource could not be found: {path}")

    def fault_body(self, fault: ApiFault) -> Any:
        """The service's error document (Nova style by default)."""
        return {
            _NOVA_FAULT_KIND.get(fault.status, "computeFault"): {
                "code": fault.status,
                "message": fault.message,
            }
        }

    # -- microversions ---------------------------------------------------------------------
    def negotiate(self, headers: Mapping[str, str]) -> tuple[int, int] | None:
        """The request's microversion (default the minimum); out of range is a 406."""
        if not self.microversion_service:
            return None
        asked = ""
        for name, value in headers.items():
            if name.lower() == "openstack-api-version":
                for part in value.split(","):
                    service, _, version = part.strip().partition(" ")
                    if service.lower() == self.microversion_service:
                        asked = version.strip()
        legacy = self.legacy_microversion_header
        if not asked and legacy:
            asked = next((v for k, v in headers.items() if k.lower() == legacy.lower()), "")
        if not asked:
            return self.min_version
        if asked.lower() == "latest":
            return self.max_version
        found = re.fullmatch(r"(\d+)\.(\d+)", asked)
        if found is None:
            raise ApiFault(400, f"Invalid API version format: {asked}")
        wanted = (int(found.group(1)), int(found.group(2)))
        if not self.min_version <= wanted <= self.max_version:
            raise ApiFault(
                406,
                f"Version {asked} is not supported by the API. Minimum is "
                f"{_v(self.min_version)} and maximum is {_v(self.max_version)}.",
            )
        return wanted

    legacy_microversion_header: str = ""

    def version_headers(self, version: tuple[int, int] | None) -> dict[str, str]:
        if version is None or not self.microversion_service:
            return {}
        headers = {
            "OpenStack-API-Version": f"{self.microversion_service} {_v(version)}",
            "Vary": "OpenStack-API-Version",
        }
        if self.legacy_microversion_header:
            headers[self.legacy_microversion_header] = _v(version)
            headers["Vary"] += f", {self.legacy_microversion_header}"
        return headers

    # -- paging ----------------------------------------------------------------------------
    def page(
        self,
        request: Request,
        items: list[Resource],
        collection: str,
        *,
        link_path: str,
        key: str = "id",
    ) -> tuple[list[Resource], list[dict[str, str]]]:
        """One page of ``items`` (already filtered and sorted) and its ``next`` link, if full."""
        limit_text = request.arg("limit")
        limit = self.max_limit
        if limit_text is not None:
            try:
                limit = int(limit_text)
            except ValueError:
                raise bad_request(f"limit must be an integer, not {limit_text!r}") from None
            if limit < 0:
                raise bad_request("limit must be >= 0")
            if self.max_limit:
                limit = min(limit, self.max_limit)
        marker = request.arg("marker")
        start = 0
        if marker:
            index = next((i for i, item in enumerate(items) if item.get(key) == marker), None)
            if index is None:
                raise bad_request(f"marker [{marker}] not found")
            start = index + 1
        if not limit:
            return items[start:], []
        chunk = items[start : start + limit]
        links: list[dict[str, str]] = []
        if chunk and len(chunk) == limit:
            query = [(k, v) for k, values in request.query.items() if k != "marker" for v in values]
            if limit_text is None:
                query.append(("limit", str(limit)))
            query.append(("marker", str(chunk[-1][key])))
            links.append(
                {"rel": "next", "href": f"{request.base_url}{link_path}?{urlencode(query)}"}
            )
        return chunk, links


_NOVA_FAULT_KIND = {
    400: "badRequest",
    401: "unauthorized",
    403: "forbidden",
    404: "itemNotFound",
    405: "badMethod",
    406: "notAcceptable",
    409: "conflictingRequest",
    413: "overLimit",
    429: "overLimit",
    501: "notImplemented",
    503: "serviceUnavailable",
}


def _v(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def version_text(version: tuple[int, int]) -> str:
    return _v(version)


def match_filters(item: Resource, request: Request, names: Iterable[str]) -> bool:
    """Neutron/Octavia-style equality filters: each named query parameter (repeatable, ORed)
    must equal the field (booleans as ``true``/``false``)."""
    for name in names:
        wanted = request.args(name)
        if not wanted:
            continue
        value = item.get(name)
        if isinstance(value, bool):
            value = "true" if value else "false"
            wanted = [{"1": "true", "0": "false"}.get(w.lower(), w.lower()) for w in wanted]
        if str(value) not in wanted and not (value is None and "" in wanted):
            return False
    return True


def match_tags(item: Resource, request: Request) -> bool:
    """``tags`` (all of), ``tags-any``, ``not-tags``, ``not-tags-any``; comma-separated lists."""
    tags = set(item.get("tags") or [])

    def wanted(name: str) -> set[str]:
        return {t for value in request.args(name) for t in value.split(",") if t}

    if (all_of := wanted("tags")) and not all_of <= tags:
        return False
    if (any_of := wanted("tags-any")) and not any_of & tags:
        return False
    if (none_of := wanted("not-tags")) and none_of <= tags:
        return False
    return not ((not_any := wanted("not-tags-any")) and not_any & tags)


def dumps(body: Any) -> bytes:
    return json.dumps(body).encode()
