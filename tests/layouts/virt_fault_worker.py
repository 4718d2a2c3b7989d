"""``cloudloop worker`` that stops dead right after one zVirt or DVP request, for the layout
SIGKILL tests.

``LAYOUT_FAULT_AT`` names a driver operation (zVirt ``AddVm``, DVP ``CreateVirtualMachine``...).
When its request has returned (the cloud made the object), the worker writes
``LAYOUT_FAULT_MARKER`` and blocks that activity forever, so the test can SIGKILL the process
between the cloud's answer and the workflow's record of it. Run as
``python -m tests.layouts.virt_fault_worker``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from cloudloop.cloud.dvp.base import DvpBase
from cloudloop.cloud.registry import Settings
from cloudloop.cloud.zvirt.base import ZvirtBase
from workers.main import run

T = TypeVar("T")


def _block(fault: str, operation: str, marker: Path) -> None:
    if operation == fault:
        marker.write_text(operation)
        logging.getLogger(__name__).warning("fault point %s reached; blocking", operation)
        threading.Event().wait()


def stop_after(fault: str, marker: Path) -> None:
    """Make every zVirt and DVP session block once a request named ``fault`` has returned."""
    zvirt_call = ZvirtBase.call
    dvp_call = DvpBase.call

    def zvirt(self: ZvirtBase, operation: str, request: Callable[[Any], T]) -> T:
        answer = zvirt_call(self, operation, request)
        _block(fault, operation, marker)
        return answer

    def dvp(
        self: DvpBase,
        operation: str,
        request: Callable[[], T],
        *,
        found: Callable[[T], bool] = lambda _: True,
    ) -> T:
        answer = dvp_call(self, operation, request, found=found)
        _block(fault, operation, marker)
        return answer

    ZvirtBase.call = zvirt  # type: ignore[method-assign]
    DvpBase.call = dvp  # type: ignore[method-assign]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    stop_after(os.environ["LAYOUT_FAULT_AT"], Path(os.environ["LAYOUT_FAULT_MARKER"]))
    asyncio.run(run(Settings()))
