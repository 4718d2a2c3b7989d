"""What the OpenStack tests share beyond :mod:`devstack.backends.openstack`: the driver's settings
with the tests' quick timings, and a blocking wait.

The emulator runs as a child process of :class:`~devstack.local.LocalStack` (nothing else of the
stack); tests reach it through ``openstacksdk`` like the driver does, and through the admin port
for inspection and faults.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from cloudloop.cloud.openstack.settings import OpenStackSettings
from devstack.backends.openstack import openstack_settings
from devstack.openstack_emulator import OpenStackEmulatorEndpoint

T = TypeVar("T")

#: Quick polling and short waits: the emulator's transitions take tenths of seconds.
TIMINGS: dict[str, Any] = {"poll_interval_s": 0.05, "wait_timeout_s": 30, "request_timeout_s": 10}


def eventually(check: Callable[[], T | None], *, timeout: float = 10.0, every: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"not reached within {timeout}s (last: {last!r})")


def quick_settings(
    endpoint: OpenStackEmulatorEndpoint, *, router: bool = True, **overrides: Any
) -> OpenStackSettings:
    """:func:`~devstack.backends.openstack.openstack_settings` with :data:`TIMINGS` (``overrides``
    win)."""
    return openstack_settings(endpoint, router=router, **{**TIMINGS, **overrides})
