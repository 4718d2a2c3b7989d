"""CloudProviderRegistration: the node manager's registration Secrets for the configured provider.

Deckhouse's node manager reads ``kube-system/d8-node-manager-cloud-provider`` (and the copy
``...-<provider>``) to learn the provider's InstanceClass and Cluster API kinds, and
``d8-cloud-provider-<provider>-capi`` for its machine-template contract. This loop writes
them at start and again every ``interval_s`` when someone changed them; an unchanged Secret is not
written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from cloudloop.cloud.registry import provider_for
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Secret
from cloudloop.kube.resources import SECRETS
from starters.context import StarterContext

log = logging.getLogger(__name__)

SecretBodies = Callable[[], list[Secret]]


def write_secrets(kube: Kube, bodies: list[Secret]) -> int:
    """Create or update each Secret whose data or labels differ; the number written."""
    written = 0
    for body in bodies:
        meta = body["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        existing = kube.get(SECRETS, name, namespace)
        if existing is None:
            kube.create(SECRETS, body, namespace)
            written += 1
            continue
        labels = existing["metadata"].get("labels") or {}
        if existing.get("data") != body["data"] or any(
            labels.get(k) != v for k, v in meta.get("labels", {}).items()
        ):
            # A merge patch keeps keys it does not name: a key the values no longer have (another
            # provider's subtree, an unset ``sshPublicKey``) is removed with null.
            stale = dict.fromkeys(set(existing.get("data") or {}) - set(body["data"]))
            kube.patch(
                SECRETS,
                name,
                {"metadata": {"labels": meta.get("labels", {})}, "data": {**stale, **body["data"]}},
                namespace,
            )
            written += 1
    return written


class CloudProviderRegistration:
    def __init__(self, kube: Kube, secrets: SecretBodies, *, interval_s: float = 600.0) -> None:
        self.kube = kube
        self.secrets = secrets
        self.interval_s = interval_s
        self._stopped = asyncio.Event()

    @classmethod
    def from_context(cls, context: StarterContext) -> CloudProviderRegistration | None:
        provider = provider_for(context.settings)
        build = provider.registration
        if build is None:
            return None
        section = provider.section(context.settings)
        templates = provider.node_templates
        # The machine-template contract travels beside the registration (Deckhouse's channel).
        extra = [templates.secret()] if templates is not None else []
        return cls(context.kube, lambda: build(section) + extra)

    def stop(self) -> None:
        self._stopped.set()

    async def run(self) -> None:
        while not self._stopped.is_set():
            try:
                written = await asyncio.to_thread(write_secrets, self.kube, self.secrets())
                if written:
                    log.info("registration: wrote %d node-manager Secrets", written)
            except Exception:
                log.exception("registration: writing the node-manager Secrets failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), timeout=self.interval_s)
