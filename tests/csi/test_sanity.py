"""csi-sanity (the real one, built from kubernetes-csi/csi-test) against the driver on each cloud.

The controller and node services run on their own sockets, the worker on the test's task queue,
the cloud is the stack's (moto, the DVP parent cluster, the oVirt emulator, the OpenStack
emulator, vcsim); the node plugin uses the directory mounter, since the cloud's disks never
reach this machine, so staging and publishing run real bind mounts. The node is a real instance
of the cloud, so ControllerPublish attaches to it. Volume and snapshot counts are per cluster:
each run has a cluster name of its own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from temporalio.client import Client

from cloudloop.cloud.driver import Capability
from cloudloop.kube.api import Kube
from tests.csi.clouds import CsiCloud
from tests.csi.support import (
    controller_service,
    csi_settings,
    node_service,
    run_sanity,
    socket_folder,
    volume_worker,
)

pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(os.geteuid() != 0, reason="the node plugin's bind mounts need root"),
]


async def test_csi_sanity(cloud: CsiCloud, client: Client, kube: Kube, tmp_path: Path) -> None:
    settings = csi_settings(
        cloud.settings,
        mounter="directory",
        directory_root=tmp_path / "volumes",
        storage_classes=False,
    )
    node_id, zone, _ = await cloud.new_node()
    async with (
        socket_folder() as sockets,
        volume_worker(client, settings, cloud.driver, kube),
        controller_service(client, settings, cloud.driver, sockets.controller),
        node_service(settings, cloud.driver, sockets.node, node_id=node_id, zone=zone),
    ):
        result = await run_sanity(sockets, mutable_parameters=cloud.mutable_parameters)
    print(f"csi-sanity on {cloud.name}: {result.summary}")
    assert result.returncode == 0, result.output[-20000:]
    counts = result.counts()
    assert counts["failed"] == 0 and counts["passed"] >= 50, result.summary
    # Where the driver has snapshots, csi-sanity's snapshot specs ran and passed (with the
    # snapshot class parameters), all but those of what it does not offer: GetSnapshot and
    # group snapshots (optional), snapshot topology (EBS snapshots are regional).
    snapshot_specs = {n: s for n, s in result.specs.items() if "snapshot" in n.lower()}
    print("\n".join(f"  {state}: {name}" for name, state in sorted(snapshot_specs.items())))
    if cloud.driver.supports(Capability.SNAPSHOTS):
        not_offered = ("GetSnapshot", "GroupController", "snapshot with accessibility")
        not_passed = sorted(
            n
            for n, s in snapshot_specs.items()
            if s != "passed" and not any(o in n for o in not_offered)
        )
        assert not_passed == [] and len(result.passed("Snapshot")) >= 15, not_passed
        assert "create volume from an existing source snapshot" in " ".join(
            result.passed("source snapshot")
        )
    # Where the driver modifies volumes, the ModifyVolume specs and the create-with-class specs
    # ran and passed; elsewhere they were skipped (no MODIFY_VOLUME).
    modify_specs = {
        n: s
        for n, s in result.specs.items()
        if "ModifyVolume" in n or "volume attribute class" in n
    }
    print("\n".join(f"  {state}: {name}" for name, state in sorted(modify_specs.items())))
    wanted = "passed" if cloud.driver.implements("modify_volume") else "skipped"
    assert len(modify_specs) >= 8 and set(modify_specs.values()) == {wanted}, modify_specs
