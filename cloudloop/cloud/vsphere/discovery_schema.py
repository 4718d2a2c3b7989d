"""vSphere's discovery documents as Deckhouse's schemas describe them
(``ee/se-plus/candi/cloud-providers/vsphere``).

Rules: the discoverer keeps the layout's kind and adds ``datacenter``, ``datastores`` and
``storagePolicies`` (go_lib ``cloud-data/apis/v1``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cloudloop.cloud.discovery_schemas import Closed, DiscoverySchemas, NonEmpty


class VsphereCloudDiscoveryData(Closed):
    """The layout's document (Terraform's ``base-infrastructure`` output)."""

    apiVersion: Literal["deckhouse.io/v1", "deckhouse.io/v1alpha1"]
    kind: Literal["VsphereCloudDiscoveryData"]
    vmFolderPath: NonEmpty
    resourcePoolPath: str = ""
    zones: list[str] = Field(default_factory=list)


class VsphereDatastore(Closed):
    name: str = ""
    path: str = ""
    zones: list[str] = Field(default_factory=list)
    datastoreType: str = ""
    datastoreURL: str = ""


class VsphereStoragePolicy(Closed):
    name: str
    id: str


class VsphereDiscovererData(VsphereCloudDiscoveryData):
    """The same kind as the discoverer writes it (go_lib ``cloud-data/apis/v1``)."""

    datacenter: str = ""
    datastores: list[VsphereDatastore] = Field(default_factory=list)
    storagePolicies: list[VsphereStoragePolicy] = Field(default_factory=list)


SCHEMAS = DiscoverySchemas(layout=VsphereCloudDiscoveryData, discoverer=VsphereDiscovererData)
