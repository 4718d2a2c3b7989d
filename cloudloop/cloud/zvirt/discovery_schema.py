"""zVirt's discovery document as Deckhouse's schema describes it.

From ``ee/candi/cloud-providers/zvirt``.

Rules: the layout and the discoverer write the same kind; its closed schema has no ``zones``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cloudloop.cloud.discovery_schemas import Closed, DiscoverySchemas, NonEmpty


class ZvirtStorageDomain(Closed):
    name: NonEmpty
    type: NonEmpty = ""
    isEnabled: bool = False
    #: Upstream's spelling: the only default flag its closed item schema admits.
    isDefaul: bool = False


class ZvirtCloudProviderDiscoveryData(Closed):
    apiVersion: Literal["deckhouse.io/v1"]
    kind: Literal["ZvirtCloudProviderDiscoveryData"]
    storageDomains: list[ZvirtStorageDomain] = Field(default_factory=list)


SCHEMAS = DiscoverySchemas(
    layout=ZvirtCloudProviderDiscoveryData, discoverer=ZvirtCloudProviderDiscoveryData
)
