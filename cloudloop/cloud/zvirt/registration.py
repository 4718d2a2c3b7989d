"""The node manager's registration Secret for zVirt (Deckhouse ``templates/registration.yaml``).

``kube-system/d8-node-manager-cloud-provider`` and its copy ``...-zvirt`` tell the node manager
which InstanceClass and Cluster API kinds zVirt uses and hand it the engine credentials (the
``zvirt`` key holds the password: it is a Secret, but it is never logged). Every value is base64.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Sequence
from typing import Any

from cloudloop.cloud.capi import INFRA_GROUP
from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT
from cloudloop.cloud.zvirt.mapping import NAME, REGION, ZONE
from cloudloop.cloud.zvirt.settings import ZvirtSettings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import SECRETS

log = logging.getLogger(__name__)

SECRET_NAME = "d8-node-manager-cloud-provider"
NAMESPACE = "kube-system"
REGISTRATION_LABEL = "cloud-provider.deckhouse.io/registration"
PROVIDER_NAME_LABEL = "cloud-provider.deckhouse.io/name"


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def _json(value: object) -> str:
    """JSON as Helm's ``toJson`` writes it: compact, keys sorted."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


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
        "zones": _json(list(zones) or [ZONE]),
        "instanceClassAPIVersion": "v1",
        "instanceClassKind": "ZvirtInstanceClass",
        "machineClassKind": "",
        "capiClusterKind": ZVIRT.cluster.kind,
        "capiClusterAPIVersion": infra_api_version,
        "capiClusterName": NAME,
        "capiMachineTemplateKind": ZVIRT.template.kind,
        "capiMachineTemplateAPIVersion": infra_api_version,
        "sshPublicKey": settings.ssh_public_key,
        "zvirt": _json(zvirt),
    }
    return {key: _b64(value) for key, value in values.items()}


def registration_secrets(
    settings: ZvirtSettings, zones: Sequence[str] = (ZONE,)
) -> list[dict[str, Any]]:
    """Both Secrets (the generic name and the ``-zvirt`` copy) with Deckhouse's labels."""
    data = registration_values(settings, zones)
    labels = {
        REGISTRATION_LABEL: "",
        PROVIDER_NAME_LABEL: NAME,
        "app.kubernetes.io/managed-by": "cloudloop",
    }
    return [
        {
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": dict(labels)},
            "type": "Opaque",
            "data": dict(data),
        }
        for name in (SECRET_NAME, f"{SECRET_NAME}-{NAME}")
    ]


def write_registration_secrets(
    kube: Kube, settings: ZvirtSettings, zones: Sequence[str] = (ZONE,)
) -> list[str]:
    """Create or update both Secrets; the names of those that changed (unchanged: no write)."""
    changed: list[str] = []
    for secret in registration_secrets(settings, zones):
        name = secret["metadata"]["name"]
        existing = kube.get(SECRETS, name, namespace=NAMESPACE)
        if existing is None:
            kube.create(SECRETS, secret, namespace=NAMESPACE)
        else:
            labels = (existing.get("metadata") or {}).get("labels") or {}
            wanted_labels = secret["metadata"]["labels"]
            if existing.get("data") == secret["data"] and all(
                labels.get(k) == v for k, v in wanted_labels.items()
            ):
                continue
            kube.patch(
                SECRETS,
                name,
                {"metadata": {"labels": wanted_labels}, "data": secret["data"]},
                namespace=NAMESPACE,
            )
        log.info("zvirt: wrote registration Secret %s/%s", NAMESPACE, name)  # never the data
        changed.append(name)
    return changed
