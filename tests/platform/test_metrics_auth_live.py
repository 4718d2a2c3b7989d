"""The /metrics guard against the real API server: a ServiceAccount token is let in only once
RBAC grants it ``get`` on the non-resource URL ``/metrics``."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid

import pytest

from cloudloop import metrics
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import Resource
from cloudloop.metrics_auth import MetricsAuthorizer
from tests.helpers import eventually

pytestmark = pytest.mark.stack

SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
CLUSTER_ROLES = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False
)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)


def get(port: int, token: str | None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def service_account_token(kube: Kube, namespace: str, name: str) -> str:
    kube.create(SERVICE_ACCOUNTS, {"metadata": {"name": name}}, namespace)
    answer = kube.request(
        "POST",
        SERVICE_ACCOUNTS.path(namespace, name, "token"),
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    return str(answer["status"]["token"])


async def test_service_account_needs_rbac_for_metrics(
    kube: Kube, namespace: str, server: metrics.MetricsServer
) -> None:
    name = f"scraper-{uuid.uuid4().hex[:8]}"
    token = service_account_token(kube, namespace, name)
    metrics.require_metrics_authorization(MetricsAuthorizer(kube, cache_ttl_s=0))
    assert get(server.port, None) == 401
    assert get(server.port, "not-a-token") == 401
    assert get(server.port, token) == 403  # authenticated, not authorized
    role = {
        "metadata": {"name": name},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    kube.create(CLUSTER_ROLES, role)
    kube.create(CLUSTER_ROLE_BINDINGS, binding)
    try:
        await eventually(lambda: get(server.port, token) == 200, what="scrape allowed by RBAC")
    finally:
        kube.delete(CLUSTER_ROLE_BINDINGS, name)
        kube.delete(CLUSTER_ROLES, name)


def test_token_audiences(kube: Kube, namespace: str, server: metrics.MetricsServer) -> None:
    """A token minted for the configured audience authenticates; for another it does not."""
    name = f"aud-{uuid.uuid4().hex[:8]}"
    kube.create(SERVICE_ACCOUNTS, {"metadata": {"name": name}}, namespace)
    answer = kube.request(
        "POST",
        SERVICE_ACCOUNTS.path(namespace, name, "token"),
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600, "audiences": ["cloudloop-metrics"]},
        },
    )
    token = str(answer["status"]["token"])
    metrics.require_metrics_authorization(
        MetricsAuthorizer(kube, cache_ttl_s=0, audiences=["cloudloop-metrics"])
    )
    assert get(server.port, token) == 403  # authenticated for that audience, no RBAC
    metrics.require_metrics_authorization(MetricsAuthorizer(kube, cache_ttl_s=0))
    assert get(server.port, token) == 401  # not a token for the API server's audience
