"""The starter's upstream-named flags: durations and how they override settings."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from cloudloop.cli import main
from cloudloop.cli.processes import with_ccm_flags
from cloudloop.cli.root import parse_duration
from cloudloop.cloud.registry import Settings
from cloudloop.settings import MAX_CONCURRENT_NODE_SYNCS, CcmSettings


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("5s", 5.0, id="seconds"),
        pytest.param("5m0s", 300.0, id="go-style"),
        pytest.param("1h30m", 5400.0, id="hours-minutes"),
        pytest.param("500ms", 0.5, id="millis"),
        pytest.param("2.5s", 2.5, id="fraction"),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", [pytest.param(t, id=t or "empty") for t in ("", "5", "5x", "s5")])
def test_bad_duration(text: str) -> None:
    with pytest.raises(click.BadParameter):
        parse_duration(text)


def test_flags_override_settings_only_when_given() -> None:
    settings = with_ccm_flags(
        Settings(), {"node_monitor_period": 2.0, "cluster_cidr": None, "concurrent_node_syncs": 4}
    )
    assert settings.ccm.node_monitor_period_s == 2.0
    assert settings.ccm.concurrent_node_syncs == 4
    assert settings.ccm.cluster_cidr == ""  # not given: the setting stays
    assert settings.ccm.node_status_update_frequency_s == 300.0


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--concurrent-node-syncs", "0"),
        ("--concurrent-node-syncs", str(MAX_CONCURRENT_NODE_SYNCS + 1)),
        ("--concurrent-node-status-updates", "-1"),
    ],
)
def test_node_sync_flags_are_bounded(flag: str, value: str) -> None:
    result = CliRunner().invoke(main, ["starter", flag, value])
    assert result.exit_code == 2
    assert flag in result.output


@pytest.mark.parametrize(
    "field",
    [
        {"concurrent_node_syncs": 0},
        {"concurrent_node_syncs": MAX_CONCURRENT_NODE_SYNCS + 1},
        {"concurrent_node_status_updates": -1},
    ],
)
def test_node_sync_settings_are_bounded(field: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        CcmSettings.model_validate(field)
    assert CcmSettings().concurrent_node_syncs == 1  # upstream's default
