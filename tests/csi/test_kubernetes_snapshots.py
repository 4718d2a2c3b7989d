"""VolumeSnapshots through Kubernetes on AWS (moto behind the AWS front): the real snapshot CRDs
and snapshot-controller, the real csi-snapshotter and external-provisioner beside
``cloudloop csi-controller``, the snapshot workflows on the test's worker.

A PVC bound to an EBS volume → a VolumeSnapshot (no class named: the driver's default
VolumeSnapshotClass, as the chart ships it, with a ``tagSpecification_1`` parameter) →
readyToUse, its VolumeSnapshotContent's handle an EBS snapshot of that volume, tagged for the
VolumeSnapshot and with the class's tag → a new PVC with the VolumeSnapshot as
``dataSource`` → Bound to a new EBS volume made from that snapshot → the VolumeSnapshot deleted →
its content and the EBS snapshot gone (deletionPolicy Delete); the restored volume stays. On the
way, CreateSnapshot of a volume that is gone is ``NOT_FOUND`` naming it and leaves no snapshot.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from temporalio.client import Client

from cloudloop.cloud import errors
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.registry import Settings
from cloudloop.csi.objects import default_class
from cloudloop.csi.v1 import csi_pb2
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import (
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    STORAGE_CLASSES,
)
from devstack import snapshots
from devstack.backends.aws import aws_client
from devstack.csi_deployment import (
    CsiDeployment,
    delete_pod,
    kwok_node,
    objects_removed,
    pod,
    pvc,
    write_discovery,
)
from devstack.local import LocalStack
from devstack.process import ManagedProcess
from tests.csi.clouds import aws_cloud
from tests.csi.scenario import cloud_volume, provision_and_attach
from tests.csi.support import (
    channel,
    deployment_settings,
    discovery_document,
    stubs,
    volume_worker,
)
from tests.helpers import eventually
from tests.support.parts import has

pytestmark = pytest.mark.stack

TIMEOUT = 180
GONE_VOLUME = "vol-0123456789abcdef0"


@pytest.fixture(scope="module")
def snapshot_controller(stack: LocalStack, kube: Kube) -> Iterator[ManagedProcess]:
    """The snapshot CRDs installed in the shared stack and the snapshot-controller running."""
    snapshots.install_crds(kube)
    process = snapshots.controller_process(stack.kubeconfig, stack.state_dir / "logs")
    process.start()
    try:
        process.wait_ready(120)
        yield process
    finally:
        process.stop()


def cloud_snapshot(driver: CloudDriver, snapshot_id: str) -> Any:
    try:
        return has(driver.snapshots).get_snapshot(snapshot_id)
    except errors.NotFound:
        return None


def bound_volume(kube: Kube, namespace: str, claim: str) -> str | None:
    found = kube.get(PERSISTENT_VOLUME_CLAIMS, claim, namespace) or {}
    if (found.get("status") or {}).get("phase") != "Bound":
        return None
    pv = kube.get(PERSISTENT_VOLUMES, found["spec"]["volumeName"]) or {}
    return str(pv["spec"]["csi"]["volumeHandle"])


async def test_snapshot_restore_delete_through_kubernetes(
    request: pytest.FixtureRequest,
    settings: Settings,
    client: Client,
    kube: Kube,
    stack: LocalStack,
    namespace: str,
    snapshot_controller: ManagedProcess,
    tmp_path: Path,
) -> None:
    cloud = await aws_cloud(request, settings)
    settings = deployment_settings(cloud.settings, namespace)
    driver_name = settings.csi.driver_name
    ec2 = aws_client("ec2", AWS.section(settings).endpoint_url)
    instance_id, zone, provider_id = await cloud.new_node()
    node = f"snap-{uuid.uuid4().hex[:8]}"
    document = await asyncio.to_thread(discovery_document, cloud)
    write_discovery(kube, namespace, document)
    storage_class = default_class(has(cloud.driver.volumes).storage_classes(document), "")
    class_name = f"snap-{uuid.uuid4().hex[:6]}"
    deployment = CsiDeployment(settings, stack.kubeconfig, tmp_path / "logs", snapshots=True)
    with objects_removed(kube, driver_name, node):
        kube.create(
            snapshots.VOLUME_SNAPSHOT_CLASSES,
            snapshots.snapshot_class(
                class_name, driver_name, parameters={"tagSpecification_1": "team=storage"}
            ),
        )
        kwok_node(
            kube,
            node,
            provider_id=provider_id,
            zone=zone,
            driver=driver_name,
            node_id=instance_id,
            topology_key=has(cloud.driver.volumes).volume_topology_key,
        )
        async with volume_worker(client, settings, cloud.driver, kube):
            await asyncio.to_thread(deployment.start)
            try:
                await eventually(
                    lambda: kube.get(STORAGE_CLASSES, storage_class),
                    timeout=TIMEOUT,
                    what=f"StorageClass {storage_class}",
                )
                volume_id, _ = await provision_and_attach(
                    kube,
                    cloud.driver,
                    namespace=namespace,
                    storage_class=storage_class,
                    node=node,
                    instance_id=instance_id,
                    zone=zone,
                    timeout=TIMEOUT,
                )

                # No class named: the snapshot-controller picks the driver's default class.
                kube.create(
                    snapshots.VOLUME_SNAPSHOTS,
                    {
                        "metadata": {"name": "backup"},
                        "spec": {"source": {"persistentVolumeClaimName": "data"}},
                    },
                    namespace,
                )

                def ready() -> dict[str, Any] | None:
                    found = kube.get(snapshots.VOLUME_SNAPSHOTS, "backup", namespace) or {}
                    status = found.get("status") or {}
                    return found if status.get("readyToUse") is True else None

                snapshot = await eventually(ready, timeout=TIMEOUT, what="VolumeSnapshot ready")
                assert snapshot["spec"]["volumeSnapshotClassName"] == class_name
                content_name = snapshot["status"]["boundVolumeSnapshotContentName"]
                content = kube.get(snapshots.VOLUME_SNAPSHOT_CONTENTS, content_name) or {}
                assert content["spec"]["driver"] == driver_name
                assert content["spec"]["deletionPolicy"] == "Delete"
                snapshot_id = content["status"]["snapshotHandle"]
                ebs = await asyncio.to_thread(cloud_snapshot, cloud.driver, snapshot_id)
                assert ebs is not None and ebs.source_volume_id == volume_id, ebs
                raw = ec2.describe_snapshots(SnapshotIds=[snapshot_id])["Snapshots"][0]
                tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
                assert tags["kubernetes.io/created-for/volumesnapshot/name"] == "backup"
                assert tags["kubernetes.io/created-for/volumesnapshot/namespace"] == namespace
                assert tags["team"] == "storage"
                assert tags["CSIVolumeSnapshotName"] == f"snapshot-{snapshot['metadata']['uid']}"

                # A snapshot of a volume that is gone: NOT_FOUND naming it, no EBS snapshot made.
                async with channel(f"unix://{deployment.socket}") as opened:
                    _, controller, _ = stubs(opened)
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await controller.CreateSnapshot(
                            csi_pb2.CreateSnapshotRequest(
                                name=f"snapshot-{uuid.uuid4()}", source_volume_id=GONE_VOLUME
                            ),
                            timeout=60,
                        )
                    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
                    assert GONE_VOLUME in str(refused.value.details())
                    listed = await controller.ListSnapshots(csi_pb2.ListSnapshotsRequest())
                    assert [e.snapshot.snapshot_id for e in listed.entries] == [snapshot_id]

                restored = pvc("restored", storage_class, "1Gi")
                restored["spec"]["dataSource"] = {
                    "apiGroup": snapshots.GROUP,
                    "kind": "VolumeSnapshot",
                    "name": "backup",
                }
                kube.create(PERSISTENT_VOLUME_CLAIMS, restored, namespace)
                kube.create(PODS, pod("restored-app", "restored", node), namespace)
                new_volume = await eventually(
                    lambda: bound_volume(kube, namespace, "restored"),
                    timeout=TIMEOUT,
                    what="restored PVC bound",
                )
                assert new_volume != volume_id
                described = ec2.describe_volumes(VolumeIds=[new_volume])["Volumes"][0]
                assert described["SnapshotId"] == snapshot_id
                assert described["AvailabilityZone"] == zone

                kube.delete(snapshots.VOLUME_SNAPSHOTS, "backup", namespace)

                def snapshot_gone() -> bool:
                    return (
                        kube.get(snapshots.VOLUME_SNAPSHOTS, "backup", namespace) is None
                        and kube.get(snapshots.VOLUME_SNAPSHOT_CONTENTS, content_name) is None
                        and cloud_snapshot(cloud.driver, snapshot_id) is None
                    )

                await eventually(snapshot_gone, timeout=TIMEOUT, what="EBS snapshot deleted")
                assert await asyncio.to_thread(cloud_volume, cloud.driver, new_volume) is not None

                for name in ("data", "restored"):
                    await asyncio.to_thread(delete_pod, kube, namespace, f"{name}-app")
                    kube.delete(PERSISTENT_VOLUME_CLAIMS, name, namespace)

                def volumes_gone() -> bool:
                    return all(
                        cloud_volume(cloud.driver, v) is None for v in (volume_id, new_volume)
                    )

                await eventually(volumes_gone, timeout=TIMEOUT, what="both EBS volumes deleted")
            finally:
                await asyncio.to_thread(deployment.stop)
                kube.delete(snapshots.VOLUME_SNAPSHOT_CLASSES, class_name)
