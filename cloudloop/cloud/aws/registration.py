"""The node manager's registration Secret for AWS (Deckhouse ``templates/registration.yaml``).

``kube-system/d8-node-manager-cloud-provider`` and its copy ``...-aws`` tell the node manager
which InstanceClass and Cluster API kinds AWS uses and hand it the ``aws`` provider values its
machine template reads (``instances``, ``internal.zoneToSubnetIdMap``, ``keyName``, ``tags``...)
with the access key pair (it is a Secret; its data is never logged). Every value is base64.

Departures from Deckhouse's AWS module: ``machineClassKind`` is empty (cloudloop serves no MCM
``AWSMachineClass``; an empty kind tells the node manager to use Cluster API, as for DVP and
zVirt), and the Cluster API keys name CAPA's kinds (:mod:`cloudloop.cloud.aws.capi`), since
Deckhouse has no Cluster API provider for AWS. ``instanceClassAPIVersion`` is ``v1`` (the
storage version of ``AWSInstanceClass``), as node-controller requires from Deckhouse 1.78.
"""

from __future__ import annotations

from typing import Any

from cloudloop.cloud import registration
from cloudloop.cloud.aws.capi import INFRA_KINDS as AWS
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.capi import INFRA_GROUP
from cloudloop.cloud.registration import encoded, helm_json
from cloudloop.kube.bodies import Secret

#: The provider's name (here rather than from the driver's base: no boto3 in the starter).
NAME = AWS.provider


def provider_values(settings: AwsSettings) -> dict[str, Any]:
    """The ``aws`` subtree: what Deckhouse publishes and the machine template reads as
    ``.provider`` (credentials included: a Secret)."""
    key_id, secret_key = settings.static_credentials()
    instances = settings.instances
    return {
        "providerAccessKeyId": key_id,
        "providerSecretAccessKey": secret_key,
        "region": settings.region,
        "instances": {
            "ami": instances.ami,
            "additionalSecurityGroups": list(instances.additional_security_groups),
            "associatePublicIPAddress": instances.associate_public_ip_address,
            "iamProfileName": instances.iam_profile_name,
        },
        "internal": {"zoneToSubnetIdMap": dict(settings.zone_to_subnet_id_map)},
        "loadBalancerSecurityGroup": settings.load_balancer_security_group,
        "keyName": settings.key_name,
        "tags": dict(settings.tags),
    }


def registration_values(settings: AwsSettings) -> dict[str, str]:
    """The Secret's ``data`` (base64 values)."""
    infra_api_version = f"{INFRA_GROUP}/{AWS.machine.version}"
    values = {
        "type": NAME,
        "region": settings.region,
        "zones": helm_json(settings.zone_names()),
        "instanceClassAPIVersion": "v1",
        "instanceClassKind": "AWSInstanceClass",
        "machineClassKind": "",
        "capiClusterKind": AWS.cluster.kind,
        "capiClusterAPIVersion": infra_api_version,
        "capiClusterAPIGroup": INFRA_GROUP,
        "capiClusterName": NAME,
        "capiMachineTemplateKind": AWS.template.kind,
        "capiMachineTemplateAPIVersion": infra_api_version,
        "capiMachineTemplateAPIGroup": INFRA_GROUP,
        "aws": helm_json(provider_values(settings)),
    }
    if settings.ssh_public_key:
        values["sshPublicKey"] = settings.ssh_public_key
    return encoded(values)


def registration_secrets(settings: AwsSettings) -> list[Secret]:
    """Both Secrets (the generic name and the ``-aws`` copy) with Deckhouse's labels."""
    return registration.registration_secrets(NAME, registration_values(settings))
