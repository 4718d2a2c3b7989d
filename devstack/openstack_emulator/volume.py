"""Cinder v3: volumes, volume types, availability zones, actions, quota; attachments via Nova.

Follows the Block Storage API v3 reference (microversions 3.0 to 3.70 in ``OpenStack-API-Version:
volume 3.x``) under ``/v3/{project_id}``. A volume is ``creating`` for ``volume_create_s``, then
``available``; a Nova attach makes it ``reserved`` at once, ``attaching`` halfway and ``in-use``
after ``volume_attach_s`` (only then is it in ``attachments``); a detach makes it ``detaching``
and ``available`` after ``volume_detach_s``; ``os-extend`` makes it ``extending`` and returns it
to its previous status with the new size (``in-use`` only from 3.42); ``os-retype`` makes it
``retyping`` for ``volume_retype_s`` and returns it with the new type (same type refused, a
``migration_policy`` other than ``never``/``on-demand`` refused); a delete needs no
attachment and an ``available``/``error`` status. The ``gigabytes``/``volumes`` quota answers
413 ``overLimit``. Lists filter by ``name``, ``status``, ``metadata`` (a dict literal) and page by
``limit``/``marker`` (newest first) with ``volumes_links``.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from devstack.openstack_emulator.api import ID, Reply, Request, Route, Service
from devstack.openstack_emulator.cloud import (
    ApiFault,
    Cloud,
    Resource,
    bad_request,
    cinder_now,
    new_id,
    seed_id,
)

MAX_VERSION = (3, 70)
_DELETABLE = ("available", "error", "error_restoring", "error_extending", "error_managing")


def cinder_fault(status: int, message: str) -> ApiFault:
    return ApiFault(status, message)


class BlockStorage(Service):
    type = "block-storage"
    microversion_service = "volume"
    min_version = (3, 0)
    max_version = MAX_VERSION
    max_limit = 1000

    def __init__(
        self, cloud: Cloud, *, zones: tuple[str, ...], gigabytes_quota: int, volumes_quota: int
    ) -> None:
        self.zones = zones
        self.gigabytes_quota = gigabytes_quota
        self.volumes_quota = volumes_quota
        super().__init__(cloud)

    def routes(self) -> list[Route]:
        p = f"/v3/{ID}"
        return [
            Route("GET", "", self.versions, public=True),
            Route("GET", "/v3", self.version, public=True),
            Route("GET", f"{p}/volumes", self.list_volumes),
            Route("GET", f"{p}/volumes/detail", self.list_volumes_detail),
            Route("POST", f"{p}/volumes", self.create_volume),
            Route("GET", f"{p}/volumes/{ID}", self.show_volume),
            Route("PUT", f"{p}/volumes/{ID}", self.update_volume),
            Route("DELETE", f"{p}/volumes/{ID}", self.delete_volume),
            Route("POST", f"{p}/volumes/{ID}/action", self.volume_action),
            Route("GET", f"{p}/volumes/{ID}/metadata", self.get_metadata),
            Route("POST", f"{p}/volumes/{ID}/metadata", self.merge_metadata),
            Route("PUT", f"{p}/volumes/{ID}/metadata", self.replace_metadata),
            Route("GET", f"{p}/types", self.list_types),
            Route("GET", f"{p}/types/default", self.default_type),
            Route("GET", f"{p}/types/{ID}", self.show_type),
            Route("GET", f"{p}/types/{ID}/extra_specs", self.type_extra_specs),
            Route("GET", f"{p}/os-availability-zone", self.list_zones),
            Route("GET", f"{p}/limits", self.limits),
        ]

    # -- versions --------------------------------------------------------------------------
    def _version(self, request: Request) -> dict[str, Any]:
        return {
            "id": "v3.0",
            "status": "CURRENT",
            "version": f"{MAX_VERSION[0]}.{MAX_VERSION[1]}",
            "min_version": "3.0",
            "updated": "2023-08-31T00:00:00Z",
            "links": [{"rel": "self", "href": f"{request.base_url}/v3/"}],
            "media-types": [
                {
                    "base": "application/json",
                    "type": "application/vnd.openstack.volume+json;version=3",
                }
            ],
        }

    def versions(self, request: Request) -> Reply:
        return Reply(300, {"versions": [self._version(request)]})

    def version(self, request: Request) -> Reply:
        return Reply(200, {"versions": [self._version(request)]})

    def _project(self, request: Request, project_id: str) -> None:
        if project_id != request.project_id:
            raise ApiFault(403, "Policy doesn't allow this operation for another project.")

    # -- volumes ---------------------------------------------------------------------------
    def volume(self, volume_id: str) -> Resource:
        found = self.cloud.table("volumes").get(volume_id)
        if found is None:
            raise cinder_fault(404, f"Volume {volume_id} could not be found.")
        return found

    def render(self, request: Request, volume: Resource, detail: bool = True) -> Resource:
        base = (
            f"{request.base_url}/v3/{volume['os-vol-tenant-attr:tenant_id']}/volumes/{volume['id']}"
        )
        links = [{"rel": "self", "href": base}, {"rel": "bookmark", "href": base}]
        if not detail:
            return {"id": volume["id"], "name": volume["name"], "links": links}
        body = {k: v for k, v in volume.items() if not k.startswith("_")}
        body["attachments"] = [dict(a) for a in volume["attachments"]]
        body["metadata"] = dict(volume["metadata"])
        body["links"] = links
        if request.at_least(3, 63):
            body["volume_type_id"] = volume["_type_id"]
        if request.at_least(3, 48):
            body["shared_targets"] = False
            body["service_uuid"] = seed_id("service", "cinder-volume")
        if request.at_least(3, 65):
            body["consumes_quota"] = True
        return body

    def _matches(self, volume: Resource, request: Request) -> bool:
        for name in ("name", "status", "availability_zone", "bootable"):
            wanted = request.arg(name)
            if wanted is not None and str(volume.get(name)) != wanted:
                return False
        wanted_metadata = request.arg("metadata")
        if wanted_metadata:
            try:
                parsed = json.loads(wanted_metadata)
            except ValueError:
                try:
                    parsed = ast.literal_eval(wanted_metadata)
                except (ValueError, SyntaxError):
                    raise bad_request(f"Invalid metadata filter: {wanted_metadata}") from None
            if not isinstance(parsed, dict):
                raise bad_request(f"Invalid metadata filter: {wanted_metadata}")
            if any(volume["metadata"].get(k) != v for k, v in parsed.items()):
                return False
        return True

    def _list(self, request: Request, project_id: str, detail: bool) -> Reply:
        self._project(request, project_id)
        items = [v for v in self.cloud.table("volumes").values() if self._matches(v, request)]
        items.sort(key=lambda v: (v["created_at"], v["_seq"]), reverse=True)
        path = f"/v3/{project_id}/volumes" + ("/detail" if detail else "")
        page, links = self.page(request, items, "volumes", link_path=path)
        body: dict[str, Any] = {"volumes": [self.render(request, v, detail) for v in page]}
        if links:
            body["volumes_links"] = links
        return Reply(200, body)

    def list_volumes(self, request: Request, project_id: str) -> Reply:
        return self._list(request, project_id, False)

    def list_volumes_detail(self, request: Request, project_id: str) -> Reply:
        return self._list(request, project_id, True)

    def show_volume(self, request: Request, project_id: str, volume_id: str) -> Reply:
        self._project(request, project_id)
        return Reply(200, {"volume": self.render(request, self.volume(volume_id))})

    def volume_type(self, ref: str) -> Resource:
        types = self.cloud.table("volume_types")
        found = types.get(ref) or next((t for t in types.values() if t["name"] == ref), None)
        if found is None:
            raise cinder_fault(404, f"Volume type with name {ref} could not be found.")
        return found

    def create_volume(self, request: Request, project_id: str) -> Reply:
        self._project(request, project_id)
        body = request.json_body("volume")
        size = body.get("size")
        if isinstance(size, str) and size.isascii() and size.isdigit():
            size = int(size)
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise bad_request(
                f"Invalid input for field/attribute size. Value: {size}. {size!r} is not valid"
            )
        zone = body.get("availability_zone") or self.zones[0]
        if zone not in self.zones:
            raise bad_request(f"Invalid input received: Availability zone '{zone}' is invalid.")
        volume_type = self.volume_type(str(body.get("volume_type") or self.default_type_id()))
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise bad_request("Invalid input for field/attribute metadata.")
        if body.get("source_volid"):
            source = self.volume(str(body["source_volid"]))
            if size < source["size"]:
                raise bad_request(
                    "Invalid input received: Volume size must not be less than "
                    "the source volume size."
                )
        image_id = str(body.get("imageRef") or "")
        if image_id and image_id not in self.cloud.table("images"):
            raise bad_request("Invalid image identifier or unable to access requested image.")
        volume = self.make_volume(
            project_id,
            size=size,
            zone=str(zone),
            image_id=image_id,
            name=body.get("name"),
            description=body.get("description"),
            volume_type=volume_type,
            metadata=metadata,
            multiattach=bool(body.get("multiattach", False)),
            snapshot_id=body.get("snapshot_id"),
            source_volid=body.get("source_volid"),
            user_id=request.token.user_id if request.token else "",
            hints=dict(
                body.get("scheduler_hints")
                or request.json_body().get("OS-SCH-HNT:scheduler_hints")
                or {}
            ),
        )
        return Reply(202, {"volume": self.render(request, volume)})

    def _check_quota(self, size: int) -> None:
        volumes = self.cloud.table("volumes")
        used = sum(v["size"] for v in volumes.values())
        gigabytes = self.cloud.quota("volume.gigabytes")
        gigabytes = self.gigabytes_quota if gigabytes < 0 else gigabytes
        if used + size > gigabytes:
            raise ApiFault(
                413,
                (
                    "VolumeSizeExceedsAvailableQuota: Requested volume or snapshot "
                    f"exceeds allowed gigabytes quota. Requested {size}G, quota "
                    f"is {gigabytes}G and {used}G has been consumed."
                ),
                headers={"Retry-After": "0"},
            )
        count = self.cloud.quota("volume.volumes")
        count = self.volumes_quota if count < 0 else count
        if len(volumes) >= count:
            raise ApiFault(
                413,
                (
                    "VolumeLimitExceeded: Maximum number of volumes allowed "
                    f"({count}) exceeded for quota 'volumes'."
                ),
            )

    def make_volume(
        self,
        project_id: str,
        *,
        size: int,
        zone: str,
        image_id: str = "",
        name: Any = None,
        description: Any = None,
        volume_type: Resource | None = None,
        metadata: dict[str, Any] | None = None,
        multiattach: bool = False,
        snapshot_id: Any = None,
        source_volid: Any = None,
        user_id: str = "",
        hints: dict[str, Any] | None = None,
    ) -> Resource:
        """A new ``creating`` volume (quota checked), ``available`` after ``volume_create_s``;
        made of an image it is bootable. Used by ``POST /volumes`` and by Nova's block device
        mappings."""
        self._check_quota(size)
        volumes = self.cloud.table("volumes")
        volume_type = volume_type or self.volume_type(self.default_type_id())
        now = cinder_now()
        volume: Resource = {
            "id": new_id(),
            "name": name,
            "description": description,
            "status": "creating",
            "size": size,
            "availability_zone": zone,
            "created_at": now,
            "updated_at": None,
            "attachments": [],
            "bootable": "true" if image_id else "false",
            "encrypted": False,
            "metadata": {str(k): str(v) for k, v in (metadata or {}).items()},
            "multiattach": multiattach,
            "os-vol-tenant-attr:tenant_id": project_id,
            "replication_status": None,
            "snapshot_id": snapshot_id,
            "source_volid": source_volid,
            "user_id": user_id,
            "volume_type": volume_type["name"],
            "consistencygroup_id": None,
            "migration_status": None,
            "group_id": None,
            "provider_id": None,
            "_type_id": volume_type["id"],
            "_seq": len(volumes),
            "_hints": dict(hints or {}),
        }
        if image_id:
            image = self.cloud.table("images")[image_id]
            volume["volume_image_metadata"] = {"image_id": image_id, "image_name": image["name"]}
        volumes[volume["id"]] = volume
        self.cloud.counts["volumes_created"] += 1

        def created() -> None:
            if volume["id"] not in volumes or volume["status"] != "creating":
                return
            failed = self.cloud.take_failure("volume")
            self._set_status(volume, "error" if failed else "available")

        self.cloud.later("volume", self.cloud.delays.volume_create_s, created)
        return volume

    def drop_volume(self, volume_id: str) -> None:
        """Remove a volume at once (Nova's ``delete_on_termination``)."""
        if self.cloud.table("volumes").pop(volume_id, None) is not None:
            self.cloud.counts["volumes_removed"] += 1

    def attach_at_boot(self, volume: Resource, server_id: str, device: str) -> None:
        """Nova attaches a block device mapping's volume while it builds the server."""
        volume.pop("_pending_attach", None)
        if volume["status"] == "creating":  # Nova waits for its own image volume
            volume["status"] = "available"
        self._attached(volume, server_id, device, new_id())

    @staticmethod
    def _set_status(volume: Resource, status: str) -> None:
        volume["status"] = status
        volume["updated_at"] = cinder_now()

    def update_volume(self, request: Request, project_id: str, volume_id: str) -> Reply:
        self._project(request, project_id)
        volume = self.volume(volume_id)
        body = request.json_body("volume")
        for key in ("name", "description"):
            if key in body:
                volume[key] = body[key]
        if "metadata" in body and isinstance(body["metadata"], dict):
            volume["metadata"] = {str(k): str(v) for k, v in body["metadata"].items()}
        volume["updated_at"] = cinder_now()
        return Reply(200, {"volume": self.render(request, volume)})

    def delete_volume(self, request: Request, project_id: str, volume_id: str) -> Reply:
        self._project(request, project_id)
        volume = self.volume(volume_id)
        if volume["status"] == "deleting":
            return Reply(202)
        if (
            volume["status"] not in _DELETABLE
            or volume["attachments"]
            or volume.get("_pending_attach")
        ):
            raise bad_request(
                "Invalid volume: Volume status must be available or error or error_restoring or "
                "error_extending or error_managing and must not be migrating, attached, belong to "
                "a group, have snapshots or be disassociated from snapshots after volume transfer."
            )
        self._set_status(volume, "deleting")

        def deleted() -> None:
            self.drop_volume(volume_id)

        self.cloud.later("volume", self.cloud.delays.volume_delete_s, deleted)
        return Reply(202)

    def volume_action(self, request: Request, project_id: str, volume_id: str) -> Reply:
        self._project(request, project_id)
        volume = self.volume(volume_id)
        body = request.json_body()
        if len(body) != 1:
            raise bad_request("There is no such action")
        action, args = next(iter(body.items()))
        args = args if isinstance(args, dict) else {}
        status = volume["status"]
        if action == "os-extend":
            self._extend(request, volume, args)
        elif action == "os-retype":
            self._retype(volume, args)
        elif action == "os-reserve":
            self._require(volume, ("available",), "reserve")
            self._set_status(volume, "attaching")
        elif action == "os-unreserve":
            if status == "attaching":
                self._set_status(volume, "available")
        elif action == "os-begin_detaching":
            self._require(volume, ("in-use",), "begin detaching")
            self._set_status(volume, "detaching")
        elif action == "os-roll_detaching":
            if status == "detaching":
                self._set_status(volume, "in-use")
        elif action == "os-attach":
            self._require(volume, ("available", "attaching", "reserved"), "attach")
            server_id = str(args.get("instance_uuid") or "")
            self._attached(volume, server_id, str(args.get("mountpoint") or "/dev/vdb"), new_id())
        elif action == "os-detach":
            attachment_id = args.get("attachment_id")
            volume["attachments"] = [
                a
                for a in volume["attachments"]
                if attachment_id and a["attachment_id"] != attachment_id
            ]
            self._set_status(volume, "in-use" if volume["attachments"] else "available")
        elif action == "os-reset_status":
            if "status" in args:
                self._set_status(volume, str(args["status"]))
            if args.get("attach_status") == "detached":
                volume["attachments"] = []
        elif action == "os-set_bootable":
            volume["bootable"] = (
                "true" if args.get("bootable") in (True, "true", "True") else "false"
            )
        elif action == "os-update_readonly_flag":
            volume["metadata"]["readonly"] = str(bool(args.get("readonly"))).lower()
        else:
            raise bad_request(f"There is no such action: {action}")
        return Reply(202)

    @staticmethod
    def _require(volume: Resource, statuses: tuple[str, ...], verb: str) -> None:
        if volume["status"] not in statuses:
            raise bad_request(
                f"Invalid volume: Volume status must be {' or '.join(statuses)} "
                f"to {verb}, but current status is: {volume['status']}."
            )

    def _extend(self, request: Request, volume: Resource, args: dict[str, Any]) -> None:
        new_size = args.get("new_size")
        if isinstance(new_size, str) and new_size.isascii() and new_size.isdigit():
            new_size = int(new_size)
        if not isinstance(new_size, int) or isinstance(new_size, bool):
            raise bad_request(f"Invalid input for field/attribute new_size. Value: {new_size}.")
        previous = volume["status"]
        allowed = ("available", "in-use") if request.at_least(3, 42) else ("available",)
        if previous not in allowed:
            raise bad_request(
                f"Invalid volume: Volume status must be {' or '.join(repr(s) for s in allowed)} "
                f"to extend, currently {previous}."
            )
        if new_size <= volume["size"]:
            raise bad_request(
                "Invalid input received: New size for extend must be greater "
                f"than current size. (current: {volume['size']}, extended: "
                f"{new_size})."
            )
        used = sum(v["size"] for v in self.cloud.table("volumes").values())
        if used + new_size - volume["size"] > self.gigabytes_quota:
            raise ApiFault(
                413,
                (
                    "VolumeSizeExceedsAvailableQuota: Requested volume or snapshot "
                    f"exceeds allowed gigabytes quota. Requested {new_size - volume['size']}G, "
                    f"quota is {self.gigabytes_quota}G and {used}G has been consumed."
                ),
            )
        self._set_status(volume, "extending")

        def extended() -> None:
            if volume["status"] != "extending":
                return
            if self.cloud.take_failure("volume-extend"):
                self._set_status(volume, "error_extending")
                return
            volume["size"] = new_size
            self._set_status(volume, previous)

        self.cloud.later("volume", self.cloud.delays.volume_extend_s, extended)

    def _retype(self, volume: Resource, args: dict[str, Any]) -> None:
        """Cinder's ``os-retype`` (volume API ``retype``): checked at once, applied later."""
        new_type = args.get("new_type")
        if not isinstance(new_type, str) or not new_type:
            raise bad_request(f"Invalid input for field/attribute new_type. Value: {new_type}.")
        policy = args.get("migration_policy", "never")
        if policy not in ("never", "on-demand"):
            raise bad_request(
                f"Invalid input for field/attribute migration_policy. Value: {policy}."
            )
        previous = volume["status"]
        self._require(volume, ("available", "in-use"), "retype")
        target = self.volume_type(new_type)
        if target["id"] == volume["_type_id"]:
            raise bad_request(
                f"Invalid input received: New volume_type same as original: {new_type}."
            )
        self._set_status(volume, "retyping")

        def retyped() -> None:
            if volume["status"] != "retyping":
                return
            volume["volume_type"] = target["name"]
            volume["_type_id"] = target["id"]
            self._set_status(volume, previous)

        self.cloud.later("volume", self.cloud.delays.volume_retype_s, retyped)

    # -- attachments (driven by Nova) ------------------------------------------------------
    def attachments_of(self, server_id: str) -> list[Resource]:
        """Nova's view (block device mappings): from the attach request until the detach ends."""
        found: list[Resource] = []
        for volume in self.cloud.table("volumes").values():
            pending = volume.get("_pending_attach")
            if pending and pending["server_id"] == server_id:
                found.append(pending)
            found += [a for a in volume["attachments"] if a["server_id"] == server_id]
        return found

    def attached_to(self, server_id: str) -> list[str]:
        return [a["volume_id"] for a in self.attachments_of(server_id)]

    def begin_attach(self, volume_id: str, server: Resource, device: str) -> Resource:
        volume = self.cloud.table("volumes").get(volume_id)
        if volume is None:
            raise ApiFault(404, f"Volume {volume_id} could not be found.")
        if (
            any(a["server_id"] == server["id"] for a in volume["attachments"])
            or (volume.get("_pending_attach") or {}).get("server_id") == server["id"]
        ):
            raise ApiFault(
                409, f"Volume {volume_id} is already attached to instance {server['id']}."
            )
        attachable = volume["status"] == "available" or (
            volume["multiattach"] and volume["status"] == "in-use"
        )
        if not attachable:
            raise bad_request(
                f"Invalid volume: volume {volume_id} status must be available "
                f"or downloading to reserve, but the current status is {volume['status']}."
            )
        previous = volume["status"]
        attachment: Resource = {
            "id": volume_id,
            "attachment_id": new_id(),
            "volume_id": volume_id,
            "server_id": server["id"],
            "host_name": f"compute-{server['_az']}",
            "device": device,
            "attached_at": None,
        }
        volume["_pending_attach"] = attachment
        if previous == "available":
            self._set_status(volume, "reserved")
        delay = self.cloud.delays.volume_attach_s

        def attaching() -> None:
            if volume.get("_pending_attach") is attachment and volume["status"] == "reserved":
                self._set_status(volume, "attaching")

        def attached() -> None:
            if volume.get("_pending_attach") is not attachment:
                return
            volume.pop("_pending_attach")
            if self.cloud.take_failure("volume-attach"):
                self._set_status(volume, "available" if not volume["attachments"] else "in-use")
                return
            attachment["attached_at"] = cinder_now()
            volume["attachments"].append(attachment)
            self._set_status(volume, "in-use")

        self.cloud.later("volume", delay / 2, attaching)
        self.cloud.later("volume", delay, attached)
        return attachment

    def _attached(self, volume: Resource, server_id: str, device: str, attachment_id: str) -> None:
        volume["attachments"].append(
            {
                "id": volume["id"],
                "attachment_id": attachment_id,
                "volume_id": volume["id"],
                "server_id": server_id,
                "host_name": None,
                "device": device,
                "attached_at": cinder_now(),
            }
        )
        self._set_status(volume, "in-use")

    def begin_detach(self, volume_id: str, server_id: str) -> None:
        volume = self.cloud.table("volumes").get(volume_id)
        if volume is None:
            raise ApiFault(404, f"Volume {volume_id} could not be found.")
        attachment = next((a for a in volume["attachments"] if a["server_id"] == server_id), None)
        if attachment is None:
            if (volume.get("_pending_attach") or {}).get("server_id") == server_id:
                raise bad_request(
                    "Invalid volume: Unable to detach volume. Volume status "
                    "must be 'in-use' and attach_status must be 'attached' to "
                    "detach."
                )
            raise ApiFault(404, f"volume_id not found: {volume_id}")
        if volume["status"] == "detaching":
            return
        if volume["status"] != "in-use":
            raise bad_request(
                "Invalid volume: Unable to detach volume. Volume status "
                "must be 'in-use' and attach_status must be 'attached' to "
                "detach."
            )
        self._set_status(volume, "detaching")

        def detached() -> None:
            if volume["status"] != "detaching":
                return
            volume["attachments"] = [a for a in volume["attachments"] if a is not attachment]
            self._set_status(volume, "in-use" if volume["attachments"] else "available")

        self.cloud.later("volume", self.cloud.delays.volume_detach_s, detached)

    def server_gone(self, server_id: str) -> None:
        for volume in self.cloud.table("volumes").values():
            if (volume.get("_pending_attach") or {}).get("server_id") == server_id:
                volume.pop("_pending_attach")
            kept = [a for a in volume["attachments"] if a["server_id"] != server_id]
            if len(kept) != len(volume["attachments"]) or volume["status"] in (
                "reserved",
                "attaching",
            ):
                volume["attachments"] = kept
                self._set_status(volume, "in-use" if kept else "available")

    # -- metadata --------------------------------------------------------------------------
    def get_metadata(self, request: Request, project_id: str, volume_id: str) -> Reply:
        self._project(request, project_id)
        return Reply(200, {"metadata": dict(self.volume(volume_id)["metadata"])})

    def merge_metadata(self, request: Request, project_id: str, volume_id: str) -> Reply:
        self._project(request, project_id)
        volume = self.volume(volume_id)
        metadata = request.json_body().get("metadata")
        if not isinstance(metadata, dict):
            raise bad_request("Malformed request body")
        volume["metadata"].update({str(k): str(v) for k, v in metadata.items()})
        return Reply(200, {"metadata": dict(volume["metadata"])})

    def replace_metadata(self, request: Request, project_id: str, volume_id: str) -> Reply:
        self._project(request, project_id)
        volume = self.volume(volume_id)
        metadata = request.json_body().get("metadata")
        if not isinstance(metadata, dict):
            raise bad_request("Malformed request body")
        volume["metadata"] = {str(k): str(v) for k, v in metadata.items()}
        return Reply(200, {"metadata": dict(volume["metadata"])})

    # -- types, zones, limits --------------------------------------------------------------
    def default_type_id(self) -> str:
        for volume_type in self.cloud.table("volume_types").values():
            if volume_type.get("_default"):
                return str(volume_type["id"])
        return next(iter(self.cloud.table("volume_types")))

    @staticmethod
    def _render_type(volume_type: Resource) -> Resource:
        return {k: v for k, v in volume_type.items() if not k.startswith("_")}

    def list_types(self, request: Request, project_id: str) -> Reply:
        self._project(request, project_id)
        types = [self._render_type(t) for t in self.cloud.table("volume_types").values()]
        return Reply(200, {"volume_types": types})

    def show_type(self, request: Request, project_id: str, type_id: str) -> Reply:
        self._project(request, project_id)
        found = self.cloud.table("volume_types").get(type_id)
        if found is None:
            raise cinder_fault(404, f"Volume type {type_id} could not be found.")
        return Reply(200, {"volume_type": self._render_type(found)})

    def default_type(self, request: Request, project_id: str) -> Reply:
        self._project(request, project_id)
        if not request.at_least(3, 62):
            return self.show_type(request, project_id, "default")
        found = self.cloud.table("volume_types")[self.default_type_id()]
        return Reply(200, {"volume_type": self._render_type(found)})

    def type_extra_specs(self, request: Request, project_id: str, type_id: str) -> Reply:
        self._project(request, project_id)
        found = self.cloud.table("volume_types").get(type_id)
        if found is None:
            raise cinder_fault(404, f"Volume type {type_id} could not be found.")
        return Reply(200, {"extra_specs": dict(found["extra_specs"])})

    def list_zones(self, request: Request, project_id: str) -> Reply:
        self._project(request, project_id)
        return Reply(
            200,
            {
                "availabilityZoneInfo": [
                    {"zoneName": z, "zoneState": {"available": True}} for z in self.zones
                ]
            },
        )

    def limits(self, request: Request, project_id: str) -> Reply:
        self._project(request, project_id)
        volumes = self.cloud.table("volumes").values()
        return Reply(
            200,
            {
                "limits": {
                    "rate": [],
                    "absolute": {
                        "maxTotalVolumes": self.volumes_quota,
                        "maxTotalVolumeGigabytes": self.gigabytes_quota,
                        "totalVolumesUsed": len(volumes),
                        "totalGigabytesUsed": sum(v["size"] for v in volumes),
                        "maxTotalSnapshots": 10,
                        "totalSnapshotsUsed": 0,
                        "maxTotalBackups": 10,
                        "maxTotalBackupGigabytes": 1000,
                        "totalBackupsUsed": 0,
                        "totalBackupGigabytesUsed": 0,
                    },
                }
            },
        )
