"""The /metrics guard: bearer parsing, TokenReview then SubjectAccessReview, cache, fail closed."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest

from cloudloop import metrics
from cloudloop.kube.api import Kube, KubeError
from cloudloop.metrics_auth import (
    SUBJECT_ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    MetricsAuthorizer,
    bearer_token,
)


class ReviewingKube(Kube):
    """Answers TokenReviews from ``users`` (token → name) and SARs from ``allowed`` names."""

    def __init__(self, users: dict[str, str], allowed: set[str]) -> None:
        self.users = users
        self.allowed = allowed
        self.failing = False
        self.bodies: list[dict[str, Any]] = []

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if self.failing:
            raise KubeError(503, "Service Unavailable", None)
        body: dict[str, Any] = kwargs["body"]
        self.bodies.append(body)
        if path == TOKEN_REVIEWS:
            name = self.users.get(body["spec"]["token"])
            user = {"username": name, "groups": ["g"]} if name else {}
            return {"status": {"authenticated": name is not None, "user": user}}
        assert path == SUBJECT_ACCESS_REVIEWS
        spec = body["spec"]
        assert spec["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
        return {"status": {"allowed": spec["user"] in self.allowed}}


@pytest.mark.parametrize(
    ("header", "token"),
    [
        pytest.param("Bearer abc", "abc", id="bearer"),
        pytest.param("bearer  abc ", "abc", id="case-and-spaces"),
        pytest.param("Basic abc", None, id="basic"),
        pytest.param("Bearer ", None, id="empty-token"),
        pytest.param("", None, id="empty"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@pytest.mark.parametrize(
    ("header", "verdict"),
    [
        pytest.param("Bearer good", 200, id="allowed"),
        pytest.param("Bearer weak", 403, id="authenticated-not-allowed"),
        pytest.param("Bearer bogus", 401, id="unknown-token"),
        pytest.param(None, 401, id="no-header"),
    ],
)
def test_verdicts(header: str | None, verdict: int) -> None:
    kube = ReviewingKube({"good": "prometheus", "weak": "someone"}, {"prometheus"})
    assert MetricsAuthorizer(kube)(header) == verdict


def test_verdicts_are_cached_by_hash() -> None:
    kube = ReviewingKube({"good": "prometheus"}, {"prometheus"})
    guard = MetricsAuthorizer(kube)
    assert guard("Bearer good") == 200
    assert guard("Bearer good") == 200
    assert guard.reviews == 1
    assert "good" not in repr(guard._cache)


def test_api_error_fails_closed() -> None:
    kube = ReviewingKube({"good": "prometheus"}, {"prometheus"})
    kube.failing = True
    assert MetricsAuthorizer(kube)("Bearer good") == 401


def get(port: int, path: str, token: str | None = None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_server_guards_only_metrics(server: metrics.MetricsServer) -> None:
    assert get(server.port, "/metrics") == 200  # open by default
    kube = ReviewingKube({"good": "prometheus", "weak": "someone"}, {"prometheus"})
    metrics.require_metrics_authorization(MetricsAuthorizer(kube))
    assert get(server.port, "/metrics") == 401
    assert get(server.port, "/metrics", "weak") == 403
    assert get(server.port, "/metrics", "good") == 200
    assert get(server.port, "/healthz") == 200  # probes stay open


def test_api_errors_are_not_remembered() -> None:
    """A review the API server could not answer refuses this scrape only."""
    kube = ReviewingKube({"good": "prometheus"}, {"prometheus"})
    guard = MetricsAuthorizer(kube)
    kube.failing = True
    assert guard("Bearer good") == 401
    kube.failing = False
    assert guard("Bearer good") == 200


def test_cache_is_a_bounded_lru() -> None:
    kube = ReviewingKube({"a": "prometheus", "b": "prometheus", "c": "prometheus"}, {"prometheus"})
    guard = MetricsAuthorizer(kube, max_cached=2)
    for token in ("a", "b", "a", "c"):  # "a" used again, so "b" is the least recent
        assert guard(f"Bearer {token}") == 200
    assert guard.reviews == 3
    assert len(guard._cache) == 2
    assert guard("Bearer a") == 200 and guard.reviews == 3  # kept
    assert guard("Bearer b") == 200 and guard.reviews == 4  # evicted, reviewed again


def test_audiences_are_asked_for() -> None:
    kube = ReviewingKube({"good": "prometheus"}, {"prometheus"})
    MetricsAuthorizer(kube, audiences=["cloudloop-metrics"])("Bearer good")
    assert kube.bodies[0]["spec"]["audiences"] == ["cloudloop-metrics"]
    MetricsAuthorizer(kube)("Bearer good")
    assert "audiences" not in kube.bodies[2]["spec"]


def test_https_with_a_self_signed_certificate() -> None:
    import ssl

    from cloudloop.metrics_auth import serving_tls

    served = metrics.MetricsServer("127.0.0.1", 0, tls=serving_tls()).start()
    try:
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        url = f"https://127.0.0.1:{served.port}/healthz"
        with urllib.request.urlopen(url, timeout=5, context=insecure) as response:
            assert response.status == 200
        assert served.scheme == "https"
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{served.port}/healthz", timeout=5)
    finally:
        served.stop()
