"""Fixtures of the cloud tests: each provider's real test backend, started once per session and
only when a test of that provider runs (the conformance backends ask for them by name)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.backends import openstack, vsphere, zvirt
from devstack.openstack_emulator import OpenStackEmulatorEndpoint
from devstack.ovirt_emulator import OvirtEmulatorEndpoint
from devstack.process import ManagedProcess, free_port, http_ok
from devstack.vcsim import VcsimEndpoint, VcsimOptions


# -- AWS: a second moto that checks credentials ------------------------------------------
@pytest.fixture(scope="session")
def authenticating_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto with IAM authentication on: unknown access keys get ``AuthFailure``."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    script = str(Path(sys.executable).parent / "moto_server")
    process = ManagedProcess(
        "moto-iam",
        [script, "-H", "127.0.0.1", "-p", str(port)],
        log_dir=tmp_path_factory.mktemp("moto-iam"),
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
        ready=lambda: http_ok(f"{endpoint}/moto-api/data.json"),
    )
    process.start()
    try:
        process.wait_ready(60)  # moto_server takes seconds to import on a loaded machine
        yield endpoint
    finally:
        process.stop()


# -- zVirt, vSphere, OpenStack: their emulators, alone ----------------------------------------
@pytest.fixture(scope="session")
def ovirt_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OvirtEmulatorEndpoint]:
    state = tmp_path_factory.mktemp("conformance-ovirt")
    with zvirt.ovirt_engine(state, password="conformance-pw") as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def vcsim_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VcsimEndpoint]:
    from devstack.vcsim_inventory import NodeVm, ZoneLayout, seed

    state = tmp_path_factory.mktemp("conformance-vcsim")
    with vsphere.vcsim_server(state, VcsimOptions(password="conformance-pw")) as endpoint:
        seed(endpoint, [NodeVm("conformance-a", "10.9.0.10")], ZoneLayout())
        yield endpoint


@pytest.fixture(scope="session")
def openstack_cloud(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OpenStackEmulatorEndpoint]:
    with openstack.openstack_emulator(tmp_path_factory.mktemp("conformance-openstack")) as endpoint:
        yield endpoint
