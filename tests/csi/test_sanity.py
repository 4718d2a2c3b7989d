"""csi-sanity (the real one, built from kubernetes-csi/csi-test) against the driver on each cloud.

The controller and node services run on their own sockets, the worker on the test's task queue,
the cloud is the stack's (moto for AWS); the node plugin uses the directory mounter, since the
cloud's disks never reach this machine, so staging and publishing run real bind mounts.
Volume and snapshot counts are per cluster, so each run gets a cluster name of its own.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.kube.api import Kube
from cloudloop.settings import Settings
from tests.csi.support import (
    controller_service,
    csi_settings,
    node_service,
    run_sanity,
    socket_folder,
)
from tests.volume.support import ec2_client, run_instance
from workers.main import build_worker

pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(os.geteuid() != 0, reason="the node plugin's bind mounts need root"),
]


async def test_csi_sanity_aws(
    client: Client, settings: Settings, kube: Kube, tmp_path: Any
) -> None:
    settings = csi_settings(
        settings.model_copy(update={"cluster_name": f"sanity-{uuid.uuid4().hex[:8]}"}),
        mounter="directory",
        directory_root=tmp_path / "volumes",
        storage_classes=False,
    )
    driver = AwsDriver(AWS.section(settings))
    node_id = await asyncio.to_thread(run_instance, ec2_client(settings), "us-east-1a")
    async with (
        socket_folder() as sockets,
        build_worker(client, settings, driver=driver, kube=kube),
        controller_service(client, settings, driver, sockets.controller),
        node_service(settings, driver, sockets.node, node_id=node_id, zone="us-east-1a"),
    ):
        result = await run_sanity(sockets)
    print(result.summary)
    assert result.returncode == 0, result.output[-20000:]
    counts = result.counts()
    assert counts["failed"] == 0 and counts["passed"] >= 50, result.summary
