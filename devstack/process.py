"""Child processes of the local stack: started with a log file, health-checked, stopped for sure.

Each child runs in its own process group and gets ``SIGKILL`` from the kernel if the process that
started it dies (``PR_SET_PDEATHSIG``), so neither Ctrl-C nor a crashed test run leaves one behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from cloudloop.net import free_port

__all__ = [
    "ManagedProcess",
    "console_script",
    "free_port",
    "http_ok",
    "port_is_free",
    "tcp_open",
]

_PR_SET_PDEATHSIG = 1


#: Run first in every child: ask for SIGKILL when the parent dies, then become the command.
#: A separate interpreter does it, never Python code between fork and exec: a parent whose other
#: threads (gRPC's, Temporal's) hold locks at the fork can crash such a child (dlopen, the
#: threading module's after-fork hooks), so the fork itself goes without ``preexec_fn``.
_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    f"    ctypes.CDLL('libc.so.6').prctl({_PR_SET_PDEATHSIG}, signal.SIGKILL)\n"
    "except OSError:\n"
    "    pass\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)


def _launched(argv: Sequence[str]) -> list[str]:
    """``argv`` run through :data:`_LAUNCHER` (dies with its parent, in a session of its own)."""
    return [sys.executable, "-c", _LAUNCHER, *argv]


def console_script(name: str) -> str:
    """A console script installed beside the running interpreter (venv ``bin/``)."""
    for candidate in (
        Path(sys.executable).parent / name,
        Path(sysconfig.get_path("scripts")) / name,
    ):
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed; run the README's set-up command")
    return found


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def http_ok(url: str, *, context: ssl.SSLContext | None = None, timeout: float = 2.0) -> bool:
    """True when ``url`` answers 2xx."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return 200 <= int(response.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def tcp_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


#: The Temporal frontend's cheapest call; it answers ``Unavailable`` ("Frontend is not healthy
#: yet") between the port opening and the server's membership being ready.
_SYSTEM_INFO = "/temporal.api.workflowservice.v1.WorkflowService/GetSystemInfo"


def temporal_ready(port: int, host: str = "127.0.0.1") -> bool:
    """True when the Temporal frontend on ``port`` answers ``GetSystemInfo`` (an open port
    alone is not ready: a client connecting then fails with "not healthy yet")."""
    import grpc

    if not tcp_open(port, host):
        return False
    try:
        with grpc.insecure_channel(f"{host}:{port}") as channel:
            call: grpc.UnaryUnaryMultiCallable[None, bytes] = channel.unary_unary(
                _SYSTEM_INFO,
                request_serializer=lambda _: b"",
                response_deserializer=lambda data: data,
            )
            call(None, timeout=2)
        return True
    except grpc.RpcError:
        return False


class ManagedProcess:
    """A child process with a name, a log file and a readiness check."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_dir: Path,
        ready: Callable[[], bool],
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        self.ready = ready
        self.env = env
        self.cwd = cwd
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it until it exits
        try:
            self.popen = subprocess.Popen(
                _launched(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        finally:
            log.close()

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"{self.name} exited early; last log lines:\n{self.tail()}")
            if self.ready():
                return
            time.sleep(0.1)
        raise TimeoutError(
            f"{self.name} not ready after {timeout:.0f}s; last log lines:\n{self.tail()}"
        )

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def terminate(self) -> None:
        """Ask the process group to stop (SIGTERM) without waiting."""
        if self.popen is not None and self.popen.poll() is None:
            self._signal_group(signal.SIGTERM)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left after ``timeout``."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.popen.wait(5)
        self._signal_group(signal.SIGKILL)  # grandchildren that outlived the leader
        self.popen = None

    def kill(self) -> None:
        """SIGKILL at once (fault tests)."""
        if self.popen is not None:
            self._signal_group(signal.SIGKILL)
            self.popen.wait(5)
            self.popen = None

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self.popen is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)


def stop_all(processes: Sequence[ManagedProcess], timeout: float = 10.0) -> None:
    """SIGTERM every process at once, then reap each (SIGKILL after ``timeout``)."""
    for process in processes:
        process.terminate()
    for process in processes:
        process.stop(timeout)
