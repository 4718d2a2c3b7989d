"""Fixtures of the registration tests: a zVirt section as Deckhouse configures it (its password
must never reach a log)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from cloudloop.cloud.zvirt.settings import ZvirtSettings


@pytest.fixture
def zvirt_section() -> ZvirtSettings:
    return ZvirtSettings(
        api_url="https://zvirt.example.com/ovirt-engine/api",
        username="admin@internal",
        password=SecretStr("pa55-w0rd-never-logged"),
        insecure=True,
        cluster_id="b8c2e1a4-0000-4000-8000-000000000001",
        ssh_public_key="ssh-ed25519 AAAA test",
    )
