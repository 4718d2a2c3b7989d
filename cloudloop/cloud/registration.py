"""The node manager's registration Secret, wrapped once for every cloud.

Deckhouse's cloud-provider modules publish ``kube-system/d8-node-manager-cloud-provider`` and its
copy ``d8-node-manager-cloud-provider-<provider>`` (both labelled
``cloud-provider.deckhouse.io/registration`` and ``cloud-provider.deckhouse.io/name``); a
provider's ``registration.py`` renders only the values (:func:`encoded` of its keys, JSON subtrees
as Helm's ``toJson`` writes them), this module makes the two Secrets of them.

Rules: pure (no I/O); the values may hold credentials: they are Secret data, never logged.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

from cloudloop.kube.bodies import Secret

SECRET_NAME = "d8-node-manager-cloud-provider"
NAMESPACE = "kube-system"
REGISTRATION_LABEL = "cloud-provider.deckhouse.io/registration"
PROVIDER_NAME_LABEL = "cloud-provider.deckhouse.io/name"


def b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def helm_json(value: object) -> str:
    """JSON as Helm's ``toJson`` writes it: compact, keys sorted."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def encoded(values: Mapping[str, str]) -> dict[str, str]:
    """A Secret's ``data``: every value base64."""
    return {key: b64(value) for key, value in values.items()}


def registration_secrets(provider: str, data: Mapping[str, str]) -> list[Secret]:
    """Both Secrets (the generic name and the ``-<provider>`` copy) with Deckhouse's labels."""
    labels = {
        REGISTRATION_LABEL: "",
        PROVIDER_NAME_LABEL: provider,
        "app.kubernetes.io/managed-by": "cloudloop",
    }
    return [
        {
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": dict(labels)},
            "type": "Opaque",
            "data": dict(data),
        }
        for name in (SECRET_NAME, f"{SECRET_NAME}-{provider}")
    ]


def provider_values(secrets: list[Secret]) -> dict[str, object]:
    """The ``<type>`` subtree of the registration (what a machine template reads as
    ``.provider``, as Deckhouse's node manager gives it); empty when there is none."""
    for secret in secrets:
        data = secret.get("data") or {}
        kind = base64.b64decode(data.get("type", "")).decode()
        if kind and kind in data:
            value = json.loads(base64.b64decode(data[kind]))
            return dict(value) if isinstance(value, dict) else {}
    return {}
