"""A hung CSI controller is seen: the livenessprobe binary against the controller's CSI server.

The chart runs the livenessprobe sidecar on the controller's socket and points the controller
container's liveness probe at its /healthz. Here the same binary (built by ``gotools``; a stand-in
built from csi-lib-utils, since the Go module proxy does not serve kubernetes-csi/livenessprobe)
runs against :func:`cloudloop.csi.server.controller_server` — the server ``cloudloop
csi-controller`` runs, whose Probe asks Temporal (the stack's). /healthz is 200 while Probe
answers ready, 500 while it hangs past the probe timeout, fails or answers not ready, and 200
again when it recovers (the kubelet restarts the container only after several failures).
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from cloudloop.csi.operations import VolumeOperations
from cloudloop.csi.server import controller_server
from cloudloop.net import free_port
from devstack import gotools
from tests.csi.support import socket_folder
from tests.helpers import eventually

pytestmark = pytest.mark.stack

PROBE_TIMEOUT = "1s"


class SwitchableTemporal:
    """The stack's Temporal client, whose ``get_system_info`` (the controller's Probe) the test
    can make hang or fail."""

    def __init__(self, real: Client) -> None:
        self.real = real
        self.mode = "ok"
        self.workflow_service = self

    async def get_system_info(self, request: Any, **kwargs: Any) -> Any:
        if self.mode == "hang":
            await asyncio.Event().wait()
        if self.mode == "fail":
            raise RPCError("temporal unreachable", RPCStatusCode.UNAVAILABLE, b"")
        return await self.real.workflow_service.get_system_info(request, **kwargs)


def healthz(url: str) -> int:
    """The status /healthz answers (0 when nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return 0


@contextlib.asynccontextmanager
async def livenessprobe(socket: str, endpoint: str) -> AsyncIterator[asyncio.subprocess.Process]:
    binary = (await asyncio.to_thread(gotools.ensure_built, ["livenessprobe"]))["livenessprobe"]
    process = await asyncio.create_subprocess_exec(
        str(binary),
        f"--csi-address={socket}",
        f"--http-endpoint={endpoint}",
        f"--probe-timeout={PROBE_TIMEOUT}",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 10)
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_healthz_follows_the_controllers_probe(settings: Settings, client: Client) -> None:
    temporal = SwitchableTemporal(client)
    operations = VolumeOperations.from_settings(temporal, settings)  # type: ignore[arg-type]
    server = controller_server(operations, settings, AwsDriver(AWS.section(settings)))
    async with socket_folder() as sockets:
        socket = sockets.controller.removeprefix("unix://")
        server.add_insecure_port(f"unix://{socket}")
        await server.start()
        endpoint = f"127.0.0.1:{free_port()}"
        url = f"http://{endpoint}/healthz"
        try:
            async with livenessprobe(socket, endpoint) as process:

                async def answers(status: int, what: str) -> None:
                    await eventually(
                        lambda: healthz(url) == status, timeout=60, interval=0.5, what=what
                    )
                    assert process.returncode is None, "livenessprobe exited"

                await answers(200, "/healthz 200 while Probe answers")
                temporal.mode = "hang"
                await answers(500, "/healthz 500 while Probe hangs")
                temporal.mode = "ok"
                await answers(200, "/healthz 200 once Probe answers again")
                temporal.mode = "fail"
                await answers(500, "/healthz 500 while Probe says not ready")
                temporal.mode = "ok"
                await answers(200, "/healthz 200 after the failure")
        finally:
            await server.stop(1)


async def test_healthz_fails_when_the_controller_is_gone(
    settings: Settings, client: Client
) -> None:
    """The controller process died (its socket answers nothing): 500, never a stale 200."""
    operations = VolumeOperations.from_settings(client, settings)
    server = controller_server(operations, settings, AwsDriver(AWS.section(settings)))
    async with socket_folder() as sockets:
        socket = sockets.controller.removeprefix("unix://")
        server.add_insecure_port(f"unix://{socket}")
        await server.start()
        endpoint = f"127.0.0.1:{free_port()}"
        url = f"http://{endpoint}/healthz"
        stopped = False
        try:
            async with livenessprobe(socket, endpoint):
                await eventually(lambda: healthz(url) == 200, timeout=60, what="/healthz 200")
                await server.stop(0)
                stopped = True
                await eventually(
                    lambda: healthz(url) == 500, timeout=60, what="/healthz 500, server gone"
                )
        finally:
            if not stopped:
                await server.stop(1)
