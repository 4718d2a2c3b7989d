"""DVP zones and orphaned disks against the parent cluster (its kube-apiserver and simulator):
a machine's failure domain places its VM, node sync reads the zone back among the zones discovery
reports; the cluster's disks no VM uses are the orphaned-disk candidates."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.driver import DvpDriver
from cloudloop.cloud.models import MachineSpec
from cloudloop.rules.discovery import orphaned_disks
from devstack import machine_fixtures
from devstack.backends.dvp import dvp_settings
from devstack.dvp_simulator import DvpParent
from tests.helpers import eventually

pytestmark = pytest.mark.stack


@pytest.fixture
def driver(dvp_parent: DvpParent) -> Iterator[DvpDriver]:
    namespace = dvp_parent.new_namespace("disc")
    yield DvpDriver(dvp_settings(dvp_parent, namespace, zones=["zone-a", "zone-b"]))


def spec(name: str, zone: str = "") -> MachineSpec:
    return MachineSpec(
        name=name,
        namespace="capi",
        cluster="c1",
        machine_uid=str(uuid.uuid4()),
        provider_spec=machine_fixtures.dvp_machine_spec(),
        failure_domain=zone,
    )


async def test_failure_domain_places_the_vm_and_node_sync_reads_the_zone(
    driver: DvpDriver,
) -> None:
    await asyncio.to_thread(
        driver.machines.create_machine, spec("zoned", "zone-b"), b"#cloud-config\n"
    )
    vm = await asyncio.to_thread(driver.session.get, r.VIRTUAL_MACHINES, "zoned")
    assert vm is not None and vm["spec"]["nodeSelector"] == {r.ZONE_LABEL: "zone-b"}

    listing = await asyncio.to_thread(driver.instances.list_instances, ["zoned"])
    instance = listing.found["zoned"]
    assert (instance.zone, instance.region) == ("zone-b", "default")
    reported = [z.name for z in await asyncio.to_thread(driver.discovery.zones)]
    assert instance.zone in reported

    # Unpinned among two zones: no zone label rather than a guess.
    await asyncio.to_thread(driver.machines.create_machine, spec("loose"), b"#cloud-config\n")
    listing = await asyncio.to_thread(driver.instances.find_instances_by_name, ["loose"])
    assert listing.found["loose"].zone == ""


async def test_disks_without_a_vm_are_orphan_candidates(
    driver: DvpDriver, dvp_parent: DvpParent
) -> None:
    machine = spec("holder")
    await asyncio.to_thread(driver.machines.create_machine, machine, b"#cloud-config\n")
    await eventually(
        lambda: (
            (driver.session.get(r.VIRTUAL_DISKS, "holder-boot") or {})
            .get("status", {})
            .get("phase")
            == "Ready"
            or None
        ),
        what="boot disk ready",
    )

    def disk(name: str, labels: dict[str, str]) -> None:
        dvp_parent.kube.create(
            r.VIRTUAL_DISKS,
            {
                "metadata": {"name": name, "namespace": driver.session.namespace, "labels": labels},
                "spec": {"persistentVolumeClaim": {"storageClassName": "ceph-rbd", "size": "3Gi"}},
            },
            driver.session.namespace,
        )

    await asyncio.to_thread(disk, "left-behind", driver.session.cluster_labels())
    await asyncio.to_thread(disk, "another-cluster", {r.CLUSTER_UUID_LABEL: "someone-else"})

    disks = await asyncio.to_thread(driver.discovery.list_cluster_disks, "c1")
    assert [d.name for d in disks] == ["left-behind"]  # the VM's boot disk is in use
    assert disks[0].size_gib == 3
    assert [d.id for d in orphaned_disks(disks, [])] == ["left-behind"]
    pv = {"metadata": {"name": "pv-1"}, "spec": {"csi": {"volumeHandle": "left-behind"}}}
    assert orphaned_disks(disks, [pv]) == []  # a detached CSI volume is not orphaned

    # Once the VM is gone, its disks are candidates until they are deleted too.
    await eventually(
        lambda: driver.machines.delete_machine(machine) or None, timeout=30, what="deleted"
    )
    disks = await asyncio.to_thread(driver.discovery.list_cluster_disks, "c1")
    assert [d.name for d in disks] == ["left-behind"]
