"""Loopback port helpers shared by the local stack and the processes' metrics exporters.

A port picked here is bound by another process a moment later, so it is taken outside the
kernel's ephemeral range: outgoing connections (which take ephemeral ports) cannot grab it in
between, as they could with the usual bind-to-port-0 trick on a busy machine.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: Where picked ports come from when the ephemeral range cannot be read.
_FALLBACK_EPHEMERAL = (32768, 60999)
_LISTEN_RANGE = (10000, 30000)


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return _FALLBACK_EPHEMERAL


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, outside the ephemeral range."""
    low, high = _ephemeral_range()
    candidates = [p for p in range(*_LISTEN_RANGE) if not low <= p <= high]
    for port in random.sample(candidates, k=min(200, len(candidates))):
        if _bindable(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # a crowded machine: any
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
