"""The node manager's registration Secret for vSphere (Deckhouse ``templates/registration.yaml``).

``kube-system/d8-node-manager-cloud-provider`` and its copy ``...-vsphere`` tell the node manager
the region, zones and InstanceClass kind and hand it the vCenter connection (the ``vsphere`` key
holds the password: it is a Secret, but it is never logged). Every value is base64.

Rules: the values are rendered from the settings only (no vCenter call), so a vCenter outage
never blanks the Secret; zones are the configured ``zones`` (discovery publishes the live ones).
Departs from Deckhouse: no Cluster API kinds yet (vSphere machines are not implemented).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from cloudloop.cloud.vsphere.config import ConfigError
from cloudloop.cloud.vsphere.mapping import PROVIDER
from cloudloop.cloud.vsphere.settings import (
    DEFAULT_REGION_CATEGORY,
    DEFAULT_ZONE_CATEGORY,
    VsphereSettings,
    resolve,
)

SECRET_NAME = "d8-node-manager-cloud-provider"
NAMESPACE = "kube-system"
REGISTRATION_LABEL = "cloud-provider.deckhouse.io/registration"
PROVIDER_NAME_LABEL = "cloud-provider.deckhouse.io/name"


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def _json(value: object) -> str:
    """JSON as Helm's ``toJson`` writes it: compact, keys sorted."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def registration_values(settings: VsphereSettings) -> dict[str, str]:
    """The Secret's ``data`` (base64 values)."""
    try:
        conn = resolve(settings)
        username, password = conn.credentials()
        host = conn.host if conn.port == 443 else f"{conn.host}:{conn.port}"
        insecure, region_category, zone_category = (
            conn.insecure,
            conn.region_category,
            conn.zone_category,
        )
    except (ConfigError, OSError):  # not configured (yet): publish what the settings say
        host, username = settings.server, settings.username
        password = settings.password.get_secret_value() if settings.password else ""
        insecure = settings.insecure
        region_category = settings.region_tag_category or DEFAULT_REGION_CATEGORY
        zone_category = settings.zone_tag_category or DEFAULT_ZONE_CATEGORY
    vsphere = {
        "host": host,
        "username": username,
        "password": password,
        "insecure": insecure,
        "regionTagCategory": region_category,
        "zoneTagCategory": zone_category,
        "region": settings.region,
        "vmFolderPath": settings.vm_folder_path,
        "sshKey": settings.ssh_public_key,
        "disableTimesync": True,
    }
    values = {
        "type": PROVIDER,
        "region": settings.region,
        "zones": _json(list(settings.zones)),
        "instanceClassAPIVersion": "v1",
        "instanceClassKind": "VsphereInstanceClass",
        "machineClassKind": "",
        "sshPublicKey": settings.ssh_public_key,
        "vsphere": _json(vsphere),
    }
    return {key: _b64(value) for key, value in values.items()}


def registration_secrets(settings: VsphereSettings) -> list[dict[str, Any]]:
    """Both Secrets (the generic name and the ``-vsphere`` copy) with Deckhouse's labels."""
    data = registration_values(settings)
    labels = {
        REGISTRATION_LABEL: "",
        PROVIDER_NAME_LABEL: PROVIDER,
        "app.kubernetes.io/managed-by": "cloudloop",
    }
    return [
        {
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": dict(labels)},
            "type": "Opaque",
            "data": dict(data),
        }
        for name in (SECRET_NAME, f"{SECRET_NAME}-{PROVIDER}")
    ]
