"""AWS's discovery document as Deckhouse's schema describes it (``candi/cloud-providers/aws``, v1).

Rules: upstream's discoverer writes no document of its own, so cloudloop's must stay inside
the closed ``AWSCloudDiscoveryData``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from cloudloop.cloud.discovery_schemas import Closed, DiscoverySchemas, NonEmpty

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


SCHEMAS = DiscoverySchemas(layout=AwsCloudDiscoveryData, discoverer=AwsCloudDiscoveryData)
