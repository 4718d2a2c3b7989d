"""The CSI surface's pure parts: parameters, paging, capabilities, StorageClasses, devices,
mountinfo and the EBS create arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudloop.cloud import errors
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.aws.volumes import create_arguments, ebs_storage_classes, nvme_serial
from cloudloop.cloud.models import StorageClassSpec, VolumeSpec
from cloudloop.csi.controller import page, split_parameters
from cloudloop.csi.devices import find_device
from cloudloop.csi.mounter import parse_mountinfo
from cloudloop.csi.objects import DEFAULT_ANNOTATION, default_class, storage_class_objects
from cloudloop.csi.spec import Features, Refused, unsupported_capability
from cloudloop.csi.v1 import csi_pb2
from cloudloop.messages.volume import Code
from cloudloop.settings import CsiSettings

Mode = csi_pb2.VolumeCapability.AccessMode


def test_parameters_split_into_cloud_tags_and_context() -> None:
    cloud, tags, context = split_parameters(
        {
            "type": "io2",
            "iops": "3000",
            "csi.storage.k8s.io/pvc/name": "data",
            "csi.storage.k8s.io/pvc/namespace": "shop",
            "csi.storage.k8s.io/pv/name": "pvc-1",
            "csi.storage.k8s.io/fstype": "XFS",
            "csi.storage.k8s.io/provisioner-secret-name": "s",
        }
    )
    assert cloud == {"type": "io2", "iops": "3000"}
    assert tags == {
        "kubernetes.io/created-for/pvc/name": "data",
        "kubernetes.io/created-for/pvc/namespace": "shop",
        "kubernetes.io/created-for/pv/name": "pvc-1",
    }
    assert context == {"fsType": "xfs"}


@pytest.mark.parametrize(
    ("token", "limit", "expected", "next_token"),
    [
        pytest.param("", 0, [0, 1, 2, 3, 4], "", id="all"),
        pytest.param("", 2, [0, 1], "2", id="first-page"),
        pytest.param("2", 2, [2, 3], "4", id="middle-page"),
        pytest.param("4", 2, [4], "", id="last-page"),
        pytest.param("5", 2, [], "", id="past-the-end-after-deletes"),
    ],
)
def test_paging(token: str, limit: int, expected: list[int], next_token: str) -> None:
    assert page(list(range(5)), token, limit) == (expected, next_token)


@pytest.mark.parametrize("token", ["invalid-token", "-1", "99"], ids=["text", "negative", "beyond"])
def test_a_bad_token_is_aborted(token: str) -> None:
    with pytest.raises(Refused) as refused:
        page(list(range(5)), token, 0)
    assert refused.value.code is Code.ABORTED


@pytest.mark.parametrize(
    ("mode", "access", "supported"),
    [
        pytest.param(Mode.SINGLE_NODE_WRITER, "mount", True, id="rwo-mount"),
        pytest.param(Mode.SINGLE_NODE_READER_ONLY, "block", True, id="ro-block"),
        pytest.param(Mode.SINGLE_NODE_MULTI_WRITER, "mount", True, id="rwop-multi"),
        pytest.param(Mode.MULTI_NODE_MULTI_WRITER, "mount", False, id="rwx"),
        pytest.param(Mode.MULTI_NODE_READER_ONLY, "block", False, id="rox"),
        pytest.param(Mode.UNKNOWN, "mount", False, id="unknown"),
    ],
)
def test_capabilities(mode: int, access: str, supported: bool) -> None:
    capability = csi_pb2.VolumeCapability(access_mode=Mode(mode=mode))  # type: ignore[arg-type]
    if access == "mount":
        capability.mount.fs_type = "ext4"
    else:
        capability.block.SetInParent()
    assert (unsupported_capability(capability) == "") is supported


def test_aws_features() -> None:
    features = Features.of(AwsDriver(AwsSettings()))
    assert (features.zonal, features.snapshots, features.capacity) == (True, True, False)
    RPC = csi_pb2.ControllerServiceCapability.RPC
    rpcs = {c.rpc.type for c in features.controller_capabilities()}
    assert {RPC.CREATE_DELETE_SNAPSHOT, RPC.LIST_SNAPSHOTS, RPC.EXPAND_VOLUME} <= rpcs
    assert RPC.GET_CAPACITY not in rpcs
    Service = csi_pb2.PluginCapability.Service
    services = {c.service.type for c in features.plugin_capabilities() if c.HasField("service")}
    assert services == {Service.CONTROLLER_SERVICE, Service.VOLUME_ACCESSIBILITY_CONSTRAINTS}


SPECS = [
    StorageClassSpec(name="fast", parameters={"tier": "1"}, default=True),
    StorageClassSpec(name="slow", parameters={"tier": "2"}),
]


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        pytest.param("", "fast", id="the-clouds-own"),
        pytest.param("slow", "slow", id="chosen"),
        pytest.param("missing", "", id="chosen-but-not-offered"),
        pytest.param("-", "", id="none"),
    ],
)
def test_default_storage_class(setting: str, expected: str) -> None:
    assert default_class(SPECS, setting) == expected


def test_storage_class_objects() -> None:
    fast, slow = storage_class_objects(
        "csi.example", SPECS, zones=["z2", "z1"], zonal=True, default="slow"
    )
    assert fast["provisioner"] == "csi.example"
    assert fast["volumeBindingMode"] == "WaitForFirstConsumer"
    assert fast["reclaimPolicy"] == "Delete" and fast["allowVolumeExpansion"] is True
    assert fast["allowedTopologies"][0]["matchLabelExpressions"][0]["values"] == ["z1", "z2"]
    assert fast["metadata"]["annotations"][DEFAULT_ANNOTATION] == "false"
    assert slow["metadata"]["annotations"][DEFAULT_ANNOTATION] == "true"
    (flat,) = storage_class_objects("d", SPECS[:1], zones=["z1"], zonal=False, default="")
    assert "allowedTopologies" not in flat


def test_ebs_storage_classes() -> None:
    classes = {c.name: c for c in ebs_storage_classes()}
    assert [c.name for c in classes.values() if c.default] == ["gp3"]
    assert {"gp3", "gp2", "io1", "io2", "st1", "sc1", "standard"} <= set(classes)
    assert classes["gp3-encrypted"].parameters == {"type": "gp3", "encrypted": "true"}
    assert classes["io2"].parameters["iopsPerGB"] == "50"


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        pytest.param({}, {"VolumeType": "gp3"}, id="default-gp3"),
        pytest.param(
            {"type": "gp3", "iops": "4000", "throughput": "250"},
            {"VolumeType": "gp3", "Iops": 4000, "Throughput": 250},
            id="gp3-iops-throughput",
        ),
        pytest.param(
            {"type": "io2", "iopsPerGB": "2000"},
            {"VolumeType": "io2", "Iops": 10000},
            id="io2-iops-per-gib-capped",
        ),
        pytest.param(
            {"encrypted": "true", "kmsKeyId": "arn:k"},
            {"VolumeType": "gp3", "Encrypted": True, "KmsKeyId": "arn:k"},
            id="encrypted",
        ),
    ],
)
def test_ebs_create_arguments(parameters: dict[str, str], expected: dict[str, object]) -> None:
    spec = VolumeSpec(name="v", size_gib=10, zone="z", parameters=parameters)
    assert create_arguments(spec) == expected


@pytest.mark.parametrize(
    "parameters",
    [
        pytest.param({"type": "gp9"}, id="unknown-type"),
        pytest.param({"colour": "red"}, id="unknown-key"),
        pytest.param({"type": "gp2", "iops": "100"}, id="iops-on-gp2"),
        pytest.param({"type": "io1", "throughput": "100"}, id="throughput-on-io1"),
        pytest.param({"iops": "many"}, id="not-a-number"),
        pytest.param({"encrypted": "yes"}, id="bad-bool"),
    ],
)
def test_bad_ebs_parameters_are_invalid(parameters: dict[str, str]) -> None:
    with pytest.raises(errors.InvalidRequest):
        create_arguments(VolumeSpec(name="v", size_gib=10, zone="z", parameters=parameters))


def test_nvme_serial() -> None:
    assert nvme_serial("vol-0123456789abcdef0") == "vol0123456789abcdef0"


def test_devices_by_serial_path_and_id(tmp_path: Path) -> None:
    disks = tmp_path / "dev"
    disks.mkdir()
    for name in ("nvme0n1", "vdb", "sdc", "vdd"):
        (disks / name).touch()
    by_id = tmp_path / "by-id"
    by_id.mkdir()
    (by_id / "nvme-Amazon_Elastic_Block_Store_vol0abc").symlink_to(disks / "nvme0n1")
    (by_id / "nvme-Amazon_Elastic_Block_Store_vol0abc-part1").symlink_to(disks / "sdc")
    (by_id / "virtio-0123456789abcdefghij").symlink_to(disks / "vdb")
    (by_id / "scsi-0QEMU_QEMU_HARDDISK_disk-uuid-1").symlink_to(disks / "sdc")
    (by_id / "virtio-pvc-5f2a").symlink_to(disks / "vdd")
    assert find_device(by_id, "vol-0abc", {"serial": "vol0abc"}) == disks / "nvme0n1"
    virtio = {"serial": "0123456789abcdefghijKLMN"}
    assert find_device(by_id, "x", virtio) == disks / "vdb"
    assert find_device(by_id, "x", {"serial": "disk-uuid-1"}) == disks / "sdc"
    assert find_device(by_id, "pvc-5f2a", {}) == disks / "vdd"
    assert find_device(by_id, "x", {"devicePath": str(disks / "vdd")}) == disks / "vdd"
    assert find_device(by_id, "x", {"serial": "nothere"}) is None


def test_mountinfo() -> None:
    text = (
        "36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw\n"
        "42 27 254:0 /tmp/a /tmp/b rw,relatime - ext4 /dev/vda rw,discard\n"
    )
    mounts = parse_mountinfo(text)
    assert mounts["/mnt/with space"].fstype == "ext3"
    assert mounts["/tmp/b"].root == "/tmp/a" and mounts["/tmp/b"].device == "254:0"


@pytest.mark.parametrize(
    ("csi_name", "disk"),
    [
        pytest.param("pvc-5f2a9c", "pvc-5f2a9c", id="a-pv-name-is-kept"),
        pytest.param("Sanity-Upper", None, id="uppercase-is-hashed"),
        pytest.param("x" * 64, None, id="too-long-is-hashed"),
    ],
)
def test_dvp_disk_names(csi_name: str, disk: str | None) -> None:
    from cloudloop.cloud.dvp.volumes import disk_name

    made = disk_name(csi_name)
    assert made == disk if disk else (made.startswith("csi-") and len(made) <= 63)
    assert disk_name(csi_name) == made  # deterministic: a retried create finds its disk


@pytest.mark.parametrize(
    ("quantity", "size"),
    [
        pytest.param("10Gi", 10 << 30, id="gibibytes"),
        pytest.param("1073741824", 1 << 30, id="bytes"),
        pytest.param("5G", 5 * 10**9, id="gigabytes"),
        pytest.param(3 << 30, 3 << 30, id="integer"),
        pytest.param("lots", 0, id="unreadable"),
    ],
)
def test_dvp_quantities(quantity: object, size: int) -> None:
    from cloudloop.cloud.dvp.volumes import quantity_bytes

    assert quantity_bytes(quantity) == size


def test_dvp_and_zvirt_storage_classes_from_discovery() -> None:
    from cloudloop.cloud.dvp.driver import DvpDriver
    from cloudloop.cloud.dvp.settings import DvpSettings
    from cloudloop.cloud.zvirt.driver import ZvirtDriver
    from cloudloop.cloud.zvirt.settings import ZvirtSettings

    dvp_volumes = DvpDriver(DvpSettings()).volumes
    dvp = dvp_volumes.storage_classes(
        {
            "storageClasses": [
                {"name": "ceph-rbd", "isEnabled": True, "isDefault": True},
                {"name": "linstor-thin-r1", "isEnabled": True},
                {"name": "off", "isEnabled": False},
            ]
        }
    )
    assert [(c.name, c.parameters, c.default) for c in dvp] == [
        ("ceph-rbd", {"dvpStorageClass": "ceph-rbd"}, True),
        ("linstor-thin-r1", {"dvpStorageClass": "linstor-thin-r1"}, False),
    ]
    # a document an older cloudloop wrote, until the discoverer's next pass replaces it
    legacy = {"volumeTypes": [{"name": "ceph-rbd", "isEnabled": True, "IsDefault": True}]}
    assert [(c.name, c.default) for c in dvp_volumes.storage_classes(legacy)] == [
        ("ceph-rbd", True)
    ]
    zvirt_volumes = ZvirtDriver(ZvirtSettings()).volumes
    zvirt = zvirt_volumes.storage_classes(
        {
            "storageDomains": [
                {"name": "data-fast", "isEnabled": True, "isDefaul": True},
                {"name": "data-slow", "isEnabled": False, "isDefaul": False},
            ]
        }
    )
    assert [(c.name, c.default) for c in zvirt] == [("data-fast", True)]
    assert zvirt[0].parameters == {"storageDomainName": "data-fast", "thinProvisioning": "true"}
    legacy = {"storageDomains": [{"name": "data-fast", "isEnabled": True, "IsDefault": True}]}
    assert [(c.name, c.default) for c in zvirt_volumes.storage_classes(legacy)] == [
        ("data-fast", True)
    ]


@pytest.mark.parametrize(
    ("patterns", "kept"),
    [
        pytest.param([], ["fast", "slow"], id="none"),
        pytest.param(["slow"], ["fast"], id="by-name"),
        pytest.param([".*-hdd", "^f"], ["slow"], id="regex"),
        pytest.param(["as"], ["slow"], id="anywhere-in-the-name"),
    ],
)
def test_storage_class_exclude(patterns: list[str], kept: list[str]) -> None:
    csi = CsiSettings(storage_class_exclude=patterns)
    assert [s.name for s in SPECS if not csi.excluded(s.name)] == kept


def test_a_storage_class_exclude_that_is_no_regex_is_refused() -> None:
    with pytest.raises(ValueError, match="is not a regex"):
        CsiSettings(storage_class_exclude=["[unclosed"])
