"""DVP discovery: the zones announced for the cluster and the parent's StorageClasses as
``storageClasses`` of ``DVPCloudDiscoveryData`` (Deckhouse's DVP cloud-data-discoverer), and
the cluster's disks no VM uses, for the orphaned-disk check.

Orphaned disks: VirtualDisks labelled for this cluster (``deckhouse.io/managed-by``,
``dvp.deckhouse.io/cluster-uuid``) that no VM of the namespace references (``blockDeviceRefs``) or
has attached (``status.attachedToVirtualMachines``) and that are not being deleted; the discoverer
then drops those a PersistentVolume references (a detached CSI volume is not orphaned). A machine's
boot and additional disks therefore count only once their VM is gone. Two LISTs per check.
"""

from __future__ import annotations

from typing import Any

from kubernetes.utils import parse_quantity

from cloudloop.cloud import models
from cloudloop.cloud.driver import DiscoveryDefaults
from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.base import DEFAULT_ZONES, NAME, REGION, DvpBase

DISCOVERY_KIND = "DVPCloudDiscoveryData"
#: The kind cloudloop wrote before (Deckhouse has no schema for it), and its ``volumeTypes``.
LEGACY_KINDS = {"DVPCloudProviderDiscoveryData": ["volumeTypes"]}


def storage_classes(parent_classes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parent's StorageClasses sorted by name, the first one the default, as Deckhouse's
    discoverer marshals them (unset binding mode ``WaitForFirstConsumer``, reclaim policy
    ``Delete``; false values omitted)."""
    by_name = {str(sc["metadata"]["name"]): sc for sc in parent_classes}
    entries: list[dict[str, Any]] = []
    for index, name in enumerate(sorted(by_name)):
        sc = by_name[name]
        entry: dict[str, Any] = {
            "name": name,
            "volumeBindingMode": str(sc.get("volumeBindingMode") or "WaitForFirstConsumer"),
            "reclaimPolicy": str(sc.get("reclaimPolicy") or "Delete"),
            "isEnabled": True,
        }
        if sc.get("allowVolumeExpansion"):
            entry["allowVolumeExpansion"] = True
        if index == 0:
            entry["isDefault"] = True
        entries.append(entry)
    return entries


class DvpDiscovery(DiscoveryDefaults):
    provider = NAME

    def __init__(self, session: DvpBase) -> None:
        self.session = session

    def zones(self) -> list[models.Zone]:
        """The configured zones (DVP has none of its own); asks the parent once so an
        unreachable parent or rejected credentials show as an error, not as zones."""
        self.session.call(
            "ListVirtualMachines",
            lambda: self.session.kube.list(r.VIRTUAL_MACHINES, self.session.namespace, limit=1),
        )
        names = self.session.settings.zones or list(DEFAULT_ZONES)
        return [models.Zone(name=name, region=REGION) for name in names]

    def list_cluster_disks(self, cluster: str) -> list[models.Disk]:
        """The cluster's VirtualDisks no VM uses (``cluster`` is implied by the settings'
        cluster UUID, which labels every disk this cluster made)."""
        selector = self.session.cluster_selector()
        disks = self.session.list_objects(r.VIRTUAL_DISKS, label_selector=selector)
        used: set[str] = set()
        for vm in self.session.list_objects(r.VIRTUAL_MACHINES):
            for ref in (vm.get("spec") or {}).get("blockDeviceRefs") or []:
                if ref.get("kind") == "VirtualDisk":
                    used.add(str(ref.get("name")))
        found: list[models.Disk] = []
        for disk in disks:
            meta, status = disk["metadata"], disk.get("status") or {}
            attached = status.get("attachedToVirtualMachines") or []
            if meta.get("deletionTimestamp") or meta["name"] in used or attached:
                continue
            claim = (disk.get("spec") or {}).get("persistentVolumeClaim") or {}
            found.append(
                models.Disk(
                    id=str(meta["name"]),
                    name=str(meta["name"]),
                    size_gib=_gib(status.get("capacity") or claim.get("size")),
                    state=str(status.get("phase") or ""),
                    tags=dict(meta.get("labels") or {}),
                )
            )
        return found

    def discovery_data(self) -> models.DiscoveryData:
        classes = self.session.list_objects(r.STORAGE_CLASSES)
        return models.DiscoveryData(
            region=REGION,
            zones=self.zones(),
            kind=DISCOVERY_KIND,
            extra={"storageClasses": storage_classes(classes)},
            legacy_kinds=LEGACY_KINDS,
        )


def _gib(size: Any) -> int:
    """A quantity in whole GiB (rounded up); 0 when unknown."""
    try:
        value = parse_quantity(size) if size else 0  # type: ignore[no-untyped-call]
    except ValueError:
        return 0
    return int(-(-value // 2**30))
