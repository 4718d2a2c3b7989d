"""The node manager's registration Secret for DVP (Deckhouse ``templates/registration.yaml``).

``kube-system/d8-node-manager-cloud-provider`` and its copy ``...-dvp`` tell the node manager
which InstanceClass and which Cluster API kinds this provider uses; every value is base64.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from cloudloop.cloud.capi import INFRA_GROUP
from cloudloop.cloud.dvp.base import DEFAULT_ZONES, NAME, REGION
from cloudloop.cloud.dvp.capi import INFRA_KINDS as DVP
from cloudloop.cloud.dvp.settings import DvpSettings

SECRET_NAME = "d8-node-manager-cloud-provider"
NAMESPACE = "kube-system"
REGISTRATION_LABEL = "cloud-provider.deckhouse.io/registration"
PROVIDER_NAME_LABEL = "cloud-provider.deckhouse.io/name"


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


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
    return {key: _b64(value) for key, value in values.items()}


def registration_secrets(settings: DvpSettings) -> list[dict[str, Any]]:
    """Both Secrets (the generic name and the ``-dvp`` copy) with Deckhouse's labels."""
    data = registration_values(settings)
    labels = {
        REGISTRATION_LABEL: "",
        PROVIDER_NAME_LABEL: NAME,
        "app.kubernetes.io/managed-by": "cloudloop",
    }
    return [
        {
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
            "type": "Opaque",
            "data": data,
        }
        for name in (SECRET_NAME, f"{SECRET_NAME}-{NAME}")
    ]
