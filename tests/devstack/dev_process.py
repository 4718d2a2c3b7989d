"""``cloudloop dev --provider <cloud>`` run as a user runs it, for the demo tests.

Rules: the process's output goes to ``dev.log``; every wait fails with the log's tail when the
process exits or the deadline passes; leaving the block sends Ctrl-C (SIGINT), waits for the
stack to stop, kills it only if it does not, and checks it said every process exited.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cloudloop.net import free_port
from devstack import gotools

TAIL = 5000


@dataclass
class DevProcess:
    process: subprocess.Popen[bytes]
    state: Path
    log_path: Path
    deadline: float
    temporal_port: int

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for(self, check: Callable[[], object], what: str) -> None:
        """Poll ``check`` every 0.5 s until it is truthy."""
        while not check():
            assert self.process.poll() is None, self.log()[-TAIL:]
            assert time.monotonic() < self.deadline, f"{what}\n{self.log()[-TAIL:]}"
            time.sleep(0.5)

    def kubectl(self, cluster: str = "main") -> list[str]:
        config = self.state / "kube" / cluster / "admin.kubeconfig"
        return [str(gotools.binary_path("kubectl")), "--kubeconfig", str(config)]

    def get(self, *args: str, cluster: str = "main") -> str:
        """``kubectl get`` on the control plane ``cluster``: its output, or "" on an error."""
        done = subprocess.run(
            [*self.kubectl(cluster), "get", *args], capture_output=True, text=True, timeout=60
        )
        return done.stdout


@contextmanager
def dev_process(provider: str, tmp_path: Path, deadline_s: float) -> Iterator[DevProcess]:
    """The dev stack of ``provider``, up (its banner printed) when the block starts."""
    state, log_path = tmp_path / "dev-state", tmp_path / "dev.log"
    temporal_port = free_port()
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "cloudloop.cli", "dev", "--provider", provider,
                "--state-dir", str(state),
                "--temporal-port", str(temporal_port), "--ui-port", str(free_port()),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    dev = DevProcess(process, state, log_path, time.monotonic() + deadline_s, temporal_port)
    try:
        dev.wait_for(lambda: f"cloudloop dev is up ({provider}" in dev.log(), "the banner")
        yield dev
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert "every process of the stack has exited" in dev.log()
