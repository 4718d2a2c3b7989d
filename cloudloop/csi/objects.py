"""The Kubernetes objects of the CSI driver: its ``CSIDriver`` and the cloud's StorageClasses.

StorageClasses come from the configured cloud (``CloudDriver.storage_classes``) and the discovery
document the discoverer writes (Secret ``d8-cloud-provider-discovery-data``); where the cloud's
driver has snapshots and ``csi.volume_snapshot_class.enabled`` is set, the driver's
VolumeSnapshotClass follows the same document.

Rules:
- Every class is ``WaitForFirstConsumer``, expandable, reclaim ``Delete``, and on zonal clouds
  limited (``allowedTopologies``) to the zones it serves, else to every discovered zone.
- The default is the cloud's own unless ``csi.default_storage_class`` names another (``-``: none).
  Classes matching ``csi.storage_class_exclude`` are not made, and removed if this driver made them.
- Identity: managed classes carry ``cloudloop.io/csi-driver=<driver>``; a class of that name
  without the label is the user's and is never touched. A class whose immutable fields changed
  is deleted and created again (as Deckhouse does); one the cloud no longer offers is deleted.
- The VolumeSnapshotClass (deletionPolicy ``Delete``) is made with the StorageClasses, replaced
  when its parameters change, deleted when snapshots are no longer offered; without the snapshot
  CRDs there is none (a log line).
- A missing or unreadable discovery document leaves everything as it is.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from cloudloop.cloud.driver import Capability, CloudDriver
from cloudloop.cloud.models import StorageClassSpec
from cloudloop.cloud.registry import Settings
from cloudloop.csi.spec import ZONE_KEY
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import CSIDriver, StorageClass, VolumeSnapshotClass
from cloudloop.kube.resources import SECRETS, STORAGE_CLASSES, Resource
from cloudloop.rules.discovery import DISCOVERY_KEY, DISCOVERY_SECRET
from cloudloop.settings import CsiSettings

log = logging.getLogger(__name__)

CSI_DRIVERS: Resource[CSIDriver] = Resource(
    "storage.k8s.io", "v1", "csidrivers", "CSIDriver", namespaced=False
)
VOLUME_SNAPSHOT_CLASSES: Resource[VolumeSnapshotClass] = Resource(
    "snapshot.storage.k8s.io",
    "v1",
    "volumesnapshotclasses",
    "VolumeSnapshotClass",
    namespaced=False,
)
SNAPSHOT_DEFAULT_ANNOTATION = "snapshot.storage.kubernetes.io/is-default-class"
DRIVER_LABEL = "cloudloop.io/csi-driver"
MANAGED_BY = {"app.kubernetes.io/managed-by": "cloudloop"}
DEFAULT_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
#: Fields Kubernetes refuses to change on a StorageClass.
IMMUTABLE = ("provisioner", "parameters", "reclaimPolicy", "volumeBindingMode", "allowedTopologies")


def csi_driver_object(name: str) -> CSIDriver:
    """Attach required (ControllerPublish), no pod info, fsGroup applied for the fs type."""
    return {
        "metadata": {"name": name, "labels": dict(MANAGED_BY)},
        "spec": {
            "attachRequired": True,
            "podInfoOnMount": False,
            "requiresRepublish": False,
            "storageCapacity": False,
            "fsGroupPolicy": "ReadWriteOnceWithFSType",
            "volumeLifecycleModes": ["Persistent"],
        },
    }


def default_class(specs: Iterable[StorageClassSpec], setting: str) -> str:
    names = [s.name for s in specs]
    if setting == "-":
        return ""
    if setting:
        return setting if setting in names else ""
    return next((s.name for s in specs if s.default), "")


def storage_class_objects(
    driver_name: str,
    specs: list[StorageClassSpec],
    *,
    zones: list[str],
    zonal: bool,
    default: str,
    topology_key: str = ZONE_KEY,
) -> list[StorageClass]:
    objects = []
    for spec in sorted(specs, key=lambda s: s.name):
        body: StorageClass = {
            "metadata": {
                "name": spec.name,
                "labels": {**MANAGED_BY, DRIVER_LABEL: driver_name},
                "annotations": {DEFAULT_ANNOTATION: "true" if spec.name == default else "false"},
            },
            "provisioner": driver_name,
            "parameters": dict(spec.parameters),
            "reclaimPolicy": "Delete",
            "allowVolumeExpansion": True,
            "volumeBindingMode": "WaitForFirstConsumer",
        }
        served = spec.zones or zones
        if zonal and served:
            body["allowedTopologies"] = [
                {"matchLabelExpressions": [{"key": topology_key, "values": sorted(served)}]}
            ]
        objects.append(body)
    return objects


def _immutable(obj: Mapping[str, Any]) -> dict[str, object]:
    return {field: obj.get(field) or None for field in IMMUTABLE}


def reconcile_storage_classes(kube: Kube, driver_name: str, desired: list[StorageClass]) -> None:
    """Create, replace (immutable fields changed), update and delete this driver's classes."""
    wanted = {obj["metadata"]["name"]: obj for obj in desired}
    mine = {
        obj["metadata"]["name"]: obj
        for obj in kube.list(STORAGE_CLASSES, labelSelector=f"{DRIVER_LABEL}={driver_name}")[
            "items"
        ]
    }
    for name, obj in wanted.items():
        current = mine.get(name)
        if current is None:
            if kube.get(STORAGE_CLASSES, name) is not None:
                log.warning("StorageClass %s exists and is not %s's: left alone", name, driver_name)
                continue
            kube.create(STORAGE_CLASSES, obj)
            log.info("created StorageClass %s", name)
        elif _immutable(current) != _immutable(obj):
            kube.delete(STORAGE_CLASSES, name)
            kube.create(STORAGE_CLASSES, obj)
            log.info("replaced StorageClass %s (its parameters changed)", name)
        else:
            annotations = (current["metadata"].get("annotations") or {}).get(DEFAULT_ANNOTATION)
            if (
                annotations != obj["metadata"]["annotations"][DEFAULT_ANNOTATION]
                or current.get("allowVolumeExpansion") is not True
            ):
                kube.patch(
                    STORAGE_CLASSES,
                    name,
                    {
                        "metadata": {"annotations": obj["metadata"]["annotations"]},
                        "allowVolumeExpansion": True,
                    },
                )
    for name in set(mine) - set(wanted):
        kube.delete(STORAGE_CLASSES, name)
        log.info("deleted StorageClass %s (no longer offered)", name)


