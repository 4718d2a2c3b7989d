"""The per-cloud parts of the CSI driver for OpenStack (Cinder) and vSphere (first-class disks),
with no cloud: features and topology keys, StorageClasses from discovery documents, class names,
parameters refused before any call, NodeGetInfo's segment, and finding their disks on a node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cloudloop.cloud import errors, models
from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.openstack.settings import BlockStorageSettings, OpenStackSettings
from cloudloop.cloud.openstack.volumes import storage_class_name as cinder_class_name
from cloudloop.cloud.vsphere.driver import VsphereDriver
from cloudloop.cloud.vsphere.settings import VsphereSettings
from cloudloop.cloud.vsphere.volumes import storage_class_name as datastore_class_name
from cloudloop.csi.devices import find_device
from cloudloop.csi.mounter import DirectoryMounter
from cloudloop.csi.node import Node
from cloudloop.csi.objects import storage_class_objects
from cloudloop.csi.spec import Features
from cloudloop.csi.v1 import csi_pb2
from tests.support.parts import has

CINDER_KEY = "topology.cinder.csi.openstack.org/zone"


def openstack(**block_storage: Any) -> OpenStackDriver:
    return OpenStackDriver(OpenStackSettings(block_storage=BlockStorageSettings(**block_storage)))


def vsphere(**settings: Any) -> VsphereDriver:
    return VsphereDriver(VsphereSettings(**settings))


@pytest.mark.parametrize(
    ("make", "key", "max_volumes", "capacity"),
    [
        pytest.param(openstack, CINDER_KEY, 256, False, id="openstack"),
        pytest.param(
            lambda: openstack(node_volume_attach_limit=40), CINDER_KEY, 40, False, id="os-limit"
        ),
        pytest.param(
            lambda: openstack(node_volume_attach_limit=1000), CINDER_KEY, 256, False, id="os-cap"
        ),
        pytest.param(vsphere, "topology.csi.vmware.com/k8s-zone", 59, True, id="vsphere"),
        pytest.param(
            lambda: vsphere(zone_tag_category="dc-zone"),
            "topology.csi.vmware.com/dc-zone",
            59,
            True,
            id="vsphere-category",
        ),
    ],
)
def test_features(make: Any, key: str, max_volumes: int, capacity: bool) -> None:
    driver: CloudDriver = make()
    features = Features.of(driver)
    assert features.zonal and features.list_volumes and not features.snapshots
    assert (features.topology_key, features.max_volumes_per_node) == (key, max_volumes)
    assert features.capacity is capacity


@pytest.mark.parametrize(
    ("volume_type", "name"),
    [
        pytest.param("__DEFAULT__", "default", id="default"),
        pytest.param("some-foo", "some-foo", id="plain"),
        pytest.param("SSD R1", "ssdr1", id="space"),
        pytest.param("-Xx$&? -foo", "xx-foo", id="symbols"),
        pytest.param(" YY fast SSD -foo.", "yyfastssd-foo", id="trimmed"),
    ],
)
def test_cinder_class_names(volume_type: str, name: str) -> None:
    """Deckhouse's ``getStorageClassName`` cases, lower-cased."""
    assert cinder_class_name(volume_type) == name


def test_openstack_storage_classes() -> None:
    document = {
        "volumeTypes": [
            {"name": "ssd", "id": "3"},
            {"name": "__DEFAULT__", "id": "1"},
            {"name": "lvmdriver-1", "id": "2"},
            {"name": "$$$", "id": "4"},
        ]
    }
    classes = openstack().volumes.storage_classes(document)
    assert [(c.name, c.parameters, c.default, c.zones) for c in classes] == [
        ("default", {"type": "__DEFAULT__"}, True, []),
        ("lvmdriver-1", {"type": "lvmdriver-1"}, False, []),
        ("ssd", {"type": "ssd"}, False, []),
    ]
    without_default = openstack().volumes.storage_classes(
        {"volumeTypes": [{"name": "b"}, {"name": "a"}]}
    )
    assert [(c.name, c.default) for c in without_default] == [("a", True), ("b", False)]
    assert openstack().volumes.storage_classes({}) == []


@pytest.mark.parametrize(
    ("datastore", "name"),
    [
        pytest.param("ds-fast", "ds-fast", id="kept"),
        pytest.param("LocalDS_0", "localds-0-", id="slugged-with-hash"),
        pytest.param("Ceph SSD/01", "ceph-ssd-01-", id="path"),
    ],
)
def test_datastore_class_names(datastore: str, name: str) -> None:
    made = datastore_class_name(datastore)
    assert made.startswith(name) and len(made) <= 63
    assert made == name or len(made) == len(name) + 8
    assert made == datastore_class_name(datastore)


