"""Loopback port helpers shared by the local stack and the processes' metrics exporters.

A port picked here is bound by another process a moment later, so it is taken outside the
kernel's ephemeral range: outgoing connections (which take ephemeral ports) cannot grab it in
between, as they could with the usual bind-to-port-0 trick on a busy machine.

``$CLOUDLOOP_PORT_RANGE`` (``low-high``) narrows the range: parallel test workers each pick from a
share of their own (``tests/conftest.py``), so no two stacks race for a port one of them has picked
but not yet bound, or has freed for a moment to restart a process on it.

A picked port is also reserved for :data:`RESERVATION_S` in a file under the temporary directory
(``cloudloop-ports/<port>``, created exclusively), so two processes that pick at the same moment —
a test and the ``cloudloop dev`` it launches, two stacks of one run — never hand out the same
port before either binds it (seen once in CI: etcd failed with "address already in use").
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
import time
from pathlib import Path

#: Where picked ports come from when the ephemeral range cannot be read.
_FALLBACK_EPHEMERAL = (32768, 60999)
_LISTEN_RANGE = (10000, 30000)
PORT_RANGE_ENV = "CLOUDLOOP_PORT_RANGE"
#: How long a picked port stays reserved for the process that picked it.
RESERVATION_S = 300.0


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return _FALLBACK_EPHEMERAL


def listen_range() -> tuple[int, int]:
    """Where :func:`free_port` picks: ``$CLOUDLOOP_PORT_RANGE`` if valid, else 10000-29999."""
    try:
        low, high = (int(part) for part in os.environ[PORT_RANGE_ENV].split("-"))
    except (KeyError, ValueError):
        return _LISTEN_RANGE
    if not 1024 <= low < high <= 65536:
        return _LISTEN_RANGE
    return low, high


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _reserve(port: int) -> bool:
    """Take the port's reservation file, or an expired one; False while another holds it."""
    folder = Path(tempfile.gettempdir()) / "cloudloop-ports"
    path = folder / str(port)
    try:
        folder.mkdir(exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        return True
    except FileExistsError:
        try:
            if time.time() - path.stat().st_mtime < RESERVATION_S:
                return False
            os.utime(path)
            return True
        except OSError:
            return False
    except OSError:
        return True  # no writable temporary directory: the bind check alone


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, outside the ephemeral range.

    The port is reserved (see the module's docstring), so no other picker in any process returns
    it again for a while.
    """
    low, high = _ephemeral_range()
    candidates = [p for p in range(*listen_range()) if not low <= p <= high]
    for port in random.sample(candidates, k=min(200, len(candidates))):
        if _bindable(port) and _reserve(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # a crowded machine: any
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
