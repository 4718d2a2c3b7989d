"""``cloudloop retry machine NAMESPACE/NAME``: argument checks and what it reports."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from cloudloop.cli import main
from cloudloop.cloud.registry import Settings


@pytest.mark.parametrize(
    "target",
    [pytest.param("just-a-name", id="no-namespace"), pytest.param("ns/", id="no-name")],
)
def test_target_must_be_namespace_slash_name(target: str) -> None:
    result = CliRunner().invoke(main, ["retry", "machine", target])
    assert result.exit_code == 2
    assert "NAMESPACE/NAME" in result.output


@pytest.mark.parametrize(
    ("outcome", "exit_code"),
    [
        pytest.param("asked workflow machine/ns/m1/uid to retry", 0, id="signalled"),
        pytest.param(LookupError("no DeckhouseMachine or ZvirtMachine ns/m1"), 1, id="missing"),
    ],
)
@pytest.mark.usefixtures("codec_keys")
def test_reports_what_it_did(
    monkeypatch: pytest.MonkeyPatch, outcome: str | Exception, exit_code: int
) -> None:
    seen: dict[str, Any] = {}

    async def fake_retry(settings: Settings, namespace: str, name: str) -> str:
        seen.update(namespace=namespace, name=name)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr("starters.machine.request_retry", fake_retry)
    result = CliRunner().invoke(main, ["retry", "machine", "ns/m1"])
    assert result.exit_code == exit_code, result.output
    assert seen == {"namespace": "ns", "name": "m1"}
    assert str(outcome) in result.output
