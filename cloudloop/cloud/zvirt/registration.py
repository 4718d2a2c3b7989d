"""The node manager's registration Secret for zVirt (Deckhouse ``templates/registration.yaml``).

``kube-system/d8-node-manager-cloud-provider`` and its copy ``...-zvirt`` tell the node manager
which InstanceClass and Cluster API kinds zVirt uses and hand it the engine credentials (the
``zvirt`` key holds the password: it is a Secret, but it is never logged). Every value is base64.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cloudloop.cloud import registration
from cloudloop.cloud.capi import INFRA_GROUP
from cloudloop.cloud.registration import encoded, helm_json
from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT
from cloudloop.cloud.zvirt.mapping import NAME, REGION, ZONE
from cloudloop.cloud.zvirt.settings import ZvirtSettings
from cloudloop.kube.bodies import Secret

log = logging.getLogger(__name__)


def registration_values(settings: ZvirtSettings, zones: Sequence[str] = (ZONE,)) -> dict[str, str]:
    """The Secret's ``data`` (base64 values), key for key as Deckhouse renders it."""
    infra_api_version = f"{INFRA_GROUP}/{ZVIRT.machine.version}"
    zvirt = {
        "sshPublicKey": settings.ssh_public_key,
        "server": settings.api_url,
        "username": settings.username,
        "password": settings.password_value(),
        "insecure": settings.insecure,
        "clusterID": settings.cluster_id,
    }
    values = {
        "type": NAME,
        "region": REGION,
        "zones": helm_json(list(zones) or [ZONE]),
        "instanceClassAPIVersion": "v1",
        "instanceClassKind": "ZvirtInstanceClass",
        "machineClassKind": "",
        "capiClusterKind": ZVIRT.cluster.kind,
        "capiClusterAPIVersion": infra_api_version,
        "capiClusterName": NAME,
        "capiMachineTemplateKind": ZVIRT.template.kind,
        "capiMachineTemplateAPIVersion": infra_api_version,
        "sshPublicKey": settings.ssh_public_key,
        "zvirt": helm_json(zvirt),
    }
    return encoded(values)


def registration_secrets(settings: ZvirtSettings, zones: Sequence[str] = (ZONE,)) -> list[Secret]:
    """Both Secrets (the generic name and the ``-zvirt`` copy) with Deckhouse's labels."""
    return registration.registration_secrets(NAME, registration_values(settings, zones))
