"""OpenStack's discovery documents as Deckhouse's schemas describe them
(``candi/cloud-providers/openstack``).

Rules: the layout's ``OpenStackCloudDiscoveryData`` is closed with one ``oneOf`` branch per
layout; the discoverer writes its own ``OpenStackCloudProviderDiscoveryData`` (v1alpha1).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from cloudloop.cloud.discovery_schemas import (
    Closed,
    DiscoverySchemas,
    Names,
    NonEmpty,
    SomeNames,
    unique,
)


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
    volumeTypes: Annotated[list[OpenStackVolumeType], AfterValidator(unique)]
    flavors: SomeNames
    zones: Names


SCHEMAS = DiscoverySchemas(
    layout=OpenStackCloudDiscoveryData, discoverer=OpenStackCloudProviderDiscoveryData
)
