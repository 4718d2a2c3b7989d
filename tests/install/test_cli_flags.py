"""The upstream CCM's command-line conventions: ``--version``, ``--kubeconfig``, ``--cloud-config``,
``--leader-elect[=bool]`` and ``--log-format json``."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from cloudloop import cli
from cloudloop.cli import processes, root
from cloudloop.cloud.registry import PROVIDERS, Settings

CLOUDLOOP = str(Path(sys.executable).parent / "cloudloop")


def test_version() -> None:
    result = subprocess.run([CLOUDLOOP, "--version"], capture_output=True, text=True, check=True)

    assert result.stdout.startswith("cloudloop, version ")


@pytest.mark.parametrize(
    "args, expected",
    [
        pytest.param([], None, id="unset"),
        pytest.param(["--leader-elect"], True, id="bare"),
        pytest.param(["--leader-elect=true"], True, id="true"),
        pytest.param(["--leader-elect=false"], False, id="false"),
    ],
)
def test_leader_elect_takes_the_upstream_forms(args: list[str], expected: bool | None) -> None:
    context = processes.starter.make_context("starter", list(args))

    assert context.params["leader_elect"] is expected


@pytest.mark.parametrize("command", ["worker", "starter", "csi-controller", "csi-node"])
def test_the_processes_take_the_upstream_flags(command: str) -> None:
    options = {opt for param in cli.main.commands[command].params for opt in param.opts}

    assert {"--kubeconfig", "--cloud-config", "--log-format"} <= options


def test_json_log_lines() -> None:
    record = logging.LogRecord("cloudloop.x", logging.WARNING, __file__, 1, "a %s", ("b",), None)

    line = json.loads(root.JsonFormatter().format(record))

    assert {k: line[k] for k in ("level", "logger", "msg")} == {
        "level": "warning",
        "logger": "cloudloop.x",
        "msg": "a b",
    }


def aws_settings(**env: Any) -> Settings:
    return Settings(provider="aws", **env)


def test_cloud_config_fills_the_provider_section_and_the_environment_wins(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cloud.yaml"
    path.write_text("region: eu-west-1\nendpoint_url: http://aws.local\ntimeout_s: 3\n")
    settings = Settings(provider="aws", aws={"region": "us-west-2"})

    applied = processes.with_process_flags(settings, kubeconfig=tmp_path / "kc", cloud_config=path)
    section = PROVIDERS["aws"].section(applied)

    assert applied.kubeconfig == tmp_path / "kc"
    assert (section.region, section.endpoint_url, section.timeout_s) == (
        "us-west-2",
        "http://aws.local",
        3,
    )


@pytest.mark.parametrize(
    "text, message",
    [
        pytest.param("regoin: eu-west-1\n", "unknown: regoin", id="unknown-key"),
        pytest.param("[Global]\nzone = a\n", "not a mapping of aws settings", id="ini"),
        pytest.param("timeout_s: soon\n", "timeout_s", id="bad-value"),
    ],
)
def test_a_bad_cloud_config_is_refused_clearly(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "cloud.conf"
    path.write_text(text)

    with pytest.raises(click.BadParameter, match=message):
        processes.with_process_flags(Settings(provider="aws"), cloud_config=path)


@pytest.mark.skipif("vsphere" not in PROVIDERS, reason="no provider reads an upstream file")
def test_an_upstream_config_file_goes_to_the_provider_that_reads_one(tmp_path: Path) -> None:
    path = tmp_path / "vsphere.conf"
    path.write_text('[Global]\ninsecure-flag = "1"\n[VirtualCenter "vc.local"]\n')

    applied = processes.with_process_flags(Settings(provider="vsphere"), cloud_config=path)

    assert PROVIDERS["vsphere"].section(applied).config_file == path


@pytest.mark.parametrize(
    ("env", "error"),
    [
        pytest.param(
            {"CLOUDLOOP_PROVIDER": "dvp", "NODE_NAME": "n1"}, "no instance metadata", id="dvp"
        ),
        pytest.param({"CLOUDLOOP_PROVIDER": "aws"}, "needs this node's name", id="no-node"),
    ],
)
def test_termination_imds_needs_no_temporal_setting_and_says_what_is_missing(
    env: dict[str, str], error: str, tmp_path: Path
) -> None:
    """The IMDS node agent starts from its own settings alone (no Temporal, no configuration
    file, no cloud section): what it cannot work without is a clear error and exit status 2."""
    result = subprocess.run(
        [CLOUDLOOP, "termination-imds"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 2, result.stderr
    assert error in result.stderr
