"""Fixtures of the emulator tests: the OpenStack emulator's admin handle (reset for each test) and
an SDK connection; a module that uses them starts its emulator as its own ``endpoint``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devstack.backends.openstack import Sdk, connect
from devstack.openstack_emulator import (
    OpenStackEmulatorAdmin,
    OpenStackEmulatorEndpoint,
)


@pytest.fixture
def admin(endpoint: OpenStackEmulatorEndpoint) -> OpenStackEmulatorAdmin:
    handle = OpenStackEmulatorAdmin(endpoint.admin_url)
    handle.reset()
    return handle


@pytest.fixture
def conn(endpoint: OpenStackEmulatorEndpoint, admin: OpenStackEmulatorAdmin) -> Iterator[Sdk]:
    connection = connect(endpoint)
    yield connection
    connection.close()
