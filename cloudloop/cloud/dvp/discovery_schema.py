"""DVP's discovery documents as Deckhouse's schema describes them (``candi/cloud-providers/dvp``).

Rules: the layout's document and the discoverer's are one kind; the discoverer adds
``storageClasses``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cloudloop.cloud.discovery_schemas import Closed, DiscoverySchemas, SomeNames


class DvpStorageClass(Closed):
    name: str = ""
    volumeBindingMode: str = ""
    reclaimPolicy: str = ""
    allowVolumeExpansion: bool = False
    isEnabled: bool = False
    isDefault: bool = False


class DvpCloudDiscoveryData(Closed):
    apiVersion: Literal["deckhouse.io/v1"]
    kind: Literal["DVPCloudDiscoveryData"]
    zones: SomeNames
    storageClasses: list[DvpStorageClass] = Field(default_factory=list)


SCHEMAS = DiscoverySchemas(layout=DvpCloudDiscoveryData, discoverer=DvpCloudDiscoveryData)
