"""The PVC → Pod → resize → delete path through the real sidecars, for any cloud.

What a user does, in order, and what each step must leave in Kubernetes and in the cloud:
a PVC on a ``WaitForFirstConsumer`` StorageClass and a Pod the real scheduler places on a kwok
Node (CSINode with its zone) → CreateVolume in that node's zone → PV bound → VolumeAttachment
attached, the disk attached to the node's instance in the cloud → Pod deleted → detached → PVC
grown → the cloud disk grown, the PVC waiting for the node to grow its filesystem → PVC deleted →
PV and disk gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cloudloop.cloud import errors
from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.models import Volume
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import (
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    VOLUME_ATTACHMENTS,
)
from devstack.csi_deployment import delete_pod, pod, pvc
from tests.helpers import eventually
from tests.support.parts import has

GIB = 1 << 30


@dataclass
class Milestones:
    """Seconds from the PVC's creation to each step (for the benchmark)."""

    started: float = field(default_factory=time.monotonic)
    seen: dict[str, float] = field(default_factory=dict)

    def mark(self, name: str) -> None:
        self.seen[name] = time.monotonic() - self.started


def cloud_volume(driver: CloudDriver, volume_id: str) -> Volume | None:
    with contextlib.suppress(errors.NotFound):
        return has(driver.volumes).get_volume(volume_id)
    return None


def live_attachments(volume: Volume | None) -> list[str]:
    if volume is None:
        return []
    return [a.instance_id for a in volume.attachments if a.state not in ("detached", "")]


def _pvc(kube: Kube, namespace: str, name: str) -> Mapping[str, Any] | None:
    return kube.get(PERSISTENT_VOLUME_CLAIMS, name, namespace)


async def provision_and_attach(
    kube: Kube,
    driver: CloudDriver,
    *,
    namespace: str,
    storage_class: str,
    node: str,
    instance_id: str,
    zone: str,
    name: str = "data",
    timeout: float = 120,
) -> tuple[str, Milestones]:
    """PVC and Pod created → bound, attached; returns the cloud volume ID."""
    milestones = Milestones()
    kube.create(PERSISTENT_VOLUME_CLAIMS, pvc(name, storage_class, "1Gi"), namespace)
    kube.create(PODS, pod(f"{name}-app", name, node), namespace)

    def bound() -> str | None:
        claim = _pvc(kube, namespace, name) or {}
        if (claim.get("status") or {}).get("phase") == "Bound":
            return str(claim["spec"]["volumeName"])
        return None

    pv_name = await eventually(bound, timeout=timeout, what=f"PVC {name} bound")
    milestones.mark("bound")
    pv = kube.get(PERSISTENT_VOLUMES, pv_name) or {}
    volume_id = str(pv["spec"]["csi"]["volumeHandle"])
    volume = await asyncio.to_thread(cloud_volume, driver, volume_id)
    assert volume is not None, f"{volume_id} not in the cloud"
    if zone:
        assert volume.zone == zone, (volume.zone, zone)
        terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert terms[0]["matchExpressions"][0]["values"] == [zone], terms

    def scheduled() -> str | None:
        found = kube.get(PODS, f"{name}-app", namespace) or {}
        return str((found.get("spec") or {}).get("nodeName") or "") or None

    assert await eventually(scheduled, timeout=timeout, what="pod scheduled") == node

    def attached() -> dict[str, Any] | None:
        for va in kube.list(VOLUME_ATTACHMENTS)["items"]:
            if va["spec"]["source"].get("persistentVolumeName") == pv_name and (
                va.get("status") or {}
            ).get("attached"):
                return dict(va)
        return None

    va = await eventually(attached, timeout=timeout, what=f"VolumeAttachment of {pv_name}")
    milestones.mark("attached")
    assert va["spec"]["nodeName"] == node
    volume = await asyncio.to_thread(cloud_volume, driver, volume_id)
    assert live_attachments(volume) == [instance_id], volume
    return volume_id, milestones


async def detach_resize_delete(
    kube: Kube,
    driver: CloudDriver,
    *,
    namespace: str,
    volume_id: str,
    name: str = "data",
    timeout: float = 120,
) -> None:
    """Pod deleted → detached; PVC grown to 2Gi → disk grown; PVC deleted → disk gone."""
    claim = _pvc(kube, namespace, name) or {}
    pv_name = claim["spec"]["volumeName"]
    await asyncio.to_thread(delete_pod, kube, namespace, f"{name}-app")

    def detached() -> bool:
        attachments = [
            va
            for va in kube.list(VOLUME_ATTACHMENTS)["items"]
            if va["spec"]["source"].get("persistentVolumeName") == pv_name
        ]
        return not attachments and not live_attachments(cloud_volume(driver, volume_id))

    await eventually(detached, timeout=timeout, what=f"{volume_id} detached")

    kube.patch(
        PERSISTENT_VOLUME_CLAIMS,
        name,
        {"spec": {"resources": {"requests": {"storage": "2Gi"}}}},
        namespace,
    )

    def grown() -> bool:
        pv = kube.get(PERSISTENT_VOLUMES, pv_name) or {}
        volume = cloud_volume(driver, volume_id)
        return (
            pv.get("spec", {}).get("capacity", {}).get("storage") == "2Gi"
            and volume is not None
            and volume.size_gib == 2
        )

    await eventually(grown, timeout=timeout, what=f"{volume_id} grown to 2Gi")

    def resize_pending() -> bool:
        conditions = ((_pvc(kube, namespace, name) or {}).get("status") or {}).get(
            "conditions"
        ) or []
        return any(c.get("type") == "FileSystemResizePending" for c in conditions)

    await eventually(resize_pending, timeout=timeout, what="FileSystemResizePending on the PVC")

    kube.delete(PERSISTENT_VOLUME_CLAIMS, name, namespace)

    def gone() -> bool:
        return (
            kube.get(PERSISTENT_VOLUMES, pv_name) is None
            and cloud_volume(driver, volume_id) is None
        )

    await eventually(gone, timeout=timeout, what=f"PV {pv_name} and {volume_id} gone")
