"""EBS snapshots for the CSI controller: tagged create, lookup by tag, delete, list.

Snapshots carry the cluster's ownership tag, ``ebs.csi.aws.com/cluster=true`` and the CSI
snapshot name (``CSIVolumeSnapshotName``), as the EBS CSI driver tags them, so a create retried
after a crash finds the snapshot it already started. Every call issues one EC2 request and
returns; a snapshot may still be ``pending`` (CSI ``ready_to_use`` false).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.base import NAME, AwsBase
from cloudloop.cloud.aws.tags import cluster_tag_key, tag_dict
from cloudloop.cloud.aws.volumes import EBS_CSI_CLUSTER_TAG, ebs_calling

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import FilterTypeDef

#: Tag holding the CSI snapshot name (the VolumeSnapshotContent name), as the EBS CSI driver.
CSI_SNAPSHOT_NAME_TAG = "CSIVolumeSnapshotName"
_SNAPSHOT_ID = re.compile(r"^snap-[0-9a-f]{8,17}$")


def is_snapshot_id(snapshot_id: str) -> bool:
    return bool(_SNAPSHOT_ID.match(snapshot_id))


class AwsSnapshots:
    """EBS snapshots on the session."""

    def __init__(self, session: AwsBase) -> None:
        self.session = session

    def find_snapshot(self, name: str, cluster: str) -> models.Snapshot | None:
        found = self._describe_snapshots(
            [
                {"Name": f"tag:{CSI_SNAPSHOT_NAME_TAG}", "Values": [name]},
                {"Name": "tag-key", "Values": [cluster_tag_key(cluster)]},
            ]
        )
        named = [s for s in found if s.name == name]
        return min(named, key=lambda s: (s.created_at, s.id)) if named else None

    def get_snapshot(self, snapshot_id: str) -> models.Snapshot:
        if not is_snapshot_id(snapshot_id):
            raise errors.NotFound(NAME, "DescribeSnapshots", f"no snapshot {snapshot_id!r}")
        found = self._describe_snapshots([{"Name": "snapshot-id", "Values": [snapshot_id]}])
        if not found:
            raise errors.NotFound(NAME, "DescribeSnapshots", f"no snapshot {snapshot_id!r}")
        return found[0]

    def create_snapshot(self, spec: models.SnapshotSpec) -> models.Snapshot:
        tags = {
            **self.session.settings.tags,
            **spec.tags,
            CSI_SNAPSHOT_NAME_TAG: spec.name,
            EBS_CSI_CLUSTER_TAG: "true",
        }
        if spec.cluster:
            tags[cluster_tag_key(spec.cluster)] = "owned"
        with ebs_calling("CreateSnapshot"):
            raw = self.session.client("ec2").create_snapshot(
                VolumeId=spec.source_volume_id,
                TagSpecifications=[
                    {
                        "ResourceType": "snapshot",
                        "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
                    }
                ],
            )
        return self._to_snapshot(raw)

    def delete_snapshot(self, snapshot_id: str) -> None:
        if not is_snapshot_id(snapshot_id):
            raise errors.NotFound(NAME, "DeleteSnapshot", f"no snapshot {snapshot_id!r}")
        with ebs_calling("DeleteSnapshot"):
            self.session.client("ec2").delete_snapshot(SnapshotId=snapshot_id)

    def list_snapshots(self, cluster: str) -> list[models.Snapshot]:
        found = self._describe_snapshots(
            [{"Name": "tag-key", "Values": [cluster_tag_key(cluster)]}]
        )
        return sorted(found, key=lambda s: s.id)

    def _describe_snapshots(self, filters: list[FilterTypeDef]) -> list[models.Snapshot]:
        snapshots: list[models.Snapshot] = []
        paginator = self.session.client("ec2").get_paginator("describe_snapshots")
        with ebs_calling("DescribeSnapshots"):
            for page in paginator.paginate(OwnerIds=["self"], Filters=filters):
                snapshots += [self._to_snapshot(raw) for raw in page.get("Snapshots", [])]
        return snapshots

    @staticmethod
    def _to_snapshot(raw: Mapping[str, Any]) -> models.Snapshot:
        started = raw.get("StartTime")
        created = started.timestamp() if isinstance(started, datetime) else 0.0
        return models.Snapshot(
            id=str(raw["SnapshotId"]),
            source_volume_id=str(raw.get("VolumeId", "")),
            size_gib=int(raw.get("VolumeSize", 0) or 0),
            state=str(raw.get("State", "")),
            created_at=created,
            name=tag_dict(raw.get("Tags")).get(CSI_SNAPSHOT_NAME_TAG, ""),
        )
