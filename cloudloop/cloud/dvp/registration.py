"""The node manager's registration Secret for DVP (Deckhouse ``templates/registration.yaml``).

``kube-system/d8-node-manager-cloud-provider`` and its copy ``...-dvp`` tell the node manager
which InstanceClass and which Cluster API kinds this provider uses; every value is base64.
"""

from __future__ import annotations

import json
from typing import Any

from cloudloop.cloud import registration
from cloudloop.cloud.capi import INFRA_GROUP
from cloudloop.cloud.dvp.base import DEFAULT_ZONES, NAME, REGION
from cloudloop.cloud.dvp.capi import INFRA_KINDS as DVP
from cloudloop.cloud.dvp.settings import DvpSettings
from cloudloop.cloud.registration import encoded
from cloudloop.kube.bodies import Secret


def registration_values(settings: DvpSettings) -> dict[str, str]:
    """The Secret's ``data`` (base64 values), key for key as Deckhouse renders it."""
    infra_api_version = f"{INFRA_GROUP}/{DVP.machine.version}"
    dvp: dict[str, Any] = {}
    if settings.additional_vm_labels:
        dvp["additionalVMLabels"] = settings.additional_vm_labels
    values = {
        "type": NAME,
        "region": REGION,
        "zones": json.dumps(settings.zones or list(DEFAULT_ZONES), separators=(",", ":")),
        "instanceClassAPIVersion": "v1alpha1",
        "instanceClassKind": "DVPInstanceClass",
        "machineClassKind": "",
        "capiClusterKind": DVP.cluster.kind,
        "capiClusterAPIVersion": infra_api_version,
        "capiClusterAPIGroup": INFRA_GROUP,
        "capiClusterName": NAME,
        "capiMachineTemplateKind": DVP.template.kind,
        "capiMachineTemplateAPIVersion": infra_api_version,
        "capiMachineTemplateAPIGroup": INFRA_GROUP,
    }
    if settings.ssh_public_key:
        values["sshPublicKey"] = settings.ssh_public_key
    values["dvp"] = json.dumps(dvp, separators=(",", ":"), sort_keys=True)
    return encoded(values)


def registration_secrets(settings: DvpSettings) -> list[Secret]:
    """Both Secrets (the generic name and the ``-dvp`` copy) with Deckhouse's labels."""
    return registration.registration_secrets(NAME, registration_values(settings))
