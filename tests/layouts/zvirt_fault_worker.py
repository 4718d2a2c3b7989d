"""``cloudloop worker`` that stops dead right after one zVirt engine request, for the layout
SIGKILL tests.

``LAYOUT_FAULT_AT`` names a driver operation (``AddVm``...). When its request has returned (the
engine made the object), the worker writes ``LAYOUT_FAULT_MARKER`` and blocks that activity
forever, so the test can SIGKILL the process between the engine's answer and the workflow's record
of it. Run as ``python -m tests.layouts.zvirt_fault_worker``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from cloudloop.cloud.zvirt.base import ZvirtBase
from cloudloop.settings import Settings
from workers.main import run

T = TypeVar("T")


def stop_after(fault: str, marker: Path) -> None:
    """Make every zVirt session block once a request named ``fault`` has returned."""
    original = ZvirtBase.call

    def call(self: ZvirtBase, operation: str, request: Callable[[Any], T]) -> T:
        answer = original(self, operation, request)
        if operation == fault:
            marker.write_text(operation)
            logging.getLogger(__name__).warning("fault point %s reached; blocking", operation)
            threading.Event().wait()
        return answer

    ZvirtBase.call = call  # type: ignore[method-assign]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    stop_after(os.environ["LAYOUT_FAULT_AT"], Path(os.environ["LAYOUT_FAULT_MARKER"]))
    asyncio.run(run(Settings()))
