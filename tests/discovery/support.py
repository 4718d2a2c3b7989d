"""What the discovery stack tests share: PersistentVolumes, Terraform's output Secret, and what the
discoverer wrote (its document, conditions and gauges)."""

from __future__ import annotations

import base64
import json
from typing import Any

from prometheus_client import REGISTRY

from cloudloop.kube.api import Kube
from cloudloop.kube.resources import (
    CONFIG_MAPS,
    PERSISTENT_VOLUMES,
    SECRETS,
)
from cloudloop.rules import discovery as cloud_data


def persistent_volume(kube: Kube, name: str, source: dict[str, Any]) -> None:
    kube.create(
        PERSISTENT_VOLUMES,
        {
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                **source,
            },
        },
    )


def put_terraform_output(kube: Kube, namespace: str, document: dict[str, Any]) -> None:
    encoded = base64.b64encode(json.dumps(document).encode()).decode()
    kube.create(
        SECRETS,
        {
            "metadata": {"name": cloud_data.PROVIDER_CONFIGURATION_SECRET},
            "data": {cloud_data.PROVIDER_DISCOVERY_KEY: encoded},
        },
        namespace,
    )


def discovery_document(kube: Kube, namespace: str) -> dict[str, Any] | None:
    secret = kube.get(SECRETS, cloud_data.DISCOVERY_SECRET, namespace)
    if secret is None:
        return None
    document: dict[str, Any] = json.loads(
        base64.b64decode(secret["data"][cloud_data.DISCOVERY_KEY])
    )
    return document


def conditions(kube: Kube, namespace: str) -> dict[str, bool] | None:
    configmap = kube.get(CONFIG_MAPS, cloud_data.CONDITIONS_CONFIGMAP, namespace)
    if configmap is None:
        return None
    return {c["name"]: c["ok"] for c in json.loads(configmap["data"][cloud_data.CONDITIONS_KEY])}


def gauge(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)
