"""The workers of ``cloudloop dev``: ``cloudloop worker`` processes, as the chart runs them (a
Deployment of workers), started again when one dies.

A user of the demo can SIGKILL a worker (its PID is in the banner and in ``cloudloop dev``'s
log) and watch its workflows resume on the other one, or on the worker started in its place.

Rules:
- Each worker reads the dev process's settings from one file (``CLOUDLOOP_CONFIG``, mode 0600
  in the state directory: it holds the demo cloud's credentials and the codec keys) and has a
  metrics port and a leader-election identity of its own.
- A worker that exits while the demo runs is logged with its exit code and started again after
  :data:`RESTART_DELAY_S`; :meth:`DevWorkers.stop` stops them all (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import SecretBytes, SecretStr
from pydantic_core import to_jsonable_python

from cloudloop.cloud.registry import Settings
from cloudloop.net import free_port
from devstack.process import ManagedProcess, console_script, http_ok

log = logging.getLogger(__name__)

#: How long a dead worker stays down before it is started again (a crash loop stays slow).
RESTART_DELAY_S = 1.0
#: How often the workers are looked at.
WATCH_INTERVAL_S = 0.5
#: How long a worker may take to answer ``/readyz``.
READY_TIMEOUT_S = 60.0


def _revealed(value: Any) -> Any:
    if isinstance(value, SecretStr | SecretBytes):
        return value.get_secret_value()
    if isinstance(value, Mapping):
        return {key: _revealed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_revealed(item) for item in value]
    return value


def settings_document(settings: Settings) -> dict[str, Any]:
    """``settings`` as a ``CLOUDLOOP_CONFIG`` document that ``Settings()`` reads back equal
    (secrets in the clear: the file is the process's own configuration)."""
    document = to_jsonable_python(_revealed(settings.model_dump(mode="python")))
    assert isinstance(document, dict)
    return document


def write_settings(settings: Settings, path: Path) -> Path:
    """Write :func:`settings_document` to ``path``, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        yaml.safe_dump(settings_document(settings), out, sort_keys=True)
    os.chmod(path, 0o600)
    return path


class DevWorker:
    """One ``cloudloop worker`` process and the number of times it was started."""

    def __init__(self, index: int, config: Path, log_dir: Path) -> None:
        self.index = index
        self.config = config
        self.log_dir = log_dir
        self.starts = 0
        self.process: ManagedProcess | None = None

    @property
    def name(self) -> str:
        return f"worker-{self.index}"

    @property
    def pid(self) -> int | None:
        popen = self.process.popen if self.process is not None else None
        return popen.pid if popen is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running

    def start(self) -> None:
        port = free_port()
        env = {
            **os.environ,
            "CLOUDLOOP_CONFIG": str(self.config),
            "CLOUDLOOP_METRICS_PORT": str(port),
            "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
            "CLOUDLOOP_LEADER_ELECTION__IDENTITY": f"dev-{self.name}-{self.starts}",
        }
        self.process = ManagedProcess(
            self.name,
            [console_script("cloudloop"), "worker"],
            log_dir=self.log_dir,
            ready=lambda: http_ok(f"http://127.0.0.1:{port}/readyz"),
            env=env,
        )
        self.process.start()
        self.starts += 1

    def exit_code(self) -> int | None:
        popen = self.process.popen if self.process is not None else None
        return popen.poll() if popen is not None else None


class DevWorkers:
    """``count`` worker processes for the dev stack's settings, kept running."""

    def __init__(self, settings: Settings, state_dir: Path, count: int = 2) -> None:
        if count < 1:
            raise ValueError("cloudloop dev needs at least one worker")
        self.config = write_settings(settings, state_dir / "worker-settings.yaml")
        self.log_dir = state_dir / "logs"
        self.workers = [DevWorker(i, self.config, self.log_dir) for i in range(count)]
        #: Restarts done, one line each (``name exited with N; started again``).
        self.restarts: list[str] = []

    def start(self) -> None:
        """Start every worker and wait until each answers ``/readyz``."""
        for worker in self.workers:
            worker.start()
        for worker in self.workers:
            assert worker.process is not None
            worker.process.wait_ready(READY_TIMEOUT_S)

    def pids(self) -> list[int]:
        return [pid for pid in (w.pid for w in self.workers) if pid is not None]

    def banner(self) -> str:
        pids = ", ".join(str(pid) for pid in self.pids())
        return (
            f"  workers     : {len(self.workers)} processes (PIDs {pids}); kill -9 one and it "
            f"starts again, its workflows resume (logs {self.log_dir}/worker-<n>.log)"
        )

    async def supervise(self, stop: asyncio.Event) -> None:
        """Start every worker that died again, until ``stop`` is set."""
        while not stop.is_set():
            for worker in self.workers:
                if worker.running:
                    continue
                code = worker.exit_code()
                log.warning(
                    "%s (PID %s) exited with %s; starting it again", worker.name, worker.pid, code
                )
                await asyncio.sleep(RESTART_DELAY_S)
                if stop.is_set():
                    return
                worker.start()
                self.restarts.append(f"{worker.name} exited with {code}; started again")
                log.info("%s started again (PID %s)", worker.name, worker.pid)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), WATCH_INTERVAL_S)

    def stop(self) -> None:
        for worker in self.workers:
            if worker.process is not None:
                worker.process.terminate()
        for worker in self.workers:
            if worker.process is not None:
                worker.process.stop()
