"""Opt-in authorization of ``/metrics`` the way kube-rbac-proxy does it.

A scrape must carry ``Authorization: Bearer <token>``. The token is checked with a TokenReview
(who is this?) and a SubjectAccessReview for verb ``get`` on the non-resource URL ``/metrics``
(may they?). No or a rejected token is 401, a valid token without the permission is 403, and an
API error is 401 too (fail closed). Verdicts are cached for a short time under the token's
SHA-256, never the token itself, and tokens are never logged.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any

from cloudloop.kube.api import Kube

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
    ) -> None:
        self.kube = kube
        self.path = path
        self.verb = verb
        self.cache_ttl_s = cache_ttl_s
        self.max_cached = max_cached
        self._cache: dict[str, tuple[int, float]] = {}
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
                return cached[0]
        verdict = self._review(token)
        with self._lock:
            if len(self._cache) >= self.max_cached:
                self._cache.clear()
            self._cache[key] = (verdict, now + self.cache_ttl_s)
        return verdict

    def _review(self, token: str) -> int:
        self.reviews += 1
        try:
            review = self.kube.request(
                "POST",
                TOKEN_REVIEWS,
                body={
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": {"token": token},
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
            return UNAUTHENTICATED
        allowed = bool((access.get("status") or {}).get("allowed"))
        if not allowed:
            log.info("metrics authorization: %s may not get %s", user.get("username"), self.path)
        return ALLOWED if allowed else FORBIDDEN