def volume_snapshot_class_object(settings: CsiSettings) -> VolumeSnapshotClass:
    wanted = settings.volume_snapshot_class
    body: VolumeSnapshotClass = {
        "metadata": {
            "name": wanted.name or settings.driver_name,
            "labels": {**MANAGED_BY, DRIVER_LABEL: settings.driver_name},
            "annotations": {SNAPSHOT_DEFAULT_ANNOTATION: "true" if wanted.default else "false"},
        },
        "driver": settings.driver_name,
        "deletionPolicy": "Delete",
    }
    if wanted.parameters:
        body["parameters"] = dict(wanted.parameters)
    return body


def reconcile_volume_snapshot_class(
    kube: Kube, settings: CsiSettings, desired: VolumeSnapshotClass | None
) -> None:
    """Make, replace (driver/parameters/deletionPolicy changed), re-annotate or delete this
    driver's VolumeSnapshotClass; a class of that name without the label is left alone."""
    selector = f"{DRIVER_LABEL}={settings.driver_name}"
    try:
        mine = {
            c["metadata"]["name"]: c
            for c in kube.list(VOLUME_SNAPSHOT_CLASSES, labelSelector=selector)["items"]
        }
    except KubeError as exc:
        if exc.not_found:
            log.info("no VolumeSnapshotClass API (snapshot CRDs not installed): no class made")
            return
        raise
    name = desired["metadata"]["name"] if desired is not None else ""
    for other in set(mine) - {name}:
        kube.delete(VOLUME_SNAPSHOT_CLASSES, other)
        log.info("deleted VolumeSnapshotClass %s (no longer offered)", other)
    if desired is None:
        return
    current = mine.get(name)
    fields = ("driver", "deletionPolicy", "parameters")
    if current is None:
        if kube.get(VOLUME_SNAPSHOT_CLASSES, name) is not None:
            log.warning("VolumeSnapshotClass %s exists and is not cloudloop's: left alone", name)
            return
        kube.create(VOLUME_SNAPSHOT_CLASSES, desired)
        log.info("created VolumeSnapshotClass %s", name)
    elif any((current.get(f) or None) != (desired.get(f) or None) for f in fields):
        kube.delete(VOLUME_SNAPSHOT_CLASSES, name)
        kube.create(VOLUME_SNAPSHOT_CLASSES, desired)
        log.info("replaced VolumeSnapshotClass %s (its parameters changed)", name)
    elif (current["metadata"].get("annotations") or {}).get(SNAPSHOT_DEFAULT_ANNOTATION) != desired[
        "metadata"
    ]["annotations"][SNAPSHOT_DEFAULT_ANNOTATION]:
        kube.patch(
            VOLUME_SNAPSHOT_CLASSES,
            name,
            {"metadata": {"annotations": desired["metadata"]["annotations"]}},
        )


