"""Cinder volumes as upstream cinder-csi makes them: create by name for the cluster, attach via
Nova (``controllerserver.go``, ``openstack_volumes.go``).

Rules:
- A volume has the PV name, cinder-csi's description and the metadata
  ``cinder.csi.openstack.org/cluster=<cluster>`` plus the request's; ``find_volume`` asks for that
  name and metadata, oldest first, so two raced creates settle on one. 413 is ``ResourceExhausted``.
- Attach reads Nova's attachment list first (Cinder lists one only once ``in-use``), so a retry
  finds the one in flight; detach of a volume not attached is fine.
- ``reserved``/``attaching`` → attaching, ``in-use`` → attached, ``detaching`` → detaching; such a
  volume is not deleted (``FailedPrecondition``).
- Expand is ``os-extend`` at microversion 3.42 (in-use volumes too, unless
  ``ignore-volume-microversion``); an extend running for an unknown target is ``OperationPending``.
- Modify is a retype (``os-retype``, ``migration_policy: on-demand``) to the mutable ``type``.
- CSI as cinder-csi: parameters ``type`` and ``availability`` (others refused); one StorageClass
  per volume type of the discovery data; key ``topology.cinder.csi.openstack.org/zone``;
  ``node-volume-attach-limit``; the guest's disk ``/dev/disk/by-id/virtio-<first 20 of the ID>``.
- No snapshots (the emulator has none) and no GetCapacity: Cinder tells a project its quota, not
  its backends' free space (upstream answers neither).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.driver import VolumeDefaults
from cloudloop.cloud.openstack.base import NAME, OpenStackBase, status_of
from cloudloop.cloud.openstack.discovery import CLUSTER_METADATA

DESCRIPTION = "Created by OpenStack Cinder CSI driver"
#: Upstream's CSI driver name and topology key (a volume's zone is its Cinder AZ).
CSI_DRIVER = "cinder.csi.openstack.org"
TOPOLOGY_KEY = "topology.cinder.csi.openstack.org/zone"
EXTEND_MICROVERSION = "3.42"
#: StorageClass parameters cinder-csi reads: the volume type and an AZ that wins over topology.
TYPE_PARAMETER = "type"
AVAILABILITY_PARAMETER = "availability"
#: Cinder's default volume type (since Train), the default StorageClass when offered.
DEFAULT_VOLUME_TYPE = "__DEFAULT__"
#: cinder-csi's ceiling on ``node-volume-attach-limit``.
MAX_ATTACH_LIMIT = 256
_ATTACHMENT_STATE = {
    "reserved": "attaching",
    "attaching": "attaching",
    "in-use": "attached",
    "detaching": "detaching",
}
_BUSY = ("reserved", "attaching", "in-use", "detaching")


def storage_class_name(volume_type: str) -> str:
    """A StorageClass name for a volume type, as Deckhouse makes it: only letters, digits, ``-``
    and ``.`` kept, trimmed of ``-``/``.`` (lower-cased here, as Kubernetes requires)."""
    kept = "".join(c for c in volume_type if c.isascii() and (c.isalnum() or c in "-."))
    return kept.strip("-.").lower()


class OpenStackVolumes(VolumeDefaults):
    provider = NAME
    _expanding: dict[str, int] = {}
    _expanding_lock = threading.Lock()
    zonal_volumes = True

    def __init__(self, session: OpenStackBase) -> None:
        self.session = session
        limit = self.session.settings.block_storage.node_volume_attach_limit
        self.max_volumes_per_node = min(limit, MAX_ATTACH_LIMIT) if limit > 0 else MAX_ATTACH_LIMIT

    @property
    def volume_topology_key(self) -> str:
        return TOPOLOGY_KEY

    def _to_volume(self, raw: dict[str, Any]) -> models.Volume:
        status = str(raw.get("status") or "")
        state = _ATTACHMENT_STATE.get(status, "attached")
        attachments = [
            models.Attachment(
                volume_id=str(raw["id"]),
                instance_id=str(a.get("server_id") or ""),
                device=str(a.get("device") or ""),
                state=state,
                serial=str(raw["id"]),
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
        body = self.session.request("GetVolume", "block_storage", "GET", f"/volumes/{volume_id}")
        return dict(body["volume"])

    # -- the contract ----------------------------------------------------------------------
    def find_volume(self, name: str, cluster: str) -> models.Volume | None:
        found = self.session.list_all(
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

    def list_volumes(self, cluster: str) -> list[models.Volume]:
        found = self.session.list_all(
            "ListVolumes",
            "block_storage",
            "/volumes/detail",
            "volumes",
            params={"metadata": json.dumps({CLUSTER_METADATA: cluster})},
        )
        live = [
            self._to_volume(v)
            for v in found
            if (v.get("metadata") or {}).get(CLUSTER_METADATA) == cluster
            and v.get("status") not in ("deleting", "error_deleting")
        ]
        return sorted(live, key=lambda v: v.id)

    def storage_classes(self, discovery: dict[str, Any]) -> list[models.StorageClassSpec]:
        """One per volume type of the discovery data's ``volumeTypes`` (Deckhouse's
        ``discover_volume_types``); ``__DEFAULT__``'s class is the default, else the first."""
        specs: dict[str, models.StorageClassSpec] = {}
        types = sorted(str(t.get("name") or "") for t in discovery.get("volumeTypes") or [])
        for volume_type in types:
            name = storage_class_name(volume_type)
            if name and name not in specs:
                specs[name] = models.StorageClassSpec(
                    name=name,
                    parameters={TYPE_PARAMETER: volume_type},
                    default=volume_type == DEFAULT_VOLUME_TYPE,
                )
        classes = sorted(specs.values(), key=lambda c: c.name)
        if classes and not any(c.default for c in classes):
            classes[0] = classes[0].model_copy(update={"default": True})
        return classes

    def create_volume(self, spec: models.VolumeSpec) -> models.Volume:
        unknown = sorted(set(spec.parameters) - {TYPE_PARAMETER, AVAILABILITY_PARAMETER})
        if unknown:
            raise errors.InvalidRequest(NAME, "CreateVolume", f"unknown parameters {unknown}")
        metadata = {str(k): str(v)[:255] for k, v in spec.tags.items()}
        if spec.cluster:
            metadata[CLUSTER_METADATA] = spec.cluster
        body: dict[str, Any] = {
            "name": spec.name,
            "size": spec.size_gib,
            "description": DESCRIPTION,
            "metadata": metadata,
        }
        zone = spec.parameters.get(AVAILABILITY_PARAMETER) or spec.zone
        if zone and not self.session.settings.block_storage.ignore_volume_az:
            body["availability_zone"] = zone
        volume_type = spec.volume_type or spec.parameters.get(TYPE_PARAMETER, "")
        if volume_type:
            body["volume_type"] = volume_type
        try:
            created = self.session.request(
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
            self.session.request("DeleteVolume", "block_storage", "DELETE", f"/volumes/{volume_id}")
        except errors.InvalidRequest as exc:
            raise errors.FailedPrecondition(NAME, "DeleteVolume", exc.message) from exc

    def attach_volume(self, volume: models.Volume, instance_id: str) -> models.Attachment:
        body = self.session.request(
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
                    serial=volume.id,
                )
        try:
            made = self.session.request(
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
            serial=volume.id,
        )

    def detach_volume(self, volume_id: str, instance_id: str) -> None:
        try:
            self.session.request(
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
        if status == "in-use" and self.session.settings.block_storage.ignore_volume_microversion:
            raise errors.FailedPrecondition(
                NAME, "ExtendVolume", f"volume {volume_id} is in use (online extend is off)"
            )
        if status not in ("available", "in-use"):
            raise errors.FailedPrecondition(NAME, "ExtendVolume", f"volume {volume_id} is {status}")
        try:
            self.session.request(
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

    # -- ControllerModifyVolume: a retype ---------------------------------------------------
    def check_volume_modification(self, parameters: Mapping[str, str]) -> None:
        unknown = sorted(set(parameters) - {TYPE_PARAMETER})
        if unknown:
            raise errors.InvalidRequest(
                NAME, "RetypeVolume", f"unknown mutable parameters {unknown}: valid is 'type'"
            )
        if not parameters.get(TYPE_PARAMETER):
            raise errors.InvalidRequest(NAME, "RetypeVolume", "mutable parameter 'type' is empty")

    def volume_changes(
        self, volume: models.Volume, parameters: Mapping[str, str]
    ) -> dict[str, str]:
        self.check_volume_modification(parameters)
        wanted = parameters[TYPE_PARAMETER]
        return {} if wanted == volume.volume_type else {TYPE_PARAMETER: wanted}

    def modify_volume(self, volume: models.Volume, parameters: Mapping[str, str]) -> None:
        changes = self.volume_changes(volume, parameters)
        if not changes:
            return
        retype = {"new_type": changes[TYPE_PARAMETER], "migration_policy": "on-demand"}
        try:
            self.session.request(
                "RetypeVolume",
                "block_storage",
                "POST",
                f"/volumes/{volume.id}/action",
                json={"os-retype": retype},
            )
        except errors.NotFound as exc:  # the volume, or (Cinder's 404 too) the type
            self._raw_volume(volume.id)  # NotFound again when the volume is gone
            raise errors.InvalidRequest(
                NAME, "RetypeVolume", f"volume type {retype['new_type']!r} does not exist"
            ) from exc
        except errors.InvalidRequest as exc:
            if exc.__cause__ is not None and status_of(exc.__cause__) == 400:
                raise errors.FailedPrecondition(NAME, "RetypeVolume", exc.message) from exc
            raise

    def get_volume_modification(self, volume_id: str) -> models.VolumeModification | None:
        raw = self._raw_volume(volume_id)
        status = str(raw.get("status") or "")
        if status == "retyping":
            return models.VolumeModification(volume_id=volume_id, state="modifying")
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
