"""Helpers for the CSI tests: the controller and node services on unix sockets, csi-sanity, and
a typed gRPC client for the tests' own calls.

The servers run in the test's event loop (``cloudloop.csi.server`` builds them as the
``cloudloop csi-controller``/``csi-node`` commands do); csi-sanity is the real binary built from
``github.com/kubernetes-csi/csi-test``. Socket folders live under ``/tmp`` (a unix socket path
must stay under 108 bytes).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree

import grpc
from temporalio.client import Client
from temporalio.worker import Worker

from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.registry import Settings
from cloudloop.csi.operations import VolumeOperations
from cloudloop.csi.server import controller_server, node_server
from cloudloop.csi.v1 import csi_pb2_grpc
from cloudloop.kube.api import Kube
from cloudloop.settings import CsiSettings, Domain, LeaderElectionSettings
from devstack import gotools
from tests.support.parts import has
from workers.main import build_worker

if TYPE_CHECKING:
    from tests.csi.clouds import CsiCloud

GIB = 1 << 30
#: The VolumeSnapshotClass parameters csi-sanity's CreateSnapshot calls carry (the snapshot tests
#: run where the controller advertises CREATE_DELETE_SNAPSHOT).
SANITY_SNAPSHOT_PARAMETERS = {"tagSpecification_1": "cloudloop.io/csi-sanity=true"}


@dataclass
class CsiSockets:
    folder: Path

    @property
    def controller(self) -> str:
        return f"unix://{self.folder / 'controller.sock'}"

    @property
    def node(self) -> str:
        return f"unix://{self.folder / 'node.sock'}"


@asynccontextmanager
async def socket_folder() -> AsyncIterator[CsiSockets]:
    folder = Path(tempfile.mkdtemp(prefix="csi-", dir="/tmp"))
    try:
        yield CsiSockets(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def csi_settings(settings: Settings, **update: object) -> Settings:
    return settings.model_copy(update={"csi": CsiSettings.model_validate(update)})


def deployment_settings(settings: Settings, namespace: str) -> Settings:
    driver = f"e2e-{uuid.uuid4().hex[:6]}.csi.cloudloop.io"
    settings = csi_settings(settings, driver_name=driver, storage_classes=True)
    return settings.model_copy(
        update={
            "discovery": settings.discovery.model_copy(update={"namespace": namespace}),
            "leader_election": LeaderElectionSettings(
                namespace=namespace, name="csi-e2e", identity="e2e"
            ),
        }
    )


def discovery_document(cloud: CsiCloud) -> dict[str, Any]:
    """What the discoverer writes for this cloud: its zones and its provider fields."""
    data = has(cloud.driver.discovery).discovery_data()
    zones = sorted(z.name for z in data.zones if z.state == "available")
    return {**data.extra, "zones": zones}


def volume_worker(client: Client, settings: Settings, driver: CloudDriver, kube: Kube) -> Worker:
    """An in-process worker on the volume domain's task queue, where the controller's
    :class:`VolumeOperations` starts the volume workflows."""
    return build_worker(
        client,
        settings,
        driver=driver,
        kube=kube,
        task_queue=settings.temporal.queue_for(Domain.VOLUME),
    )


@asynccontextmanager
async def controller_service(
    client: Client, settings: Settings, driver: CloudDriver, endpoint: str
) -> AsyncIterator[None]:
    server = controller_server(VolumeOperations.from_settings(client, settings), settings, driver)
    path = endpoint.removeprefix("unix://")
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    try:
        yield
    finally:
        await server.stop(1)


@asynccontextmanager
async def node_service(
    settings: Settings, driver: CloudDriver, endpoint: str, *, node_id: str, zone: str = ""
) -> AsyncIterator[None]:
    server = node_server(settings, driver, node_id, zone)
    server.add_insecure_port(endpoint)
    await server.start()
    try:
        yield
    finally:
        await server.stop(1)


@dataclass
class SanityResult:
    returncode: int
    output: str
    #: Each spec's full name → its state (``passed``, ``skipped``, ``failed``...), from the
    #: JUnit report.
    specs: dict[str, str] = field(default_factory=dict)

    def passed(self, containing: str) -> list[str]:
        return sorted(n for n, state in self.specs.items() if containing in n and state == "passed")

    @property
    def summary(self) -> str:
        found = re.findall(r"Ran \d+ of \d+ Specs.*|\d+ Passed \| \d+ Failed.*", self.output)
        return " / ".join(found)

    def counts(self) -> dict[str, int]:
        found = re.search(
            r"(\d+) Passed \| (\d+) Failed \| (\d+) Pending \| (\d+) Skipped", self.output
        )
        if not found:
            return {}
        keys = ("passed", "failed", "pending", "skipped")
        return dict(zip(keys, (int(g) for g in found.groups()), strict=True))


async def run_sanity(
    sockets: CsiSockets,
    *,
    extra: tuple[str, ...] = (),
    timeout: float = 900,
    mutable_parameters: dict[str, str] | None = None,
) -> SanityResult:
    """csi-sanity, controller and node, against the two sockets (1 GiB volumes, grown to 2;
    snapshots with :data:`SANITY_SNAPSHOT_PARAMETERS`; the ModifyVolume specs, where the
    controller has them, with ``mutable_parameters``)."""
    binary = gotools.ensure_built(["csi-sanity"])["csi-sanity"]
    work = sockets.folder
    snapshot_parameters = work / "snapshot-parameters.yaml"
    snapshot_parameters.write_text(json.dumps(SANITY_SNAPSHOT_PARAMETERS))
    mutable = work / "mutable-parameters.yaml"
    mutable.write_text(json.dumps(mutable_parameters or {}))
    argv = [
        str(binary),
        f"--csi.endpoint={sockets.node}",
        f"--csi.controllerendpoint={sockets.controller}",
        f"--csi.mountdir={work / 'mount'}",
        f"--csi.stagingdir={work / 'staging'}",
        f"--csi.testvolumesize={GIB}",
        f"--csi.testvolumeexpandsize={2 * GIB}",
        f"--csi.testsnapshotparameters={snapshot_parameters}",
        f"--csi.testvolumemutableparameters={mutable}",
        f"--ginkgo.junit-report={work / 'junit.xml'}",
        "--ginkgo.no-color",
        *extra,
    ]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
    return SanityResult(
        proc.returncode or 0, out.decode(errors="replace"), junit_specs(work / "junit.xml")
    )


def junit_specs(report: Path) -> dict[str, str]:
    """Spec name → state from ginkgo's JUnit report (empty when there is none)."""
    if not report.exists():
        return {}
    root = ElementTree.parse(report).getroot()
    return {
        str(case.get("name")): str(case.get("status", ""))
        for case in root.iter("testcase")
        if case.get("name")
    }


@asynccontextmanager
async def channel(endpoint: str) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(endpoint) as opened:
        yield opened


def stubs(
    opened: grpc.aio.Channel,
) -> tuple[
    csi_pb2_grpc.IdentityAsyncStub, csi_pb2_grpc.ControllerAsyncStub, csi_pb2_grpc.NodeAsyncStub
]:
    return (
        csi_pb2_grpc.IdentityStub(opened),
        csi_pb2_grpc.ControllerStub(opened),
        csi_pb2_grpc.NodeStub(opened),
    )
