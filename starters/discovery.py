"""CloudDataDiscoverer: Deckhouse's cloud-data-discoverer as one periodic loop in the starter.

Each pass (every ``discovery.interval_s``; after a pass the cloud failed, again in
``discovery.retry_interval_s``, doubling up to the interval) asks the cloud for instance types,
the discovery data and the cluster's disks, then writes, in Deckhouse's order: the conditions
ConfigMap, the ``InstanceTypesCatalog``, the discovery-data Secret, and the orphaned-disk
gauges. A cloud error sets ``cloud_data_discovery_cloud_request_error{type}`` and leaves what it
would have fed untouched, so a good Secret or catalog is never replaced by an empty or partial
one. Kubernetes writes are create-or-update, retried with backoff (Deckhouse: 15 attempts, 3 s up
to 30 s).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from cloudloop.cloud.driver import Discovery
from cloudloop.cloud.errors import CloudError, NotSupported
from cloudloop.cloud.models import DiscoveryData, Disk
from cloudloop.cloud.registry import PROVIDERS
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import (
    CONFIG_MAPS,
    INSTANCE_TYPES_CATALOGS,
    PERSISTENT_VOLUMES,
    SECRETS,
)
from cloudloop.metrics import (
    DISCOVERY_CLOUD_REQUEST_ERROR,
    DISCOVERY_CONDITIONS_ERROR,
    DISCOVERY_ORPHANED_DISK,
    DISCOVERY_UPDATE_RESOURCE_ERROR,
)
from cloudloop.rules import discovery as cloud_data
from starters.context import StarterContext

log = logging.getLogger(__name__)

T = TypeVar("T")

INSTANCE_TYPES = "instance_types"
DISCOVERY_DATA = "discovery_data"
DISKS_META = "disks_meta"
MANAGED_BY = {"app.kubernetes.io/managed-by": "cloudloop"}


@dataclass
class DiscoveryPass:
    """What one pass found and wrote (for logs and tests)."""

    failures: dict[str, CloudError | None] = field(default_factory=dict)
    conditions: list[cloud_data.CloudCondition] = field(default_factory=list)
    orphans: list[Disk] | None = None
    wrote_catalog: bool = False
    wrote_secret: bool = False
    write_failed: bool = False

    @property
    def cloud_failed(self) -> bool:
        """A request the cloud failed (not one it does not support): worth trying again soon."""
        return any(
            error is not None and not isinstance(error, NotSupported)
            for error in self.failures.values()
        )


class CloudDataDiscoverer:
    def __init__(
        self,
        kube: Kube,
        discovery: Discovery,
        *,
        provider: str,
        cluster: str,
        interval_s: float,
        retry_interval_s: float | None = None,
        namespace: str = "kube-system",
        catalog_name: str = cloud_data.CATALOG_NAME,
        write_attempts: int = 15,
        write_backoff_s: float = 3.0,
        write_backoff_max_s: float = 30.0,
        schema: type[BaseModel] | None = None,
    ) -> None:
        self.kube = kube
        self.discovery = discovery
        self.provider = provider
        self.cluster = cluster
        self.interval_s = interval_s
        self.retry_interval_s = min(retry_interval_s or interval_s, interval_s)
        self.namespace = namespace
        self.catalog_name = catalog_name
        self.write_attempts = write_attempts
        self.write_backoff_s = write_backoff_s
        self.write_backoff_max_s = write_backoff_max_s
        #: Deckhouse's schema of the document (the provider record's), checked before a write.
        self.schema = schema
        self.passes = 0
        self.last_pass: DiscoveryPass | None = None
        self._orphan_labels: set[tuple[str, str]] = set()
        self._condition_labels: set[tuple[str, str]] = set()
        self._stopped = asyncio.Event()

    @classmethod
    def from_context(cls, context: StarterContext) -> CloudDataDiscoverer | None:
        settings = context.settings.discovery
        if not settings.enabled:
            log.info("cloud data discovery off: discovery.enabled is false")
            return None
        if context.driver.discovery is None:
            log.info("cloud data discovery off: %s has no discovery", context.driver.provider)
            return None
        record = PROVIDERS.get(context.driver.provider)
        schemas = record.discovery_schemas if record is not None else None
        return cls(
            context.kube,
            context.driver.discovery,
            provider=context.driver.provider,
            cluster=context.cluster,
            interval_s=settings.interval_s,
            retry_interval_s=settings.retry_interval_s,
            namespace=settings.namespace,
            schema=schemas.discoverer if schemas is not None else None,
        )

    def stop(self) -> None:
        self._stopped.set()

    async def run(self) -> None:
        retry = self.retry_interval_s
        try:
            while not self._stopped.is_set():
                started = time.monotonic()
                failed = True
                try:
                    failed = (await self.discover()).cloud_failed
                except Exception:
                    log.exception("discovery: pass failed")
                if failed:
                    wait, retry = retry, min(retry * 2, self.interval_s)
                    log.info("discovery: next pass in %.0fs (this one failed)", wait)
                else:
                    wait, retry = self.interval_s, self.retry_interval_s
                remaining = wait - (time.monotonic() - started)
                if remaining > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopped.wait(), timeout=remaining)
        finally:
            self.forget_metrics()

    def forget_metrics(self) -> None:
        """Drop the per-disk and per-condition series this discoverer exported."""
        for labels in self._orphan_labels:
            DISCOVERY_ORPHANED_DISK.remove(*labels)
        for labels in self._condition_labels:
            DISCOVERY_CONDITIONS_ERROR.remove(*labels)
        self._orphan_labels, self._condition_labels = set(), set()

    # -- one pass --------------------------------------------------------------------------
    async def _ask(self, kind: str, call: Callable[[], T], result: DiscoveryPass) -> T | None:
        try:
            answer = await asyncio.to_thread(call)
        except NotSupported as exc:
            result.failures[kind] = exc
            return None
        except CloudError as exc:
            log.warning("discovery: %s failed: %s", kind, exc)
            result.failures[kind] = exc
            DISCOVERY_CLOUD_REQUEST_ERROR.labels(kind).set(1)
            return None
        except Exception as exc:  # a driver bug must not look like success
            log.exception("discovery: %s failed unexpectedly", kind)
            result.failures[kind] = CloudError(self.provider, kind, type(exc).__name__)
            DISCOVERY_CLOUD_REQUEST_ERROR.labels(kind).set(1)
            return None
        result.failures[kind] = None
        DISCOVERY_CLOUD_REQUEST_ERROR.labels(kind).set(0)
        return answer

    async def discover(self) -> DiscoveryPass:
        result = DiscoveryPass()
        instance_types = await self._ask(INSTANCE_TYPES, self.discovery.instance_types, result)
        data = await self._ask(DISCOVERY_DATA, self.discovery.discovery_data, result)
        disks = await self._ask(
            DISKS_META, lambda: self.discovery.list_cluster_disks(self.cluster), result
        )

        result.conditions = cloud_data.cloud_conditions(
            result.failures, data.zones if data is not None else None
        )
        self._export_conditions(result.conditions)
        encoded_conditions = cloud_data.encode_conditions(result.conditions)
        if not await self._write(
            "conditions ConfigMap", lambda: self._put_conditions(encoded_conditions)
        ):
            result.write_failed = True

        if instance_types:
            items = cloud_data.catalog_items(instance_types)
            result.wrote_catalog = await self._write(
                "InstanceTypesCatalog", lambda: self._put_catalog(items)
            )
            result.write_failed |= not result.wrote_catalog
        elif instance_types is not None:
            log.warning("discovery: the cloud listed no instance type; catalog left as it is")
            DISCOVERY_CLOUD_REQUEST_ERROR.labels(INSTANCE_TYPES).set(1)

        # Clouds without an instance-type catalog (DVP, zVirt) still get their discovery data.
        types_unsupported = isinstance(result.failures.get(INSTANCE_TYPES), NotSupported)
        if data is not None and (instance_types or types_unsupported):
            written = await self._write_discovery_secret(data)
            result.wrote_secret = bool(written)
            result.write_failed |= written is False

        if disks is not None:
            result.orphans = await self._check_orphans(disks)

        DISCOVERY_UPDATE_RESOURCE_ERROR.set(1 if result.write_failed else 0)
        self.passes += 1
        self.last_pass = result
        return result

    async def _write_discovery_secret(self, data: DiscoveryData) -> bool | None:
        """Write the Secret; ``None`` when there is nothing trustworthy to write."""
        try:
            base = await asyncio.to_thread(self._read_provider_document)
        except Exception as exc:  # unreadable input: never write a document without it
            log.error(
                "discovery: cannot read %s/%s (%s); discovery data left as it is",
                self.namespace,
                cloud_data.PROVIDER_CONFIGURATION_SECRET,
                exc,
            )
            return False
        try:
            document = cloud_data.discovery_document(base, data)
        except cloud_data.IncompleteDiscovery as exc:
            log.warning("discovery: %s; discovery data left as it is", exc)
            DISCOVERY_CLOUD_REQUEST_ERROR.labels(DISCOVERY_DATA).set(1)
            return None
        self._check_schema(document)
        encoded = cloud_data.encode_document(document)
        return await self._write("discovery-data Secret", lambda: self._put_secret(encoded))

    def _check_schema(self, document: dict[str, Any]) -> None:
        """Log what Deckhouse's schema of the document refuses (the document is still written:
        it is the cloud's data, and the previous one would be as stale)."""
        if self.schema is None:
            return
        try:
            self.schema.model_validate(document)
        except ValidationError as exc:
            refused = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(document)'}: {e['msg']}"
                for e in exc.errors(include_url=False, include_input=False)
            )
            log.warning(
                "discovery: the %s document does not satisfy Deckhouse's schema (%s)",
                document.get("kind") or "discovery",
                refused,
            )

    def _export_conditions(self, conditions: list[cloud_data.CloudCondition]) -> None:
        failing = {(c.name, c.message) for c in conditions if not c.ok}
        for labels in self._condition_labels - failing:
            DISCOVERY_CONDITIONS_ERROR.remove(*labels)
        for labels in failing:
            DISCOVERY_CONDITIONS_ERROR.labels(*labels).set(1)
        self._condition_labels = failing

    async def _check_orphans(self, disks: list[Disk]) -> list[Disk] | None:
        try:
            listing = await asyncio.to_thread(self.kube.list, PERSISTENT_VOLUMES)
        except Exception as exc:  # without the PVs every disk would look orphaned
            log.warning("discovery: cannot list PersistentVolumes, orphan check skipped: %s", exc)
            return None
        orphans = cloud_data.orphaned_disks(disks, listing.get("items", []))
        current = {(d.id, d.name) for d in orphans}
        for labels in self._orphan_labels - current:
            DISCOVERY_ORPHANED_DISK.remove(*labels)
        for labels in current:
            DISCOVERY_ORPHANED_DISK.labels(*labels).set(1)
        self._orphan_labels = current
        if orphans:
            log.info("discovery: %d orphaned disks: %s", len(orphans), [d.id for d in orphans])
        return orphans

    # -- Kubernetes writes -----------------------------------------------------------------
    async def _write(self, what: str, write: Callable[[], None]) -> bool:
        delay = self.write_backoff_s
        for attempt in range(1, self.write_attempts + 1):
            try:
                await asyncio.to_thread(write)
                return True
            except Exception as exc:
                if attempt == self.write_attempts:
                    log.error("discovery: writing the %s failed %d times: %s", what, attempt, exc)
                    return False
                log.warning(
                    "discovery: writing the %s failed (attempt %d/%d): %s; retrying in %.1fs",
                    what,
                    attempt,
                    self.write_attempts,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.write_backoff_max_s)
        return False

    def _read_provider_document(self) -> dict[str, Any] | None:
        secret = self.kube.get(
            SECRETS, cloud_data.PROVIDER_CONFIGURATION_SECRET, namespace=self.namespace
        )
        if secret is None:
            return None
        raw = (secret.get("data") or {}).get(cloud_data.PROVIDER_DISCOVERY_KEY)
        if raw is None:
            return None
        try:
            text = base64.b64decode(raw, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise ValueError(f"{cloud_data.PROVIDER_DISCOVERY_KEY} is not base64 text") from exc
        return cloud_data.parse_provider_document(text)

    def _put_secret(self, encoded: str) -> None:
        value = base64.b64encode(encoded.encode()).decode()
        name, key = cloud_data.DISCOVERY_SECRET, cloud_data.DISCOVERY_KEY
        existing = self.kube.get(SECRETS, name, namespace=self.namespace)
        if existing is None:
            body = {
                "metadata": {"name": name, "namespace": self.namespace, "labels": MANAGED_BY},
                "type": "Opaque",
                "data": {key: value},
            }
            self.kube.create(SECRETS, body, namespace=self.namespace)
        elif (existing.get("data") or {}).get(key) != value:
            self.kube.patch(SECRETS, name, {"data": {key: value}}, namespace=self.namespace)

    def _put_conditions(self, encoded: str) -> None:
        name, key = cloud_data.CONDITIONS_CONFIGMAP, cloud_data.CONDITIONS_KEY
        existing = self.kube.get(CONFIG_MAPS, name, namespace=self.namespace)
        if existing is None:
            body = {
                "metadata": {"name": name, "namespace": self.namespace, "labels": MANAGED_BY},
                "data": {key: encoded},
            }
            self.kube.create(CONFIG_MAPS, body, namespace=self.namespace)
        elif (existing.get("data") or {}).get(key) != encoded:
            self.kube.patch(CONFIG_MAPS, name, {"data": {key: encoded}}, namespace=self.namespace)

    def _put_catalog(self, items: list[dict[str, str]]) -> None:
        existing = self.kube.get(INSTANCE_TYPES_CATALOGS, self.catalog_name)
        if existing is None:
            body = {
                "metadata": {"name": self.catalog_name, "labels": MANAGED_BY},
                "instanceTypes": items,
            }
            self.kube.create(INSTANCE_TYPES_CATALOGS, body)
        elif existing.get("instanceTypes") != items:
            self.kube.patch(INSTANCE_TYPES_CATALOGS, self.catalog_name, {"instanceTypes": items})
