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


def _exit(code: int) -> None:
    raise SystemExit(code)


@pytest.mark.parametrize(
    ("args", "workflow_id"),
    [
        pytest.param(["workflow", "any/id"], "any/id", id="workflow"),
        pytest.param(["layout", "kube"], "layout/kube", id="layout"),
        pytest.param(["volume", "vol-1"], "volume/vol-1", id="volume"),
    ],
)
@pytest.mark.parametrize("refused", [False, True], ids=["started", "refused"])
@pytest.mark.usefixtures("codec_keys")
def test_rerun_commands_name_the_workflow_and_report(
    monkeypatch: pytest.MonkeyPatch, args: list[str], workflow_id: str, refused: bool
) -> None:
    from starters.rerun import RetryRefused

    seen: list[str] = []

    async def fake_connect(settings: object) -> object:
        return object()

    async def fake_rerun(client: object, settings: Settings, wanted: str) -> str:
        seen.append(wanted)
        if refused:
            raise RetryRefused(f"workflow {wanted} is running: nothing to retry")
        return f"started {wanted} again"

    monkeypatch.setattr("cloudloop.temporal.connect", fake_connect)
    monkeypatch.setattr("starters.rerun.rerun", fake_rerun)
    monkeypatch.setattr("cloudloop.cli.retry.leave", _exit)
    result = CliRunner().invoke(main, ["retry", *args])
    assert len(seen) == 1 and seen[0].endswith(workflow_id), seen
    if refused:
        assert result.exit_code == 1
        assert "Error: workflow" in result.output and "nothing to retry" in result.output
    else:
        assert result.exit_code == 0, result.output
        assert f"started {seen[0]} again" in result.output


@pytest.mark.usefixtures("codec_keys")
def test_rerun_reports_an_unreachable_temporal(monkeypatch: pytest.MonkeyPatch) -> None:
    async def fake_connect(settings: object) -> object:
        raise RuntimeError("connection refused")

    monkeypatch.setattr("cloudloop.temporal.connect", fake_connect)
    monkeypatch.setattr("cloudloop.cli.retry.leave", _exit)
    result = CliRunner().invoke(main, ["retry", "workflow", "x"])
    assert result.exit_code == 1
    assert "Error: Temporal at" in result.output and "connection refused" in result.output
