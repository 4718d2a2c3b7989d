"""The CSI driver as Kubernetes calls it: the real external-provisioner, external-attacher and
external-resizer, the real scheduler, controller-manager and kwok, ``cloudloop csi-controller``
as a process, and the volume workflows on the test's worker.

The controller also keeps the cloud's objects: the ``CSIDriver`` and the StorageClasses from the
discovery document (``WaitForFirstConsumer``, zones as ``allowedTopologies``, gp3 default); the
PVC uses the generated default-less name, so a user's cluster default is never needed.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.csi.objects import CSI_DRIVERS, DEFAULT_ANNOTATION, STORAGE_CLASSES
from cloudloop.csi.spec import ZONE_KEY
from cloudloop.kube.api import Kube
from cloudloop.settings import LeaderElectionSettings, Settings
from devstack.csi_deployment import CsiDeployment, kwok_node, objects_removed, write_discovery
from devstack.local import LocalStack
from tests.csi.scenario import detach_resize_delete, provision_and_attach
from tests.csi.support import csi_settings
from tests.helpers import eventually
from tests.volume.support import ec2_client, run_instance
from workers.main import build_worker

pytestmark = pytest.mark.stack


def deployment_settings(settings: Settings, namespace: str) -> Settings:
    driver = f"e2e-{uuid.uuid4().hex[:6]}.csi.cloudloop.io"
    settings = csi_settings(settings, driver_name=driver, storage_classes=True)
    return settings.model_copy(
        update={
            "discovery": settings.discovery.model_copy(update={"namespace": namespace}),
            "leader_election": LeaderElectionSettings(
                namespace=namespace, name="csi-e2e", identity="e2e"
            ),
        }
    )


async def test_pvc_pod_resize_delete_on_aws(
    client: Client,
    settings: Settings,
    kube: Kube,
    stack: LocalStack,
    namespace: str,
    tmp_path: Path,
) -> None:
    settings = deployment_settings(settings, namespace)
    driver_name = settings.csi.driver_name
    driver = AwsDriver(AWS.section(settings))
    instance_id = await asyncio.to_thread(run_instance, ec2_client(settings), "us-east-1b")
    node = f"csi-{uuid.uuid4().hex[:8]}"
    write_discovery(kube, namespace, {"zones": ["us-east-1a", "us-east-1b"]})
    deployment = CsiDeployment(settings, stack.kubeconfig, tmp_path / "logs")
    with objects_removed(kube, driver_name, node):
        kwok_node(
            kube,
            node,
            provider_id=f"aws:///us-east-1b/{instance_id}",
            zone="us-east-1b",
            driver=driver_name,
            node_id=instance_id,
        )
        async with build_worker(client, settings, driver=driver, kube=kube):
            await asyncio.to_thread(deployment.start)
            try:

                def generated() -> dict[str, object] | None:
                    return kube.get(STORAGE_CLASSES, "gp3")

                gp3 = await eventually(generated, what="StorageClass gp3")
                assert gp3["provisioner"] == driver_name
                assert gp3["volumeBindingMode"] == "WaitForFirstConsumer"
                assert gp3["allowVolumeExpansion"] is True
                assert gp3["metadata"]["annotations"][DEFAULT_ANNOTATION] == "true"  # type: ignore[index]
                assert gp3["allowedTopologies"] == [
                    {
                        "matchLabelExpressions": [
                            {"key": ZONE_KEY, "values": ["us-east-1a", "us-east-1b"]}
                        ]
                    }
                ]
                assert kube.get(STORAGE_CLASSES, "io2") is not None
                csi_driver = kube.get(CSI_DRIVERS, driver_name)
                assert csi_driver is not None and csi_driver["spec"]["attachRequired"] is True

                volume_id, _ = await provision_and_attach(
                    kube,
                    driver,
                    namespace=namespace,
                    storage_class="gp3",
                    node=node,
                    instance_id=instance_id,
                    zone="us-east-1b",
                )
                raw = await asyncio.to_thread(
                    ec2_client(settings).describe_volumes, VolumeIds=[volume_id]
                )
                tags = {t["Key"]: t["Value"] for t in raw["Volumes"][0]["Tags"]}
                assert tags["kubernetes.io/created-for/pvc/name"] == "data"
                assert tags["kubernetes.io/created-for/pvc/namespace"] == namespace
                assert raw["Volumes"][0]["VolumeType"] == "gp3"
                await detach_resize_delete(kube, driver, namespace=namespace, volume_id=volume_id)
            finally:
                await asyncio.to_thread(deployment.stop)
