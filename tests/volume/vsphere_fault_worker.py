"""``cloudloop worker`` for vSphere that stops dead right after one vCenter call, for SIGKILL tests.

``VSPHERE_FAULT_AFTER`` names a driver operation (e.g. ``AttachDisk``: the task is issued, its
outcome never heard). When that call returns, the worker writes ``VSPHERE_FAULT_MARKER`` and
blocks the activity forever, so the test can SIGKILL the process with the change under way.
Run as ``python -m tests.volume.vsphere_fault_worker``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from cloudloop.cloud.registry import Settings
from cloudloop.cloud.vsphere.base import VsphereBase
from workers.main import run

T = TypeVar("T")


def stop_after(fault_after: str, marker: Path) -> None:
    """Make every vSphere driver block once the call ``fault_after`` has been answered."""
    original = VsphereBase.call

    def call(self: VsphereBase, operation: str, request: Callable[[Any], T]) -> T:
        result = original(self, operation, request)
        if operation == fault_after:
            marker.write_text(f"{operation} {result}")
            logging.getLogger(__name__).warning("fault point after %s reached; blocking", operation)
            threading.Event().wait()
        return result

    VsphereBase.call = call  # type: ignore[method-assign]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    stop_after(os.environ["VSPHERE_FAULT_AFTER"], Path(os.environ["VSPHERE_FAULT_MARKER"]))
    asyncio.run(run(Settings()))