def _datastore(name: str, zones: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "zones": zones,
        "path": name,
        "datastoreType": "local",
        "datastoreURL": f"ds:///vmfs/volumes/{name}/",
    }


def test_vsphere_storage_classes() -> None:
    document = {
        "zones": ["zone-a", "zone-b"],
        "datastores": [
            _datastore("ds-b", ["zone-b", "zone-c"]),
            _datastore("ds-a", ["zone-a"]),
            _datastore("ds-c", ["zone-c"]),  # no zone the cluster uses
            _datastore("ds-none", []),
        ],
        "storagePolicies": [{"name": "gold", "id": "p-1"}],
    }
    classes = vsphere().volumes.storage_classes(document)
    assert [(c.name, c.zones, c.default) for c in classes] == [
        ("ds-a", ["zone-a"], True),
        ("ds-b", ["zone-b"], False),
    ]
    assert classes[0].parameters == {"DatastoreURL": "ds:///vmfs/volumes/ds-a/"}
    chosen = vsphere(default_datastore="ds-b", storage_policy_id="p-1").volumes.storage_classes(
        document
    )
    assert [(c.name, c.default) for c in chosen] == [("ds-a", False), ("ds-b", True)]
    assert chosen[1].parameters == {
        "DatastoreURL": "ds:///vmfs/volumes/ds-b/",
        "StoragePolicyName": "gold",
    }


def test_storage_class_objects_use_the_class_zones_and_the_cloud_key() -> None:
    specs = [
        models.StorageClassSpec(name="ds-a", zones=["zone-a"], default=True),
        models.StorageClassSpec(name="any"),
    ]
    any_zone, ds_a = storage_class_objects(
        "d", specs, zones=["zone-b", "zone-a"], zonal=True, default="ds-a", topology_key="k/zone"
    )
    assert ds_a["allowedTopologies"] == [
        {"matchLabelExpressions": [{"key": "k/zone", "values": ["zone-a"]}]}
    ]
    assert any_zone["allowedTopologies"][0]["matchLabelExpressions"][0]["values"] == [
        "zone-a",
        "zone-b",
    ]


@pytest.mark.parametrize(
    ("make", "parameters"),
    [
        pytest.param(openstack, {"type": "ssd", "fsType": "ext4"}, id="openstack"),
        pytest.param(vsphere, {"DatastoreURL": "ds:///x/", "diskformat": "thin"}, id="vsphere"),
    ],
)
def test_unknown_parameters_are_refused_before_any_call(
    make: Any, parameters: dict[str, str]
) -> None:
    driver: CloudDriver = make()
    with pytest.raises(errors.InvalidRequest, match="unknown parameters"):
        has(driver.volumes).create_volume(
            models.VolumeSpec(name="pvc-1", size_gib=1, parameters=parameters)
        )


async def test_node_info_names_the_zone_under_the_cloud_key(tmp_path: Path) -> None:
    node = Node(DirectoryMounter(tmp_path), node_id="srv-1", zone="nova", topology_key=CINDER_KEY)
    info = await node.NodeGetInfo(csi_pb2.NodeGetInfoRequest(), None)  # type: ignore[arg-type]
    assert info.node_id == "srv-1"
    assert dict(info.accessible_topology.segments) == {CINDER_KEY: "nova"}


@pytest.mark.parametrize(
    ("by_id_name", "serial"),
    [
        pytest.param(
            "virtio-4f1a2b3c-5d6e-4f70-8",
            "4f1a2b3c-5d6e-4f70-8192-a3b4c5d6e7f8",
            id="cinder-virtio-blk",
        ),
        pytest.param(
            "scsi-0QEMU_QEMU_HARDDISK_4f1a2b3c-5d6e-4f70-8",
            "4f1a2b3c-5d6e-4f70-8192-a3b4c5d6e7f8",
            id="cinder-virtio-scsi",
        ),
        pytest.param(
            "wwn-0x6000c29a1b2c3d4e5f60718293a4b5c6",
            "6000c29a1b2c3d4e5f60718293a4b5c6",
            id="vsphere-scsi-uuid",
        ),
    ],
)
def test_disks_are_found_by_their_serial(tmp_path: Path, by_id_name: str, serial: str) -> None:
    disk = tmp_path / "sdb"
    disk.touch()
    by_id = tmp_path / "by-id"
    by_id.mkdir()
    (by_id / by_id_name).symlink_to(disk)
    (by_id / f"{by_id_name}-part1").symlink_to(tmp_path / "elsewhere")
    assert find_device(by_id, "volume", {"serial": serial}) == disk
    assert find_device(by_id, "volume", {"serial": "another"}) is None
