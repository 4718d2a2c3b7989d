"""Fixtures of the machine tests: a stack of their own running the real Cluster API manager (the
contract and node-group tests), and the oVirt Engine emulator with quick delays (zVirt cases).

Both are module-scoped: a module that needs them starts its own, and only when one of its tests
asks (the zVirt cases reach ``ovirt`` through ``request.getfixturevalue``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from devstack.backends.zvirt import ovirt_engine
from devstack.devmode import stack_settings
from devstack.local import LocalStack
from devstack.ovirt_emulator import OvirtEmulatorEndpoint
from tests.conftest import NAMESPACES
from tests.machine import capi_objects


@pytest.fixture(scope="module")
def contract_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """Temporal + moto + a control plane running the Cluster API manager, with our CRDs."""
    with capi_objects.running_capi_stack(tmp_path_factory.mktemp("capi-contract")) as local:
        yield local


@pytest.fixture(scope="module")
def contract_kube(contract_stack: LocalStack) -> Kube:
    return Kube(api_client(contract_stack.kubeconfig))


@pytest.fixture(scope="module")
async def contract_client(contract_stack: LocalStack) -> Client:
    return await temporal.connect(stack_settings(contract_stack).temporal)


@pytest.fixture
def contract_namespace(contract_kube: Kube) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    contract_kube.create(NAMESPACES, {"metadata": {"name": name}})
    yield name
    contract_kube.delete(NAMESPACES, name)


@pytest.fixture(scope="module")
def ovirt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OvirtEmulatorEndpoint]:
    """The oVirt Engine emulator alone, with quick delays."""
    with ovirt_engine(tmp_path_factory.mktemp("ovirt"), password="machine-engine") as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def openstack_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The OpenStack emulator alone, with quick delays (OpenStack cases)."""
    from devstack.backends.openstack import openstack_emulator

    with openstack_emulator(tmp_path_factory.mktemp("openstack")) as endpoint:
        yield endpoint
