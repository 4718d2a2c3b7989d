"""CSI test fixtures: the cloud each parametrized test runs on, and the oVirt emulator."""

from __future__ import annotations

import os
from collections.abc import Iterator

# The tests fork processes (workers, controllers, sidecars) while gRPC channels are open; grpcio's
# fork handlers are for fork-without-exec and only get in the way of a fork that execs at once.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import pytest

from cloudloop.settings import Settings
from devstack.local import LocalStack, StackOptions
from devstack.ovirt_emulator import OvirtEmulatorOptions
from devstack.ovirt_emulator.engine import Delays
from tests.csi.clouds import CLOUDS, CsiCloud


@pytest.fixture(scope="session")
def csi_ovirt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The oVirt Engine emulator with short delays (disks, attachments, VMs)."""
    fast = Delays(
        clone_s=0.2, boot_s=0.2, guest_ip_s=0.1, shutdown_s=0.1, disk_resize_s=0.1, remove_s=0.1
    )
    local = LocalStack(
        StackOptions(
            state_dir=tmp_path_factory.mktemp("csi-ovirt"),
            temporal=False,
            moto=False,
            kube=(),
            ovirt_emulator=OvirtEmulatorOptions(password="csi-pw", delays=fast),
        )
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(params=sorted(CLOUDS))
async def cloud(request: pytest.FixtureRequest, settings: Settings) -> CsiCloud:
    return await CLOUDS[request.param](request, settings)
