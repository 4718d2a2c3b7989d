"""``cloudloop worker`` (or ``starter``) as a real process for the stack and fault tests: its
environment, started with a fresh metrics port, waited for on ``/readyz``, SIGKILLed, started
again; its health endpoints and metrics read over HTTP.

Rules: every process runs through :class:`~devstack.process.ManagedProcess` (its own process
group, killed with the test run if that dies); a kill is SIGKILL (no graceful shutdown, no last
heartbeat); whatever a test started is killed when it ends (:class:`Workers`, the ``workers``
fixture) or when its module's rig stops. Each start writes its own log, ``<name>-<n>.log``.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from cloudloop.cloud.registry import Settings
from cloudloop.net import free_port
from devstack.local import LocalStack
from devstack.process import ManagedProcess, http_ok

REPO = Path(__file__).resolve().parents[2]
CLI = "cloudloop.cli"


def worker_env(
    settings: Settings,
    stack: LocalStack,
    *parts: Mapping[str, str],
    graceful_shutdown_s: float | None = 1,
) -> dict[str, str]:
    """The environment of a worker for ``settings``' cluster and task queue on ``stack`` (metrics
    on loopback); ``parts`` add the provider's section and anything else, in order."""
    env = {
        **os.environ,
        "CLOUDLOOP_CLUSTER_NAME": settings.cluster_name,
        "CLOUDLOOP_KUBECONFIG": str(stack.kubeconfig),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": settings.temporal.task_queue,
        **stack.codec_env(),
    }
    if graceful_shutdown_s is not None:
        env["CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S"] = f"{graceful_shutdown_s:g}"
    for part in parts:
        env.update(part)
    return env


def aws_env(endpoint: str, **extra: str) -> dict[str, str]:
    """The AWS section for moto (or a proxy in front of it) at ``endpoint``."""
    return {
        "CLOUDLOOP_AWS__ENDPOINT_URL": endpoint,
        "CLOUDLOOP_AWS__ACCESS_KEY_ID": "testing",
        "CLOUDLOOP_AWS__SECRET_ACCESS_KEY": "testing",
        **extra,
    }


def aws_process_env(settings: Settings, stack: LocalStack, folder: Path) -> dict[str, str]:
    """A worker's or starter's environment as a chart sets it for AWS on moto: credentials from a
    mounted file (its secret must never reach a log), the starters' Lease in ``default``."""
    credentials = folder / "aws-credentials"
    credentials.write_text(
        "[default]\naws_access_key_id = testing\naws_secret_access_key = s3cr3t-value\n"
    )
    return worker_env(
        settings,
        stack,
        {
            "CLOUDLOOP_AWS__ENDPOINT_URL": stack.aws_endpoint,
            "CLOUDLOOP_AWS__CREDENTIALS_FILE": str(credentials),
            "CLOUDLOOP_LEADER_ELECTION__NAMESPACE": "default",
            "CLOUDLOOP_LEADER_ELECTION__NAME": f"starter-{settings.temporal.task_queue}",
        },
        graceful_shutdown_s=5,
    )


class WorkerProcess:
    """One worker process at a time: ``python -m <module> worker`` (``module`` may be a test's
    worker that stops dead at a fault point; ``command`` ``starter`` runs the starter instead),
    restarted by :meth:`start` after a kill."""

    def __init__(
        self,
        env: dict[str, str],
        log_dir: Path,
        *,
        name: str = "worker",
        module: str = CLI,
        command: str = "worker",
        ready_timeout_s: float = 60.0,
    ) -> None:
        self.env, self.log_dir, self.name, self.module = env, log_dir, name, module
        self.command = command
        self.ready_timeout_s = ready_timeout_s
        self.starts = 0
        self.port = 0  # the current process's metrics port
        self.process: ManagedProcess | None = None

    def start(self, *, wait: bool = True) -> WorkerProcess:
        """A new process (its own log and metrics port); with ``wait``, until it is ready."""
        port = self.port = free_port()
        self.starts += 1
        argv = [sys.executable, "-m", self.module, *([self.command] if self.module == CLI else [])]
        self.process = ManagedProcess(
            f"{self.name}-{self.starts}",
            argv,
            log_dir=self.log_dir,
            env={**self.env, "CLOUDLOOP_METRICS_PORT": str(port)},
            cwd=REPO,
            ready=lambda: http_ok(f"http://127.0.0.1:{port}/readyz"),
        )
        self.process.start()
        if wait:
            self.process.wait_ready(self.ready_timeout_s)
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running

    @property
    def log(self) -> Path:
        """The current (last started) process's log."""
        return self.log_dir / f"{self.name}-{self.starts}.log"

    def kill(self) -> None:
        """SIGKILL now; it must have been running (a worker that died by itself is a failure)."""
        assert self.process is not None and self.process.running, (
            f"{self.name} died by itself:\n{self.process.tail() if self.process else ''}"
        )
        self.process.kill()

    def stop(self) -> None:
        """SIGKILL whatever still runs (the end of a test or a rig)."""
        if self.process is not None and self.process.running:
            self.process.kill()

    def get(self, path: str) -> tuple[int, str]:
        """Status and body of ``path`` on the metrics port (0 when nothing answers)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=3) as r:
                return int(r.status), r.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode(errors="replace")
        except OSError:
            return 0, ""

    def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """The sum of ``name``'s samples whose labels include ``labels`` (0 when absent)."""
        status, text = self.get("/metrics")
        if status != 200:
            return 0.0
        total = 0.0
        for line in text.splitlines():
            head, _, value = line.rpartition(" ")
            if head.split("{", 1)[0] != name:
                continue
            if all(f'{k}="{v}"' in head for k, v in (labels or {}).items()):
                total += float(value)
        return total

    def tail(self, lines: int = 40) -> str:
        return self.process.tail(lines) if self.process is not None else ""


class Workers:
    """Every worker process one test starts, killed when it ends (the ``workers`` fixture)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[WorkerProcess] = []

    def start(
        self,
        env: dict[str, str],
        *,
        module: str = CLI,
        wait: bool = True,
        ready_timeout_s: float = 60.0,
    ) -> WorkerProcess:
        """A new worker process (``worker-<n>.log``), waited for unless ``wait`` is false."""
        worker = WorkerProcess(
            env,
            self.log_dir,
            name=f"worker-{len(self.started)}",
            module=module,
            ready_timeout_s=ready_timeout_s,
        )
        self.started.append(worker)
        return worker.start(wait=wait)

    def stop_all(self) -> None:
        for worker in self.started:
            worker.stop()
