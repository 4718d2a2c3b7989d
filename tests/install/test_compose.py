"""``docker-compose.yml``: valid for Debian's docker-compose, runs what ``cloudloop dev`` runs.

Temporal with its namespace set up by the product's ``cloudloop temporal setup`` (the chart's hook),
and per cloud the dev stack emulates a profile with the stack (control plane and emulator) and the
product's worker and starter, whose commands and environment the CLI and settings accept.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from cloudloop.cli import main as cli
from cloudloop.cloud.registry import Settings
from devstack.compose import CLOUDS

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose missing: `make installdeps` installs Debian's")
    result = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    loaded: dict[str, Any] = yaml.safe_load(result.stdout)
    return loaded


@pytest.mark.parametrize("profile", sorted(CLOUDS), ids=sorted(CLOUDS))
def test_every_emulated_cloud_has_a_profile_with_stack_worker_and_starter(
    config: dict[str, Any], profile: str
) -> None:
    services = config["services"]
    in_profile = sorted(n for n, s in services.items() if profile in (s.get("profiles") or []))

    assert in_profile == sorted(f"{role}-{profile}" for role in ("stack", "worker", "starter"))
    assert services[f"stack-{profile}"]["command"][0] == profile
    for role in ("worker", "starter"):
        service = services[f"{role}-{profile}"]
        assert service["environment"]["CLOUDLOOP_PROVIDER"] == profile
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
        assert set(service["depends_on"]) == {"temporal-setup", f"stack-{profile}"}


def test_temporal_is_set_up_by_the_product_command(config: dict[str, Any]) -> None:
    services = config["services"]
    setup = services["temporal-setup"]

    assert not services["temporal"].get("profiles") and not setup.get("profiles")
    assert setup["command"] == ["temporal", "setup"]
    assert setup["build"]["dockerfile"] == "deploy/Dockerfile"
    assert setup["depends_on"] == {"temporal": {"condition": "service_healthy"}}
    assert not any("--search-attribute" in arg for arg in services["temporal"]["command"])


@pytest.mark.parametrize("service", ["worker-aws", "starter-aws", "starter-zvirt", "worker-dvp"])
def test_the_cli_and_settings_accept_the_commands_and_environment(
    config: dict[str, Any], service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = config["services"][service]
    command = cli.commands[spec["command"][0]]
    options = {opt for param in command.params for opt in param.opts}
    for name, value in spec["environment"].items():
        monkeypatch.setenv(name, str(value))

    settings = Settings()

    assert isinstance(command, click.Command)
    assert {arg.split("=")[0] for arg in spec["command"][1:]} <= options
    assert settings.provider == spec["environment"]["CLOUDLOOP_PROVIDER"]
    assert settings.temporal.address == spec["environment"]["CLOUDLOOP_TEMPORAL__ADDRESS"]
    # the payload codec is on, its key the stack's (devstack.local.LocalStack.codec)
    assert settings.temporal.codec.enabled
    assert str(settings.temporal.codec.key_dir) == "/state/stack/codec-keys"
