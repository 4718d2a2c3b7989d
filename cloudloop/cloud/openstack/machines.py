"""OpenStack machines for Cluster API: create (or adopt) a Nova server with its ports and root
volume, read it, delete it with everything it was made with.

The steps follow CAPO: resolve every reference, the root volume ``<server>-root`` when asked,
one port per ``ports[]`` entry, then the server (microversion 2.52); the create returns once
Nova accepted it and ``get_machine`` reads BUILD → ACTIVE.
Why, and the departure from CAPO: docs/decisions/0049-openstack-machines-follow-capo.md.

Rules:
- An unknown or ambiguous reference is one :class:`InvalidRequest` naming every bad one, before
  anything is made.
- Every step finds before it creates: the server by exact name *and* the ``cloudloop-machine-uid``
  metadata key (another owner's namesake is left alone, two of ours are an error); ports by name,
  network and the UID in their description; the root volume by name and UID in its metadata.
- Quota refusals → :class:`QuotaExceeded`; "No valid host" → :class:`InsufficientCapacity`, the
  server deleted first (ports and volume kept for the next attempt).
- Delete: the server, then its ports and root volume; ``True`` once all three are gone.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.openstack.base import OpenStackBase, status_of
from cloudloop.cloud.openstack.machine_spec import (
    MAX_USER_DATA,
    NAME,
    NO_VALID_HOST,
    OWNER_KEY,
    OpenStackMachineSpec,
    PortSpec,
    Ref,
    check_server_name,
    deleting,
    fault_message,
    is_ours,
    is_quota_message,
    owner_description,
    owner_of_description,
    parse_machine_spec,
    port_name,
    root_volume_name,
    scheduler_hints,
    server_metadata,
    to_machine,
)

log = logging.getLogger(__name__)

#: Server tags in the create request need 2.52; it also embeds the flavor (2.47).
MICROVERSION = "2.52"
#: Cinder states in which a volume cannot be deleted yet (attached or in a transition).
_VOLUME_BUSY = frozenset(
    {"creating", "attaching", "detaching", "reserved", "in-use", "deleting", "downloading"}
)


@dataclass
class Resolved:
    """The spec's references as IDs (every lookup done before anything is made)."""

    flavor_id: str = ""
    image_id: str = ""
    group_ids: list[str] = field(default_factory=list)
    ports: list[PortSpec] = field(default_factory=list)
    port_networks: list[str] = field(default_factory=list)
    port_groups: list[list[str]] = field(default_factory=list)
    server_group_id: str = ""


