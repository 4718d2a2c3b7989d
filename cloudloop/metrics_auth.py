"""Opt-in authorization of ``/metrics`` the way kube-rbac-proxy does it.

A scrape must carry ``Authorization: Bearer <token>``. The token is checked with a TokenReview
(who is this?, for the configured audiences) and a SubjectAccessReview for verb ``get`` on the
non-resource URL ``/metrics`` (may they?). No or a rejected token is 401, a valid token without
the permission is 403, and an API error is 401 too (fail closed) but is not remembered: the next
scrape asks again. Verdicts are kept for a short time in a bounded LRU cache under the token's
SHA-256, never the token itself, and tokens are never logged.

With authorization on, the endpoint serves HTTPS only (tokens never cross the network in clear
text), from the configured certificate or, as kube-rbac-proxy does without one, a self-signed
certificate made at start (:func:`serving_tls`).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import logging
import os
import socket
import ssl
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from cloudloop.kube.api import Kube
from cloudloop.settings import CoreSettings

log = logging.getLogger(__name__)

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

ALLOWED, UNAUTHENTICATED, FORBIDDEN = 200, 401, 403


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else ``None``."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class MetricsAuthorizer:
    """Callable guard for :func:`cloudloop.metrics.require_metrics_authorization`."""

    def __init__(
        self,
        kube: Kube,
        *,
        path: str = "/metrics",
        verb: str = "get",
        cache_ttl_s: float = 60.0,
        max_cached: int = 1024,
        audiences: list[str] | None = None,
    ) -> None:
        self.kube = kube
        self.path = path
        self.verb = verb
        self.cache_ttl_s = cache_ttl_s
        self.max_cached = max_cached
        self.audiences = list(audiences or [])
        self._cache: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.reviews = 0  # TokenReviews sent (for tests and debugging)

    def __call__(self, authorization: str | None) -> int:
        token = bearer_token(authorization)
        if token is None:
            return UNAUTHENTICATED
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached[1] > now:
                self._cache.move_to_end(key)
                return cached[0]
        verdict = self._review(token)
        if verdict is None:  # the API server could not say: refuse now, ask again next time
            return UNAUTHENTICATED
        with self._lock:
            self._cache[key] = (verdict, now + self.cache_ttl_s)
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
        return verdict

    def _review(self, token: str) -> int | None:
        """The verdict for ``token``; ``None`` when the API server gave none."""
        self.reviews += 1
        spec: dict[str, Any] = {"token": token}
        if self.audiences:
            spec["audiences"] = self.audiences
        try:
            review = self.kube.request(
                "POST",
                TOKEN_REVIEWS,
                body={
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": spec,
                },
            )
            status = review.get("status") or {}
            if not status.get("authenticated"):
                return UNAUTHENTICATED
            user: dict[str, Any] = status.get("user") or {}
            access = self.kube.request(
                "POST",
                SUBJECT_ACCESS_REVIEWS,
                body={
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {
                        "user": user.get("username", ""),
                        "uid": user.get("uid", ""),
                        "groups": user.get("groups") or [],
                        "extra": user.get("extra") or {},
                        "nonResourceAttributes": {"path": self.path, "verb": self.verb},
                    },
                },
            )
        except Exception as exc:  # the API server could not say: nobody gets in
            log.warning("metrics authorization: review failed: %s", type(exc).__name__)
            return None
        allowed = bool((access.get("status") or {}).get("allowed"))
        if not allowed:
            log.info("metrics authorization: %s may not get %s", user.get("username"), self.path)
        return ALLOWED if allowed else FORBIDDEN


def serving_tls(cert_file: Path | None = None, key_file: Path | None = None) -> ssl.SSLContext:
    """The server TLS context of the metrics endpoint: the given certificate and key, or a
    self-signed pair made now (kept in a private temporary folder)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file is not None and key_file is not None:
        context.load_cert_chain(str(cert_file), str(key_file))
        return context
    cert, key = _self_signed()
    folder = Path(tempfile.mkdtemp(prefix="cloudloop-metrics-tls-"))
    (folder / "tls.crt").write_bytes(cert)
    key_path = folder / "tls.key"
    key_path.touch(mode=0o600)
    key_path.write_bytes(key)
    context.load_cert_chain(str(folder / "tls.crt"), str(key_path))
    log.info("metrics endpoint: serving HTTPS with a self-signed certificate")
    return context


def _self_signed() -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    host = socket.gethostname()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"cloudloop-metrics@{host}")])
    now = datetime.datetime.now(datetime.UTC)
    alt_names: list[x509.GeneralName] = [
        x509.DNSName(host),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    pod_ip = os.environ.get("POD_IP")
    if pod_ip:
        alt_names.append(x509.IPAddress(ipaddress.ip_address(pod_ip)))
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .sign(key, hashes.SHA256())
    )
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def protect_metrics(settings: CoreSettings) -> ssl.SSLContext | None:
    """With ``metrics_authorization`` on: guard ``/metrics`` and return the TLS context to
    serve it with; ``None`` (plain HTTP, open) when it is off."""
    if not settings.metrics_authorization:
        return None
    from cloudloop.kube.client import api_client
    from cloudloop.metrics import require_metrics_authorization

    require_metrics_authorization(
        MetricsAuthorizer(
            Kube(api_client(settings.kubeconfig)), audiences=settings.metrics_token_audiences
        )
    )
    return serving_tls(settings.metrics_tls_cert_file, settings.metrics_tls_key_file)
