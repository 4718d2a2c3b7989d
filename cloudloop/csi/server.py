"""The two CSI processes: ``cloudloop csi-controller`` and ``cloudloop csi-node``.

Both serve CSI over a unix socket (``csi.endpoint``, ``unix:///path``; a stale socket file is
replaced) with grpcio's asyncio server until SIGTERM/SIGINT, then stop accepting and let running
RPCs finish for a few seconds. The controller connects to Temporal only (the workers hold the
cloud credentials) and, leader-elected, keeps the cloud's StorageClasses and the ``CSIDriver``
object up to date. The node plugin learns its instance ID and zone from its Node object
(``spec.providerID``, ``topology.kubernetes.io/zone``) unless ``csi.node_id``/``csi.zone`` say;
it holds no cloud credential and no Temporal connection on any cloud (its driver is built
without the credential files, :func:`node_driver`; docs/decisions/node-agents-credentials.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from grpc import aio
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.cloud.driver import CloudDriver, Instances
from cloudloop.cloud.registry import Settings
from cloudloop.csi.controller import Controller
from cloudloop.csi.identity import Identity
from cloudloop.csi.mounter import DirectoryMounter, Mounter
from cloudloop.csi.node import Node
from cloudloop.csi.operations import VolumeOperations
from cloudloop.csi.spec import ZONE_KEY, Features
from cloudloop.csi.v1 import csi_pb2_grpc

log = logging.getLogger(__name__)

GRACE_S = 5.0


def socket_path(endpoint: str) -> Path:
    if not endpoint.startswith("unix://"):
        raise ValueError(f"CSI endpoint must be unix:///path, not {endpoint!r}")
    return Path(endpoint.removeprefix("unix://"))


def _driver(settings: Settings) -> CloudDriver:
    """The configured cloud's driver: only its class is used here (features, provider-ID
    parsing, StorageClasses); nothing connects to the cloud."""
    from cloudloop.cloud.registry import driver_for

    return driver_for(settings)


async def serve(server: aio.Server, endpoint: str, stop: asyncio.Event) -> None:
    path = socket_path(endpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    log.info("CSI serving on %s", endpoint)
    try:
        await stop.wait()
    finally:
        await server.stop(GRACE_S)
        path.unlink(missing_ok=True)


def controller_server(
    operations: VolumeOperations, settings: Settings, driver: CloudDriver
) -> aio.Server:
    """The controller's gRPC server; ``operations`` check the driver's volume limits (no cloud
    call) before any workflow starts, unless they were given other limits."""
    features = Features.of(driver)
    if operations.limits is None:
        operations.limits = driver.volumes

    async def ready() -> bool:
        await operations.client.workflow_service.get_system_info(GetSystemInfoRequest())
        return True

    server = aio.server()
    csi_pb2_grpc.add_IdentityServicer_to_server(
        Identity(settings.csi.driver_name, features, provider=settings.provider, ready=ready),
        server,
    )
    csi_pb2_grpc.add_ControllerServicer_to_server(Controller(operations, features), server)
    return server


async def run_controller(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    temporal.stop_on_signals(stop)
    client = await temporal.connect(settings.temporal)
    driver = _driver(settings)
    operations = VolumeOperations.from_settings(_claimed(client, settings, stop), settings)
    server = controller_server(operations, settings, driver)
    tasks = []
    if settings.csi.storage_classes:
        from cloudloop.csi.objects import keep_objects

        tasks.append(asyncio.create_task(keep_objects(settings, driver, stop)))
    try:
        await serve(server, settings.csi.endpoint, stop)
    finally:
        stop.set()
        for task in tasks:
            await asyncio.gather(task, return_exceptions=True)


def _claimed(client: Client, settings: Settings, stop: asyncio.Event) -> Client:
    """``client`` gated by this cluster's claim of its queues (:mod:`cloudloop.claim`): a volume
    workflow starts only on queues this cluster holds; a queue another cluster serves stops
    the controller (the refusal is logged, naming both clusters)."""
    from cloudloop.claim import for_process, gated
    from cloudloop.kube.api import Kube
    from cloudloop.kube.client import api_client

    kube = Kube(api_client(settings.kubeconfig))
    return gated(client, for_process(client, settings, kube, on_refused=lambda _: stop.set()))


def node_identity(settings: Settings, instances: Instances | None, zonal: bool) -> tuple[str, str]:
    """(node ID, zone): from settings, else from the Node object of ``csi.node_name``
    (``instances`` turn its providerID into the node ID; ``zonal``: its zone label is read)."""
    node_id, zone = settings.csi.node_id, settings.csi.zone
    if node_id and (zone or not zonal):
        return node_id, zone
    if not settings.csi.node_name:
        raise RuntimeError("set csi.node_id (and csi.zone) or csi.node_name (NODE_NAME)")
    from cloudloop.kube.api import Kube
    from cloudloop.kube.client import api_client
    from cloudloop.kube.resources import NODES

    node = Kube(api_client(settings.kubeconfig)).get(NODES, settings.csi.node_name)
    if node is None:
        raise RuntimeError(f"Node {settings.csi.node_name} does not exist")
    provider_id = (node.get("spec") or {}).get("providerID", "")
    if not node_id:
        if not provider_id:
            raise RuntimeError(f"Node {settings.csi.node_name} has no providerID yet")
        if instances is None:
            raise RuntimeError(f"{settings.provider} has no instances to read {provider_id!r}")
        node_id = instances.instance_id_from_provider_id(provider_id)
    if not zone and zonal:
        zone = ((node.get("metadata") or {}).get("labels") or {}).get(ZONE_KEY, "")
    return node_id, zone


def node_server(settings: Settings, driver: CloudDriver, node_id: str, zone: str) -> aio.Server:
    csi = settings.csi
    features = Features.of(driver)
    mounter: Mounter = (
        DirectoryMounter(csi.directory_root)
        if csi.mounter == "directory"
        else Mounter(csi.device_dir, device_wait_s=csi.device_wait_s)
    )
    server = aio.server()
    csi_pb2_grpc.add_IdentityServicer_to_server(
        Identity(csi.driver_name, features, provider=settings.provider), server
    )
    node = Node(
        mounter,
        node_id=node_id,
        zone=zone if features.zonal else "",
        max_volumes=csi.max_volumes_per_node or features.max_volumes_per_node,
        default_fs_type=csi.default_fs_type,
        topology_key=features.topology_key,
    )
    csi_pb2_grpc.add_NodeServicer_to_server(node, server)
    return server


def node_driver(settings: Settings) -> CloudDriver:
    """The configured cloud's driver as the node plugin uses it (features, provider-ID parsing),
    built without the cloud's credential files: the node plugin's DaemonSet mounts none (the
    controller's publish context and the Node object tell it all it needs)."""
    from cloudloop.cloud.registry import provider_for

    return provider_for(settings).make_node_driver(settings)


async def run_node(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    temporal.stop_on_signals(stop)
    driver = node_driver(settings)
    zonal = Features.of(driver).zonal
    node_id, zone = await asyncio.to_thread(node_identity, settings, driver.instances, zonal)
    log.info("CSI node %s (zone %s) on %s", node_id, zone or "-", os.uname().nodename)
    await serve(node_server(settings, driver, node_id, zone), settings.csi.endpoint, stop)
