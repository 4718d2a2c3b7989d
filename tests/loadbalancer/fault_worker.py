"""``cloudloop worker`` that stops dead at one AWS call, for the SIGKILL fault tests.

``LB_FAULT_AT`` names a botocore event (e.g.
``after-call.elastic-load-balancing.CreateLoadBalancer``). When it fires, the worker writes
``LB_FAULT_MARKER`` and blocks that activity forever, so the test can SIGKILL the process in the
middle of an ensure or a delete. Run as ``python -m tests.loadbalancer.fault_worker``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path
from typing import Any

import boto3

from cloudloop.cloud.aws.base import AwsBase
from cloudloop.cloud.registry import Settings
from workers.main import run


def stop_at(event: str, marker: Path) -> None:
    """Make every AWS driver session block at ``event`` once it is reached."""
    original = AwsBase._make_session

    def make_session(self: AwsBase) -> boto3.Session:
        session = original(self)

        def block(**_: Any) -> None:
            marker.write_text(event)
            logging.getLogger(__name__).warning("fault point %s reached; blocking", event)
            threading.Event().wait()

        session.events.register(event, block)
        return session

    AwsBase._make_session = make_session  # type: ignore[method-assign]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    stop_at(os.environ["LB_FAULT_AT"], Path(os.environ["LB_FAULT_MARKER"]))
    asyncio.run(run(Settings()))
