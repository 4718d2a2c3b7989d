"""The contract of "Cluster API machines on DVP and zVirt", end to end: the real Cluster API core
manager, our machine starter and worker (in-process), and the cloud (DVP: the parent cluster with
its simulator; zVirt: the oVirt Engine emulator).

Objects are created the way a user (or a MachineSet) creates them: the bootstrap Secret, the
InfraCluster and the Cluster, the InfraMachine and the Machine, with no owners, labels or status;
CAPI wires them, our starter provisions, and the real CAPI Machine must reach a provisioned phase
with our providerID and addresses. Deleting the Machine must remove the VM and its disks.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, cast

import pytest
from temporalio.client import Client

from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.dvp.capi import INFRA_KINDS as DVP_KINDS
from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT_KINDS
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import InfraObject
from cloudloop.rules import machine as capi
from devstack.devmode import stack_settings
from devstack.local import LocalStack
from starters.machine import MachineStarter
from tests.helpers import eventually
from tests.machine import capi_objects
from workers.main import build_worker

pytestmark = pytest.mark.stack

#: Generous: two clouds' delays, a Temporal round trip per step and a loaded 2-core machine.
PROVISION_TIMEOUT = 120.0
CLOUD_INIT = "#cloud-config\nruncmd: [echo capi-contract]\n"


@dataclass(frozen=True)
class CloudObjects:
    """A machine's VM and disks in the cloud, by the cloud's names or IDs."""

    vms: frozenset[str]
    disks: frozenset[str]


@dataclass
class CloudUnderTest:
    """One provider as the contract test drives and inspects it."""

    kinds: capi.InfraKinds
    driver: CloudDriver
    machine_spec: dict[str, Any]
    #: The providerID our provider must report for a machine (its name).
    provider_id: Callable[[str], str]
    #: The VM and disks the cloud holds for a machine (name, InfraMachine uid).
    find: Callable[[str, str], CloudObjects]
    #: Which of these the cloud still holds.
    existing: Callable[[CloudObjects], CloudObjects]


# -- the clouds ---------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def dvp_cloud(
    request: pytest.FixtureRequest, kube: Kube, namespace: str
) -> AsyncIterator[CloudUnderTest]:
    from cloudloop.cloud.dvp import resources as dvp
    from devstack import machine_fixtures
    from tests.machine.dvp_machines import dvp_machines

    parent = request.getfixturevalue("dvp_parent")
    async with dvp_machines(kube, parent, namespace) as machines:

        def find(_name: str, uid: str) -> CloudObjects:
            labelled = machines.parent_objects(uid)  # VMs and disks carry the machine's uid
            return CloudObjects(frozenset(labelled["vms"]), frozenset(labelled["disks"]))

        def existing(objects: CloudObjects) -> CloudObjects:
            return CloudObjects(
                frozenset(n for n in objects.vms if machines.parent_get(dvp.VIRTUAL_MACHINES, n)),
                frozenset(n for n in objects.disks if machines.parent_get(dvp.VIRTUAL_DISKS, n)),
            )

        yield CloudUnderTest(
            kinds=DVP_KINDS,
            driver=machines.driver,
            machine_spec=machine_fixtures.dvp_machine_spec(),
            provider_id=lambda name: f"dvp://{name}",
            find=find,
            existing=existing,
        )


@contextlib.asynccontextmanager
async def zvirt_cloud(request: pytest.FixtureRequest) -> AsyncIterator[CloudUnderTest]:
    from cloudloop.cloud.zvirt.driver import ZvirtDriver
    from devstack.backends.zvirt import QUICK_TIMINGS, machine_spec, zvirt_settings
    from devstack.ovirt_emulator import OvirtEmulatorAdmin, OvirtEmulatorEndpoint

    endpoint: OvirtEmulatorEndpoint = request.getfixturevalue("ovirt")
    admin = OvirtEmulatorAdmin(endpoint.admin_url)
    driver = ZvirtDriver(zvirt_settings(endpoint, **QUICK_TIMINGS))

    def provider_id(name: str) -> str:
        vm = admin.vm(name)
        assert vm is not None, f"no VM {name} in the emulator"
        return f"zvirt://{vm['id']}"

    def find(name: str, _uid: str) -> CloudObjects:
        vm = admin.vm(name) or {}
        return CloudObjects(
            frozenset([vm["id"]] if vm else []),
            frozenset(a["disk_id"] for a in vm.get("disk_attachments", [])),
        )

    def existing(objects: CloudObjects) -> CloudObjects:
        state = admin.state()
        return CloudObjects(
            objects.vms & {vm["id"] for vm in state["vms"]},
            objects.disks & {disk["id"] for disk in state["disks"]},
        )

    try:
        yield CloudUnderTest(
            kinds=ZVIRT_KINDS,
            driver=driver,
            machine_spec=machine_spec(
                endpoint, cpu={"sockets": 1, "cores": 2, "threads": 1}, nicName="nic1"
            ),
            provider_id=provider_id,
            find=find,
            existing=existing,
        )
    finally:
        driver.close()


@pytest.fixture(params=["dvp", "zvirt"])
async def cloud(
    request: pytest.FixtureRequest, contract_kube: Kube, contract_namespace: str
) -> AsyncIterator[CloudUnderTest]:
    if request.param == "dvp":
        async with dvp_cloud(request, contract_kube, contract_namespace) as found:
            yield found
    else:
        async with zvirt_cloud(request) as found:
            yield found


@pytest.fixture
async def provider(
    cloud: CloudUnderTest,
    contract_stack: LocalStack,
    contract_kube: Kube,
    contract_client: Client,
    contract_namespace: str,
) -> AsyncIterator[CloudUnderTest]:
    """Our worker (with the cloud's driver) and machine starter, running for this test."""
    from tests.machine.dvp_machines import TEST_TIMINGS

    task_queue = f"capi-{uuid.uuid4().hex[:10]}"
    settings = stack_settings(contract_stack, task_queue=task_queue, cluster="capi-contract")
    worker = build_worker(
        contract_client, settings, driver=cloud.driver, kube=contract_kube, task_queue=task_queue
    )
    starter = MachineStarter(
        contract_kube,
        contract_client,
        kinds=cloud.kinds,
        task_queue=task_queue,
        cluster=settings.cluster_name,
        namespace=contract_namespace,
        timings=TEST_TIMINGS,
    )
    async with worker:
        task = asyncio.create_task(starter.run())
        try:
            yield cloud
        finally:
            starter.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await task


# -- the contract -------------------------------------------------------------------------------
async def test_capi_machine_is_provisioned_by_our_provider_and_deleted_with_its_vm(
    provider: CloudUnderTest,
    contract_stack: LocalStack,
    contract_kube: Kube,
    contract_namespace: str,
) -> None:
    kube, ns, cloud = contract_kube, contract_namespace, provider
    with capi_objects.explained(kube, ns, contract_stack):
        infra, infra_cluster = (
            capi_objects.infra_kind(cloud.kinds.machine.kind),
            capi_objects.infra_kind(cloud.kinds.cluster.kind),
        )
        # The CRDs' contract labels name the versions the code uses.
        assert infra.resource == cloud.kinds.machine and infra.contract == "v1beta2"
        assert infra_cluster.resource == cloud.kinds.cluster
        name = f"w-{uuid.uuid4().hex[:6]}"

        await asyncio.to_thread(capi_objects.bootstrap_secret, kube, ns, f"{name}-boot", CLOUD_INIT)
        await asyncio.to_thread(capi_objects.cluster, kube, ns, "c1", infra_cluster, {})
        created = await asyncio.to_thread(
            lambda: capi_objects.machine(
                kube,
                ns,
                name,
                cluster_name="c1",
                infra=infra,
                infra_spec=cloud.machine_spec,
                data_secret=f"{name}-boot",
            )
        )
        assert created["metadata"]["labels"][capi.CLUSTER_NAME_LABEL] == "c1"  # CAPI's defaulting

        machine = await eventually(
            lambda: capi_objects.provisioned_machine(kube, ns, name),
            timeout=PROVISION_TIMEOUT,
            what=f"CAPI Machine {name} Provisioned",
        )
        infra_obj = await asyncio.to_thread(kube.get, infra.resource, name, ns)
        assert infra_obj is not None
        uid = infra_obj["metadata"]["uid"]

        # CAPI wired what our starter waits for: the owner Machine, the cluster-name label, and the
        # Cluster's infrastructure (our starter marked the InfraCluster provisioned).
        assert capi.owner(cast(InfraObject, infra_obj), "Machine") == name
        assert infra_obj["metadata"]["labels"][capi.CLUSTER_NAME_LABEL] == "c1"
        cluster_obj = await asyncio.to_thread(kube.get, capi.CLUSTERS, "c1", ns)
        assert capi.cluster_infrastructure_ready(cluster_obj)

        # The Machine carries our providerID and addresses, copied from the InfraMachine (the
        # copy may trail an address our provider adds later, hence the wait).
        expected_id = await asyncio.to_thread(cloud.provider_id, name)
        assert machine["spec"]["providerID"] == expected_id
        assert infra_obj["spec"]["providerID"] == expected_id
        assert machine["status"]["initialization"]["infrastructureProvisioned"] is True

        def addresses_copied() -> list[dict[str, str]] | None:
            ours = (kube.get(infra.resource, name, ns) or {}).get("status", {}).get("addresses")
            copied = capi_objects.machine_status(kube, ns, name).get("addresses")
            return list(copied) if ours and copied == ours else None

        addresses = await eventually(addresses_copied, what="addresses copied to the Machine")
        assert any(a["type"] == "InternalIP" and a["address"] for a in addresses), addresses

        in_cloud = await asyncio.to_thread(cloud.find, name, uid)
        assert len(in_cloud.vms) == 1, in_cloud
        assert in_cloud.disks, in_cloud

        # Deleting the Machine: CAPI deletes the InfraMachine, our finalizer holds it until the VM
        # and its disks are gone, then the Machine goes.
        await asyncio.to_thread(kube.delete, capi.MACHINES, name, ns)
        await eventually(
            lambda: kube.get(capi.MACHINES, name, ns) is None,
            timeout=PROVISION_TIMEOUT,
            what=f"CAPI Machine {name} deleted",
        )
        assert await asyncio.to_thread(kube.get, infra.resource, name, ns) is None
        assert await asyncio.to_thread(cloud.existing, in_cloud) == CloudObjects(
            frozenset(), frozenset()
        )
        assert await asyncio.to_thread(cloud.find, name, uid) == CloudObjects(
            frozenset(), frozenset()
        )
