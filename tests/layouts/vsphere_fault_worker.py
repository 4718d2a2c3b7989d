"""``cloudloop worker`` that stops dead right after one vSphere call, for the SIGKILL fault tests.

``LAYOUT_FAULT_AT`` names an operation of the vSphere session (``CloneVM``,
``CreateResourcePool``...). When that call has returned (vCenter made the object or started the
task), the worker writes ``LAYOUT_FAULT_MARKER`` and blocks that activity forever, so the test
can SIGKILL the process between the cloud's answer and the workflow's record of it. Run as
``python -m tests.layouts.vsphere_fault_worker``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cloudloop.cloud.registry import Settings
from cloudloop.cloud.vsphere.base import VsphereBase
from workers.main import run


def stop_after(operation: str, marker: Path) -> None:
    """Make every vSphere session block once ``operation`` returned."""
    original = VsphereBase._counted

    def counted(self: VsphereBase, op: str, request: Callable[[], Any]) -> Any:
        result = original(self, op, request)
        if op == operation:
            marker.write_text(op)
            logging.getLogger(__name__).warning("fault point %s reached; blocking", op)
            threading.Event().wait()
        return result

    VsphereBase._counted = counted  # type: ignore[method-assign,assignment]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    stop_after(os.environ["LAYOUT_FAULT_AT"], Path(os.environ["LAYOUT_FAULT_MARKER"]))
    asyncio.run(run(Settings()))
