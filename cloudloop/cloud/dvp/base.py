"""The DVP driver's base: a REST client for the parent cluster, call counting, error translation.

The driver talks to the *parent* DVP cluster with its own kubeconfig (a file or Deckhouse's
base64 ``DVP_KUBERNETES_CONFIG_BASE64``) and keeps to one namespace. Every request is counted in
``cloud_api_requests_total{provider="dvp"}`` and every failure becomes a
:mod:`cloudloop.cloud.errors` class: a transport error or a 5xx is never "not found".
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import urllib3
import yaml
from kubernetes import client, config

from cloudloop.cloud import errors
from cloudloop.cloud.calls import cloud_call
from cloudloop.cloud.dvp.resources import CLUSTER_UUID_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE
from cloudloop.cloud.dvp.settings import DvpSettings
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import Resource

NAME = "dvp"
PROVIDER_ID_PREFIX = "dvp://"
REGION = "default"
DEFAULT_ZONES = ("default",)

T = TypeVar("T")
DeleteResult = Literal["gone", "deleting"]


def translate(operation: str, exc: BaseException) -> errors.CloudError:
    """Map a parent-cluster failure onto the contract's error classes."""
    if isinstance(exc, KubeError):
        message = str(exc)
        if exc.unreachable:  # no answer at all: the parent's API server is down or unreachable
            return errors.CloudUnreachable(NAME, operation, message)
        if exc.status in (401, 403):
            return errors.CloudAuthFailed(NAME, operation, message)
        if exc.status == 404:
            return errors.NotFound(NAME, operation, message)
        if exc.status == 409 and exc.reason == "AlreadyExists":
            return errors.AlreadyExists(NAME, operation, message)
        if exc.status == 429:
            return errors.CloudThrottled(NAME, operation, message)
        if exc.status in (400, 422):
            return errors.InvalidRequest(NAME, operation, message)
        return errors.CloudError(NAME, operation, message)
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return errors.CloudUnreachable(NAME, operation, f"{type(exc).__name__}: {exc}")
    return errors.CloudError(NAME, operation, f"{type(exc).__name__}: {exc}")


def parent_api_client(settings: DvpSettings) -> client.ApiClient:
    """An API client for the parent cluster; never the cluster the process runs in."""
    if settings.kubeconfig_base64 is not None:
        try:
            raw = base64.b64decode(settings.kubeconfig_base64.get_secret_value(), validate=True)
            document = yaml.safe_load(raw)
        except (binascii.Error, yaml.YAMLError) as exc:
            raise errors.CloudAuthFailed(
                NAME, "Connect", f"the base64 kubeconfig is unreadable ({type(exc).__name__})"
            ) from None
        configuration = client.Configuration()
        config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
            document, client_configuration=configuration
        )
        configuration.connection_pool_maxsize = 32
        return client.ApiClient(configuration)
    if settings.kubeconfig is not None:
        return api_client(settings.kubeconfig)
    raise errors.CloudAuthFailed(
        NAME, "Connect", "no parent cluster configured: set dvp.kubeconfig or the base64 one"
    )


class DvpBase:
    """The DVP session: the parent cluster's client (made on first use) and counted, translated
    calls; every capability object takes it."""

    provider = NAME

    def __init__(self, settings: DvpSettings, *, kube: Kube | None = None) -> None:
        self.settings = settings
        self._kube = kube
        self._lock = threading.Lock()
        #: (kind, name) → when an image or VM class was last seen to exist (see ``exists``).
        self._seen: dict[tuple[str, str], float] = {}

    @property
    def namespace(self) -> str:
        if not self.settings.namespace:
            raise errors.InvalidRequest(NAME, "Configure", "dvp.namespace is not set")
        return self.settings.namespace

    @property
    def kube(self) -> Kube:
        with self._lock:
            if self._kube is None:
                # Strict: a field the virtualization API does not have is refused, never pruned.
                self._kube = Kube(
                    parent_api_client(self.settings),
                    timeout_s=self.settings.timeout_s,
                    field_validation="Strict",
                )
            return self._kube

    def cluster_labels(self) -> dict[str, str]:
        """Labels that mark an object as this cluster's (as Deckhouse sets them)."""
        labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}
        if self.settings.cluster_uuid:
            labels[CLUSTER_UUID_LABEL] = self.settings.cluster_uuid
        return labels

    def cluster_selector(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.cluster_labels().items())

    # -- counted calls ---------------------------------------------------------------------
    def call(
        self,
        operation: str,
        request: Callable[[], T],
        *,
        found: Callable[[T], bool] = lambda _: True,
    ) -> T:
        """Run one API request through :func:`cloud_call` (``found`` tells a positive "not
        found" answer from a success)."""
        with cloud_call(NAME, operation, translate) as call:
            result = request()
            call.found = found(result)
        return result

    def get(self, resource: Resource, name: str) -> dict[str, Any] | None:
        """The object, or ``None`` when the parent positively says it does not exist."""
        namespace = self.namespace if resource.namespaced else None
        found = self.call(
            f"Get{resource.kind}",
            lambda: self.kube.get(resource, name, namespace),
            found=lambda answer: answer is not None,
        )
        return found

    def list_objects(
        self, resource: Resource, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Every object (all pages), in the namespace when the resource is namespaced."""
        return self.list_object_pages(resource, label_selector=label_selector)[0]

    def list_object_pages(
        self, resource: Resource, *, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """Every object and the number of requests (pages of 500) it took."""
        namespace = self.namespace if resource.namespaced else None
        items: list[dict[str, Any]] = []
        token: str | None = None
        pages = 0
        while True:
            pages += 1
            page = self.call(
                f"List{resource.kind}s",
                lambda token=token: self.kube.list(  # type: ignore[misc]
                    resource,
                    namespace,
                    labelSelector=label_selector,
                    limit=500,
                    **{"continue": token},
                ),
            )
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items, pages

    def exists(self, resource: Resource, name: str, *, ttl_s: float = 60.0) -> bool:
        """Whether a shared object (image, VM class) exists; a positive answer is reused for
        ``ttl_s``, so a burst of machines from one template asks once."""
        key = (resource.kind, name)
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get(key)
        if seen is not None and now - seen < ttl_s:
            return True
        if self.get(resource, name) is None:
            return False
        with self._lock:
            self._seen[key] = now
        return True

    def create(self, resource: Resource, body: dict[str, Any]) -> dict[str, Any] | None:
        """Create; ``None`` when an object of that name exists already."""
        namespace = self.namespace if resource.namespaced else None
        try:
            return self.call(
                f"Create{resource.kind}", lambda: self.kube.create(resource, body, namespace)
            )
        except errors.AlreadyExists:
            return None

    def patch(self, resource: Resource, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        namespace = self.namespace if resource.namespaced else None
        return self.call(
            f"Patch{resource.kind}", lambda: self.kube.patch(resource, name, patch, namespace)
        )

    def delete(self, resource: Resource, name: str) -> DeleteResult:
        """Delete; ``gone`` when nothing is left, ``deleting`` while finalizers hold it."""
        namespace = self.namespace if resource.namespaced else None
        try:
            answer = self.call(
                f"Delete{resource.kind}",
                lambda: self.kube.request("DELETE", resource.path(namespace, name)),
            )
        except errors.NotFound:
            return "gone"
        return "deleting" if (answer.get("metadata") or {}).get("finalizers") else "gone"
