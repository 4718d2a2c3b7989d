"""Fixtures of the platform tests: the metrics server, on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cloudloop import metrics


@pytest.fixture
def server() -> Iterator[metrics.MetricsServer]:
    """A running metrics server; metrics authorization is off again afterwards."""
    served = metrics.MetricsServer("127.0.0.1", 0).start()
    try:
        yield served
    finally:
        metrics.require_metrics_authorization(None)
        served.stop()
