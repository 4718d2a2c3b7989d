"""Deckhouse's discovery-data schemas, described as cloudloop's own pydantic models.

Two documents per cloud, each checked by Deckhouse's hooks against a schema of its kind and
apiVersion (``dhctl`` ``config.ValidateDiscoveryData``): the layout's ``cloud_discovery_data``
(``d8-provider-cluster-configuration``, key ``cloud-provider-discovery-data.json``) and the
discoverer's document (``d8-cloud-provider-discovery-data``, key ``discovery-data.json``).

Rules:
- :data:`LAYOUT` and :data:`DISCOVERER` give each provider's model; :func:`validate` raises
  pydantic's ``ValidationError`` for what Deckhouse would refuse.
- Closed where upstream is: dhctl closes every object schema that leaves
  ``additionalProperties`` unset, nested ones included, so those models forbid extra keys.
- Types are strict (no ``"true"`` for a boolean); a key may be absent, never ``null``.
- DVP, zVirt, vSphere: the discoverer keeps the layout's kind and adds fields; OpenStack's
  discoverer writes its own ``OpenStackCloudProviderDiscoveryData``; AWS's writes none, so
  cloudloop's AWS document must stay inside ``AWSCloudDiscoveryData``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

T = TypeVar("T")

V1 = "deckhouse.io/v1"
V1ALPHA1 = "deckhouse.io/v1alpha1"


def _unique(items: list[T]) -> list[T]:
    """``uniqueItems: true`` (objects compared by value)."""
    seen: list[Any] = []
    for item in items:
        key = item.model_dump() if isinstance(item, BaseModel) else item
        if key in seen:
            raise ValueError(f"duplicate item {key!r}")
        seen.append(key)
    return items


NonEmpty = Annotated[str, StringConstraints(min_length=1)]
Names = Annotated[list[NonEmpty], AfterValidator(_unique)]
SomeNames = Annotated[list[NonEmpty], Field(min_length=1), AfterValidator(_unique)]


class Closed(BaseModel):
    """An object schema Deckhouse closes: unknown keys are refused (a default stands for an
    absent key; it is not checked)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Open(BaseModel):
    """``additionalProperties: true``: any further key passes."""

    model_config = ConfigDict(extra="allow", strict=True)


# -- DVP (``candi/cloud-providers/dvp``; the discoverer adds ``storageClasses``) ---------------
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


# -- zVirt (``ee/candi/cloud-providers/zvirt``; the same kind from the discoverer) -------------
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


# -- vSphere (``ee/se-plus/candi/cloud-providers/vsphere``) ----------------------------------
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


# -- AWS (``candi/cloud-providers/aws``, v1; the discoverer writes no document) ---------------
SecurityGroup = Annotated[str, StringConstraints(pattern=r"^sg-[a-z0-9]+$")]
AwsZone = Annotated[
    str, StringConstraints(pattern=r"^[a-z]+-[a-z]+-[0-9]+(?:[a-z]|-[a-z]+-[0-9]+[a-z])$")
]


class AwsInstances(Closed):
    ami: Annotated[str, StringConstraints(pattern=r"^ami-[a-z0-9]+$")]
    additionalSecurityGroups: list[SecurityGroup]
    associatePublicIPAddress: bool
    iamProfileName: NonEmpty


class AwsCloudDiscoveryData(Closed):
    apiVersion: Literal["deckhouse.io/v1", "deckhouse.io/v1alpha1"]
    kind: Literal["AWSCloudDiscoveryData"]
    instances: AwsInstances
    keyName: NonEmpty
    loadBalancerSecurityGroup: Annotated[str, StringConstraints(pattern=r"^$|^sg-[a-z0-9]+$")]
    zoneToSubnetIdMap: Annotated[dict[str, str], Field(min_length=1)]
    zones: Annotated[list[AwsZone], Field(min_length=1)]


# -- OpenStack (``candi/cloud-providers/openstack``) -----------------------------------------
class OpenStackInstances(Closed):
    sshKeyPairName: NonEmpty = ""
    imageName: NonEmpty = ""
    mainNetwork: NonEmpty = ""
    additionalNetworks: SomeNames = Field(default_factory=list)
    securityGroups: list[str] = Field(default_factory=list)


class OpenStackLoadBalancer(Closed):
    subnetID: NonEmpty = ""
    floatingNetworkID: NonEmpty = ""


