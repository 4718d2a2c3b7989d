"""The clouds the CSI tests run on, one builder each: settings for the driver and the worker, a
node (an instance the controller can attach to) with its ID and zone, and a way to make more.

AWS is moto (an EC2 instance in ``us-east-1a``); DVP is the parent cluster with its simulator (a
VirtualMachine made by the driver, node ID its name); zVirt is the oVirt emulator (a VM cloned
from the seed template, node ID its UUID); OpenStack is the OpenStack emulator (an ACTIVE server
in AZ ``nova``, node ID its UUID); vSphere is vcsim with Deckhouse's zone layout (a VM cloned
into cluster ``DC0_C0``, zone ``zone-a``, node ID its BIOS UUID).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import SecretStr

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.registry import Settings
from devstack.backends.aws import aws_client, launch_instance
from tests.helpers import eventually


@dataclass
class CsiCloud:
    name: str
    settings: Settings
    driver: CloudDriver
    #: Make a new node: (node ID, zone, provider ID).
    new_node: Callable[[], Awaitable[tuple[str, str, str]]]
    #: Remove a node's instance (the VM is gone).
    remove_node: Callable[[str], Awaitable[None]]
    #: VolumeAttributesClass parameters the cloud's volumes can be changed to (csi-sanity's
    #: ModifyVolume specs); empty where the driver does not modify volumes.
    mutable_parameters: dict[str, str] = field(default_factory=dict)


async def aws_cloud(request: pytest.FixtureRequest, settings: Settings) -> CsiCloud:
    # A loaded machine answers slowly: a timeout must not pass for the cloud's answer.
    section = AWS.section(settings).model_copy(update={"timeout_s": 30.0, "max_attempts": 3})
    settings = settings.model_copy(
        update={"cluster_name": f"csi-{uuid.uuid4().hex[:8]}", AWS.name: section}
    )
    driver = AwsDriver(section)
    ec2 = aws_client("ec2", section.endpoint_url)

    async def new_node() -> tuple[str, str, str]:
        instance = await asyncio.to_thread(launch_instance, ec2, "us-east-1a")
        return instance, "us-east-1a", f"aws:///us-east-1a/{instance}"

    async def remove_node(node_id: str) -> None:
        await asyncio.to_thread(ec2.terminate_instances, InstanceIds=[node_id])

    mutable = {"throughput": "150", "tagSpecification_1": "cloudloop.io/sanity=modified"}
    return CsiCloud("aws", settings, driver, new_node, remove_node, mutable)


async def dvp_cloud(request: pytest.FixtureRequest, settings: Settings) -> CsiCloud:
    from cloudloop.cloud.dvp import PROVIDER as DVP
    from cloudloop.cloud.dvp.driver import DvpDriver
    from devstack.backends.dvp import dvp_settings
    from devstack.dvp_simulator import DvpParent
    from devstack.machine_fixtures import dvp_machine_spec

    parent: DvpParent = request.getfixturevalue("dvp_parent")
    namespace = await asyncio.to_thread(parent.new_namespace, "csi")
    section = dvp_settings(parent, namespace, cluster_uuid=f"csi-{uuid.uuid4().hex[:6]}")
    settings = settings.model_copy(
        update={
            "provider": DVP.name,
            DVP.name: section,
            "cluster_name": f"csi-{uuid.uuid4().hex[:8]}",
        }
    )
    driver = DvpDriver(section)

    async def new_node() -> tuple[str, str, str]:
        name = f"node-{uuid.uuid4().hex[:6]}"
        spec = models.MachineSpec(
            name=name,
            namespace="default",
            cluster=settings.cluster_name,
            machine_uid=str(uuid.uuid4()),
            provider_spec=dvp_machine_spec(),
        )
        machine = await asyncio.to_thread(driver.machines.create_machine, spec, b"#cloud-config\n")
        return machine.id, "", machine.provider_id

    async def remove_node(node_id: str) -> None:
        from cloudloop.cloud.dvp import resources

        await asyncio.to_thread(driver.session.delete, resources.VIRTUAL_MACHINES, node_id)

    return CsiCloud(DVP.name, settings, driver, new_node, remove_node)


async def zvirt_cloud(
    request: pytest.FixtureRequest, settings: Settings, *, engine: str = "csi_ovirt"
) -> CsiCloud:
    from cloudloop.cloud.zvirt import PROVIDER as ZVIRT
    from cloudloop.cloud.zvirt.driver import ZvirtDriver
    from devstack.backends.zvirt import machine_spec, zvirt_settings
    from devstack.ovirt_emulator import OvirtEmulatorEndpoint

    endpoint: OvirtEmulatorEndpoint = request.getfixturevalue(engine)
    section = zvirt_settings(endpoint, timeout_s=5, wait_timeout_s=20, poll_interval_s=0.05)
    settings = settings.model_copy(
        update={
            "provider": ZVIRT.name,
            ZVIRT.name: section,
            "cluster_name": f"csi-{uuid.uuid4().hex[:8]}",
        }
    )
    driver = ZvirtDriver(section)

    async def new_node() -> tuple[str, str, str]:
        spec = models.MachineSpec(
            name=f"node-{uuid.uuid4().hex[:6]}",
            namespace="default",
            cluster=settings.cluster_name,
            machine_uid=str(uuid.uuid4()),
            provider_spec=machine_spec(endpoint),
        )
        machine = await asyncio.to_thread(driver.machines.create_machine, spec, b"#cloud-config\n")
        return machine.id, "", machine.provider_id

    async def remove_node(node_id: str) -> None:
        """Power the VM off, remove it, and wait until the engine says it is gone."""

        def vm(api: Any) -> Any:
            return api.vms_service().vm_service(node_id)

        with contextlib.suppress(errors.CloudError):  # already down
            await asyncio.to_thread(driver.session.call, "StopVm", lambda api: vm(api).stop())
        await asyncio.to_thread(driver.session.call, "RemoveVm", lambda api: vm(api).remove())

        def gone() -> bool:
            try:
                driver.session.call("GetVm", lambda api: vm(api).get())
            except errors.NotFound:
                return True
            return False

        await eventually(gone, what=f"VM {node_id} removed")

    return CsiCloud(ZVIRT.name, settings, driver, new_node, remove_node)


async def openstack_cloud(
    request: pytest.FixtureRequest, settings: Settings, *, engine: str = "csi_openstack"
) -> CsiCloud:
    from cloudloop.cloud.openstack import PROVIDER as OPENSTACK
    from cloudloop.cloud.openstack.driver import OpenStackDriver
    from devstack.backends.openstack import openstack_settings
    from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint

    endpoint: OpenStackEmulatorEndpoint = request.getfixturevalue(engine)
    section = openstack_settings(endpoint, router=False, request_timeout_s=30)
    settings = settings.model_copy(
        update={
            "provider": OPENSTACK.name,
            OPENSTACK.name: section,
            "cluster_name": f"csi-{uuid.uuid4().hex[:8]}",
        }
    )
    driver = OpenStackDriver(section)
    admin = OpenStackEmulatorAdmin(endpoint.admin_url)
    zone = (endpoint.zones or ("nova",))[0]

    async def new_node() -> tuple[str, str, str]:
        [server] = await asyncio.to_thread(
            admin.seed_servers, 1, prefix=f"node-{uuid.uuid4().hex[:6]}", zones=[zone]
        )
        return server["id"], zone, f"openstack:///{server['id']}"

    async def remove_node(node_id: str) -> None:
        path = f"/servers/{node_id}"
        await asyncio.to_thread(driver.session.request, "DeleteServer", "compute", "DELETE", path)

        def gone() -> bool:
            try:
                driver.session.request("GetServer", "compute", "GET", path)
            except errors.NotFound:
                return True
            return False

        await eventually(gone, what=f"server {node_id} deleted")

    mutable = {"type": "ssd"}  # a Cinder retype from the default type
    return CsiCloud(OPENSTACK.name, settings, driver, new_node, remove_node, mutable)


#: Addresses of the node VMs cloned into vcsim (unique per process).
_VM_ADDRESSES = (f"10.66.{n // 200}.{n % 200 + 10}" for n in itertools.count())


async def vsphere_cloud(
    request: pytest.FixtureRequest, settings: Settings, *, engine: str = "csi_vcsim"
) -> CsiCloud:
    from cloudloop.cloud.vsphere import PROVIDER as VSPHERE
    from cloudloop.cloud.vsphere.driver import VsphereDriver
    from cloudloop.cloud.vsphere.settings import VsphereSettings
    from devstack.local import LocalStack
    from devstack.vcsim_inventory import NodeVm, ZoneLayout, seed

    local: LocalStack = request.getfixturevalue(engine)
    assert local.vcsim is not None
    endpoint = local.vcsim
    layout = ZoneLayout()
    section = VsphereSettings(
        server=endpoint.server,
        username=endpoint.username,
        password=SecretStr(endpoint.password),
        ca_bundle=endpoint.ca_file,
        region=layout.region,
        timeout_s=30,
        poll_interval_s=0.05,
    )
    settings = settings.model_copy(
        update={
            "provider": VSPHERE.name,
            VSPHERE.name: section,
            "cluster_name": f"csi-{uuid.uuid4().hex[:8]}",
        }
    )
    driver = VsphereDriver(section)
    zone, cluster = next(iter(layout.zones.items()))

    async def new_node() -> tuple[str, str, str]:
        node = NodeVm(f"node-{uuid.uuid4().hex[:6]}", next(_VM_ADDRESSES), cluster=cluster)
        inventory = await asyncio.to_thread(seed, endpoint, [node], None)
        record = inventory.vms[node.name]
        return record.uuid.lower(), zone, record.provider_id

    async def remove_node(node_id: str) -> None:
        await asyncio.to_thread(remove_vm, endpoint, node_id)

    return CsiCloud(VSPHERE.name, settings, driver, new_node, remove_node)


def remove_vm(endpoint: Any, bios_uuid: str) -> None:
    """Power the VM off and destroy it (what removing a node's VM in vCenter does)."""
    from devstack.vcsim_inventory import connect, disconnect, wait_task

    si = connect(endpoint)
    try:
        vm = si.content.searchIndex.FindByUuid(None, bios_uuid, True, None)
        if vm is None:
            return
        with contextlib.suppress(Exception):  # already off
            wait_task(si, vm.PowerOffVM_Task())
        wait_task(si, vm.Destroy_Task())
    finally:
        disconnect(si)


CLOUDS: dict[str, Callable[[pytest.FixtureRequest, Settings], Awaitable[CsiCloud]]] = {
    "aws": aws_cloud,
    "dvp": dvp_cloud,
    "openstack": openstack_cloud,
    "vsphere": vsphere_cloud,
    "zvirt": zvirt_cloud,
}
