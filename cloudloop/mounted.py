"""Files a worker reads on an input's word, only from one configured directory (a mount).

An input (a workflow's, so anyone who can start one) names a file by path; :func:`read_under`
reads it only if its real path lies inside the directory: the name is taken inside the
directory when relative, every symlink and ``..`` is resolved, and a path outside, the
directory itself, or anything but a regular file is refused before the file is opened (so
nothing of it is read; a device or FIFO is not even opened). What is read is size-limited.

Rules:
- Refusals and failures name the requested file and the setting, never the resolved path, the
  directory or any content (:class:`Refused`, :class:`Unreadable`).
- Symlinks inside the directory are followed (a Kubernetes Secret volume is ``key`` →
  ``..data/key`` → ``..<timestamp>/key``): only where they end counts. The file is opened by
  its real path with ``O_NOFOLLOW`` and checked to be the inode looked at, so a symlink swapped
  in between is refused too.
- The stamp changes when the content may have (another real path, mtime or size).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

#: The settings these texts name (the layouts section; kept here so messages stay value-free).
SOURCE_SETTING = "layouts.source_dir"
SIZE_SETTING = "layouts.max_file_bytes"


class Refused(ValueError):
    """The file is not one the worker may read (outside the mount, not a file, too large)."""


class Unreadable(OSError):
    """The file is allowed but cannot be read (missing, no permission)."""


@dataclass(frozen=True)
class MountedFile:
    data: bytes
    #: Changes whenever the content may have.
    stamp: str

    @property
    def text(self) -> str:
        """The content as text (:func:`read_under` checked it is UTF-8)."""
        return self.data.decode()


def resolve_under(root: Path, name: str) -> Path:
    """The real path of ``name`` (relative names inside ``root``) if it lies inside ``root``'s
    real path; :class:`Refused` otherwise. Reads no file (only the directories' entries)."""
    if not name or "\x00" in name:
        raise Refused("not a file name (empty, or holding NUL)")
    try:
        base = Path(os.path.realpath(root))
        requested = Path(name)
        real = Path(os.path.realpath(requested if requested.is_absolute() else base / requested))
    except (OSError, ValueError):
        raise Refused(f"{name}: not a file name under {SOURCE_SETTING}") from None
    if real == base or not real.is_relative_to(base):
        raise Refused(f"{name}: outside {SOURCE_SETTING}; nothing read")
    return real


def read_under(root: Path, name: str, *, max_bytes: int) -> MountedFile:
    """The text of ``name`` if :func:`resolve_under` allows it, it is a regular file of at most
    ``max_bytes`` and UTF-8; :class:`Refused` or :class:`Unreadable` otherwise."""
    read = read_bytes_under(root, name, max_bytes=max_bytes)
    try:
        read.data.decode()
    except UnicodeDecodeError:
        raise Refused(f"{name}: not UTF-8 text") from None
    return read


def read_bytes_under(root: Path, name: str, *, max_bytes: int) -> MountedFile:
    """The bytes of ``name`` (any content: a gzipped cloud-config too) under the same rules
    as :func:`read_under`."""
    real = resolve_under(root, name)
    try:
        looked = os.stat(real)
    except OSError as exc:
        raise Unreadable(f"{name}: {exc.strerror or 'cannot be read'}") from None
    if not stat.S_ISREG(looked.st_mode):
        raise Refused(f"{name}: not a regular file; nothing read")
    if looked.st_size > max_bytes:
        raise Refused(f"{name}: larger than {SIZE_SETTING}; nothing read")
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symlink was swapped in after the look
            raise Refused(f"{name}: changed while looked at; nothing read") from None
        raise Unreadable(f"{name}: {exc.strerror or 'cannot be read'}") from None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (looked.st_dev, looked.st_ino):
            raise Refused(f"{name}: changed while looked at; nothing read")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise Unreadable(f"{name}: {exc.strerror or 'cannot be read'}") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise Refused(f"{name}: larger than {SIZE_SETTING}")
    data = b"".join(chunks)
    return MountedFile(data=data, stamp=f"{real}:{opened.st_mtime_ns}:{opened.st_size}")
