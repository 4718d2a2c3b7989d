"""A small client for vCenter's tagging service over the legacy ``/rest`` paths, on ``requests``.

Categories, tags and tag associations (``/rest/com/vmware/cis/tagging/*``), one session kept for
all calls. pyvmomi is SOAP only and the Automation SDK does not work against vcsim.

Rules:
- **Session**: created on first use (``POST /rest/com/vmware/cis/session`` with basic auth), sent
  as ``vmware-api-session-id``; a 401 re-creates it once (credentials are read again, so a rotated
  password file is picked up) and repeats the request. :meth:`TaggingClient.keepalive` touches it.
- **TLS**: a CA file, or the server certificate's thumbprint (SHA-1 or SHA-256, as vCenter shows
  it), or no verification only when ``insecure`` is asked. ``trust_env`` is off: neither proxy
  variables nor ``REQUESTS_CA_BUNDLE`` change what this client trusts.
- **Errors**: transport failures stay ``requests`` exceptions and HTTP failures are
  :class:`TaggingHTTPError` (status, vAPI error type); the driver classifies both. The password and
  the session id never appear in an error or a log line.
- **Batching**: :meth:`TaggingClient.attached_objects` answers "which objects carry these tags" in
  one call, so a node-sync pass needs one tag listing whatever the number of VMs.
- Departs from upstream: govmomi's CPI logs in and out per lookup and asks per object; here one
  session lives as long as the driver and lookups are batched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter

log = logging.getLogger(__name__)

REST = "/rest/com/vmware/cis"
SESSION_HEADER = "vmware-api-session-id"


class TaggingHTTPError(Exception):
    """The tagging service answered with an HTTP error (``error_type`` is vAPI's, if given)."""

    def __init__(self, status: int, method: str, path: str, error_type: str, message: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status} {error_type} {message}".rstrip())
        self.status = status
        self.error_type = error_type
        self.message = message


@dataclass(frozen=True)
class ObjectId:
    """A managed object as the tagging service names it: ``{"id": "vm-62", "type": ...}``."""

    id: str
    type: str

    def body(self) -> dict[str, str]:
        return {"id": self.id, "type": self.type}


@dataclass(frozen=True)
class Category:
    id: str
    name: str
    cardinality: str = "SINGLE"
    associable_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tag:
    id: str
    name: str
    category_id: str


class _FingerprintAdapter(HTTPAdapter):
    """Verify the server by its certificate's fingerprint instead of a CA chain."""

    def __init__(self, fingerprint: str) -> None:
        self._fingerprint = fingerprint.replace(":", "").lower()
        super().__init__()

    def build_connection_pool_key_attributes(
        self, request: requests.PreparedRequest, verify: Any, cert: Any = None
    ) -> Any:
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(
            request, False, cert
        )
        extra: dict[str, Any] = dict(pool_kwargs)
        extra["assert_fingerprint"] = self._fingerprint
        return host_params, extra


def _error_type(response: requests.Response) -> tuple[str, str]:
    """vAPI errors: ``{"type": "com.vmware.vapi.std.errors.not_found", "value": {...}}``."""
    try:
        body = response.json()
    except ValueError:
        return "", response.text[:200]
    if not isinstance(body, dict):
        return "", ""
    kind = str(body.get("type", ""))
    value = body.get("value")
    messages: list[str] = []
    if isinstance(value, dict):
        for message in value.get("messages") or []:
            if isinstance(message, dict) and message.get("default_message"):
                messages.append(str(message["default_message"]))
    return kind.rsplit(".", 1)[-1], "; ".join(messages)


class TaggingClient:
    """Categories, tags and associations of one vCenter, over one kept session."""

    def __init__(
        self,
        base_url: str,
        credentials: Callable[[], tuple[str, str]],
        *,
        ca_file: Path | None = None,
        thumbprint: str = "",
        insecure: bool = False,
        timeout_s: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._credentials = credentials
        self._timeout = timeout_s
        self._lock = threading.Lock()
        self._session_id: str | None = None
        http = requests.Session()
        http.trust_env = False
        if thumbprint or insecure:
            # Asked for: the thumbprint is checked instead of a chain, or nothing is (insecure).
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        if thumbprint:
            http.mount("https://", _FingerprintAdapter(thumbprint))
            http.verify = False
        elif ca_file is not None:
            http.verify = str(ca_file)
        elif insecure:
            http.verify = False
        else:
            http.verify = True
        self._http = http

    # -- session -------------------------------------------------------------------------------
    def _login(self) -> str:
        username, password = self._credentials()
        response = self._http.post(
            f"{self.base_url}{REST}/session", auth=(username, password), timeout=self._timeout
        )
        if response.status_code >= 400:
            kind, message = _error_type(response)
            raise TaggingHTTPError(response.status_code, "POST", "session", kind, message)
        return str(response.json()["value"])

    def _session(self) -> str:
        with self._lock:
            if self._session_id is None:
                self._session_id = self._login()
            return self._session_id

    def _forget(self, session_id: str) -> None:
        with self._lock:
            if self._session_id == session_id:
                self._session_id = None

    def logout(self) -> None:
        with self._lock:
            session_id, self._session_id = self._session_id, None
        if session_id is None:
            return
        try:
            self._http.delete(
                f"{self.base_url}{REST}/session",
                headers={SESSION_HEADER: session_id},
                timeout=self._timeout,
            )
        except requests.RequestException:
            log.debug("vsphere tagging: logout failed", exc_info=True)
        self._http.close()

    def keepalive(self) -> None:
        """Touch the session (``?~action=get``) so an idle one does not expire."""
        self._request("POST", "/session", params={"~action": "get"})

    # -- requests --------------------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: object = None,
    ) -> Any:
        for attempt in (1, 2):
            session_id = self._session()
            response = self._http.request(
                method,
                f"{self.base_url}{REST}{path}",
                params=params,
                json=body,
                headers={SESSION_HEADER: session_id},
                timeout=self._timeout,
            )
            if response.status_code == 401 and attempt == 1:
                self._forget(session_id)
                continue
            if response.status_code >= 400:
                kind, message = _error_type(response)
                raise TaggingHTTPError(response.status_code, method, path, kind, message)
            if not response.content:
                return None
            return response.json().get("value")
        raise AssertionError("unreachable")  # pragma: no cover

    # -- categories and tags ----------------------------------------------------------------------
    def list_categories(self) -> list[Category]:
        """Every category with its name (one call for the IDs, one per category)."""
        ids = self._request("GET", "/tagging/category") or []
        return [self.get_category(str(i)) for i in ids]

    def get_category(self, category_id: str) -> Category:
        value = self._request("GET", f"/tagging/category/id:{category_id}")
        return Category(
            id=str(value["id"]),
            name=str(value["name"]),
            cardinality=str(value.get("cardinality", "")),
            associable_types=tuple(value.get("associable_types") or ()),
        )

    def tag_ids_in_category(self, category_id: str) -> list[str]:
        ids = self._request(
            "POST", f"/tagging/tag/id:{category_id}", params={"~action": "list-tags-for-category"}
        )
        return [str(i) for i in ids or []]

    def tags_in_category(self, category_id: str) -> list[Tag]:
        return [self.get_tag(i) for i in self.tag_ids_in_category(category_id)]

    def get_tag(self, tag_id: str) -> Tag:
        value = self._request("GET", f"/tagging/tag/id:{tag_id}")
        return Tag(id=str(value["id"]), name=str(value["name"]), category_id=value["category_id"])

    def create_category(
        self, name: str, *, associable_types: Sequence[str] = (), cardinality: str = "SINGLE"
    ) -> str:
        spec = {
            "name": name,
            "description": "",
            "cardinality": cardinality,
            "associable_types": list(associable_types),
        }
        return str(self._request("POST", "/tagging/category", body={"create_spec": spec}))

    def create_tag(self, name: str, category_id: str) -> str:
        spec = {"name": name, "description": "", "category_id": category_id}
        return str(self._request("POST", "/tagging/tag", body={"create_spec": spec}))

    # -- associations -----------------------------------------------------------------------------
    def attach(self, tag_id: str, obj: ObjectId) -> None:
        self._request(
            "POST",
            f"/tagging/tag-association/id:{tag_id}",
            params={"~action": "attach"},
            body={"object_id": obj.body()},
        )

    def detach(self, tag_id: str, obj: ObjectId) -> None:
        self._request(
            "POST",
            f"/tagging/tag-association/id:{tag_id}",
            params={"~action": "detach"},
            body={"object_id": obj.body()},
        )

    def attached_tags(self, objects: Sequence[ObjectId]) -> dict[ObjectId, list[str]]:
        """The tag IDs on each object, in one call."""
        if not objects:
            return {}
        value = self._request(
            "POST",
            "/tagging/tag-association",
            params={"~action": "list-attached-tags-on-objects"},
            body={"object_ids": [o.body() for o in objects]},
        )
        found: dict[ObjectId, list[str]] = {}
        for item in value or []:
            obj = item["object_id"]
            found[ObjectId(str(obj["id"]), str(obj["type"]))] = [
                str(t) for t in item.get("tag_ids") or []
            ]
        return found

    def attached_objects(self, tag_ids: Sequence[str]) -> dict[str, list[ObjectId]]:
        """The objects carrying each tag, in one call."""
        if not tag_ids:
            return {}
        value = self._request(
            "POST",
            "/tagging/tag-association",
            params={"~action": "list-attached-objects-on-tags"},
            body={"tag_ids": list(tag_ids)},
        )
        found: dict[str, list[ObjectId]] = {}
        for item in value or []:
            found[str(item["tag_id"])] = [
                ObjectId(str(o["id"]), str(o["type"])) for o in item.get("object_ids") or []
            ]
        return found
