"""Fixtures of the volume tests: the CSI-facing client API (VolumeOperations) on the test's task
queue."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from cloudloop.cloud.registry import Settings
from cloudloop.csi.operations import VolumeOperations


@pytest.fixture
def ops(client: Client, settings: Settings) -> VolumeOperations:
    return VolumeOperations.from_settings(client, settings)
