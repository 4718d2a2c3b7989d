"""AWS EBS volumes for the CSI controller: tagged create, lookup by tag, attach with device names
allocated per instance, detach, resize, and attribute changes (ControllerModifyVolume: type,
IOPS, throughput through ``ModifyVolume``, tags through ``CreateTags``).

Every call issues one EC2 change and returns; waiting for ``available``/``attached``/``detached``
is the activities' job. Volumes carry the cluster's ownership tag and the CSI name
(``CSIVolumeName``), as the EBS CSI driver tags them, so a create retried after a crash finds the
volume it already made.
"""

from __future__ import annotations

import contextlib
import re
import string
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import botocore.exceptions

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws import ebs_limits
from cloudloop.cloud.aws.base import NAME, AwsBase, translate
from cloudloop.cloud.aws.tags import cluster_tag_key, tag_dict
from cloudloop.cloud.driver import VolumeDefaults

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import FilterTypeDef, TagTypeDef

#: Tag holding the CSI volume name (the PV name), as the EBS CSI driver sets it.
CSI_NAME_TAG = "CSIVolumeName"
#: Tag the EBS CSI driver puts on every volume it creates.
EBS_CSI_CLUSTER_TAG = "ebs.csi.aws.com/cluster"
DEFAULT_VOLUME_TYPE = "gp3"
#: EBS volume types and the StorageClass each gets (aws-ebs-csi-driver's parameters).
VOLUME_TYPES = ebs_limits.VOLUME_TYPES
#: Volumes an instance takes when its type is unknown (aws-ebs-csi-driver, Nitro instances).
DEFAULT_MAX_VOLUMES = 25

#: Device names handed to EBS attachments, ``/dev/xvdba`` .. ``/dev/xvdcz`` (EBS CSI driver).
DEVICE_NAMES = tuple(f"/dev/xvd{a}{b}" for a in "bc" for b in string.ascii_lowercase)

_VOLUME_ID = re.compile(r"^vol-[0-9a-f]{8,17}$")
_GONE_STATES = {"deleting", "deleted"}
_GONE_INSTANCE_STATES = {"shutting-down", "terminated"}

#: EC2 error codes that mean more than the generic translation says.
_CODE_ERRORS: dict[str, type[errors.CloudError]] = {
    "VolumeInUse": errors.FailedPrecondition,
    "IncorrectState": errors.FailedPrecondition,
    "IncorrectModificationState": errors.FailedPrecondition,
    "InvalidVolume.ZoneMismatch": errors.FailedPrecondition,
    "AttachmentLimitExceeded": errors.ResourceExhausted,
    "VolumeLimitExceeded": errors.ResourceExhausted,
    "InsufficientVolumeCapacity": errors.ResourceExhausted,
    "VolumeModificationRateExceeded": errors.ModificationCooldown,
}
#: EBS takes one ModifyVolume per volume every six hours (EC2 API Reference, ModifyVolume).
MODIFICATION_COOLDOWN_S = 6 * 3600.0


def is_volume_id(volume_id: str) -> bool:
    return bool(_VOLUME_ID.match(volume_id))


def nvme_serial(volume_id: str) -> str:
    """The serial an EBS volume has on a Nitro instance (``/dev/disk/by-id/nvme-Amazon_Elastic_
    Block_Store_vol0123...``): its ID without the dash."""
    return volume_id.replace("-", "", 1)


def create_arguments(spec: models.VolumeSpec) -> dict[str, Any]:
    """``CreateVolume`` arguments from the StorageClass parameters, checked against the EBS
    limits first (:mod:`~cloudloop.cloud.aws.ebs_limits`: ``InvalidRequest``/``OutOfRange``)."""
    request = ebs_limits.check_request(
        spec.size_gib, spec.parameters, spec.volume_type, default_type=DEFAULT_VOLUME_TYPE
    )
    kwargs: dict[str, Any] = {"VolumeType": request.volume_type}
    if request.iops is not None:
        kwargs["Iops"] = request.iops
    if request.throughput is not None:
        kwargs["Throughput"] = request.throughput
    if request.encrypted:
        kwargs["Encrypted"] = True
        if request.kms_key_id:
            kwargs["KmsKeyId"] = request.kms_key_id
    if spec.snapshot_id:
        kwargs["SnapshotId"] = spec.snapshot_id
    return kwargs


