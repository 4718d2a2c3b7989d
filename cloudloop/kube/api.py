"""A thin, typed REST layer over the kubernetes client: any resource as plain dicts.

Using one generic path for core and custom resources keeps starters and activities free of the
generated per-kind API classes, and gives the informer raw watch streams. The verbs answer the
resource's body type (``get(NODES, name)`` is a ``Node | None``, ``list(NODES)`` an
``ObjectList[Node]``): the dict the server sent, typed by :meth:`Resource.body`.

Every failure is a :class:`KubeError`: a non-2xx answer carries its status, and a transport
failure (connection refused or reset while the API server restarts, a timeout, a TLS error, a
truncated body) is ``KubeError(0, "Unreachable")``, so callers handle one exception type and a
restarting API server never escapes a loop's error handling.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cloudloop.kube.bodies import BodyT, JsonPatchOperation, ObjectList
from cloudloop.kube.resources import Resource

PatchType = Literal["merge", "strategic", "json"]
#: How the API server treats a field the object's schema does not have (``fieldValidation``):
#: ``Strict`` refuses the write (400, naming the field), ``None`` leaves the server's default
#: (prune it and warn), as for every write to this cluster's own API server.
FieldValidation = Literal["Strict", "Warn", "Ignore"]
_PATCH_CONTENT = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}


class KubeError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, reason: str, body: dict[str, Any] | None) -> None:
        message = (body or {}).get("message") or reason
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = (body or {}).get("reason") or reason
        self.body = body or {}

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def unreachable(self) -> bool:
        """No answer at all (status 0): the API server is down, restarting or unreachable."""
        return self.status == 0

    @classmethod
    def transport(cls, exc: BaseException) -> KubeError:
        return cls(0, "Unreachable", {"message": f"{type(exc).__name__}: {exc}"})

    @classmethod
    def unserved(cls, status: int, reason: str, data: bytes) -> KubeError:
        """An error answer without a Status body: the API server does not serve the path (its
        plain ``404 page not found`` for a group or version it has not registered, such as a CRD
        not installed, or not yet loaded after a restart). Not the object's NotFound, so never
        taken for "gone": the caller sees it as unreachable and tries again, with what was
        answered in the message."""
        text = data.decode("utf-8", "replace").strip()[:200]
        return cls(
            0,
            "Unreachable",
            {
                "message": f"the API server answered {status} {reason} without a Status"
                f" ({text!r}): is the resource's API group served (its CRD installed)?"
            },
        )


#: What the kubernetes client and urllib3 raise when no HTTP answer arrives.
TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, ApiException, OSError, ValueError)


class Kube:
    """Synchronous calls against one API server; safe to share across threads."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        timeout_s: float = 30.0,
        field_validation: FieldValidation | None = None,
    ) -> None:
        self.api = api
        self.timeout_s = timeout_s
        self.field_validation = field_validation

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> Any:
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        headers = {"Accept": "application/json", "Content-Type": content_type}
        _, url, headers, body, post = self.api.param_serialize(
            method,
            path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            return self.api.call_api(
                method,
                url,
                header_params=headers,
                body=body,
                post_params=post,
                _request_timeout=timeout or self.timeout_s,
            )
        except TRANSPORT_ERRORS as exc:
            raise KubeError.transport(exc) from exc

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self._send(method, path, **kwargs)
        data = b""
        try:
            data = response.read()
            parsed = json.loads(data) if data else {}
        except TRANSPORT_ERRORS as exc:  # reset mid-body, or a truncated JSON document
            if isinstance(exc, ValueError) and data and not 200 <= int(response.status) < 300:
                raise KubeError.unserved(int(response.status), str(response.reason), data) from exc
            raise KubeError.transport(exc) from exc
        if not 200 <= int(response.status) < 300:
            raise KubeError(
                int(response.status),
                str(response.reason),
                parsed if isinstance(parsed, dict) else None,
            )
        return parsed if isinstance(parsed, dict) else {}

    def stream(
        self,
        path: str,
        query: dict[str, Any],
        *,
        read_timeout_s: float,
        opened: Callable[[Any], None] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yield watch events (parsed JSON lines) until the server closes the stream.

        ``opened`` receives the raw response, so another thread can close it to end the watch.
        """
        response = self._send(
            "GET", path, query={**query, "watch": "true"}, timeout=(10.0, read_timeout_s)
        )
        raw = response.response
        if opened is not None:
            opened(raw)
        try:
            if not 200 <= int(response.status) < 300:
                body = raw.read()
                try:
                    parsed = json.loads(body) if body else None
                except ValueError as exc:
                    raise KubeError.unserved(
                        int(response.status), str(response.reason), body
                    ) from exc
                raise KubeError(
                    int(response.status),
                    str(response.reason),
                    parsed if isinstance(parsed, dict) else None,
                )
            buffer = b""
            try:
                for chunk in raw.stream(64 * 1024, decode_content=True):
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        if line.strip():
                            yield json.loads(line)
            except TRANSPORT_ERRORS as exc:
                raise KubeError.transport(exc) from exc
        finally:
            raw.release_conn()

    # -- verbs -----------------------------------------------------------------------------
    def get(
        self, resource: Resource[BodyT], name: str, namespace: str | None = None
    ) -> BodyT | None:
        try:
            return resource.body(self.request("GET", resource.path(namespace, name)))
        except KubeError as exc:
            if exc.not_found:
                return None
            raise

    def list(
        self, resource: Resource[BodyT], namespace: str | None = None, **query: Any
    ) -> ObjectList[BodyT]:
        return resource.page(self.request("GET", resource.path(namespace), query=query))

    def create(
        self, resource: Resource[BodyT], obj: Mapping[str, Any], namespace: str | None = None
    ) -> BodyT:
        body = {"apiVersion": resource.api_version, "kind": resource.kind, **obj}
        return resource.body(
            self.request("POST", resource.path(namespace), body=body, query=self._validation())
        )

    def patch(
        self,
        resource: Resource[BodyT],
        name: str,
        patch: Mapping[str, Any] | Sequence[JsonPatchOperation],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        patch_type: PatchType = "merge",
    ) -> BodyT:
        """Patch the object (or its ``subresource``) with a merge or strategic patch (a partial
        body, e.g. a ``Node``) or a JSON patch (a list of operations); its body as the server now
        has it."""
        return resource.body(
            self.request(
                "PATCH",
                resource.path(namespace, name, subresource),
                body=patch,
                content_type=_PATCH_CONTENT[patch_type],
                query=self._validation(),
            )
        )

    def _validation(self) -> dict[str, Any] | None:
        return {"fieldValidation": self.field_validation} if self.field_validation else None

    def delete(self, resource: Resource[Any], name: str, namespace: str | None = None) -> bool:
        """Delete; ``False`` when it was already gone."""
        try:
            self.request("DELETE", resource.path(namespace, name))
        except KubeError as exc:
            if exc.not_found:
                return False
            raise
        return True