def ensure_csi_driver(kube: Kube, name: str) -> None:
    if kube.get(CSI_DRIVERS, name) is None:
        kube.create(CSI_DRIVERS, csi_driver_object(name))
        log.info("created CSIDriver %s", name)


def read_discovery(kube: Kube, namespace: str) -> dict[str, Any] | None:
    """The discovery document, or ``None`` when it is missing or unreadable."""
    secret = kube.get(SECRETS, DISCOVERY_SECRET, namespace=namespace)
    raw = ((secret or {}).get("data") or {}).get(DISCOVERY_KEY)
    if raw is None:
        return None
    try:
        document = json.loads(base64.b64decode(raw, validate=True))
    except (binascii.Error, ValueError) as exc:
        log.warning("discovery data %s/%s unreadable: %s", namespace, DISCOVERY_SECRET, exc)
        return None
    return document if isinstance(document, dict) else None


def sync_objects(kube: Kube, settings: Settings, driver: CloudDriver) -> bool:
    """One pass; ``False`` when there was no discovery document to go by."""
    csi = settings.csi
    ensure_csi_driver(kube, csi.driver_name)
    document = read_discovery(kube, settings.discovery.namespace)
    volumes = driver.volumes
    if document is None or volumes is None or not driver.implements("storage_classes"):
        return False
    specs = [s for s in volumes.storage_classes(document) if not csi.excluded(s.name)]
    zones = [str(z) for z in document.get("zones") or []]
    desired = storage_class_objects(
        csi.driver_name,
        specs,
        zones=zones,
        zonal=volumes.zonal_volumes,
        default=default_class(specs, csi.default_storage_class),
        topology_key=volumes.volume_topology_key,
    )
    reconcile_storage_classes(kube, csi.driver_name, desired)
    if csi.volume_snapshot_class.enabled:  # else the chart gives no RBAC for the kind
        snapshots = driver.supports(Capability.SNAPSHOTS)
        reconcile_volume_snapshot_class(
            kube, csi, volume_snapshot_class_object(csi) if snapshots else None
        )
    return True


async def keep_objects(settings: Settings, driver: CloudDriver, stop: asyncio.Event) -> None:
    """While leader (Lease ``<leader_election.name>-csi``), sync every ``interval``."""
    from cloudloop.kube.client import api_client
    from cloudloop.kube.leader import run_as_leader

    api = api_client(settings.kubeconfig)
    kube = Kube(api)
    election = settings.leader_election.model_copy(
        update={"name": f"{settings.leader_election.name}-csi"}
    )

    async def loop() -> None:
        while not stop.is_set():
            try:
                await asyncio.to_thread(sync_objects, kube, settings, driver)
            except Exception as exc:  # the next pass tries again; the driver keeps serving
                log.warning("CSI objects: sync failed: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), settings.csi.storage_class_interval_s)

    await run_as_leader(api, election, loop)
