"""``cloudloop worker`` that stops dead right after one OpenStack request, for the SIGKILL tests.

``OS_FAULT_AT`` names a driver operation (``CreatePort``, ``CreateServer``...). When a request of
that operation has been answered, the worker writes ``OS_FAULT_MARKER`` and blocks that activity
forever, so the test can SIGKILL the process between the cloud's answer and the workflow's
record of it. Run as ``python -m tests.layouts.openstack_fault_worker``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path
from typing import Any

from cloudloop.cloud.openstack.base import OpenStackBase
from cloudloop.cloud.registry import Settings
from workers.main import run


def stop_after(operation: str, marker: Path) -> None:
    """Make every OpenStack session block once a request of ``operation`` has been answered."""
    original = OpenStackBase.request

    def request(self: OpenStackBase, name: str, *args: Any, **kwargs: Any) -> Any:
        answer = original(self, name, *args, **kwargs)
        if name == operation:
            marker.write_text(operation)
            logging.getLogger(__name__).warning("fault point %s reached; blocking", operation)
            threading.Event().wait()
        return answer

    OpenStackBase.request = request  # type: ignore[method-assign,assignment]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    stop_after(os.environ["OS_FAULT_AT"], Path(os.environ["OS_FAULT_MARKER"]))
    asyncio.run(run(Settings()))
