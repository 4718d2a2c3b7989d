"""`cloudloop worker` and `cloudloop starter` as real processes: ready, metrics, clean SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudloop.cloud.registry import Settings
from cloudloop.net import free_port
from devstack.local import LocalStack
from tests.support.workers import aws_process_env

pytestmark = pytest.mark.stack

CLI = [sys.executable, "-m", "cloudloop.cli"]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""
    except OSError:
        return 0, ""


@pytest.fixture(params=["worker", "starter"])
def process(
    request: pytest.FixtureRequest, settings: Settings, stack: LocalStack, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    port = free_port()
    log = tmp_path / f"{request.param}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*CLI, request.param],
            env={**aws_process_env(settings, stack, tmp_path), "CLOUDLOOP_METRICS_PORT": str(port)},
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        yield proc, port, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ready_metrics_and_graceful_sigterm(
    process: tuple[subprocess.Popen[str], int, Path],
) -> None:
    proc, port, log = process
    deadline = time.monotonic() + 30
    while get(f"http://127.0.0.1:{port}/readyz")[0] != 200:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    status, metrics = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    assert "cloudloop_workflows_started" in metrics  # the project's own registry
    if log.name.startswith("worker"):
        assert "temporal_" in metrics  # the Temporal SDK runtime's metrics on the same endpoint

    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0, log.read_text()
    assert time.monotonic() - started < 20
    assert "s3cr3t-value" not in log.read_text()  # credentials never reach the logs
