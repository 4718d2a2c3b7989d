"""Fixtures of the node tests: settings that run NodeSync over this test's Nodes only, quickly."""

from __future__ import annotations

import pytest

from cloudloop.cloud.registry import Settings
from tests.node.support import fast_sync


@pytest.fixture
def ccm_settings(settings: Settings, scope: str) -> Settings:
    return fast_sync(settings, scope, concurrent_node_syncs=4)
