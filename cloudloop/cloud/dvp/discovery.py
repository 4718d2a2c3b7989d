"""DVP discovery: the zones announced for the cluster and the parent's StorageClasses as
``volumeTypes`` of ``DVPCloudProviderDiscoveryData`` (Deckhouse's DVP cloud-data-discoverer)."""

from __future__ import annotations

from typing import Any

from cloudloop.cloud import models
from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.base import DEFAULT_ZONES, REGION, DvpBase

DISCOVERY_KIND = "DVPCloudProviderDiscoveryData"


def volume_types(storage_class_names: list[str]) -> list[dict[str, Any]]:
    """Sorted by name, the first one the default; keys as Deckhouse's Go struct marshals them
    (``IsDefault`` with a capital I, false values omitted)."""
    entries: list[dict[str, Any]] = []
    for index, name in enumerate(sorted(set(storage_class_names))):
        entry: dict[str, Any] = {"name": name, "isEnabled": True}
        if index == 0:
            entry["IsDefault"] = True
        entries.append(entry)
    return entries


class DvpDiscovery(DvpBase):
    def zones(self) -> list[models.Zone]:
        """The configured zones (DVP has none of its own); asks the parent once so an
        unreachable parent or rejected credentials show as an error, not as zones."""
        self.call(
            "ListVirtualMachines",
            lambda: self.kube.list(r.VIRTUAL_MACHINES, self.namespace, limit=1),
        )
        names = self.settings.zones or list(DEFAULT_ZONES)
        return [models.Zone(name=name, region=REGION) for name in names]

    def discovery_data(self) -> models.DiscoveryData:
        classes = self.list_objects(r.STORAGE_CLASSES)
        names = [str(sc["metadata"]["name"]) for sc in classes]
        return models.DiscoveryData(
            region=REGION,
            zones=self.zones(),
            kind=DISCOVERY_KIND,
            extra={"volumeTypes": volume_types(names)},
        )
