"""What a live process holds, read from ``/proc``: its environment, its open files and the remote
ports of its TCP sockets (for the node agents' no-credential checks)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def environment_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode(errors="replace").split("=", 1) for e in raw if b"=" in e)


def open_files_of(pid: int) -> list[str]:
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            found.append(os.readlink(fd))
    return found


def remote_ports_of(pid: int) -> set[int]:
    """The remote TCP ports of the process's sockets (IPv4 and IPv6)."""
    inodes = {
        f.removeprefix("socket:[").removesuffix("]")
        for f in open_files_of(pid)
        if f.startswith("socket:[")
    }
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports
