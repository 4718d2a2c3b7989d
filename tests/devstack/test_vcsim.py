"""vcsim in the dev stack and its seeder, exercised only through pyvmomi and the tagging client:
guest IPs after customization, lookups by UUID/IP/DNS name, tags at every inventory level,
first-class disks with the two pyvmomi work-arounds, TLS by CA file or thumbprint."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from cloudloop.cloud.vsphere.tagging import ObjectId, TaggingClient, TaggingHTTPError
from cloudloop.cloud.vsphere.vmomi import vim
from devstack.vcsim import VcsimEndpoint
from devstack.vcsim_inventory import (
    REGION_CATEGORY,
    ZONE_CATEGORY,
    Inventory,
    connect,
    disconnect,
    find,
    tagging_client,
    wait_task,
)

pytestmark = pytest.mark.stack


@pytest.fixture
def si(vcsim: VcsimEndpoint) -> Iterator[Any]:
    service = connect(vcsim)
    try:
        yield service
    finally:
        disconnect(service)


@pytest.fixture
def tags(vcsim: VcsimEndpoint) -> Iterator[TaggingClient]:
    client = tagging_client(vcsim)
    try:
        yield client
    finally:
        client.logout()


@pytest.mark.parametrize("name", ["node-a", "node-b"])
def test_seeded_vm_has_guest_identity(seeded: Inventory, si: Any, name: str) -> None:
    record = seeded.vms[name]
    index = si.content.searchIndex
    vm = index.FindByUuid(None, record.uuid, True, None)
    assert vm is not None and vm._moId == record.moref
    assert vm.runtime.powerState == "poweredOn"
    assert vm.guest.hostName == name
    assert [ip for nic in vm.guest.net for ip in nic.ipAddress] == [record.ip]
    assert vm.guest.net[0].network == "VM Network"
    assert (vm.config.hardware.numCPU, vm.config.hardware.memoryMB) == (2, 4096)
    assert vm.config.guestId == "ubuntu64Guest"
    assert index.FindByIp(None, record.ip, True)._moId == record.moref
    assert [v._moId for v in index.FindAllByDnsName(None, name, True)] == [record.moref]


@pytest.mark.parametrize(
    ("path", "category", "tag"),
    [
        pytest.param("DC0", REGION_CATEGORY, "region-a", id="datacenter-region"),
        pytest.param("DC0/host/DC0_C0", ZONE_CATEGORY, "zone-a", id="cluster-zone-a"),
        pytest.param("DC0/host/DC0_C1", ZONE_CATEGORY, "zone-b", id="cluster-zone-b"),
        pytest.param("DC0/datastore/LocalDS_0", ZONE_CATEGORY, "zone-a", id="datastore-zone-a"),
        pytest.param("DC0/datastore/LocalDS_1", ZONE_CATEGORY, "zone-b", id="datastore-zone-b"),
    ],
)
def test_zone_layout_tags(
    seeded: Inventory, si: Any, tags: TaggingClient, path: str, category: str, tag: str
) -> None:
    entity = find(si, path)
    obj = ObjectId(entity._moId, entity._wsdlName)
    attached = tags.attached_tags([obj])[obj]
    names = {(tags.get_category(t.category_id).name, t.name) for t in map(tags.get_tag, attached)}
    assert names == {(category, tag)}


@pytest.mark.parametrize("path", ["DC0/host/DC0_C0/DC0_C0_H0", "DC0/vm/node-a"], ids=["host", "vm"])
def test_tags_attach_and_detach_at_host_and_vm(
    seeded: Inventory, si: Any, tags: TaggingClient, path: str
) -> None:
    entity = find(si, path)
    obj = ObjectId(entity._moId, entity._wsdlName)
    category = tags.create_category(f"test-{entity._moId}")
    tag = tags.create_tag("x", category)
    tags.attach(tag, obj)
    assert tags.attached_objects([tag]) == {tag: [obj]}
    tags.detach(tag, obj)
    assert tags.attached_objects([tag]) == {tag: []}


def test_tagging_session_is_reestablished(seeded: Inventory, tags: TaggingClient) -> None:
    tags.keepalive()
    stale = tags._session_id
    tags._http.delete(
        f"{tags.base_url}/rest/com/vmware/cis/session",
        headers={"vmware-api-session-id": str(stale)},
    )
    assert tags.list_categories()
    assert tags._session_id not in (None, stale)


@pytest.mark.parametrize(
    ("trust", "works"),
    [
        pytest.param("ca", True, id="ca-file"),
        pytest.param("thumbprint", True, id="thumbprint"),
        pytest.param("wrong-thumbprint", False, id="wrong-thumbprint"),
        pytest.param("system", False, id="system-store-rejects"),
        pytest.param("insecure", True, id="insecure-when-asked"),
    ],
)
def test_tagging_tls(vcsim: VcsimEndpoint, trust: str, works: bool) -> None:
    options: dict[str, dict[str, Any]] = {
        "ca": {"ca_file": vcsim.ca_file},
        "thumbprint": {"thumbprint": vcsim.thumbprint()},
        "wrong-thumbprint": {"thumbprint": "00:" * 19 + "00"},
        "system": {},
        "insecure": {"insecure": True},
    }
    kwargs = options[trust]
    client = TaggingClient(vcsim.url, lambda: (vcsim.username, vcsim.password), **kwargs)
    try:
        if works:
            client.list_categories()
        else:
            with pytest.raises(requests.exceptions.SSLError):
                client.list_categories()
    finally:
        client.logout()


def test_tagging_wrong_password_is_401(vcsim: VcsimEndpoint) -> None:
    client = TaggingClient(vcsim.url, lambda: (vcsim.username, "wrong"), ca_file=vcsim.ca_file)
    with pytest.raises(TaggingHTTPError) as caught:
        client.list_categories()
    assert caught.value.status == 401
    assert "wrong" not in str(caught.value)


def test_first_class_disk_round_trip(seeded: Inventory, si: Any) -> None:
    """CreateDisk/AttachDisk/ExtendDisk/DetachDisk/Delete through a hand-built manager."""
    assert si.content.vStorageObjectManager is None  # pyvmomi's gap the driver works around
    manager = vim.vslm.vcenter.VStorageObjectManager("VStorageObjectManager", si._stub)
    datastore = find(si, "DC0/datastore/LocalDS_0")
    spec = vim.vslm.CreateSpec(
        name="pvc-test",
        capacityInMB=1024,
        backingSpec=vim.vslm.CreateSpec.DiskFileBackingSpec(
            datastore=datastore, provisioningType="thin"
        ),
    )
    disk = wait_task(si, manager.CreateDisk_Task(spec))
    disk_id = disk.config.id
    vm = find(si, "DC0/vm/node-a")
    wait_task(si, vm.AttachDisk_Task(diskId=disk_id, datastore=datastore))
    got = manager.RetrieveVStorageObject(disk_id, datastore)
    assert got.config.name == "pvc-test"
    assert [c.id for c in got.config.consumerId] == [seeded.vms["node-a"].uuid]
    wait_task(si, manager.ExtendDisk_Task(disk_id, datastore, 2048))
    assert manager.RetrieveVStorageObject(disk_id, datastore).config.capacityInMB == 2048
    wait_task(si, vm.DetachDisk_Task(diskId=disk_id))
    wait_task(si, manager.DeleteVStorageObject_Task(disk_id, datastore))
    with pytest.raises(vim.fault.NotFound):
        manager.RetrieveVStorageObject(disk_id, datastore)
