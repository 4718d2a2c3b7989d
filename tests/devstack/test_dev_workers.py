"""``cloudloop dev``'s worker processes read the dev process's settings from one file: what it
writes reads back equal, secrets included, and only its owner can read it."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.registry import Settings
from cloudloop.settings import TemporalSettings
from devstack import dev_workers
from devstack.dev_workers import DevWorker, DevWorkers, settings_document, write_settings
from devstack.process import ManagedProcess


def _settings() -> Settings:
    return Settings(
        cluster_name="dev",
        provider="aws",
        kubeconfig=Path("/state/kube/admin.kubeconfig"),
        temporal=TemporalSettings(address="127.0.0.1:7233", task_queue="q-dev"),
        aws=AwsSettings(
            endpoint_url="http://127.0.0.1:5000",
            region="us-east-1",
            access_key_id=SecretStr("AKIA-dev"),
            secret_access_key=SecretStr("s3cret"),
        ),
    )


def test_the_settings_file_reads_back_equal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings()
    path = write_settings(settings, tmp_path / "worker-settings.yaml")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for name in [n for n in os.environ if n.startswith("CLOUDLOOP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CLOUDLOOP_CONFIG", str(path))
    again = Settings()
    assert settings_document(again) == settings_document(settings)
    assert settings_document(again)["aws"]["secret_access_key"] == "s3cret"


def test_a_dead_worker_is_started_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def start(self: DevWorker) -> None:  # a short-lived stand-in for `cloudloop worker`
        seconds = "0" if self.starts == 0 else "30"
        self.process = ManagedProcess(
            self.name,
            [sys.executable, "-c", f"import time; time.sleep({seconds})"],
            log_dir=self.log_dir,
            ready=lambda: True,
        )
        self.process.start()
        self.starts += 1

    monkeypatch.setattr(DevWorker, "start", start)
    monkeypatch.setattr(dev_workers, "RESTART_DELAY_S", 0.0)
    pool = DevWorkers(_settings(), tmp_path, count=1)

    async def run() -> None:
        stop = asyncio.Event()
        supervisor = asyncio.create_task(pool.supervise(stop))
        while not pool.restarts:
            await asyncio.sleep(0.05)
        stop.set()
        await supervisor

    pool.workers[0].start()
    try:
        asyncio.run(asyncio.wait_for(run(), 30))
        assert pool.restarts == ["worker-0 exited with 0; started again"]
        assert pool.workers[0].running
    finally:
        pool.stop()
    assert not pool.workers[0].running
