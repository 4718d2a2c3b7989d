"""Zonal DVP volumes: with two zones configured, the CSI controller (gRPC, the volume workflows,
the DVP driver, the simulated parent cluster) advertises accessibility constraints, creates the
VirtualDisk for the requested zone (labelled ``topology.kubernetes.io/zone``, the volume's
topology), attaches it to a VM placed in that zone and refuses, ``FAILED_PRECONDITION``, a VM
placed in the other; with one zone nothing is zonal (Deckhouse's driver has no topology)."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest
from temporalio.client import Client

from cloudloop.cloud import models
from cloudloop.cloud.dvp import PROVIDER as DVP
from cloudloop.cloud.dvp import resources
from cloudloop.cloud.dvp.driver import DvpDriver
from cloudloop.cloud.registry import Settings
from cloudloop.csi.spec import Features
from cloudloop.csi.v1 import csi_pb2
from cloudloop.kube.api import Kube
from devstack.backends.dvp import dvp_settings
from devstack.dvp_simulator import DvpParent
from devstack.machine_fixtures import dvp_machine_spec
from tests.csi.support import (
    GIB,
    channel,
    controller_service,
    csi_settings,
    socket_folder,
    stubs,
    volume_worker,
)
from tests.support.parts import has

pytestmark = pytest.mark.stack

ZONES = ["zone-a", "zone-b"]
ZONE_KEY = "topology.kubernetes.io/zone"
Mode = csi_pb2.VolumeCapability.AccessMode


def capability() -> csi_pb2.VolumeCapability:
    return csi_pb2.VolumeCapability(
        mount=csi_pb2.VolumeCapability.MountVolume(fs_type="ext4"),
        access_mode=Mode(mode=Mode.SINGLE_NODE_WRITER),
    )


async def test_dvp_volumes_are_zonal_where_zones_are_configured(
    dvp_parent: DvpParent, settings: Settings, client: Client, kube: Kube
) -> None:
    namespace = await asyncio.to_thread(dvp_parent.new_namespace, "csi-zones")
    section = dvp_settings(dvp_parent, namespace, cluster_uuid=f"csi-{uuid.uuid4().hex[:6]}")
    assert not Features.of(DvpDriver(section)).zonal  # one (the mock) zone: no topology
    section = section.model_copy(update={"zones": ZONES})
    settings = csi_settings(
        settings.model_copy(
            update={
                "provider": DVP.name,
                DVP.name: section,
                "cluster_name": f"csi-{uuid.uuid4().hex[:8]}",
            }
        ),
        storage_classes=False,
    )
    driver = DvpDriver(section)
    assert Features.of(driver).zonal

    def vm_in(zone: str) -> str:
        spec = models.MachineSpec(
            name=f"node-{uuid.uuid4().hex[:6]}",
            namespace="default",
            cluster=settings.cluster_name,
            machine_uid=str(uuid.uuid4()),
            failure_domain=zone,
            provider_spec=dvp_machine_spec(),
        )
        return has(driver.machines).create_machine(spec, b"#cloud-config\n").id

    in_a, in_b = await asyncio.to_thread(vm_in, "zone-a"), await asyncio.to_thread(vm_in, "zone-b")
    async with (
        socket_folder() as sockets,
        volume_worker(client, settings, driver, kube),
        controller_service(client, settings, driver, sockets.controller),
        channel(sockets.controller) as opened,
    ):
        identity, controller, _ = stubs(opened)
        plugin = await identity.GetPluginCapabilities(csi_pb2.GetPluginCapabilitiesRequest())
        services = {c.service.type for c in plugin.capabilities if c.HasField("service")}
        assert csi_pb2.PluginCapability.Service.VOLUME_ACCESSIBILITY_CONSTRAINTS in services

        zone_b = csi_pb2.Topology(segments={ZONE_KEY: "zone-b"})
        created = await controller.CreateVolume(
            csi_pb2.CreateVolumeRequest(
                name=f"pvc-{uuid.uuid4()}",
                capacity_range=csi_pb2.CapacityRange(required_bytes=GIB),
                volume_capabilities=[capability()],
                accessibility_requirements=csi_pb2.TopologyRequirement(
                    requisite=[zone_b], preferred=[zone_b]
                ),
            ),
            timeout=120,
        )
        volume_id = created.volume.volume_id
        assert [dict(t.segments) for t in created.volume.accessible_topology] == [
            {ZONE_KEY: "zone-b"}
        ]
        disk = driver.session.get(resources.VIRTUAL_DISKS, volume_id) or {}
        assert disk["metadata"]["labels"][ZONE_KEY] == "zone-b"

        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await controller.ControllerPublishVolume(
                csi_pb2.ControllerPublishVolumeRequest(
                    volume_id=volume_id, node_id=in_a, volume_capability=capability()
                ),
                timeout=120,
            )
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "zone-b" in (refused.value.details() or "")

        published = await controller.ControllerPublishVolume(
            csi_pb2.ControllerPublishVolumeRequest(
                volume_id=volume_id, node_id=in_b, volume_capability=capability()
            ),
            timeout=120,
        )
        assert published is not None
        await controller.ControllerUnpublishVolume(
            csi_pb2.ControllerUnpublishVolumeRequest(volume_id=volume_id, node_id=in_b),
            timeout=120,
        )
        await controller.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=volume_id), timeout=120)
