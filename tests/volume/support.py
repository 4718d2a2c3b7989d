"""Helpers for the volume tests: EC2 volumes in moto, read back through boto3."""

from __future__ import annotations

import json
import uuid
from typing import Any

from temporalio.client import Client

from cloudloop.cloud.aws.tags import cluster_tag_key
from tests.support.histories import raw_history, without_visible

GIB = 1 << 30


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_volume(ec2: Any, zone: str, size_gib: int = 1) -> str:
    return str(ec2.create_volume(AvailabilityZone=zone, Size=size_gib)["VolumeId"])


def describe_volume(ec2: Any, volume_id: str) -> dict[str, Any] | None:
    found = ec2.describe_volumes(Filters=[{"Name": "volume-id", "Values": [volume_id]}])
    volumes = found.get("Volumes", [])
    return dict(volumes[0]) if volumes else None


def attachments(ec2: Any, volume_id: str) -> list[dict[str, Any]]:
    volume = describe_volume(ec2, volume_id)
    return [dict(a) for a in (volume or {}).get("Attachments", [])]


def volumes_named(ec2: Any, cluster: str, name: str) -> list[dict[str, Any]]:
    """Every live volume tagged for ``cluster`` with ``CSIVolumeName=name``."""
    found = ec2.describe_volumes(
        Filters=[
            {"Name": "tag:CSIVolumeName", "Values": [name]},
            {"Name": "tag-key", "Values": [cluster_tag_key(cluster)]},
        ]
    )
    return [dict(v) for v in found.get("Volumes", [])]


def instance_devices(ec2: Any, instance_id: str) -> dict[str, str]:
    """The instance's block device mappings: device name → volume ID."""
    found = ec2.describe_instances(InstanceIds=[instance_id])
    raw = found["Reservations"][0]["Instances"][0]
    return {
        str(m["DeviceName"]): str(m.get("Ebs", {}).get("VolumeId", ""))
        for m in raw.get("BlockDeviceMappings", [])
    }


async def ran_again_after_the_kill(client: Client, workflow_id: str) -> bool:
    """The operation ran again on the second worker: the killed worker's workflow task (its
    local attempt) timed out, or an activity attempt after the first one started."""
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.HasField("workflow_task_timed_out_event_attributes"):
            return True
        started = event.activity_task_started_event_attributes
        if event.HasField("activity_task_started_event_attributes") and started.attempt >= 2:
            return True
    return False


async def raw_history_text(temporal_address: str, workflow_id: str) -> tuple[list[str], str]:
    """The event types of a history and its JSON without the readable fields (search
    attributes, workflow IDs), as read by a client that has no codec at all."""
    history = await raw_history(temporal_address, workflow_id)
    types = [str(event["eventType"]) for event in history["events"]]
    return types, json.dumps(without_visible(history))
