"""Settings come from env and a YAML file; secrets never show in reprs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.registry import Settings


def test_env_overrides_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("cluster_name: from-file\ntemporal:\n  address: file:7233\n  task_queue: q\n")
    monkeypatch.setenv("CLOUDLOOP_CONFIG", str(config))
    monkeypatch.setenv("CLOUDLOOP_TEMPORAL__ADDRESS", "env:7233")
    settings = Settings()
    assert settings.cluster_name == "from-file"
    assert settings.temporal.address == "env:7233"
    assert settings.temporal.task_queue == "q"


def test_empty_yaml_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    monkeypatch.setenv("CLOUDLOOP_CONFIG", str(config))
    assert Settings().provider == "aws"


def test_secrets_are_masked() -> None:
    aws = AwsSettings(access_key_id=SecretStr("AKIAEXAMPLE"), secret_access_key=SecretStr("s3cr3t"))
    text = repr(Settings(aws=aws)) + str(aws.model_dump())
    assert "s3cr3t" not in text
    assert "AKIAEXAMPLE" not in text


def test_unknown_provider_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDLOOP_PROVIDER", "nimbus")
    with pytest.raises(ValueError, match="provider"):
        Settings()
