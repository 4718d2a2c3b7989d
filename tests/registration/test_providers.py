"""Each CAPI provider publishes the node manager's registration Secrets under Deckhouse's names."""

from __future__ import annotations

import base64

import pytest

from cloudloop.cloud.registry import PROVIDERS
from cloudloop.settings import Settings


@pytest.mark.parametrize(
    "provider", [pytest.param(p, id=p) for p, r in PROVIDERS.items() if r.registration]
)
def test_registration_secrets_per_provider(provider: str) -> None:
    record = PROVIDERS[provider]
    assert record.registration is not None
    bodies = record.registration(record.section(Settings()))
    names = [b["metadata"]["name"] for b in bodies]
    assert names == ["d8-node-manager-cloud-provider", f"d8-node-manager-cloud-provider-{provider}"]
    assert all(b["metadata"]["namespace"] == "kube-system" for b in bodies)
    assert base64.b64decode(bodies[0]["data"]["type"]).decode() == provider
