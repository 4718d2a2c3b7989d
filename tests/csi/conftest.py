"""CSI test fixtures: the cloud each parametrized test runs on, the oVirt emulator, the
OpenStack emulator and vcsim (seeded with Deckhouse's zone layout)."""

from __future__ import annotations

import os
from collections.abc import Iterator

# The tests fork processes (workers, controllers, sidecars) while gRPC channels are open; grpcio's
# fork handlers are for fork-without-exec and only get in the way of a fork that execs at once.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import pytest

from cloudloop.cloud.registry import Settings
from devstack.backends.zvirt import ovirt_engine
from devstack.local import LocalStack, StackOptions
from devstack.openstack_emulator import OpenStackEmulatorEndpoint
from devstack.ovirt_emulator import Delays, OvirtEmulatorEndpoint
from tests.csi.clouds import CLOUDS, CsiCloud


@pytest.fixture(scope="session")
def csi_ovirt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OvirtEmulatorEndpoint]:
    """The oVirt Engine emulator with short delays (disks, attachments, VMs)."""
    fast = Delays(
        clone_s=0.2, boot_s=0.2, guest_ip_s=0.1, shutdown_s=0.1, disk_resize_s=0.1, remove_s=0.1
    )
    with ovirt_engine(tmp_path_factory.mktemp("csi-ovirt"), password="csi-pw", delays=fast) as up:
        yield up


@pytest.fixture(scope="session")
def csi_openstack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OpenStackEmulatorEndpoint]:
    """The OpenStack emulator with quick but visible transitions."""
    from devstack.backends.openstack import openstack_emulator

    with openstack_emulator(tmp_path_factory.mktemp("csi-openstack")) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def csi_vcsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """vcsim with a region tag on DC0, zones ``zone-a``/``zone-b`` on its clusters and
    datastores ``LocalDS_0``/``LocalDS_1`` tagged with them."""
    from devstack.vcsim import VcsimOptions
    from devstack.vcsim_inventory import ZoneLayout, seed

    local = LocalStack(
        StackOptions(
            state_dir=tmp_path_factory.mktemp("csi-vcsim"),
            temporal=False,
            moto=False,
            kube=(),
            vcsim=VcsimOptions(password="csi-vcsim-pw"),
        )
    )
    local.start()
    try:
        assert local.vcsim is not None
        seed(local.vcsim, [], ZoneLayout())
        yield local
    finally:
        local.stop()


@pytest.fixture(params=sorted(CLOUDS))
async def cloud(request: pytest.FixtureRequest, settings: Settings) -> CsiCloud:
    return await CLOUDS[request.param](request, settings)