def parameter_tags(spec: models.VolumeSpec) -> dict[str, str]:
    """The ``tagSpecification_<n>: key=value`` tags of the StorageClass parameters."""
    return ebs_limits.check_request(
        spec.size_gib, spec.parameters, spec.volume_type, default_type=DEFAULT_VOLUME_TYPE
    ).tags


def ebs_storage_classes() -> list[models.StorageClassSpec]:
    """One StorageClass per EBS type, ``gp3`` the default (as Deckhouse's cloud-provider-aws)."""
    classes = [models.StorageClassSpec(name="gp3", parameters={"type": "gp3"}, default=True)]
    classes.append(
        models.StorageClassSpec(
            name="gp3-encrypted", parameters={"type": "gp3", "encrypted": "true"}
        )
    )
    classes += [
        models.StorageClassSpec(name=t, parameters={"type": t})
        for t in VOLUME_TYPES
        if t not in ("gp3", "io1", "io2")
    ]
    classes += [
        models.StorageClassSpec(name=t, parameters={"type": t, "iopsPerGB": "50"})
        for t in ("io1", "io2")
    ]
    return classes


def _error_code(exc: BaseException | None) -> str:
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


@contextlib.contextmanager
def ebs_calling(operation: str) -> Iterator[None]:
    """Like :func:`~cloudloop.cloud.aws.base.calling`, with the EBS-specific error codes."""
    try:
        yield
    except errors.CloudError:
        raise
    except botocore.exceptions.ClientError as exc:
        code = _error_code(exc)
        if code in _CODE_ERRORS:
            message = str(exc.response.get("Error", {}).get("Message", code))
            raise _CODE_ERRORS[code](NAME, operation, f"{code}: {message}") from exc
        raise translate(operation, exc) from exc
    except Exception as exc:
        raise translate(operation, exc) from exc


def _short_device(device: str) -> str:
    return device.removeprefix("/dev/")


