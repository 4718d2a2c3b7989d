"""Fixtures of the install tests: the image builder, helm, and the chart's rendered manifests.

Tests here install cloudloop the way a user does (image, Helm chart, docker-compose, Temporal
set-up). The ones that build the image or start processes are marked ``stack`` too, so the fast
suite (``-m "not stack"``) leaves them out.
"""

from __future__ import annotations

import pytest

from tests.install.chart import Helm, provider_values

#: Every provider the chart has a values file for (``deploy/helm/values/<provider>.yaml``).
PROVIDER_NAMES = sorted(provider_values())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "image: builds the container image (minutes)")


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The Helm binary the set-up built, with a home of its own for this module."""
    return Helm(tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="module", params=PROVIDER_NAMES, ids=PROVIDER_NAMES)
def provider(request: pytest.FixtureRequest) -> str:
    """Each provider in turn (a module renders the chart once per provider)."""
    return str(request.param)
