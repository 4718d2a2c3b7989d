"""Fixtures of the install tests: the image builder, helm, and the chart's rendered manifests.

Tests here install cloudloop the way a user does (image, Helm chart, docker-compose, Temporal
set-up). The ones that build the image or start processes are marked ``stack`` too, so the fast
suite (``-m "not stack"``) leaves them out.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "image: builds the container image (minutes)")
