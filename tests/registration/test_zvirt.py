"""The zVirt registration Secret (``d8-node-manager-cloud-provider``), key for key as Deckhouse."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import pytest
from pydantic import SecretStr

from cloudloop.cloud.registration import NAMESPACE, SECRET_NAME
from cloudloop.cloud.registry import Settings, driver_for
from cloudloop.cloud.zvirt import PROVIDER as ZVIRT
from cloudloop.cloud.zvirt.driver import ZvirtDriver
from cloudloop.cloud.zvirt.registration import registration_secrets, registration_values
from cloudloop.cloud.zvirt.settings import ZvirtSettings
from cloudloop.kube.resources import SECRETS
from starters.registration import write_secrets
from tests.fakes import MemoryKube


def decoded(data: dict[str, str]) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in data.items()}


def test_values_as_deckhouse_renders_them(zvirt_section: ZvirtSettings) -> None:
    values = decoded(registration_values(zvirt_section))
    zvirt = json.loads(values.pop("zvirt"))
    assert values == {
        "type": "zvirt",
        "region": "default",
        "zones": '["default"]',
        "instanceClassAPIVersion": "v1",
        "instanceClassKind": "ZvirtInstanceClass",
        "machineClassKind": "",
        "capiClusterKind": "ZvirtCluster",
        "capiClusterAPIVersion": "infrastructure.cluster.x-k8s.io/v1",
        "capiClusterName": "zvirt",
        "capiMachineTemplateKind": "ZvirtMachineTemplate",
        "capiMachineTemplateAPIVersion": "infrastructure.cluster.x-k8s.io/v1",
        "sshPublicKey": "ssh-ed25519 AAAA test",
    }
    assert zvirt == {
        "sshPublicKey": "ssh-ed25519 AAAA test",
        "server": "https://zvirt.example.com/ovirt-engine/api",
        "username": "admin@internal",
        "password": zvirt_section.password_value(),
        "insecure": True,
        "clusterID": "b8c2e1a4-0000-4000-8000-000000000001",
    }


def test_the_password_can_come_from_a_file(tmp_path: Path, zvirt_section: ZvirtSettings) -> None:
    path = tmp_path / "password"
    path.write_text("from-file\n")
    zvirt_settings = zvirt_section.model_copy(update={"password": None, "password_file": path})
    zvirt = json.loads(decoded(registration_values(zvirt_settings))["zvirt"])
    assert zvirt["password"] == "from-file"


def test_both_secrets_are_written_once_and_the_password_never_logged(
    caplog: pytest.LogCaptureFixture, zvirt_section: ZvirtSettings
) -> None:
    kube = MemoryKube()
    caplog.set_level(logging.DEBUG)

    assert write_secrets(kube, registration_secrets(zvirt_section)) == 2
    assert write_secrets(kube, registration_secrets(zvirt_section)) == 0  # unchanged: no write

    for name in (SECRET_NAME, f"{SECRET_NAME}-zvirt"):
        secret = kube.get(SECRETS, name, namespace=NAMESPACE)
        assert secret is not None
        assert secret["metadata"]["labels"]["cloud-provider.deckhouse.io/registration"] == ""
        assert secret["metadata"]["labels"]["cloud-provider.deckhouse.io/name"] == "zvirt"
        assert secret["type"] == "Opaque"
    rotated = zvirt_section.model_copy(update={"password": SecretStr("rotated")})
    assert write_secrets(kube, registration_secrets(rotated)) == 2
    password = zvirt_section.password_value()
    assert password not in caplog.text and "rotated" not in caplog.text


def test_settings_mask_the_password_and_the_registry_builds_the_driver(
    zvirt_section: ZvirtSettings,
) -> None:
    password = zvirt_section.password_value()
    full = Settings(provider="zvirt", zvirt=zvirt_section)
    assert password not in repr(full) and password not in str(ZVIRT.section(full).model_dump())
    driver = driver_for(full)
    assert isinstance(driver, ZvirtDriver)
    assert driver.provider == "zvirt"
