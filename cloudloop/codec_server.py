"""``cloudloop codec-server``: Temporal's codec endpoint, so the Temporal UI and CLI show
decrypted payloads to the people allowed to see them.

Temporal's convention: ``POST <endpoint>/decode`` and ``/encode``, body and answer
``{"payloads": [...]}`` in proto-JSON, the namespace in ``X-Namespace``; CORS (preflight and
headers) for the configured origins only, with credentials. ``GET /healthz`` answers ``ok``.
Why: docs/decisions/payload-codec.md.

Rules:
- Every encode and decode needs authorization: a bearer token listed in ``tokens_file`` (re-read
  at each request; compared by SHA-256 in constant time), or, with ``kubernetes_authorization``,
  a Kubernetes token allowed ``post`` on ``/cloudloop/codec`` (TokenReview + SubjectAccessReview,
  cached). Without either the server refuses to start, unless ``insecure_no_authorization``.
  No token is 401, a refused one 403.
- Another namespace than ``temporal.namespace`` is 403. No ``Content-Length`` is 411, over
  ``max_body_bytes`` 413 (never read), not a payloads document 400; a payload that does not
  decrypt is 400 naming its key id.
- Logs never hold a payload's data, a token or a key. Each connection has ``request_timeout_s``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from cloudloop.codec import CodecConfigError, CodecError, KeyRing
from cloudloop.http_server import QuietHandler, ThreadedServer
from cloudloop.metrics_auth import ALLOWED, FORBIDDEN, UNAUTHENTICATED, bearer_token
from cloudloop.settings import CodecServerSettings

log = logging.getLogger(__name__)

#: The non-resource URL a Kubernetes user must be allowed ``post`` on (RBAC ``nonResourceURLs``).
CODEC_URL = "/cloudloop/codec"
ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"

#: Judges a request's ``Authorization`` header: 200, 401 or 403.
Guard = Callable[[str | None], int]


class TokenFile:
    """The bearer tokens of a file, one a line (blank lines and ``#`` comments skipped)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, authorization: str | None) -> int:
        token = bearer_token(authorization)
        if token is None:
            return UNAUTHENTICATED
        try:
            lines = self.path.read_text().splitlines()
        except OSError as exc:
            log.warning(
                "codec server: tokens file %s unreadable: %s", self.path, type(exc).__name__
            )
            return UNAUTHENTICATED
        given = hashlib.sha256(token.encode()).digest()
        found = False
        for line in lines:
            line = line.strip()
            if line and not line.startswith("#"):
                found |= hmac.compare_digest(given, hashlib.sha256(line.encode()).digest())
        return ALLOWED if found else FORBIDDEN


def any_of(guards: list[Guard]) -> Guard:
    """Allowed when one guard allows; else the strongest refusal (403 over 401)."""

    def guard(authorization: str | None) -> int:
        verdicts = [g(authorization) for g in guards]
        if ALLOWED in verdicts:
            return ALLOWED
        return FORBIDDEN if FORBIDDEN in verdicts else UNAUTHENTICATED

    return guard


def build_guard(settings: CodecServerSettings, kubeconfig: Path | None) -> Guard | None:
    """The configured authorization (``None``: none, when explicitly allowed); refuses a server
    with no check configured."""
    guards: list[Guard] = []
    if settings.tokens_file is not None:
        guards.append(TokenFile(settings.tokens_file))
    if settings.kubernetes_authorization:
        from cloudloop.kube.api import Kube
        from cloudloop.kube.client import api_client
        from cloudloop.metrics_auth import MetricsAuthorizer

        guards.append(
            MetricsAuthorizer(
                Kube(api_client(kubeconfig)),
                path=CODEC_URL,
                verb="post",
                audiences=settings.token_audiences,
            )
        )
    if guards:
        return any_of(guards)
    if settings.insecure_no_authorization:
        log.warning("codec server: serving WITHOUT authorization (insecure_no_authorization)")
        return None
    raise CodecConfigError(
        "the codec server needs an authorization check: set CLOUDLOOP_CODEC_SERVER__TOKENS_FILE "
        "and/or CLOUDLOOP_CODEC_SERVER__KUBERNETES_AUTHORIZATION=true"
    )


class BadRequest(ValueError):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def transform(ring: KeyRing, action: str, body: bytes) -> tuple[bytes, int]:
    """The answer to an ``encode`` or ``decode`` body, and its payload count."""
    try:
        document = json.loads(body)
        payloads = json_format.ParseDict(document, Payloads(), ignore_unknown_fields=True)
    except (ValueError, json_format.ParseError, TypeError):
        raise BadRequest(400, 'not a payloads document ({"payloads": [...]})') from None
    change = ring.encrypt if action == "encode" else ring.decrypt
    try:
        result = Payloads(payloads=[change(p) for p in payloads.payloads])
    except CodecError as exc:
        raise BadRequest(400, str(exc)) from None
    answer = json_format.MessageToDict(result)
    answer.setdefault("payloads", [])
    return json.dumps(answer).encode(), len(result.payloads)


class CodecServer(ThreadedServer):
    """The threaded HTTP server; :meth:`start` serves in a thread, :meth:`stop` ends it."""

    def __init__(
        self,
        ring: KeyRing,
        settings: CodecServerSettings,
        *,
        namespace: str,
        guard: Guard | None,
        tls: Any = None,
    ) -> None:
        origins = frozenset(settings.cors_origins)
        limit = settings.max_body_bytes

        class Handler(QuietHandler):  # one line per request, nothing it carried
            timeout = settings.request_timeout_s

            def _cors(self) -> None:
                origin = self.headers.get("Origin")
                if origin and origin in origins:
                    self.send_header("Access-Control-Allow-Origin", origin)
                    self.send_header("Access-Control-Allow-Credentials", "true")
                    self.send_header("Vary", "Origin")

            def _send(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
                self.send_response(code)
                self._cors()
                if code == UNAUTHENTICATED:
                    self.send_header("WWW-Authenticate", "Bearer")
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_OPTIONS(self) -> None:
                origin = self.headers.get("Origin")
                if not origin or origin not in origins:
                    self._send(403, b"origin not allowed\n")
                    return
                self.send_response(204)
                self._cors()
                self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
                self.send_header("Access-Control-Allow-Headers", ALLOWED_HEADERS)
                self.send_header("Access-Control-Max-Age", "600")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                if self.path == "/healthz":
                    self._send(200, b"ok\n")
                else:
                    self._send(404, b"not found\n")

            def do_POST(self) -> None:
                path = self.path.split("?", 1)[0].rstrip("/")
                action = path.rsplit("/", 1)[-1]
                asked = self.headers.get("X-Namespace") or ""
                count, size = 0, 0
                try:
                    if action not in ("encode", "decode"):
                        raise BadRequest(404, "not found")
                    verdict = guard(self.headers.get("Authorization")) if guard else ALLOWED
                    if verdict != ALLOWED:
                        raise BadRequest(
                            verdict, "unauthorized" if verdict == UNAUTHENTICATED else "forbidden"
                        )
                    if asked and asked != namespace:
                        raise BadRequest(403, f"this codec server serves namespace {namespace!r}")
                    length = self.headers.get("Content-Length")
                    if length is None or not length.isdigit():
                        raise BadRequest(411, "Content-Length required")
                    size = int(length)
                    if size > limit:
                        self.close_connection = True
                        raise BadRequest(413, f"body over {limit} bytes")
                    answer, count = transform(ring, action, self.rfile.read(size))
                    status, body, kind = 200, answer, "application/json"
                except BadRequest as exc:
                    status, body, kind = exc.status, f"{exc}\n".encode(), "text/plain"
                # logged before the answer is sent: a client that has its answer has the line too
                log.info(
                    "codec %s %s namespace=%s payloads=%d bytes=%d -> %d",
                    self.command,
                    path,
                    asked or "-",
                    count,
                    size,
                    status,
                )
                self._send(status, body, kind)

        super().__init__(Handler, settings.bind, settings.port, tls=tls, thread_name="codec-server")


def serve(
    ring: KeyRing,
    settings: CodecServerSettings,
    *,
    namespace: str,
    kubeconfig: Path | None,
    stop: threading.Event,
) -> None:
    """Serve until ``stop`` is set."""
    guard = build_guard(settings, kubeconfig)
    tls = None
    if settings.tls_cert_file is not None and settings.tls_key_file is not None:
        from cloudloop.metrics_auth import serving_tls

        tls = serving_tls(settings.tls_cert_file, settings.tls_key_file)
    server = CodecServer(ring, settings, namespace=namespace, guard=guard, tls=tls).start()
    log.info(
        "codec server on %s://%s:%d for namespace %r (keys %s, active %r; CORS origins: %s)",
        server.scheme,
        settings.bind,
        server.port,
        namespace,
        ", ".join(sorted(ring.keys)),
        ring.active,
        ", ".join(settings.cors_origins) or "none",
    )
    try:
        stop.wait()
    finally:
        server.stop()
