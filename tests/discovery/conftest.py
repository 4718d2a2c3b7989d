"""Fixtures of the discovery tests: the InstanceTypesCatalog a test's discoverer writes, removed
when the test ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cloudloop.kube.api import Kube
from cloudloop.kube.resources import INSTANCE_TYPES_CATALOGS


@pytest.fixture
def catalog(kube: Kube, scope: str) -> Iterator[str]:
    """The name of this test's InstanceTypesCatalog (cluster-scoped, so named after ``scope``)."""
    name = f"catalog-{scope}"
    try:
        yield name
    finally:
        kube.delete(INSTANCE_TYPES_CATALOGS, name)
