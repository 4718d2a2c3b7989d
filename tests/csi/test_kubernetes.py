"""The CSI driver as Kubernetes calls it, on every cloud: the real external-provisioner,
external-attacher and external-resizer, the real scheduler, controller-manager and kwok,
``cloudloop csi-controller`` as a process, and the volume workflows on the test's worker.

The controller also keeps the cloud's objects: the ``CSIDriver`` and the StorageClasses from the
discovery document (as the discoverer writes it from the same cloud): ``WaitForFirstConsumer``,
expandable, zonal clouds limited to the zones the class serves under the cloud's topology key,
the cloud's default marked. The PVC uses the
generated default class; its Pod is placed by the scheduler on a kwok Node of the cloud.

On AWS a PVC of 100000Gi (beyond every EBS type) stays Pending: the provisioner's
``ProvisioningFailed`` Event carries the controller's ``OutOfRange`` naming the gp3 limit, and no
``CreateVolume`` reaches the AWS front.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from cloudloop.csi.objects import CSI_DRIVERS, DEFAULT_ANNOTATION, default_class
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import EVENTS, PERSISTENT_VOLUME_CLAIMS, PODS, STORAGE_CLASSES
from devstack.aws_front import stats as front_stats
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
from tests.csi.clouds import CsiCloud
from tests.csi.scenario import detach_resize_delete, provision_and_attach
from tests.csi.support import deployment_settings, discovery_document, volume_worker
from tests.helpers import eventually
from tests.support.parts import has

pytestmark = pytest.mark.stack


async def huge_claim_is_refused(
    kube: Kube, stack: LocalStack, namespace: str, storage_class: str, node: str
) -> None:
    creates = int(front_stats(stack.aws_endpoint)["requests"].get("ec2:CreateVolume", 0))
    kube.create(PERSISTENT_VOLUME_CLAIMS, pvc("huge", storage_class, "100000Gi"), namespace)
    kube.create(PODS, pod("huge-app", "huge", node), namespace)

    def refusal() -> str | None:
        for event in kube.list(EVENTS, namespace)["items"]:
            involved = event.get("involvedObject") or {}
            if (involved.get("kind"), involved.get("name")) == (
                "PersistentVolumeClaim",
                "huge",
            ) and event.get("reason") == "ProvisioningFailed":
                return str(event.get("message", ""))
        return None

    message = await eventually(refusal, timeout=120, what="ProvisioningFailed on PVC huge")
    assert "OutOfRange" in message and "1-65536 GiB" in message, message
    claim = kube.get(PERSISTENT_VOLUME_CLAIMS, "huge", namespace) or {}
    assert (claim.get("status") or {}).get("phase") == "Pending", claim.get("status")
    assert int(front_stats(stack.aws_endpoint)["requests"].get("ec2:CreateVolume", 0)) == creates
    delete_pod(kube, namespace, "huge-app")
    kube.delete(PERSISTENT_VOLUME_CLAIMS, "huge", namespace)


async def test_pvc_pod_resize_delete(
    cloud: CsiCloud,
    client: Client,
    kube: Kube,
    stack: LocalStack,
    namespace: str,
    tmp_path: Path,
) -> None:
    settings = deployment_settings(cloud.settings, namespace)
    driver_name = settings.csi.driver_name
    instance_id, zone, provider_id = await cloud.new_node()
    node = f"csi-{uuid.uuid4().hex[:8]}"
    document = await asyncio.to_thread(discovery_document, cloud)
    write_discovery(kube, namespace, document)
    specs = has(cloud.driver.volumes).storage_classes(document)
    storage_class = default_class(specs, "")
    spec = next(s for s in specs if s.name == storage_class)
    topology_key = has(cloud.driver.volumes).volume_topology_key
    deployment = CsiDeployment(settings, stack.kubeconfig, tmp_path / "logs")
    with objects_removed(kube, driver_name, node):
        kwok_node(
            kube,
            node,
            provider_id=provider_id,
            zone=zone,
            driver=driver_name,
            node_id=instance_id,
            topology_key=topology_key,
        )
        async with volume_worker(client, settings, cloud.driver, kube):
            await asyncio.to_thread(deployment.start)
            try:
                generated = await eventually(
                    lambda: kube.get(STORAGE_CLASSES, storage_class),
                    what=f"StorageClass {storage_class}",
                )
                assert generated["provisioner"] == driver_name
                assert generated["volumeBindingMode"] == "WaitForFirstConsumer"
                assert generated["allowVolumeExpansion"] is True
                assert generated["metadata"]["annotations"][DEFAULT_ANNOTATION] == "true"
                if has(cloud.driver.volumes).zonal_volumes:
                    topology = generated["allowedTopologies"][0]["matchLabelExpressions"][0]
                    zones = spec.zones or document["zones"]
                    assert topology == {"key": topology_key, "values": sorted(zones)}
                else:
                    assert "allowedTopologies" not in generated
                csi_driver = kube.get(CSI_DRIVERS, driver_name)
                assert csi_driver is not None and csi_driver["spec"]["attachRequired"] is True

                volume_id, _ = await provision_and_attach(
                    kube,
                    cloud.driver,
                    namespace=namespace,
                    storage_class=storage_class,
                    node=node,
                    instance_id=instance_id,
                    zone=zone,
                )
                volume = await asyncio.to_thread(has(cloud.driver.volumes).get_volume, volume_id)
                assert volume.tags.get("kubernetes.io/created-for/pvc/name") in ("data", None)
                if cloud.name == "aws":
                    await huge_claim_is_refused(kube, stack, namespace, storage_class, node)
                await detach_resize_delete(
                    kube, cloud.driver, namespace=namespace, volume_id=volume_id
                )
            finally:
                await asyncio.to_thread(deployment.stop)