class OpenStackMachines:
    def __init__(self, session: OpenStackBase) -> None:
        self.session = session

    # -- reads -----------------------------------------------------------------------------
    def _servers_named(self, name: str) -> list[dict[str, Any]]:
        """Every server named exactly ``name`` (Nova's ``name`` filter is a regex)."""
        found = self.session.list_all(
            "ListServers",
            "compute",
            "/servers/detail",
            "servers",
            params={"name": f"^{re.escape(name)}$"},
            microversion=MICROVERSION,
        )
        return [s for s in found if s.get("name") == name]

    def _our_servers(self, spec: models.MachineSpec) -> list[dict[str, Any]]:
        return [s for s in self._servers_named(spec.name) if is_ours(s, spec)]

    def _our_server(self, spec: models.MachineSpec) -> dict[str, Any] | None:
        """The server of this InfraMachine: the live one (two live ones of ours are an error,
        never picked silently), else one being deleted."""
        servers = self._our_servers(spec)
        live = [s for s in servers if not deleting(s)]
        if len(live) > 1:
            raise errors.FailedPrecondition(
                NAME,
                "FindServer",
                f"{len(live)} servers named {spec.name} carry machine UID "
                f"{spec.machine_uid} ({', '.join(str(s['id']) for s in live)}); delete "
                "all but one",
            )
        if live:
            return live[0]
        return servers[0] if servers else None

    def _our_ports(self, spec: models.MachineSpec) -> list[dict[str, Any]]:
        description = owner_description(spec)
        found = self.session.list_all(
            "ListPorts", "network", "/ports", "ports", params={"description": description}
        )
        return [p for p in found if owner_of_description(p.get("description")) == spec.machine_uid]

    def _our_volumes(self, spec: models.MachineSpec) -> list[dict[str, Any]]:
        found = self.session.list_all(
            "ListVolumes",
            "block_storage",
            "/volumes/detail",
            "volumes",
            params={
                "name": root_volume_name(spec.name),
                "metadata": json.dumps({OWNER_KEY: spec.machine_uid}),
            },
        )
        return [
            v
            for v in found
            if v.get("name") == root_volume_name(spec.name)
            and (v.get("metadata") or {}).get(OWNER_KEY) == spec.machine_uid
        ]

    def _machine(self, server: dict[str, Any]) -> models.Machine:
        settings = self.session.settings
        return to_machine(
            server,
            region=settings.connection.region,
            regional=settings.regional_provider_id,
            networking=settings.networking,
        )

    # -- create ----------------------------------------------------------------------------
    def create_machine(self, spec: models.MachineSpec, user_data: bytes) -> models.Machine:
        machine = parse_machine_spec(spec.provider_spec)
        check_server_name(spec.name)
        encoded = base64.b64encode(user_data).decode()
        if len(encoded) > MAX_USER_DATA:
            raise errors.InvalidRequest(
                NAME, "CreateMachine", f"user data is {len(encoded)} bytes in base64 (max 65535)"
            )
        server = self._our_server(spec)
        if server is not None:
            if deleting(server):  # its port and volume are still bound to it: retry later
                raise errors.CloudError(
                    NAME,
                    "CreateServer",
                    f"server {server['id']} of this machine is still being deleted; the next "
                    "attempt makes a new one",
                )
            if str(server.get("status")) == "ERROR":
                self._fail_over(server)
            log.info(
                "openstack: adopting server %s (%s), %s",
                spec.name,
                server["id"],
                server.get("status"),
            )
            return self._machine(server)
        resolved = self._resolve(machine)
        volume_id = self._ensure_root_volume(spec, machine, resolved) if machine.root_volume else ""
        port_ids = self._ensure_ports(spec, machine, resolved)
        created = self._create_server(spec, machine, resolved, volume_id, port_ids, encoded)
        return self._machine(created)

    def _fail_over(self, server: dict[str, Any]) -> None:
        """A server of ours in ERROR: delete it (ports and volume stay for the next attempt)
        and say why, so the machine is retried with backoff."""
        fault = fault_message(server) or "no fault reported"
        self._delete_server(str(server["id"]))
        log.warning(
            "openstack: server %s (%s) is in ERROR (%s); deleted it, the next attempt "
            "makes a new one",
            server.get("name"),
            server["id"],
            fault,
        )
        if NO_VALID_HOST.lower() in fault.lower():
            raise errors.InsufficientCapacity(NAME, "CreateServer", fault)
        raise errors.CloudError(NAME, "CreateServer", f"server in ERROR: {fault}")

    def _resolve(self, machine: OpenStackMachineSpec) -> Resolved:
        resolved = Resolved()
        problems: list[str] = []

        def attempt(what: str, lookup: Any, *args: Any) -> str:
            try:
                return str(lookup(*args))
            except errors.InvalidRequest as exc:
                problems.append(f"{what}: {exc.message}")
                return ""

        resolved.flavor_id = attempt("flavor", self._flavor_id, machine)
        resolved.image_id = attempt("image", self._image_id, machine)
        cache: dict[str, str] = {}

        def group(ref: Ref, where: str) -> str:
            key = ref.id or f"name={ref.label}"
            if key not in cache:
                cache[key] = attempt(where, self._find_one, "security group", ref)
            return cache[key]

        resolved.group_ids = [
            group(ref, f"securityGroups.{i}") for i, ref in enumerate(machine.security_groups)
        ]
        resolved.ports = machine.ports or [self._default_port(problems)]
        for index, port in enumerate(resolved.ports):
            if port.network is None:
                problems.append(f"ports.{index}.network: a network is required")
                resolved.port_networks.append("")
            else:
                resolved.port_networks.append(
                    attempt(f"ports.{index}.network", self._find_one, "network", port.network)
                )
            groups = (
                [
                    group(ref, f"ports.{index}.securityGroups.{i}")
                    for i, ref in enumerate(port.security_groups)
                ]
                if port.security_groups is not None
                else list(resolved.group_ids)
            )
            resolved.port_groups.append(groups)
        if machine.server_group is not None:
            resolved.server_group_id = attempt(
                "serverGroup", self._server_group_id, machine.server_group
            )
        if problems:
            raise errors.InvalidRequest(NAME, "CreateMachine", "; ".join(problems))
        return resolved

    def _default_port(self, problems: list[str]) -> PortSpec:
        """No ``ports``: one port on the cluster's first internal network (CAPO: the cluster
        network)."""
        names = self.session.settings.networking.internal_network_names
        if not names:
            problems.append("ports: no port and no internal-network-name to default to")
            return PortSpec()
        return PortSpec.model_validate({"network": {"filter": {"name": names[0]}}})

    def _flavor_id(self, machine: OpenStackMachineSpec) -> str:
        wanted = machine.flavor or machine.flavor_id
        flavors = self.session.list_all("ListFlavors", "compute", "/flavors/detail", "flavors")
        if machine.flavor:
            matches = [f for f in flavors if f.get("name") == machine.flavor]
        else:
            matches = [f for f in flavors if f.get("id") == machine.flavor_id]
        if len(matches) != 1:
            raise errors.InvalidRequest(
                NAME,
                "CreateMachine",
                f"no flavor {wanted!r}" if not matches else f"{len(matches)} flavors {wanted!r}",
            )
        return str(matches[0]["id"])

    def _image_id(self, machine: OpenStackMachineSpec) -> str:
        if machine.image.id:
            try:
                self.session.request("GetImage", "image", "GET", f"/images/{machine.image.id}")
            except errors.NotFound:
                raise errors.InvalidRequest(
                    NAME, "CreateMachine", f"no image {machine.image.id}"
                ) from None
            return machine.image.id
        name = machine.image.filter.name if machine.image.filter else ""
        images = [
            i
            for i in self.session.list_all(
                "ListImages", "image", "/images", "images", params={"name": name}
            )
            if i.get("name") == name
        ]
        if len(images) != 1:
            raise errors.InvalidRequest(
                NAME,
                "CreateMachine",
                f"no image named {name!r}"
                if not images
                else f"{len(images)} images named {name!r}",
            )
        return str(images[0]["id"])

    def _find_one(self, what: str, ref: Ref) -> str:
        """A network or security group by ID or exact name (exactly one)."""
        collection = {"network": "networks", "security group": "security-groups"}[what]
        key = collection.replace("-", "_")
        if ref.id:
            try:
                self.session.request(
                    f"Get{what.title().replace(' ', '')}",
                    "network",
                    "GET",
                    f"/{collection}/{ref.id}",
                )
            except errors.NotFound:
                raise errors.InvalidRequest(NAME, "CreateMachine", f"no {what} {ref.id}") from None
            return ref.id
        found = [
            item
            for item in self.session.list_all(
                f"List{what.title().replace(' ', '')}s",
                "network",
                f"/{collection}",
                key,
                params={"name": ref.label},
            )
            if item.get("name") == ref.label
        ]
        if len(found) != 1:
            raise errors.InvalidRequest(
                NAME,
                "CreateMachine",
                f"no {what} named {ref.label!r}"
                if not found
                else f"{len(found)} {what}s named {ref.label!r}",
            )
        return str(found[0]["id"])

    def _server_group_id(self, ref: Ref) -> str:
        body = self.session.request("ListServerGroups", "compute", "GET", "/os-server-groups")
        groups = list((body or {}).get("server_groups") or [])
        found = [g for g in groups if (g.get("id") if ref.id else g.get("name")) == ref.label]
        if len(found) != 1:
            raise errors.InvalidRequest(
                NAME,
                "CreateMachine",
                f"no server group {ref.label!r}"
                if not found
                else f"{len(found)} server groups named {ref.label!r}",
            )
        return str(found[0]["id"])

    @contextmanager
    def _quota(self) -> Iterator[None]:
        """Nova 403 / Neutron 409 ``OverQuota`` / Cinder 413 "Quota exceeded": QuotaExceeded."""
        try:
            yield
        except errors.CloudError as exc:
            status = status_of(exc.__cause__) if exc.__cause__ is not None else 0
            if status == 413 or (status in (403, 409) and is_quota_message(exc.message)):
                raise errors.QuotaExceeded(NAME, exc.operation, exc.message) from exc
            raise

    def _ensure_root_volume(
        self, spec: models.MachineSpec, machine: OpenStackMachineSpec, resolved: Resolved
    ) -> str:
        """``<server>-root`` made of the image, available (adopted if a try made it before)."""
        root = machine.root_volume
        assert root is not None
        volumes = [v for v in self._our_volumes(spec) if v.get("status") != "deleting"]
        usable = [v for v in volumes if v.get("status") != "error"]
        for broken in [v for v in volumes if v.get("status") == "error"]:
            self._delete_volume(str(broken["id"]))
        if usable:
            volume = min(usable, key=lambda v: (str(v.get("created_at") or ""), str(v["id"])))
        else:
            zone = ""
            source = root.availability_zone
            if source is None or source.from_ == "Machine":
                zone = spec.failure_domain
            elif source.name:
                zone = source.name
            body: dict[str, Any] = {
                "name": root_volume_name(spec.name),
                "size": root.size_gib,
                "imageRef": resolved.image_id,
                "description": owner_description(spec),
                "metadata": {OWNER_KEY: spec.machine_uid},
            }
            if zone:
                body["availability_zone"] = zone
            if root.type:
                body["volume_type"] = root.type
            try:
                with self._quota():
                    made = self.session.request(
                        "CreateVolume", "block_storage", "POST", "/volumes", json={"volume": body}
                    )
            except errors.NotFound as exc:  # an unknown volume type
                raise errors.InvalidRequest(NAME, "CreateVolume", exc.message) from exc
            volume = dict(made["volume"])
            log.info(
                "openstack: created root volume %s (%s, %d GiB)",
                body["name"],
                volume["id"],
                root.size_gib,
            )
        volume_id = str(volume["id"])
        if volume.get("status") != "available":
            ready = self.session.wait_until(
                "WaitForVolume",
                lambda: dict(
                    self.session.request(
                        "GetVolume", "block_storage", "GET", f"/volumes/{volume_id}"
                    )["volume"]
                ),
                lambda v: v.get("status") in ("available", "error", "in-use"),
            )
            if ready.get("status") == "error":
                self._delete_volume(volume_id)
                raise errors.CloudError(
                    NAME, "CreateVolume", f"root volume {volume_id} went to error; deleted"
                )
        return volume_id

    def _ensure_ports(
        self, spec: models.MachineSpec, machine: OpenStackMachineSpec, resolved: Resolved
    ) -> list[str]:
        ours = self._our_ports(spec)
        ids: list[str] = []
        for index, port in enumerate(resolved.ports):
            name = port_name(spec.name, index, port)
            network_id = resolved.port_networks[index]
            existing = sorted(
                (p for p in ours if p.get("name") == name and p.get("network_id") == network_id),
                key=lambda p: (str(p.get("created_at") or ""), str(p["id"])),
            )
            tags = list(dict.fromkeys([*machine.tags, *port.tags]))
            if existing:  # made by an earlier try, maybe before its tags were set
                port_id = str(existing[0]["id"])
                if not set(tags) <= set(existing[0].get("tags") or []):
                    self._set_port_tags(port_id, tags)
                ids.append(port_id)
                continue
            body: dict[str, Any] = {
                "name": name,
                "network_id": network_id,
                "description": owner_description(spec),
            }
            if port.disable_port_security:
                body["port_security_enabled"] = False
            else:
                if resolved.port_groups[index]:  # none: Neutron's default group
                    body["security_groups"] = resolved.port_groups[index]
                if port.allowed_address_pairs:
                    body["allowed_address_pairs"] = [
                        {
                            "ip_address": p.ip_address,
                            **({"mac_address": p.mac_address} if p.mac_address else {}),
                        }
                        for p in port.allowed_address_pairs
                    ]
            with self._quota():
                made = self.session.request(
                    "CreatePort", "network", "POST", "/ports", json={"port": body}
                )
            port_id = str(made["port"]["id"])
            if tags:
                self._set_port_tags(port_id, tags)
            log.info("openstack: created port %s (%s) on network %s", name, port_id, network_id)
            ids.append(port_id)
        return ids

    def _set_port_tags(self, port_id: str, tags: list[str]) -> None:
        """CAPO tags ports after creating them (``PUT /ports/{id}/tags``)."""
        self.session.request(
            "SetPortTags", "network", "PUT", f"/ports/{port_id}/tags", json={"tags": tags}
        )

    def _create_server(
        self,
        spec: models.MachineSpec,
        machine: OpenStackMachineSpec,
        resolved: Resolved,
        volume_id: str,
        port_ids: list[str],
        user_data: str,
    ) -> dict[str, Any]:
        server: dict[str, Any] = {
            "name": spec.name,
            "flavorRef": resolved.flavor_id,
            "networks": [{"port": port_id} for port_id in port_ids],
            "metadata": server_metadata(spec, machine),
            "user_data": user_data,
        }
        if volume_id:
            server["block_device_mapping_v2"] = [
                {
                    "boot_index": 0,
                    "uuid": volume_id,
                    "source_type": "volume",
                    "destination_type": "volume",
                    "delete_on_termination": False,
                }
            ]
        else:
            server["imageRef"] = resolved.image_id
        if machine.ssh_key_name:
            server["key_name"] = machine.ssh_key_name
        if machine.config_drive:
            server["config_drive"] = True
        if machine.tags:
            server["tags"] = list(dict.fromkeys(machine.tags))
        if spec.failure_domain:
            server["availability_zone"] = spec.failure_domain
        body: dict[str, Any] = {"server": server}
        hints = scheduler_hints(machine, resolved.server_group_id)
        if hints:
            body["os:scheduler_hints"] = hints
        with self._quota():
            made = self.session.request(
                "CreateServer", "compute", "POST", "/servers", json=body, microversion=MICROVERSION
            )
        server_id = str(made["server"]["id"])
        log.info(
            "openstack: created server %s (%s), flavor %s",
            spec.name,
            server_id,
            machine.flavor or machine.flavor_id,
        )
        return self._get_server(server_id) or {
            "id": server_id,
            "name": spec.name,
            "status": "BUILD",
        }

    def _get_server(self, server_id: str) -> dict[str, Any] | None:
        try:
            body = self.session.request(
                "GetServer", "compute", "GET", f"/servers/{server_id}", microversion=MICROVERSION
            )
        except errors.NotFound:
            return None
        return dict(body["server"])

    # -- read ------------------------------------------------------------------------------
    def get_machine(self, spec: models.MachineSpec) -> models.Machine | None:
        server = self._our_server(spec)
        return None if server is None else self._machine(server)

    # -- delete ----------------------------------------------------------------------------
    def delete_machine(self, spec: models.MachineSpec) -> bool:
        """The server, then its ports and root volume; ``True`` once none is left."""
        deadline = time.monotonic() + self.session.settings.wait_timeout_s
        while True:
            servers = self._our_servers(spec)
            for server in servers:
                if not deleting(server):
                    self._delete_server(str(server["id"]))
            if not servers:
                for port in self._our_ports(spec):
                    self._delete_port(str(port["id"]))
                volumes = self._our_volumes(spec)
                for volume in volumes:
                    if volume.get("status") not in _VOLUME_BUSY:
                        self._delete_volume(str(volume["id"]))
                if not volumes:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.session.settings.poll_interval_s)

    def _delete_server(self, server_id: str) -> None:
        try:
            self.session.request("DeleteServer", "compute", "DELETE", f"/servers/{server_id}")
        except errors.NotFound:
            return
        log.info("openstack: deleting server %s", server_id)

    def _delete_port(self, port_id: str) -> None:
        try:
            self.session.request("DeletePort", "network", "DELETE", f"/ports/{port_id}")
        except errors.NotFound:
            return
        log.info("openstack: deleted port %s", port_id)

    def _delete_volume(self, volume_id: str) -> None:
        try:
            self.session.request("DeleteVolume", "block_storage", "DELETE", f"/volumes/{volume_id}")
        except errors.NotFound:
            return
        except errors.InvalidRequest as exc:  # still attached or in a transition: next round
            log.info("openstack: volume %s not deletable yet: %s", volume_id, exc.message)
            return
        log.info("openstack: deleting volume %s", volume_id)
