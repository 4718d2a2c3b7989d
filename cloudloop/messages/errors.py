"""Error kinds for workflows and activities: :class:`ErrorKind`, re-exported from the drivers'
layer (:mod:`cloudloop.cloud.error_kinds`, where the error classes take their ``kind``).

Rules: a re-export only; the enum and its wire names live in :mod:`cloudloop.cloud.error_kinds`.
"""

from __future__ import annotations

from cloudloop.cloud.error_kinds import ErrorKind

__all__ = ["ErrorKind"]
