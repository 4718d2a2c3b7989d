"""The CSI driver's figures: CreateVolume through gRPC against the same cloud calls made directly,
and PVCs bound and attached through the real sidecars.

``csi_create_median_s``: median over N volumes of a CreateVolume RPC to the controller (in this
process) → ``VolumeOperations.create`` → the ``CreateVolume`` workflow and its activity
(tag lookup, zones, EC2 CreateVolume, duplicate check, read until available) → the response.
``csi_create_direct_median_s``: the activity's own driver calls, made directly in a thread.
``csi_create_overhead_ratio``: the two medians divided (goal ≤ 1.3); samples alternate.
``csi_create_step_<step>_median_s``: where the workflow path's time goes (:mod:`bench.breakdown`).
``pvc_bound_median_s``: PVC (``WaitForFirstConsumer``) and its Pod created → PVC ``Bound``,
through the scheduler, external-provisioner, ``cloudloop csi-controller`` and the workflow.
``pvc_attach_median_s``: the same start → the VolumeAttachment ``attached`` (attach/detach
controller, external-attacher, the attach workflow).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from bench.breakdown import Sample, breakdown, cloud_seconds
from bench.context import BenchContext
from bench.overhead import overhead_ms
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.models import VolumeSpec
from cloudloop.cloud.registry import Settings
from cloudloop.csi.operations import VolumeOperations
from cloudloop.csi.server import controller_server
from cloudloop.csi.spec import ZONE_KEY
from cloudloop.csi.v1 import csi_pb2, csi_pb2_grpc
from cloudloop.kube.resources import PERSISTENT_VOLUME_CLAIMS, PODS, VOLUME_ATTACHMENTS
from cloudloop.messages.scope import scoped_id
from cloudloop.messages.volume import create_workflow_id
from cloudloop.settings import CsiSettings, Domain
from devstack.backends.aws import launch_instance
from devstack.csi_deployment import (
    CsiDeployment,
    kwok_node,
    objects_removed,
    pod,
    pvc,
    write_discovery,
)
from workers.main import build_worker

SAMPLES = 20
PVC_SAMPLES = 5
ZONE = "us-east-1a"
GIB = 1 << 30
NAMESPACES_PATH = "/api/v1/namespaces"


def create_directly(driver: AwsDriver, name: str, cluster: str) -> str:
    """What the create activity does, without Temporal."""
    driver.volumes.find_volume(name, cluster)
    zones = sorted(z.name for z in driver.discovery.zones() if z.state == "available")
    created = driver.volumes.create_volume(
        VolumeSpec(name=name, size_gib=1, zone=zones[0], cluster=cluster, client_token=name)
    )
    driver.volumes.find_volume(name, cluster)
    while driver.volumes.get_volume(created.id).state not in ("available", "in-use"):
        time.sleep(0.1)
    return created.id


def _request(name: str) -> csi_pb2.CreateVolumeRequest:
    return csi_pb2.CreateVolumeRequest(
        name=name,
        capacity_range=csi_pb2.CapacityRange(required_bytes=GIB),
        volume_capabilities=[
            csi_pb2.VolumeCapability(
                mount=csi_pb2.VolumeCapability.MountVolume(fs_type="ext4"),
                access_mode=csi_pb2.VolumeCapability.AccessMode(
                    mode=csi_pb2.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
                ),
            )
        ],
    )


async def create_figures(ctx: BenchContext, settings: Settings) -> dict[str, float]:
    driver = AwsDriver(AWS.section(settings))
    server = controller_server(
        VolumeOperations.from_settings(ctx.client, settings), settings, driver
    )
    socket = Path(f"/tmp/cloudloop-bench-csi-{uuid.uuid4().hex[:8]}.sock")
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    through_s: list[float] = []
    direct_s: list[float] = []
    samples: list[Sample] = []
    try:
        async with (
            build_worker(
                ctx.client,
                settings,
                driver=driver,
                kube=ctx.kube,
                task_queue=settings.temporal.queue_for(Domain.VOLUME),
            ),
            grpc.aio.insecure_channel(f"unix://{socket}") as channel,
        ):
            controller = csi_pb2_grpc.ControllerStub(channel)

            async def through() -> float:
                name = f"bench-{uuid.uuid4()}"
                requested, cloud_before = time.time(), cloud_seconds()
                started = time.monotonic()
                await controller.CreateVolume(_request(name))
                elapsed = time.monotonic() - started
                samples.append(
                    Sample(
                        workflow_id=scoped_id(settings.temporal.id_scope, create_workflow_id(name)),
                        requested=requested,
                        seen=requested + elapsed,
                        cloud_s=cloud_seconds() - cloud_before,
                    )
                )
                return elapsed

            async def direct() -> float:
                started = time.monotonic()
                name = f"bench-{uuid.uuid4()}"
                await asyncio.to_thread(create_directly, driver, name, settings.cluster_name)
                return time.monotonic() - started

            await through()  # warm-up: worker caches, boto3 clients, the channel
            await direct()
            for _ in range(SAMPLES):
                through_s.append(await through())
                direct_s.append(await direct())
    finally:
        await server.stop(1)
        socket.unlink(missing_ok=True)
    through_median, direct_median = statistics.median(through_s), statistics.median(direct_s)
    steps = await breakdown(ctx.client, "csi_create", samples[1:])
    return {
        "csi_create_median_s": through_median,
        "csi_create_direct_median_s": direct_median,
        "csi_create_overhead_ratio": through_median / direct_median,
        **overhead_ms("csi_create", through_s, direct_s),
        **steps,
    }


@dataclass(frozen=True)
class PvcCloud:
    """What the PVC figures need of one cloud: its driver and settings, an instance to attach
    to (node ID, providerID, zone), the discovery document the StorageClasses come from and the
    class the claims name."""

    settings: Settings
    driver: CloudDriver
    node_id: str
    provider_id: str
    zone: str
    discovery: dict[str, Any]
    storage_class: str
    #: The CSI topology key of the zone (the cloud driver's).
    topology_key: str = ZONE_KEY


async def pvc_figures(ctx: BenchContext, settings: Settings) -> dict[str, float]:
    driver = AwsDriver(AWS.section(settings))
    instance = launch_instance(driver.session.client("ec2"), ZONE)
    cloud = PvcCloud(
        settings=settings,
        driver=driver,
        node_id=instance,
        provider_id=f"aws:///{ZONE}/{instance}",
        zone=ZONE,
        discovery={"zones": [ZONE]},
        storage_class="gp3",
    )
    bound, attached = await pvc_medians(ctx, cloud)
    return {"pvc_bound_median_s": bound, "pvc_attach_median_s": attached}


async def pvc_medians(ctx: BenchContext, cloud: PvcCloud) -> tuple[float, float]:
    """Medians of :data:`PVC_SAMPLES` claims of ``cloud``: created → Bound, → attached."""
    kube = ctx.kube
    namespace = f"bench-csi-{uuid.uuid4().hex[:6]}"
    kube.request("POST", NAMESPACES_PATH, body={"metadata": {"name": namespace}})
    settings = cloud.settings.model_copy(
        update={
            "discovery": cloud.settings.discovery.model_copy(update={"namespace": namespace}),
            "leader_election": cloud.settings.leader_election.model_copy(
                update={"namespace": namespace, "name": "bench-csi"}
            ),
        }
    )
    driver_name = settings.csi.driver_name
    node = f"bench-csi-{uuid.uuid4().hex[:6]}"
    write_discovery(kube, namespace, cloud.discovery)
    deployment = CsiDeployment(settings, ctx.stack.kubeconfig, ctx.stack.state_dir / "logs")
    bound_s: list[float] = []
    attached_s: list[float] = []
    with objects_removed(kube, driver_name, node):
        kwok_node(
            kube,
            node,
            provider_id=cloud.provider_id,
            zone=cloud.zone,
            driver=driver_name,
            node_id=cloud.node_id,
            topology_key=cloud.topology_key,
        )
        async with build_worker(
            ctx.client,
            settings,
            driver=cloud.driver,
            kube=kube,
            task_queue=settings.temporal.queue_for(Domain.VOLUME),
        ):
            await asyncio.to_thread(deployment.start)
            try:
                await _wait(lambda: _storage_class(ctx, cloud.storage_class), 60)
                for i in range(PVC_SAMPLES):
                    bound, attached = await _one_pvc(
                        ctx, namespace, node, f"data-{i}", cloud.storage_class
                    )
                    bound_s.append(bound)
                    attached_s.append(attached)
            finally:
                await asyncio.to_thread(deployment.stop)
    kube.request("DELETE", f"{NAMESPACES_PATH}/{namespace}")
    return statistics.median(bound_s), statistics.median(attached_s)


def _storage_class(ctx: BenchContext, name: str) -> bool:
    from cloudloop.kube.resources import STORAGE_CLASSES

    return ctx.kube.get(STORAGE_CLASSES, name) is not None


async def _wait(check: object, timeout: float) -> float:
    assert callable(check)
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if await asyncio.to_thread(check):
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise TimeoutError(f"not done within {timeout}s")


async def _one_pvc(
    ctx: BenchContext, namespace: str, node: str, name: str, storage_class: str
) -> tuple[float, float]:
    kube = ctx.kube
    started = time.monotonic()
    kube.create(PERSISTENT_VOLUME_CLAIMS, pvc(name, storage_class, "1Gi"), namespace)
    kube.create(PODS, pod(f"{name}-app", name, node), namespace)

    def bound() -> bool:
        claim = kube.get(PERSISTENT_VOLUME_CLAIMS, name, namespace) or {}
        return (claim.get("status") or {}).get("phase") == "Bound"

    await _wait(bound, 120)
    bound_at = time.monotonic() - started
    pv = (kube.get(PERSISTENT_VOLUME_CLAIMS, name, namespace) or {})["spec"]["volumeName"]

    def attached() -> bool:
        return any(
            va["spec"]["source"].get("persistentVolumeName") == pv
            and (va.get("status") or {}).get("attached")
            for va in kube.list(VOLUME_ATTACHMENTS)["items"]
        )

    await _wait(attached, 120)
    return bound_at, time.monotonic() - started


async def csi_figures(ctx: BenchContext) -> dict[str, float]:
    settings = ctx.settings.model_copy(
        update={
            "csi": CsiSettings(driver_name=f"bench-{uuid.uuid4().hex[:6]}.csi.cloudloop.io"),
            "cluster_name": f"bench-csi-{uuid.uuid4().hex[:6]}",
            "temporal": ctx.settings.temporal.model_copy(
                update={"task_queue": f"bench-csi-{uuid.uuid4().hex[:6]}"}
            ),
        }
    )
    return {**await create_figures(ctx, settings), **await pvc_figures(ctx, settings)}
