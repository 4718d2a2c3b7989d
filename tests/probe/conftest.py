"""Fixtures of the probe tests: the CloudProbe starter for this test's namespace and task queue
(not running: a test runs it beside its worker)."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from starters.probe import CloudProbeStarter


@pytest.fixture
def starter(kube: Kube, client: Client, settings: Settings, namespace: str) -> CloudProbeStarter:
    return CloudProbeStarter(
        kube,
        client,
        task_queue=settings.temporal.task_queue,
        cluster=settings.cluster_name,
        namespace=namespace,
    )
