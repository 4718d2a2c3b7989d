"""Fixtures of the OpenStack tests: one emulator per session, reset per test, settings that
point the product (driver, worker, starters) at it, and the load-balancer tests' servers with
their Nodes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from devstack.backends.openstack import openstack_emulator
from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint
from tests.openstack.lb_support import delete_nodes, make_nodes
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


@pytest.fixture
def lb_config(os_settings: Settings, scope: str) -> Settings:
    """A cluster of this test's own, its Nodes selected by ``scope``."""
    ccm = os_settings.ccm.model_copy(update={"node_selector": f"cloudloop-test={scope}"})
    return os_settings.model_copy(update={"cluster_name": f"lb-{scope}", "ccm": ccm})


@pytest.fixture
def servers(admin: OpenStackEmulatorAdmin, scope: str) -> list[dict[str, str]]:
    return admin.seed_servers(2, prefix=f"lb-{scope}")


@pytest.fixture
def nodes(kube: Kube, servers: list[dict[str, str]], scope: str) -> Iterator[list[str]]:
    yield make_nodes(kube, servers, scope)
    delete_nodes(kube, scope)
