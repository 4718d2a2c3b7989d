"""Fixtures of the OpenStack tests: one emulator per session, reset per test, and settings that
point the product (driver, worker, starters) at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.settings import Settings
from devstack.backends.openstack import openstack_emulator
from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint
from tests.openstack.support import quick_settings


@pytest.fixture(scope="session")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenStackEmulatorEndpoint]:
    with openstack_emulator(tmp_path_factory.mktemp("openstack")) as running:
        yield running


@pytest.fixture
def admin(endpoint: OpenStackEmulatorEndpoint) -> OpenStackEmulatorAdmin:
    handle = OpenStackEmulatorAdmin(endpoint.admin_url)
    handle.reset()
    return handle


@pytest.fixture
def driver(
    endpoint: OpenStackEmulatorEndpoint, admin: OpenStackEmulatorAdmin
) -> Iterator[OpenStackDriver]:
    made = OpenStackDriver(quick_settings(endpoint))
    yield made
    made.close()


@pytest.fixture
def os_settings(
    settings: Settings, endpoint: OpenStackEmulatorEndpoint, admin: OpenStackEmulatorAdmin
) -> Settings:
    """The stack's settings with the OpenStack provider (the test's task queue and cluster)."""
    return settings.model_copy(
        update={"provider": "openstack", "openstack": quick_settings(endpoint)}
    )
