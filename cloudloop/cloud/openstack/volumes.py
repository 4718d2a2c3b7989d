"""Cinder volumes with Cinder CSI's semantics: create by name for the cluster, attach via Nova.

As upstream ``cinder-csi`` (``controllerserver.go``, ``openstack_volumes.go``):

- A volume is made with the PV name, the description ``Created by OpenStack Cinder CSI driver``
  and the metadata ``cinder.csi.openstack.org/cluster=<cluster>`` plus the request's extra
  metadata (PVC name and namespace); ``find_volume`` asks for that name and metadata (oldest
  first, so two raced creates settle on one). A quota refusal (413) is ``ResourceExhausted``.
- Attach is ``POST /servers/{id}/os-volume_attachments``; Nova's own attachment list is read
  first, so a retried attach finds the one in flight (Cinder lists an attachment only once
  ``in-use``). Detach is ``DELETE .../os-volume_attachments/{volume}``; "not attached" is fine.
- Statuses map onto the contract's attachment states: ``reserved``/``attaching`` → attaching,
  ``in-use`` → attached, ``detaching`` → detaching. A volume being attached, in use or detaching
  is not deleted (``FailedPrecondition``).
- Expand is ``os-extend`` at microversion 3.42 (in-use volumes too, unless
  ``ignore-volume-microversion``); ``extending`` is a modification in progress and
  ``error_extending`` a failed one. An extend already running for an unknown target (a worker
  died) is ``OperationPending``: the caller asks again once it ended.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.openstack.base import NAME, OpenStackBase, status_of
from cloudloop.cloud.openstack.discovery import CLUSTER_METADATA

DESCRIPTION = "Created by OpenStack Cinder CSI driver"
#: Upstream's CSI driver name and topology key (a volume's zone is its Cinder AZ).
CSI_DRIVER = "cinder.csi.openstack.org"
TOPOLOGY_KEY = "topology.cinder.csi.openstack.org/zone"
EXTEND_MICROVERSION = "3.42"
_ATTACHMENT_STATE = {
    "reserved": "attaching",
    "attaching": "attaching",
    "in-use": "attached",
    "detaching": "detaching",
}
_BUSY = ("reserved", "attaching", "in-use", "detaching")


class OpenStackVolumes(OpenStackBase):
    _expanding: dict[str, int] = {}
    _expanding_lock = threading.Lock()

    def _to_volume(self, raw: dict[str, Any]) -> models.Volume:
        status = str(raw.get("status") or "")
        state = _ATTACHMENT_STATE.get(status, "attached")
        attachments = [
            models.Attachment(
                volume_id=str(raw["id"]),
                instance_id=str(a.get("server_id") or ""),
                device=str(a.get("device") or ""),
                state=state,
            )
            for a in raw.get("attachments") or []
            if a.get("server_id")
        ]
        return models.Volume(
            id=str(raw["id"]),
            size_gib=int(raw.get("size") or 0),
            zone=str(raw.get("availability_zone") or ""),
            state=status,
            attached_to=[a.instance_id for a in attachments],
            name=str(raw.get("name") or ""),
            volume_type=str(raw.get("volume_type") or ""),
            attachments=attachments,
            tags={str(k): str(v) for k, v in (raw.get("metadata") or {}).items()},
        )

    def _raw_volume(self, volume_id: str) -> dict[str, Any]:
        body = self.request("GetVolume", "block_storage", "GET", f"/volumes/{volume_id}")
        return dict(body["volume"])

    # -- the contract ----------------------------------------------------------------------
    def find_volume(self, name: str, cluster: str) -> models.Volume | None:
        found = self.list_all(
            "ListVolumes",
            "block_storage",
            "/volumes/detail",
            "volumes",
            params={"name": name, "metadata": json.dumps({CLUSTER_METADATA: cluster})},
        )
        live = [
            v
            for v in found
            if v.get("name") == name
            and (v.get("metadata") or {}).get(CLUSTER_METADATA) == cluster
            and v.get("status") not in ("deleting", "error_deleting")
        ]
        if not live:
            return None
        oldest = min(live, key=lambda v: (str(v.get("created_at") or ""), str(v["id"])))
        return self._to_volume(oldest)

    def get_volume(self, volume_id: str) -> models.Volume:
        return self._to_volume(self._raw_volume(volume_id))

    def create_volume(self, spec: models.VolumeSpec) -> models.Volume:
        metadata = {str(k): str(v)[:255] for k, v in spec.tags.items()}
        if spec.cluster:
            metadata[CLUSTER_METADATA] = spec.cluster
        body: dict[str, Any] = {
            "name": spec.name,
            "size": spec.size_gib,
            "description": DESCRIPTION,
            "metadata": metadata,
        }
        if spec.zone and not self.settings.block_storage.ignore_volume_az:
            body["availability_zone"] = spec.zone
        if spec.volume_type:
            body["volume_type"] = spec.volume_type
        try:
            created = self.request(
                "CreateVolume", "block_storage", "POST", "/volumes", json={"volume": body}
            )
        except errors.NotFound as exc:  # Cinder answers 404 for an unknown volume type
            raise errors.InvalidRequest(NAME, "CreateVolume", exc.message) from exc
        return self._to_volume(created["volume"])

    def delete_volume(self, volume_id: str) -> None:
        raw = self._raw_volume(volume_id)
        if raw.get("status") in _BUSY or any(
            a.get("server_id") for a in raw.get("attachments") or []
        ):
            server = next((a.get("server_id") for a in raw.get("attachments") or []), "")
            raise errors.FailedPrecondition(
                NAME,
                "DeleteVolume",
                f"volume {volume_id} is {raw.get('status')}"
                + (f" on server {server}" if server else ""),
            )
        if raw.get("status") == "deleting":
            return
        try:
            self.request("DeleteVolume", "block_storage", "DELETE", f"/volumes/{volume_id}")
        except errors.InvalidRequest as exc:
            raise errors.FailedPrecondition(NAME, "DeleteVolume", exc.message) from exc

    def attach_volume(self, volume: models.Volume, instance_id: str) -> models.Attachment:
        body = self.request(
            "ListVolumeAttachments",
            "compute",
            "GET",
            f"/servers/{instance_id}/os-volume_attachments",
        )
        for existing in (body or {}).get("volumeAttachments") or []:
            if existing.get("volumeId") == volume.id:
                state = _ATTACHMENT_STATE.get(volume.state, "attaching")
                return models.Attachment(
                    volume_id=volume.id,
                    instance_id=instance_id,
                    device=str(existing.get("device") or ""),
                    state=state,
                )
        try:
            made = self.request(
                "AttachVolume",
                "compute",
                "POST",
                f"/servers/{instance_id}/os-volume_attachments",
                json={"volumeAttachment": {"volumeId": volume.id}},
            )
        except errors.InvalidRequest as exc:  # "Invalid volume": not available right now
            raise errors.FailedPrecondition(NAME, "AttachVolume", exc.message) from exc
        attachment = (made or {}).get("volumeAttachment") or {}
        return models.Attachment(
            volume_id=volume.id,
            instance_id=instance_id,
            device=str(attachment.get("device") or ""),
            state="attaching",
        )

    def detach_volume(self, volume_id: str, instance_id: str) -> None:
        try:
            self.request(
                "DetachVolume",
                "compute",
                "DELETE",
                f"/servers/{instance_id}/os-volume_attachments/{volume_id}",
            )
        except errors.NotFound:
            return  # not attached there (or the server is gone): nothing to detach
        except errors.InvalidRequest as exc:
            raise errors.FailedPrecondition(NAME, "DetachVolume", exc.message) from exc

    def expand_volume(self, volume_id: str, size_gib: int) -> models.VolumeModification:
        raw = self._raw_volume(volume_id)
        status = str(raw.get("status") or "")
        if int(raw.get("size") or 0) >= size_gib:
            return models.VolumeModification(
                volume_id=volume_id, state="completed", target_size_gib=int(raw["size"])
            )
        if status == "extending":
            raise errors.OperationPending(
                NAME, "ExtendVolume", f"volume {volume_id} is being extended already"
            )
        if status == "in-use" and self.settings.block_storage.ignore_volume_microversion:
            raise errors.FailedPrecondition(
                NAME, "ExtendVolume", f"volume {volume_id} is in use (online extend is off)"
            )
        if status not in ("available", "in-use"):
            raise errors.FailedPrecondition(NAME, "ExtendVolume", f"volume {volume_id} is {status}")
        try:
            self.request(
                "ExtendVolume",
                "block_storage",
                "POST",
                f"/volumes/{volume_id}/action",
                json={"os-extend": {"new_size": size_gib}},
                microversion=EXTEND_MICROVERSION,
            )
        except errors.InvalidRequest as exc:
            if exc.__cause__ is not None and status_of(exc.__cause__) == 400:
                raise errors.FailedPrecondition(NAME, "ExtendVolume", exc.message) from exc
            raise
        with self._expanding_lock:
            self._expanding[volume_id] = size_gib
        return models.VolumeModification(
            volume_id=volume_id, state="modifying", target_size_gib=size_gib
        )

    def get_volume_modification(self, volume_id: str) -> models.VolumeModification | None:
        raw = self._raw_volume(volume_id)
        status = str(raw.get("status") or "")
        with self._expanding_lock:
            target = self._expanding.get(volume_id, 0)
        if status == "extending":
            return models.VolumeModification(
                volume_id=volume_id, state="modifying", target_size_gib=target
            )
        if status == "error_extending":
            return models.VolumeModification(
                volume_id=volume_id,
                state="failed",
                target_size_gib=target,
                message="Cinder could not extend the volume",
            )
        with self._expanding_lock:
            self._expanding.pop(volume_id, None)
        return None
