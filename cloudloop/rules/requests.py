"""Request fingerprints, pure: how a call that meets a running workflow tells a repeat of its
own request (join it) from another request (refuse it).

Rules: the digest is of the whole model's JSON, so any field that differs makes another request;
16 hex digits, short enough for a memo.
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel


def fingerprint(model: BaseModel) -> str:
    """A short digest of a request: equal for a repeated request, different for a changed one."""
    return hashlib.sha256(model.model_dump_json().encode()).hexdigest()[:16]
