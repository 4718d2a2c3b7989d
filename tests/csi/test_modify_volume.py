"""VolumeAttributesClasses on AWS through the real external-provisioner and external-resizer.

A PVC naming a class is created with its parameters (the class's IOPS and throughput on the
EBS volume); changing the PVC's class changes the volume in place (``ControllerModifyVolume`` →
EBS ``ModifyVolume``, tags through ``CreateTags``) and the PVC reports the new class. A change
inside EBS's cooldown (the AWS front refuses a second ``ModifyVolume`` as AWS does, here after
4 s instead of six hours) is waited out on a workflow timer and then made. A class the volume
cannot take (IOPS beyond gp3's) leaves the PVC ``Infeasible`` and the volume as it was.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from cloudloop.cloud.models import Volume
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import (
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    STORAGE_CLASSES,
    Resource,
)
from cloudloop.messages.scope import scoped_id
from cloudloop.messages.volume import modify_workflow_id
from devstack.aws_front import set_ebs_cooldown
from devstack.aws_front import stats as front_stats
from devstack.csi_deployment import (
    CsiDeployment,
    delete_pod,
    kwok_node,
    objects_removed,
    pod,
    write_discovery,
)
from devstack.local import LocalStack
from tests.csi.clouds import CsiCloud, aws_cloud
from tests.csi.scenario import cloud_volume
from tests.csi.support import deployment_settings, discovery_document, volume_worker
from tests.helpers import eventually
from tests.support.parts import has

pytestmark = pytest.mark.stack

VOLUME_ATTRIBUTES_CLASSES: Resource[dict[str, Any]] = Resource(
    "storage.k8s.io", "v1", "volumeattributesclasses", "VolumeAttributesClass", namespaced=False
)
COOLDOWN_S = 4.0


@pytest.fixture
async def cloud(request: pytest.FixtureRequest, settings: Settings) -> CsiCloud:
    return await aws_cloud(request, settings)


def attributes_class(name: str, driver: str, parameters: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "driverName": driver, "parameters": parameters}


def claim(name: str, storage_class: str, attributes: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "volumeAttributesClassName": attributes,
            "resources": {"requests": {"storage": "10Gi"}},
        },
    }


def cooldown_refusals(stack: LocalStack) -> int:
    refused = front_stats(stack.aws_endpoint)["refused"]
    return int(refused.get("ec2:ModifyVolume:VolumeModificationRateExceeded", 0))


def claim_status(kube: Kube, namespace: str) -> dict[str, Any]:
    return dict((kube.get(PERSISTENT_VOLUME_CLAIMS, "data", namespace) or {}).get("status") or {})


async def volume_with(
    kube: Kube, cloud: CsiCloud, namespace: str, volume_id: str, klass: str, **want: Any
) -> Volume:
    """The volume once it has ``want`` and the PVC reports ``klass`` as its current class."""

    def done() -> Volume | None:
        volume = cloud_volume(cloud.driver, volume_id)
        status = claim_status(kube, namespace)
        if volume is None or status.get("currentVolumeAttributesClassName") != klass:
            return None
        have = {key: getattr(volume, key) for key in want if key != "tags"}
        tags_ok = all(volume.tags.get(k) == v for k, v in want.get("tags", {}).items())
        return (
            volume if tags_ok and have == {k: v for k, v in want.items() if k != "tags"} else None
        )

    return await eventually(done, timeout=120, what=f"{volume_id} as class {klass}")


async def test_attributes_classes_create_and_change_the_volume(
    cloud: CsiCloud,
    client: Client,
    kube: Kube,
    stack: LocalStack,
    namespace: str,
    tmp_path: Path,
) -> None:
    settings = deployment_settings(cloud.settings, namespace)
    driver_name = settings.csi.driver_name
    suffix = uuid.uuid4().hex[:6]
    fast, faster, impossible = (f"{n}-{suffix}" for n in ("fast", "faster", "impossible"))
    classes = {
        fast: {"iops": "4000", "throughput": "200"},
        faster: {"iops": "5000", "throughput": "300", "tagSpecification_1": "tier=gold"},
        impossible: {"iops": "99999"},
    }
    instance_id, zone, provider_id = await cloud.new_node()
    node = f"csi-{uuid.uuid4().hex[:8]}"
    write_discovery(kube, namespace, await asyncio.to_thread(discovery_document, cloud))
    deployment = CsiDeployment(settings, stack.kubeconfig, tmp_path / "logs")
    set_ebs_cooldown(stack.aws_endpoint, COOLDOWN_S)
    with objects_removed(kube, driver_name, node):
        for name, parameters in classes.items():
            kube.create(VOLUME_ATTRIBUTES_CLASSES, attributes_class(name, driver_name, parameters))
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
                await eventually(lambda: kube.get(STORAGE_CLASSES, "gp3"), what="gp3 class")
                kube.create(PERSISTENT_VOLUME_CLAIMS, claim("data", "gp3", fast), namespace)
                kube.create(PODS, pod("data-app", "data", node), namespace)

                def bound() -> str | None:
                    found = kube.get(PERSISTENT_VOLUME_CLAIMS, "data", namespace) or {}
                    return str((found.get("spec") or {}).get("volumeName") or "") or None

                pv_name = await eventually(bound, timeout=120, what="PVC data bound")
                pv = kube.get(PERSISTENT_VOLUMES, pv_name)
                volume_id = str((pv or {})["spec"]["csi"]["volumeHandle"])
                # Created with the class's parameters, not changed afterwards.
                await volume_with(
                    kube, cloud, namespace, volume_id, fast, iops=4000, throughput=200
                )
                volumes = has(cloud.driver.volumes)
                assert await asyncio.to_thread(volumes.get_volume_modification, volume_id) is None

                patch = {"spec": {"volumeAttributesClassName": faster}}
                kube.patch(PERSISTENT_VOLUME_CLAIMS, "data", patch, namespace)
                await volume_with(
                    kube,
                    cloud,
                    namespace,
                    volume_id,
                    faster,
                    iops=5000,
                    throughput=300,
                    tags={"tier": "gold"},
                )

                # Back inside the cooldown: refused by EBS, waited out on a timer, then made.
                refusals = cooldown_refusals(stack)
                patch = {"spec": {"volumeAttributesClassName": fast}}
                kube.patch(PERSISTENT_VOLUME_CLAIMS, "data", patch, namespace)
                await volume_with(
                    kube, cloud, namespace, volume_id, fast, iops=4000, throughput=200
                )
                assert cooldown_refusals(stack) > refusals
                handle = client.get_workflow_handle(
                    scoped_id(settings.temporal.id_scope, modify_workflow_id(volume_id))
                )
                timers = [
                    event
                    async for event in handle.fetch_history_events()
                    if event.HasField("timer_started_event_attributes")
                ]
                assert timers, "the cooldown was not waited on a timer"

                # A class the volume cannot take: Infeasible, the volume left as it was.
                patch = {"spec": {"volumeAttributesClassName": impossible}}
                kube.patch(PERSISTENT_VOLUME_CLAIMS, "data", patch, namespace)

                def infeasible() -> dict[str, Any] | None:
                    status = claim_status(kube, namespace)
                    modify = status.get("modifyVolumeStatus") or {}
                    return status if modify.get("status") == "Infeasible" else None

                await eventually(infeasible, timeout=120, what="PVC data Infeasible")
                volume = await asyncio.to_thread(cloud_volume, cloud.driver, volume_id)
                assert volume is not None and (volume.iops, volume.throughput) == (4000, 200)

                delete_pod(kube, namespace, "data-app")
                kube.delete(PERSISTENT_VOLUME_CLAIMS, "data", namespace)
                await eventually(
                    lambda: cloud_volume(cloud.driver, volume_id) is None,
                    timeout=120,
                    what=f"{volume_id} deleted",
                )
            finally:
                set_ebs_cooldown(stack.aws_endpoint, 6 * 3600.0)
                await asyncio.to_thread(deployment.stop)
                for name in classes:
                    kube.delete(VOLUME_ATTRIBUTES_CLASSES, name)