class DeviceAllocator:
    """Device names for attachments to one instance, free of collisions within this process.

    A name is free when the instance's block device mappings (read by the caller while holding
    :meth:`instance_lock`) do not use it and no attach of this process holds it. A held name
    stays held for ``hold_s`` after :meth:`release`, so a mapping read that raced with the
    attach (EC2 reads are eventually consistent) cannot hand the name out again.
    """

    def __init__(
        self,
        names: Iterable[str] = DEVICE_NAMES,
        *,
        hold_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.names = tuple(names)
        self.hold_s = hold_s
        self.clock = clock
        self._guard = threading.Lock()
        self._instance_locks: dict[str, threading.Lock] = {}
        #: instance → device → when the hold ends (``inf`` while the attach is in flight).
        self._held: dict[str, dict[str, float]] = {}

    def instance_lock(self, instance_id: str) -> threading.Lock:
        """Hold it across reading the instance's mappings and :meth:`reserve`."""
        with self._guard:
            return self._instance_locks.setdefault(instance_id, threading.Lock())

    def held(self, instance_id: str) -> set[str]:
        now = self.clock()
        with self._guard:
            held = self._held.get(instance_id, {})
            for device in [d for d, until in held.items() if until <= now]:
                del held[device]
            return set(held)

    def reserve(self, instance_id: str, in_use: Iterable[str]) -> str:
        """The first name neither ``in_use`` nor held; ``ResourceExhausted`` when none is left."""
        taken = {_short_device(d) for d in in_use} | {
            _short_device(d) for d in self.held(instance_id)
        }
        with self._guard:
            for name in self.names:
                if _short_device(name) not in taken:
                    self._held.setdefault(instance_id, {})[name] = float("inf")
                    return name
        raise errors.ResourceExhausted(
            NAME,
            "AttachVolume",
            f"no free device name on instance {instance_id} ({len(self.names)} in use)",
        )

    def release(self, instance_id: str, device: str) -> None:
        with self.instance_lock(instance_id), self._guard:
            held = self._held.setdefault(instance_id, {})
            if device in held:
                held[device] = self.clock() + self.hold_s


class AwsVolumes(VolumeDefaults):
    """EBS volumes through EC2, on the session."""

    provider = NAME
    #: Shared by every driver of the process: attaches to one instance never pick one name twice.
    devices = DeviceAllocator()
    zonal_volumes = True
    max_volumes_per_node = DEFAULT_MAX_VOLUMES

    def __init__(self, session: AwsBase) -> None:
        self.session = session

    def list_volumes(self, cluster: str) -> list[models.Volume]:
        filters: list[FilterTypeDef] = [
            {"Name": "tag-key", "Values": [cluster_tag_key(cluster)]},
            {"Name": "tag-key", "Values": [CSI_NAME_TAG]},
        ]
        found: list[models.Volume] = []
        paginator = self.session.client("ec2").get_paginator("describe_volumes")
        with ebs_calling("DescribeVolumes"):
            for page in paginator.paginate(Filters=filters):
                for raw in page.get("Volumes", []):
                    tags = tag_dict(raw.get("Tags"))
                    if raw.get("State") in _GONE_STATES or cluster_tag_key(cluster) not in tags:
                        continue
                    found.append(self.to_volume(raw))
        return sorted(found, key=lambda v: v.id)

    def storage_classes(self, discovery: dict[str, Any]) -> list[models.StorageClassSpec]:
        return ebs_storage_classes()

    def check_volume_request(
        self, size_gib: int, parameters: Mapping[str, str], volume_type: str = ""
    ) -> None:
        ebs_limits.check_request(
            size_gib, parameters, volume_type, default_type=DEFAULT_VOLUME_TYPE
        )

    def check_volume_size(self, size_gib: int, volume_type: str = "") -> None:
        ebs_limits.check_size(size_gib, volume_type, "ModifyVolume")

    # -- volumes ---------------------------------------------------------------------------
    def find_volume(self, name: str, cluster: str) -> models.Volume | None:
        filters: list[FilterTypeDef] = [
            {"Name": f"tag:{CSI_NAME_TAG}", "Values": [name]},
            {"Name": "tag-key", "Values": [cluster_tag_key(cluster)]},
        ]
        with ebs_calling("DescribeVolumes"):
            answer = self.session.client("ec2").describe_volumes(Filters=filters)
        found = [
            raw
            for raw in answer.get("Volumes", [])
            if raw.get("State") not in _GONE_STATES
            and tag_dict(raw.get("Tags")).get(CSI_NAME_TAG) == name
        ]
        if not found:
            return None
        found.sort(key=lambda raw: (str(raw.get("CreateTime", "")), str(raw["VolumeId"])))
        return self.to_volume(found[0])

    def get_volume(self, volume_id: str) -> models.Volume:
        if not is_volume_id(volume_id):
            raise errors.NotFound(NAME, "DescribeVolumes", f"no volume {volume_id!r}")
        with ebs_calling("DescribeVolumes"):
            answer = self.session.client("ec2").describe_volumes(VolumeIds=[volume_id])
        volumes = answer.get("Volumes", [])
        if not volumes or volumes[0].get("State") == "deleted":
            raise errors.NotFound(NAME, "DescribeVolumes", f"no volume {volume_id!r}")
        return self.to_volume(volumes[0])

    def create_volume(self, spec: models.VolumeSpec) -> models.Volume:
        if not spec.zone:
            raise errors.InvalidRequest(NAME, "CreateVolume", "an EBS volume needs a zone")
        if not self.session.settings.allows_zone(spec.zone):
            raise errors.InvalidRequest(
                NAME,
                "CreateVolume",
                f"zone {spec.zone!r} is not one of the cluster's zones "
                f"({', '.join(self.session.settings.zones)})",
            )
        tags = {
            **self.session.settings.tags,
            **parameter_tags(spec),
            **spec.tags,
            CSI_NAME_TAG: spec.name,
            EBS_CSI_CLUSTER_TAG: "true",
        }
        if spec.cluster:
            tags[cluster_tag_key(spec.cluster)] = "owned"
        kwargs: dict[str, Any] = {
            **create_arguments(spec),
            "AvailabilityZone": spec.zone,
            "Size": spec.size_gib,
            "TagSpecifications": [
                {
                    "ResourceType": "volume",
                    "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
                }
            ],
        }
        if spec.client_token:
            kwargs["ClientToken"] = spec.client_token
        with ebs_calling("CreateVolume"):
            raw = self.session.client("ec2").create_volume(**kwargs)
        return self.to_volume(raw)

    def delete_volume(self, volume_id: str) -> None:
        if not is_volume_id(volume_id):
            raise errors.NotFound(NAME, "DeleteVolume", f"no volume {volume_id!r}")
        with ebs_calling("DeleteVolume"):
            self.session.client("ec2").delete_volume(VolumeId=volume_id)

    def attach_volume(self, volume: models.Volume, instance_id: str) -> models.Attachment:
        ec2 = self.session.client("ec2")
        excluded: set[str] = set()
        for _ in range(3):  # another process may take the name we picked: pick again
            with self.devices.instance_lock(instance_id):
                instance = self._instance(instance_id)
                zone = str(instance.get("Placement", {}).get("AvailabilityZone", ""))
                if volume.zone and zone and volume.zone != zone:
                    raise errors.FailedPrecondition(
                        NAME,
                        "AttachVolume",
                        f"volume {volume.id} is in zone {volume.zone}, "
                        f"instance {instance_id} in zone {zone}",
                    )
                mappings = {
                    str(m["DeviceName"]): str(m.get("Ebs", {}).get("VolumeId", ""))
                    for m in instance.get("BlockDeviceMappings", []) or []
                }
                for device, mapped_volume in mappings.items():
                    if mapped_volume == volume.id:
                        return models.Attachment(
                            volume_id=volume.id,
                            instance_id=instance_id,
                            device=device,
                            serial=nvme_serial(volume.id),
                        )
                device = self.devices.reserve(instance_id, set(mappings) | excluded)
            try:
                with ebs_calling("AttachVolume"):
                    answer = ec2.attach_volume(
                        VolumeId=volume.id, InstanceId=instance_id, Device=device
                    )
            except errors.InvalidRequest as exc:
                if "already in use" not in exc.message:
                    raise
                excluded.add(device)
                continue
            except errors.FailedPrecondition:
                # In use: maybe a concurrent attempt attached it here already.
                current = self.get_volume(volume.id)
                mine = [a for a in current.attachments if a.instance_id == instance_id]
                if mine:
                    return mine[0]
                raise
            finally:
                self.devices.release(instance_id, device)
            return models.Attachment(
                volume_id=volume.id,
                instance_id=instance_id,
                device=str(answer.get("Device", device)),
                state=str(answer.get("State", "attaching")),
                serial=nvme_serial(volume.id),
            )
        raise errors.CloudError(
            NAME, "AttachVolume", f"device names on {instance_id} kept colliding: {excluded}"
        )

    def detach_volume(self, volume_id: str, instance_id: str) -> None:
        if not is_volume_id(volume_id):
            raise errors.NotFound(NAME, "DetachVolume", f"no volume {volume_id!r}")
        try:
            with ebs_calling("DetachVolume"):
                self.session.client("ec2").detach_volume(VolumeId=volume_id, InstanceId=instance_id)
        except (errors.NotFound, errors.FailedPrecondition) as exc:
            if _error_code(exc.__cause__) in ("InvalidAttachment.NotFound", "IncorrectState"):
                return  # not attached there, or already detaching
            raise

    def expand_volume(self, volume_id: str, size_gib: int) -> models.VolumeModification:
        if not is_volume_id(volume_id):
            raise errors.NotFound(NAME, "ModifyVolume", f"no volume {volume_id!r}")
        with ebs_calling("ModifyVolume"):
            answer = self.session.client("ec2").modify_volume(VolumeId=volume_id, Size=size_gib)
        return self._to_modification(answer["VolumeModification"])

    def get_volume_modification(self, volume_id: str) -> models.VolumeModification | None:
        if not is_volume_id(volume_id):
            raise errors.NotFound(NAME, "DescribeVolumesModifications", f"no {volume_id!r}")
        try:
            with ebs_calling("DescribeVolumesModifications"):
                answer = self.session.client("ec2").describe_volumes_modifications(
                    VolumeIds=[volume_id]
                )
        except errors.NotFound as exc:
            if _error_code(exc.__cause__) == "InvalidVolumeModification.NotFound":
                return None  # never modified
            raise
        found = sorted(
            answer.get("VolumesModifications", []), key=lambda m: str(m.get("StartTime", ""))
        )
        return self._to_modification(found[-1]) if found else None

    # -- ControllerModifyVolume ------------------------------------------------------------
    def check_volume_modification(self, parameters: Mapping[str, str]) -> None:
        ebs_limits.check_mutable(parameters)

    def volume_changes(
        self, volume: models.Volume, parameters: Mapping[str, str]
    ) -> dict[str, str]:
        wanted = ebs_limits.check_modification(
            volume.size_gib, volume.volume_type, volume.iops, parameters
        )
        changes: dict[str, str] = {}
        if wanted.volume_type != volume.volume_type:
            changes["type"] = wanted.volume_type
        if wanted.iops is not None and wanted.iops != volume.iops:
            changes["iops"] = str(wanted.iops)
        if wanted.throughput is not None and wanted.throughput != volume.throughput:
            changes["throughput"] = str(wanted.throughput)
        for key, value in wanted.tags.items():
            if volume.tags.get(key) != value:
                changes[f"tag:{key}"] = value
        return changes

    def modify_volume(self, volume: models.Volume, parameters: Mapping[str, str]) -> None:
        """Tags through ``CreateTags`` (no cooldown), type, IOPS and throughput through one
        ``ModifyVolume``; its six-hour refusal is ``ModificationCooldown`` with the time left."""
        if not is_volume_id(volume.id):
            raise errors.NotFound(NAME, "ModifyVolume", f"no volume {volume.id!r}")
        changes = self.volume_changes(volume, parameters)
        ec2 = self.session.client("ec2")
        tags: list[TagTypeDef] = [
            {"Key": key.removeprefix("tag:"), "Value": value}
            for key, value in sorted(changes.items())
            if key.startswith("tag:")
        ]
        if tags:
            with ebs_calling("CreateTags"):
                ec2.create_tags(Resources=[volume.id], Tags=tags)
        kwargs: dict[str, Any] = {}
        if "type" in changes:
            kwargs["VolumeType"] = changes["type"]
        if "iops" in changes:
            kwargs["Iops"] = int(changes["iops"])
        if "throughput" in changes:
            kwargs["Throughput"] = int(changes["throughput"])
        if not kwargs:
            return
        try:
            with ebs_calling("ModifyVolume"):
                ec2.modify_volume(VolumeId=volume.id, **kwargs)
        except errors.ModificationCooldown as exc:
            last = self.get_volume_modification(volume.id)
            left = (last.started_at + MODIFICATION_COOLDOWN_S - time.time()) if last else 0.0
            raise errors.ModificationCooldown(
                NAME, "ModifyVolume", exc.message, retry_after_s=max(left, 0.0)
            ) from exc

    # -- helpers ---------------------------------------------------------------------------
    def _instance(self, instance_id: str) -> dict[str, Any]:
        """The raw instance; ``NotFound`` when it does not exist or is terminated."""
        ec2 = self.session.client("ec2")
        if instance_id.startswith("i-"):
            with ebs_calling("DescribeInstances"):
                answer = ec2.describe_instances(
                    Filters=[{"Name": "instance-id", "Values": [instance_id]}]
                )
            for reservation in answer.get("Reservations", []):
                for raw in reservation.get("Instances", []):
                    if raw.get("State", {}).get("Name") not in _GONE_INSTANCE_STATES:
                        return dict(raw)
        raise errors.NotFound(NAME, "DescribeInstances", f"no instance {instance_id!r}")

    @staticmethod
    def to_volume(raw: Mapping[str, Any]) -> models.Volume:
        tags = tag_dict(raw.get("Tags"))
        volume_id = str(raw["VolumeId"])
        attachments = [
            models.Attachment(
                volume_id=volume_id,
                instance_id=str(a.get("InstanceId", "")),
                device=str(a.get("Device", "")),
                state=str(a.get("State", "")),
                serial=nvme_serial(volume_id),
            )
            for a in raw.get("Attachments", []) or []
        ]
        return models.Volume(
            id=volume_id,
            size_gib=int(raw.get("Size", 0) or 0),
            zone=str(raw.get("AvailabilityZone", "")),
            state=str(raw.get("State", "")),
            attached_to=[a.instance_id for a in attachments if a.state != "detached"],
            name=tags.get(CSI_NAME_TAG, ""),
            volume_type=str(raw.get("VolumeType", "")),
            attachments=attachments,
            tags=tags,
            iops=int(raw.get("Iops", 0) or 0),
            throughput=int(raw.get("Throughput", 0) or 0),
        )

    @staticmethod
    def _to_modification(raw: Mapping[str, Any]) -> models.VolumeModification:
        started = raw.get("StartTime")
        return models.VolumeModification(
            volume_id=str(raw.get("VolumeId", "")),
            state=str(raw.get("ModificationState", "")),
            target_size_gib=int(raw.get("TargetSize", 0) or 0),
            message=str(raw.get("StatusMessage", "")),
            started_at=started.timestamp() if isinstance(started, datetime) else 0.0,
        )