#: ``oneOf`` by layout: the keys each layout requires, of the document and of ``instances``.
_OPENSTACK_LAYOUTS: dict[str, tuple[set[str], set[str]]] = {
    "Standard": (
        {"externalNetworkNames", "loadBalancer"},
        {"sshKeyPairName", "imageName", "mainNetwork", "securityGroups"},
    ),
    "StandardWithNoRouter": (
        {"externalNetworkNames"},
        {"sshKeyPairName", "imageName", "mainNetwork", "additionalNetworks", "securityGroups"},
    ),
    "Simple": (set(), {"sshKeyPairName", "imageName", "mainNetwork"}),
    "SimpleWithInternalNetwork": (set(), {"sshKeyPairName", "imageName", "mainNetwork"}),
}


class OpenStackCloudDiscoveryData(Closed):
    apiVersion: Literal["deckhouse.io/v1", "deckhouse.io/v1alpha1"]
    kind: Literal["OpenStackCloudDiscoveryData"]
    layout: Literal["Standard", "StandardWithNoRouter", "Simple", "SimpleWithInternalNetwork"]
    internalNetworkNames: SomeNames
    externalNetworkNames: Names = Field(default_factory=list)
    podNetworkMode: Literal["VXLAN", "DirectRouting", "DirectRoutingWithPortSecurityEnabled"]
    zones: SomeNames
    instances: OpenStackInstances
    loadBalancer: OpenStackLoadBalancer = Field(default_factory=OpenStackLoadBalancer)

    @model_validator(mode="after")
    def _one_of(self) -> OpenStackCloudDiscoveryData:
        required, instance_keys = _OPENSTACK_LAYOUTS[self.layout]
        given = self.instances.model_fields_set
        missing = sorted(required - self.model_fields_set)
        missing += [f"instances.{k}" for k in sorted(instance_keys - given)]
        extra = sorted(given - instance_keys)
        if missing or extra:
            raise ValueError(f"layout {self.layout}: missing {missing}, not allowed {extra}")
        if self.layout in ("Standard", "StandardWithNoRouter") and not self.externalNetworkNames:
            raise ValueError(f"layout {self.layout}: externalNetworkNames is empty")
        lb = self.loadBalancer.model_fields_set
        if self.layout == "Standard" and lb != {"subnetID", "floatingNetworkID"}:
            raise ValueError("layout Standard: loadBalancer needs subnetID and floatingNetworkID")
        return self


class OpenStackVolumeType(Closed):
    name: str
    id: str
    description: str = ""
    extraSpecs: dict[str, Any] = Field(default_factory=dict)
    isPublic: bool = False
    qosSpecID: str = ""


class OpenStackCloudProviderDiscoveryData(Closed):
    """The discoverer's own document (``cloud_provider_discovery_data.yaml``)."""

    apiVersion: Literal["deckhouse.io/v1alpha1"]
    kind: Literal["OpenStackCloudProviderDiscoveryData"]
    mainNetwork: str
    additionalNetworks: Names
    additionalSecurityGroups: Names
    defaultImageName: str
    images: SomeNames
    volumeTypes: Annotated[list[OpenStackVolumeType], AfterValidator(_unique)]
    flavors: SomeNames
    zones: Names


#: The layout's ``cloud_discovery_data`` of each provider.
LAYOUT: dict[str, type[BaseModel]] = {
    "aws": AwsCloudDiscoveryData,
    "dvp": DvpCloudDiscoveryData,
    "openstack": OpenStackCloudDiscoveryData,
    "vsphere": VsphereCloudDiscoveryData,
    "zvirt": ZvirtCloudProviderDiscoveryData,
}

#: The discoverer's ``discovery-data.json`` of each provider.
DISCOVERER: dict[str, type[BaseModel]] = {
    "aws": AwsCloudDiscoveryData,
    "dvp": DvpCloudDiscoveryData,
    "openstack": OpenStackCloudProviderDiscoveryData,
    "vsphere": VsphereDiscovererData,
    "zvirt": ZvirtCloudProviderDiscoveryData,
}


def validate(
    models: Mapping[str, type[BaseModel]], provider: str, document: Mapping[str, Any]
) -> BaseModel:
    """``document`` as ``models[provider]`` reads it; ``ValidationError`` when Deckhouse would
    refuse it."""
    return models[provider].model_validate(dict(document))
