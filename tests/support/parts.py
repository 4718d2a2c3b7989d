"""A capability part a test knows its driver has.

Rules:
- Only for tests typed against the :class:`~cloudloop.cloud.driver.CloudDriver` facade (the
  conformance backends): a missing part fails the test's assertion, not a ``None`` access.
"""

from __future__ import annotations

from typing import TypeVar

P = TypeVar("P")


def has(part: P | None) -> P:
    """``part``, asserting the driver has it."""
    assert part is not None, "the driver lacks this capability"
    return part
