"""One private file per CA bundle, for the clients that take a CA by path only.

openstacksdk (``verify=``), ovirtsdk4 (``ca_file``) and :func:`ssl.create_default_context`
(``cafile=``) read a CA bundle from a file; a cluster configuration carries it inline
(``caCert``, ``caBundle``). :func:`ca_file` gives such a bundle a path.

Rules:
- One file per distinct content per process: the same PEM gives the same path, so a session
  made again and again (every layout activity connects) leaves no new file behind.
- The file is made by :func:`tempfile.mkstemp` (unpredictable name, ``O_EXCL``, mode 0600) and
  written whole before its path is returned: never a file someone else placed in the shared
  temporary directory, never a half-written one.
- The process that wrote a file removes it when it exits (a forked child leaves its parent's
  files alone); a file removed meanwhile is written again by the next call.
- Standard library only: every layer may import this module.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import tempfile
import threading

_lock = threading.Lock()
#: SHA-256 of the content → (path, pid of the process that wrote it).
_files: dict[str, tuple[str, int]] = {}


def ca_file(pem: str | bytes) -> str:
    """The path of a private file holding ``pem``, written on the first call for that content."""
    data = pem.encode() if isinstance(pem, str) else pem
    digest = hashlib.sha256(data).hexdigest()
    with _lock:
        known = _files.get(digest)
        if known is not None and os.path.exists(known[0]):
            return known[0]
        fd, path = tempfile.mkstemp(prefix="cloudloop-ca-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        except BaseException:
            _unlink(path)
            raise
        _files[digest] = (path, os.getpid())
        return path


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


@atexit.register
def _remove_own_files() -> None:
    pid = os.getpid()
    with _lock:
        for digest, (path, writer) in list(_files.items()):
            if writer == pid:
                _unlink(path)
                del _files[digest]
