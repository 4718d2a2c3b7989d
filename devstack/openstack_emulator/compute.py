"""Nova v2.1: servers, flavors, availability zones, key pairs, metadata, tags, volume attachments.

Follows the Compute API reference with microversions 2.1 to 2.96 (``OpenStack-API-Version:
compute 2.x`` or ``X-OpenStack-Nova-API-Version``): the server's ``flavor`` is ``{id, links}``
before 2.47 and the embedded flavor (``original_name``, ``vcpus``, ...) from 2.47, ``tags`` in
the body from 2.26. A created server is ``BUILD`` until ``server_build_s`` has passed, then
``ACTIVE`` with its ports bound and ``addresses`` (fixed and floating) filled from Neutron;
``os-stop``/``os-start`` move it between ``ACTIVE`` and ``SHUTOFF``; a deleted server is gone
(404) after ``server_delete_s``. Create takes ``block_device_mapping_v2`` (boot from an existing
volume, or from a volume Nova makes of an image; ``delete_on_termination``), ``networks`` by
``uuid`` or pre-created ``port``, ``security_groups``, ``os:scheduler_hints`` (``group``: a server
group of ``/os-server-groups``), ``metadata``, ``tags`` (≥ 2.52), ``config_drive``, ``user_data``
(base64); the project's ``compute.instances``/``cores``/``ram`` quotas answer 403 "Quota
exceeded", and a flavor marked "no valid host" (admin) makes its servers end in ``ERROR`` with
Nova's fault. ``GET /servers[/detail]`` filters by ``name`` (a regex, as Nova
does), ``status``, ``uuid``, ``ip``, tags, and pages by ``limit``/``marker`` (``max_limit``
1000, newest first) with ``servers_links``. Key pairs are made, shown and deleted by name (a
second one of a name is 409, a public key Nova cannot fingerprint 400). Below 2.36 Nova proxies
Neutron's floating IPs (``/os-floating-ips`` list, create from a ``pool`` = an external
network's name, show, delete; ``/os-floating-ip-pools``; 404 from 2.36) and the server actions
``addFloatingIp``/``removeFloatingIp`` (gone from 2.44), on the emulator's Neutron floating IPs,
as gophercloud's ``compute/v2/extensions/floatingips`` (Terraform's
``openstack_compute_floatingip_v2`` and ``_associate_v2``) drives them. Errors are
``{"itemNotFound": {code, message}}``.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import TYPE_CHECKING, Any

from devstack.openstack_emulator.api import ID, Reply, Request, Route, Service, match_tags
from devstack.openstack_emulator.cloud import (
    ApiFault,
    Cloud,
    Resource,
    bad_request,
    conflict,
    iso_now,
    new_id,
)

if TYPE_CHECKING:
    from devstack.openstack_emulator.network import Network
    from devstack.openstack_emulator.volume import BlockStorage

MAX_VERSION = (2, 96)
_VM_STATE = {
    "ACTIVE": ("active", 1),
    "BUILD": ("building", 0),
    "SHUTOFF": ("stopped", 4),
    "ERROR": ("error", 0),
    "DELETED": ("deleted", 0),
    "SOFT_DELETED": ("soft-delete", 4),
    "PAUSED": ("paused", 3),
    "SUSPENDED": ("suspended", 7),
    "SHELVED": ("shelved", 4),
    "SHELVED_OFFLOADED": ("shelved_offloaded", 0),
    "REBOOT": ("active", 1),
    "RESCUE": ("rescued", 1),
}


#: What Nova's fingerprinting accepts as an OpenSSH public key.
_KEY_TYPES = ("ssh-rsa", "ssh-ed25519", "ssh-dss", "ecdsa-sha2-", "sk-ssh-", "sk-ecdsa-")


def nova_fault(status: int, message: str) -> ApiFault:
    return ApiFault(status, message)


#: Nova's server metadata keys (``parameter_types.metadata``): no ``/``, at most 255 characters.
_METADATA_KEY = re.compile(r"^[a-zA-Z0-9-_:. ]{1,255}$")


def _valid_metadata(value: object) -> bool:
    """Nova's schema for server metadata: string keys of its pattern, strings of ≤ 255."""
    return isinstance(value, dict) and all(
        isinstance(k, str) and _METADATA_KEY.match(k) and isinstance(v, str) and len(v) <= 255
        for k, v in value.items()
    )


class Compute(Service):
    type = "compute"
    microversion_service = "compute"
    legacy_microversion_header = "X-OpenStack-Nova-API-Version"
    min_version = (2, 1)
    max_version = MAX_VERSION
    max_limit = 1000

    def __init__(self, cloud: Cloud, *, zones: tuple[str, ...]) -> None:
        self.zones = zones
        self.network: Network
        self.volumes: BlockStorage
        super().__init__(cloud)

    def routes(self) -> list[Route]:
        s = f"/v2.1/servers/{ID}"
        return [
            Route("GET", "", self.versions, public=True),
            Route("GET", "/v2.1", self.version, public=True),
            Route("GET", "/v2.1/servers", self.list_servers),
            Route("GET", "/v2.1/servers/detail", self.list_servers_detail),
            Route("POST", "/v2.1/servers", self.create_server),
            Route("GET", s, self.show_server),
            Route("PUT", s, self.update_server),
            Route("DELETE", s, self.delete_server),
            Route("POST", f"{s}/action", self.server_action),
            Route("GET", f"{s}/metadata", self.get_metadata),
            Route("PUT", f"{s}/metadata", self.replace_metadata),
            Route("POST", f"{s}/metadata", self.merge_metadata),
            Route("GET", f"{s}/metadata/{ID}", self.get_metadata_item),
            Route("PUT", f"{s}/metadata/{ID}", self.set_metadata_item),
            Route("DELETE", f"{s}/metadata/{ID}", self.delete_metadata_item),
            Route("GET", f"{s}/tags", self.get_tags),
            Route("PUT", f"{s}/tags", self.replace_tags),
            Route("DELETE", f"{s}/tags", self.clear_tags),
            Route("GET", f"{s}/tags/{ID}", self.has_tag),
            Route("PUT", f"{s}/tags/{ID}", self.add_tag),
            Route("DELETE", f"{s}/tags/{ID}", self.remove_tag),
            Route("GET", f"{s}/os-volume_attachments", self.list_attachments),
            Route("POST", f"{s}/os-volume_attachments", self.attach_volume),
            Route("GET", f"{s}/os-volume_attachments/{ID}", self.show_attachment),
            Route("DELETE", f"{s}/os-volume_attachments/{ID}", self.detach_volume),
            Route("GET", "/v2.1/flavors", self.list_flavors),
            Route("GET", "/v2.1/flavors/detail", self.list_flavors_detail),
            Route("GET", f"/v2.1/flavors/{ID}", self.show_flavor),
            Route("GET", f"/v2.1/flavors/{ID}/os-extra_specs", self.flavor_extra_specs),
            Route("GET", "/v2.1/os-availability-zone", self.list_zones),
            Route("GET", "/v2.1/os-availability-zone/detail", self.list_zones),
            Route("GET", "/v2.1/os-server-groups", self.list_server_groups),
            Route("POST", "/v2.1/os-server-groups", self.create_server_group),
            Route("GET", f"/v2.1/os-server-groups/{ID}", self.show_server_group),
            Route("DELETE", f"/v2.1/os-server-groups/{ID}", self.delete_server_group),
            Route("GET", "/v2.1/os-floating-ips", self.list_floating_ips),
            Route("POST", "/v2.1/os-floating-ips", self.create_floating_ip),
            Route("GET", f"/v2.1/os-floating-ips/{ID}", self.show_floating_ip),
            Route("DELETE", f"/v2.1/os-floating-ips/{ID}", self.delete_floating_ip),
            Route("GET", "/v2.1/os-floating-ip-pools", self.list_floating_ip_pools),
            Route("GET", "/v2.1/os-keypairs", self.list_keypairs),
            Route("POST", "/v2.1/os-keypairs", self.create_keypair),
            Route("GET", f"/v2.1/os-keypairs/{ID}", self.show_keypair),
            Route("DELETE", f"/v2.1/os-keypairs/{ID}", self.delete_keypair),
        ]

    # -- versions --------------------------------------------------------------------------
    def _version(self, request: Request) -> dict[str, Any]:
        return {
            "id": "v2.1",
            "status": "CURRENT",
            "version": f"{MAX_VERSION[0]}.{MAX_VERSION[1]}",
            "min_version": "2.1",
            "updated": "2013-07-23T11:33:21Z",
            "links": [{"rel": "self", "href": f"{request.base_url}/v2.1/"}],
            "media-types": [
                {
                    "base": "application/json",
                    "type": "application/vnd.openstack.compute+json;version=2.1",
                }
            ],
        }

    def versions(self, request: Request) -> Reply:
        legacy = {
            "id": "v2.0",
            "status": "SUPPORTED",
            "version": "",
            "min_version": "",
            "updated": "2011-01-21T11:33:21Z",
            "links": [{"rel": "self", "href": f"{request.base_url}/v2/"}],
        }
        return Reply(200, {"versions": [legacy, self._version(request)]})

    def version(self, request: Request) -> Reply:
        return Reply(200, {"version": self._version(request)})

    # -- flavors and zones -----------------------------------------------------------------
    def flavor(self, flavor_id: str) -> Resource:
        found = self.cloud.table("flavors").get(flavor_id)
        if found is None:
            found = next(
                (f for f in self.cloud.table("flavors").values() if f["name"] == flavor_id), None
            )
        if found is None:
            raise nova_fault(404, f"Flavor {flavor_id} could not be found.")
        return found

    def _render_flavor(self, request: Request, flavor: Resource, detail: bool) -> Resource:
        links = [{"rel": "self", "href": f"{request.base_url}/v2.1/flavors/{flavor['id']}"}]
        if not detail:
            body = {"id": flavor["id"], "name": flavor["name"], "links": links}
        else:
            body = {k: v for k, v in flavor.items() if k != "extra_specs"}
            body["links"] = links
            if request.at_least(2, 61):
                body["extra_specs"] = dict(flavor["extra_specs"])
        if request.at_least(2, 55):
            body["description"] = flavor.get("description")
        return body

    def _flavors(self, request: Request, detail: bool) -> Reply:
        items = sorted(self.cloud.table("flavors").values(), key=lambda f: str(f["id"]))
        page, links = self.page(
            request, items, "flavors", link_path="/v2.1/flavors" + ("/detail" if detail else "")
        )
        body: dict[str, Any] = {"flavors": [self._render_flavor(request, f, detail) for f in page]}
        if links:
            body["flavors_links"] = links
        return Reply(200, body)

    def list_flavors(self, request: Request) -> Reply:
        return self._flavors(request, False)

    def list_flavors_detail(self, request: Request) -> Reply:
        return self._flavors(request, True)

    def show_flavor(self, request: Request, flavor_id: str) -> Reply:
        return Reply(200, {"flavor": self._render_flavor(request, self.flavor(flavor_id), True)})

    def flavor_extra_specs(self, request: Request, flavor_id: str) -> Reply:
        return Reply(200, {"extra_specs": dict(self.flavor(flavor_id)["extra_specs"])})

    def list_zones(self, request: Request) -> Reply:
        detail = request.path.endswith("/detail")
        return Reply(
            200,
            {
                "availabilityZoneInfo": [
                    {
                        "zoneName": zone,
                        "zoneState": {"available": True},
                        "hosts": {
                            f"compute-{zone}": {"nova-compute": {"available": True, "active": True}}
                        }
                        if detail
                        else None,
                    }
                    for zone in self.zones
                ]
            },
        )

    def list_keypairs(self, request: Request) -> Reply:
        return Reply(
            200,
            {
                "keypairs": [
                    {"keypair": {k: v for k, v in kp.items()}}
                    for kp in self.cloud.table("keypairs").values()
                ]
            },
        )

    def create_keypair(self, request: Request) -> Reply:
        body = request.json_body("keypair")
        name = str(body.get("name") or "")
        if not name or name in self.cloud.table("keypairs"):
            raise (
                conflict(f"Key pair '{name}' already exists.")
                if name
                else bad_request("name is required")
            )
        public_key = str(body.get("public_key") or "ssh-ed25519 AAAA emulated").strip()
        if not public_key.startswith(_KEY_TYPES) or len(public_key.split()) < 2:
            raise bad_request("Keypair data is invalid: failed to generate fingerprint")
        keypair = {
            "name": name,
            "public_key": public_key,
            "fingerprint": "00:00",
            "type": "ssh",
        }
        self.cloud.table("keypairs")[name] = keypair
        return Reply(200, {"keypair": keypair})

    def keypair(self, request: Request, name: str) -> Resource:
        found = self.cloud.table("keypairs").get(name)
        if found is None:
            user = request.token.user_id if request.token else ""
            raise nova_fault(404, f"Keypair {name} not found for user {user}")
        return found

    def show_keypair(self, request: Request, name: str) -> Reply:
        keypair = self.keypair(request, name)
        return Reply(
            200,
            {
                "keypair": {
                    **keypair,
                    "user_id": request.token.user_id if request.token else "",
                    "deleted": False,
                    "created_at": keypair.get("created_at") or iso_now(),
                    "id": keypair.get("id", 1),
                }
            },
        )

    def delete_keypair(self, request: Request, name: str) -> Reply:
        self.keypair(request, name)
        self.cloud.table("keypairs").pop(name, None)
        return Reply(202)

    # -- server groups ---------------------------------------------------------------------
    def _render_group(self, request: Request, group: Resource) -> Resource:
        body = {k: v for k, v in group.items() if not k.startswith("_")}
        if request.at_least(2, 64):
            body["policy"] = group["_policy"]
            body["rules"] = {}
        else:
            body["policies"] = [group["_policy"]]
            body["metadata"] = {}
        return body

    def server_group(self, group_id: str) -> Resource:
        found = self.cloud.table("server_groups").get(group_id)
        if found is None:
            raise nova_fault(404, f"Instance group {group_id} could not be found.")
        return found

    def list_server_groups(self, request: Request) -> Reply:
        groups = sorted(self.cloud.table("server_groups").values(), key=lambda g: g["_seq"])
        return Reply(200, {"server_groups": [self._render_group(request, g) for g in groups]})

    def show_server_group(self, request: Request, group_id: str) -> Reply:
        return Reply(
            200, {"server_group": self._render_group(request, self.server_group(group_id))}
        )

    def create_server_group(self, request: Request) -> Reply:
        body = request.json_body("server_group")
        name = body.get("name")
        policies = body.get("policies")
        policy = body.get("policy") if request.at_least(2, 64) else None
        if policy is None and isinstance(policies, list) and len(policies) == 1:
            policy = policies[0]
        allowed = ("anti-affinity", "affinity", "soft-anti-affinity", "soft-affinity")
        if not isinstance(name, str) or not name or policy not in allowed:
            raise bad_request("Invalid input for field/attribute server_group.")
        group: Resource = {
            "id": new_id(),
            "name": name,
            "members": [],
            "project_id": request.project_id,
            "user_id": request.token.user_id if request.token else "",
            "_policy": policy,
            "_seq": len(self.cloud.table("server_groups")),
        }
        self.cloud.table("server_groups")[group["id"]] = group
        return Reply(200, {"server_group": self._render_group(request, group)})

    def delete_server_group(self, request: Request, group_id: str) -> Reply:
        self.server_group(group_id)
        self.cloud.table("server_groups").pop(group_id, None)
        return Reply(204)

    # -- servers ---------------------------------------------------------------------------
    def server(self, server_id: str) -> Resource:
        found = self.cloud.table("servers").get(server_id)
        if found is None:
            raise nova_fault(404, f"Instance {server_id} could not be found.")
        return found

    def port_index(self) -> dict[str, list[Resource]]:
        """Ports by ``device_id`` (one pass, for rendering many servers)."""
        index: dict[str, list[Resource]] = {}
        for port in self.cloud.table("ports").values():
            if port["device_id"]:
                index.setdefault(port["device_id"], []).append(port)
        return index

    def _addresses(
        self, server: Resource, ports: dict[str, list[Resource]] | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        addresses: dict[str, list[dict[str, Any]]] = {}
        if server["status"] == "BUILD":
            return addresses
        networks = self.cloud.table("networks")
        mine = (
            ports.get(server["id"], [])
            if ports is not None
            else self.network.ports_of(server["id"])
        )
        for port in mine:
            network = networks.get(port["network_id"])
            entries = addresses.setdefault(network["name"] if network else port["network_id"], [])
            for ip in port["fixed_ips"]:
                entries.append(
                    {
                        "version": 6 if ":" in ip["ip_address"] else 4,
                        "addr": ip["ip_address"],
                        "OS-EXT-IPS:type": "fixed",
                        "OS-EXT-IPS-MAC:mac_addr": port["mac_address"],
                    }
                )
            for fip in self.network.floating_ips_of(port["id"]):
                entries.append(
                    {
                        "version": 4,
                        "addr": fip["floating_ip_address"],
                        "OS-EXT-IPS:type": "floating",
                        "OS-EXT-IPS-MAC:mac_addr": port["mac_address"],
                    }
                )
        return addresses

    def render_server(
        self, request: Request, server: Resource, ports: dict[str, list[Resource]] | None = None
    ) -> Resource:
        base = request.base_url
        flavor = self.cloud.table("flavors").get(server["_flavor_id"]) or {}
        if request.at_least(2, 47):
            flavor_body: dict[str, Any] = {
                "original_name": flavor.get("name", server["_flavor_id"]),
                "vcpus": flavor.get("vcpus", 0),
                "ram": flavor.get("ram", 0),
                "disk": flavor.get("disk", 0),
                "ephemeral": flavor.get("OS-FLV-EXT-DATA:ephemeral", 0),
                "swap": flavor.get("swap") or 0,
                "extra_specs": dict(flavor.get("extra_specs") or {}),
            }
        else:
            flavor_body = {
                "id": server["_flavor_id"],
                "links": [{"rel": "bookmark", "href": f"{base}/flavors/{server['_flavor_id']}"}],
            }
        vm_state, power_state = _VM_STATE.get(server["status"], ("active", 1))
        image: Any = ""
        if server["_image_id"]:
            image = {
                "id": server["_image_id"],
                "links": [{"rel": "bookmark", "href": f"{base}/images/{server['_image_id']}"}],
            }
        body: Resource = {
            "id": server["id"],
            "name": server["name"],
            "status": server["status"],
            "tenant_id": server["tenant_id"],
            "user_id": server["user_id"],
            "metadata": dict(server["metadata"]),
            "hostId": server["hostId"] if server["status"] != "BUILD" else "",
            "image": image,
            "flavor": flavor_body,
            "created": server["created"],
            "updated": server["updated"],
            "addresses": self._addresses(server, ports),
            "accessIPv4": server["accessIPv4"],
            "accessIPv6": server["accessIPv6"],
            "links": [
                {"rel": "self", "href": f"{base}/v2.1/servers/{server['id']}"},
                {"rel": "bookmark", "href": f"{base}/servers/{server['id']}"},
            ],
            "OS-DCF:diskConfig": "MANUAL",
            "OS-EXT-AZ:availability_zone": server["_az"] if server["status"] != "BUILD" else "",
            "config_drive": server["config_drive"],
            "key_name": server["key_name"],
            "OS-SRV-USG:launched_at": server["_launched_at"],
            "OS-SRV-USG:terminated_at": None,
            "security_groups": [{"name": name} for name in server["_security_groups"]],
            "OS-EXT-STS:task_state": server["_task_state"],
            "OS-EXT-STS:vm_state": vm_state,
            "OS-EXT-STS:power_state": power_state,
            "os-extended-volumes:volumes_attached": [
                {
                    "id": volume_id,
                    **({"delete_on_termination": False} if request.at_least(2, 3) else {}),
                }
                for volume_id in self.volumes.attached_to(server["id"])
            ],
        }
        if server["status"] == "BUILD":
            body["progress"] = 0
        if server["status"] == "ERROR" and server.get("_fault"):
            body["fault"] = {"code": 500, "created": server["updated"], "message": server["_fault"]}
        if request.at_least(2, 9):
            body["locked"] = False
        if request.at_least(2, 19):
            body["description"] = server["description"]
        if request.at_least(2, 26):
            body["tags"] = list(server["tags"])
        if request.at_least(2, 73):
            body["locked_reason"] = None
        return body

    def _filtered(self, request: Request) -> list[Resource]:
        name = request.arg("name")
        pattern: re.Pattern[str] | None = None
        if name:
            try:
                pattern = re.compile(name)
            except re.error as exc:
                raise bad_request(f"Invalid name filter {name!r}: {exc}") from None
        status = (request.arg("status") or "").upper()
        uuids = set(request.args("uuid"))
        ip = request.arg("ip")
        ip_pattern = re.compile(ip) if ip else None
        ports = self.port_index() if ip_pattern is not None else None
        found: list[Resource] = []
        for server in self.cloud.table("servers").values():
            if pattern is not None and pattern.search(server["name"]) is None:
                continue
            if status and server["status"] != status:
                continue
            if uuids and server["id"] not in uuids:
                continue
            if server["status"] == "DELETED" and not request.flag("deleted"):
                pass  # a forced DELETED server stays listed, as a local delete shows it
            if not match_tags(server, request):
                continue
            if ip_pattern is not None and not any(
                ip_pattern.search(a["addr"])
                for entries in self._addresses(server, ports).values()
                for a in entries
            ):
                continue
            found.append(server)
        found.sort(key=lambda s: (s["created"], s["_seq"]), reverse=True)
        return found

    def _list(self, request: Request, detail: bool) -> Reply:
        servers = self._filtered(request)
        path = "/v2.1/servers" + ("/detail" if detail else "")
        page, links = self.page(request, servers, "servers", link_path=path)
        ports = self.port_index() if detail else None
        rendered = [
            self.render_server(request, s, ports)
            if detail
            else {
                "id": s["id"],
                "name": s["name"],
                "links": [{"rel": "self", "href": f"{request.base_url}/v2.1/servers/{s['id']}"}],
            }
            for s in page
        ]
        body: dict[str, Any] = {"servers": rendered}
        if links:
            body["servers_links"] = links
        return Reply(200, body)

    def list_servers(self, request: Request) -> Reply:
        return self._list(request, False)

    def list_servers_detail(self, request: Request) -> Reply:
        return self._list(request, True)

    def show_server(self, request: Request, server_id: str) -> Reply:
        return Reply(200, {"server": self.render_server(request, self.server(server_id))})

    def create_server(self, request: Request) -> Reply:
        body = request.json_body("server")
        hints = request.json_body().get("os:scheduler_hints") or {}
        if not isinstance(hints, dict):
            raise bad_request("Invalid input for field/attribute os:scheduler_hints.")
        server = self.build_server(
            request.project_id,
            request.token.user_id if request.token else "",
            body,
            microversion=request.microversion or (2, 1),
            hints=hints,
        )
        reply = {
            "id": server["id"],
            "links": [{"rel": "self", "href": f"{request.base_url}/v2.1/servers/{server['id']}"}],
            "OS-DCF:diskConfig": "MANUAL",
            "security_groups": [{"name": n} for n in server["_security_groups"]],
            "adminPass": "emulated-admin-pass",
        }
        return Reply(202, {"server": reply})

    def build_server(
        self,
        project_id: str,
        user_id: str,
        body: dict[str, Any],
        *,
        microversion: tuple[int, int] = (2, 96),
        build_s: float | None = None,
        hints: dict[str, Any] | None = None,
    ) -> Resource:
        """Validate a create request, allocate the ports and schedule ``BUILD → ACTIVE``."""
        name = body.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 255:
            raise bad_request("Invalid input for field/attribute name.")
        flavor_ref = str(body.get("flavorRef") or "")
        flavor = self.cloud.table("flavors").get(flavor_ref.rsplit("/", 1)[-1])
        if flavor is None:
            raise bad_request(f"Flavor {flavor_ref} could not be found.")
        image_ref = str(body.get("imageRef") or "").rsplit("/", 1)[-1]
        if image_ref and image_ref not in self.cloud.table("images"):
            raise bad_request(f"Image {image_ref} could not be found.")
        if not image_ref and not body.get("block_device_mapping_v2"):
            raise bad_request("Missing imageRef attribute")
        zone = str(body.get("availability_zone") or self.zones[0]).split(":", 1)[0]
        if zone not in self.zones:
            raise bad_request("The requested availability zone is not available")
        tags = body.get("tags") or []
        if tags and microversion < (2, 52):
            raise bad_request("Additional properties are not allowed ('tags' was unexpected)")
        if not isinstance(tags, list) or len(tags) > 50 or not all(_valid_tag(t) for t in tags):
            raise bad_request("Invalid input for field/attribute tags.")
        metadata = body.get("metadata") or {}
        if not _valid_metadata(metadata):
            raise bad_request("Invalid input for field/attribute metadata.")
        user_data = body.get("user_data")
        if user_data is not None:
            try:
                base64.b64decode(str(user_data), validate=True)
            except (binascii.Error, ValueError):
                raise bad_request("User data needs to be valid base 64.") from None
        key_name = body.get("key_name")
        if key_name and key_name not in self.cloud.table("keypairs"):
            raise bad_request("Invalid key_name provided.")
        groups = [str(g.get("name")) for g in body.get("security_groups") or [{"name": "default"}]]
        hints = dict(hints or {})
        group_id = str(hints.get("group") or "")
        if group_id and group_id not in self.cloud.table("server_groups"):
            raise bad_request(f"Invalid input: instance group {group_id} could not be found.")
        self._check_quotas(project_id, flavor)
        server_id = new_id()
        now = iso_now()
        server: Resource = {
            "id": server_id,
            "name": name,
            "status": "BUILD",
            "tenant_id": project_id,
            "user_id": user_id,
            "metadata": dict(metadata),
            "hostId": server_id.replace("-", "")[:28],
            "created": now,
            "updated": now,
            "accessIPv4": str(body.get("accessIPv4") or ""),
            "accessIPv6": str(body.get("accessIPv6") or ""),
            "config_drive": "True" if body.get("config_drive") else "",
            "key_name": key_name,
            "description": body.get("description"),
            "tags": sorted(set(tags)),
            "_flavor_id": flavor["id"],
            "_image_id": image_ref,
            "_az": zone,
            "_task_state": "spawning",
            "_launched_at": None,
            "_security_groups": groups,
            "_user_data": user_data,
            "_seq": len(self.cloud.table("servers")) + int(self.cloud.clock() * 1000),
            "_nova_ports": [],
            "_hints": hints,
            "_bdm": [],
        }
        boot = self._block_devices(project_id, server, body.get("block_device_mapping_v2"), zone)
        ports = self._server_ports(project_id, server, body.get("networks", "auto"), groups)
        self.cloud.table("servers")[server_id] = server
        self.cloud.counts["servers_created"] += 1
        for port in ports:
            port.update(device_id=server_id, device_owner=f"compute:{zone}")
        for volume, device in boot:
            self.volumes.attach_at_boot(volume, server_id, device)
        if group_id:
            self.cloud.table("server_groups")[group_id]["members"].append(server_id)
        delay = self.cloud.delays.server_build_s if build_s is None else build_s
        no_host = flavor["id"] in self.cloud.no_valid_host or flavor["name"] in (
            self.cloud.no_valid_host
        )

        def built() -> None:
            if server_id not in self.cloud.table("servers"):
                return
            if no_host or self.cloud.take_failure("server"):
                server.update(
                    status="ERROR",
                    _task_state=None,
                    _fault="No valid host was found. There are not enough hosts available.",
                )
                return
            server.update(
                status="ACTIVE", _task_state=None, _launched_at=iso_now(), updated=iso_now()
            )
            for port in self.network.ports_of(server_id):
                port.update(
                    status="ACTIVE",
                    **{"binding:host_id": f"compute-{zone}", "binding:vif_type": "ovs"},
                )

        if delay <= 0:
            built()
        else:
            self.cloud.later("server", delay, built)
        return server

    def _check_quotas(self, project_id: str, flavor: Resource) -> None:
        """Nova's ``instances``/``cores``/``ram`` quotas: 403 "Quota exceeded for ..."."""
        mine = [s for s in self.cloud.table("servers").values() if s["tenant_id"] == project_id]
        flavors = self.cloud.table("flavors")
        used = {
            "instances": len(mine),
            "cores": sum(int(flavors.get(s["_flavor_id"], {}).get("vcpus", 0)) for s in mine),
            "ram": sum(int(flavors.get(s["_flavor_id"], {}).get("ram", 0)) for s in mine),
        }
        wanted = {"instances": 1, "cores": int(flavor["vcpus"]), "ram": int(flavor["ram"])}
        for resource, amount in wanted.items():
            limit = self.cloud.quota(f"compute.{resource}")
            if self.cloud.over_quota(f"compute.{resource}", used[resource], amount):
                raise nova_fault(
                    403,
                    f"Quota exceeded for {resource}: Requested {amount}, but already used "
                    f"{used[resource]} of {limit} {resource}",
                )

    def _block_devices(
        self, project_id: str, server: Resource, mappings: Any, zone: str
    ) -> list[tuple[Resource, str]]:
        """``block_device_mapping_v2``: the volumes to attach at boot (``/dev/vda`` first).

        ``source_type`` ``volume`` boots an existing, available, bootable volume; ``image`` with
        ``destination_type`` ``volume`` makes a ``volume_size`` GiB volume of the image (Nova's
        own, counted against Cinder's quota). ``delete_on_termination`` volumes go with the
        server."""
        if not mappings:
            return []
        if not isinstance(mappings, list):
            raise bad_request("Invalid input for field/attribute block_device_mapping_v2.")
        found: list[tuple[Resource, str]] = []
        ordered = sorted(
            mappings, key=lambda m: int(m.get("boot_index", -1)) if isinstance(m, dict) else 0
        )
        ordered = [m for m in ordered if int(m.get("boot_index", -1)) >= 0] + [
            m for m in ordered if int(m.get("boot_index", -1)) < 0
        ]
        for index, mapping in enumerate(ordered):
            source = mapping.get("source_type")
            destination = mapping.get("destination_type", "volume")
            if destination != "volume":
                raise bad_request(f"Block device mapping destination {destination} not supported")
            ref = str(mapping.get("uuid") or "")
            if source == "volume":
                volume = self.cloud.table("volumes").get(ref)
                if volume is None:
                    raise bad_request(
                        f"Block Device Mapping is Invalid: failed to get volume {ref}."
                    )
                if volume["status"] != "available" or volume["attachments"]:
                    raise bad_request(
                        f"Invalid volume: volume {ref} status must be available, "
                        f"but the current status is {volume['status']}."
                    )
                if index == 0 and volume.get("bootable") != "true":
                    raise bad_request(f"Block Device {ref} is not bootable.")
            elif source == "image":
                if ref not in self.cloud.table("images"):
                    raise bad_request(f"Image {ref} could not be found.")
                size = mapping.get("volume_size")
                if not isinstance(size, int) or size < 1:
                    raise bad_request("Block Device Mapping is Invalid: volume_size is required.")
                volume = self.volumes.make_volume(
                    project_id, size=size, zone=zone, image_id=ref, name=""
                )
            else:
                raise bad_request(f"Block Device Mapping is Invalid: source_type {source}.")
            device = f"/dev/vd{chr(ord('a') + index)}"
            found.append((volume, device))
            if mapping.get("delete_on_termination"):
                server["_bdm"].append(volume["id"])
        return found

    def _server_ports(
        self, project_id: str, server: Resource, networks: Any, groups: list[str]
    ) -> list[Resource]:
        group_ids = []
        for name in groups:
            group = next(
                (
                    g
                    for g in self.cloud.table("security_groups").values()
                    if name in (g["name"], g["id"])
                ),
                None,
            )
            if group is None:
                raise bad_request(f"Security group {name} not found for project {project_id}.")
            group_ids.append(group["id"])
        if networks == "none":
            return []
        if networks == "auto" or networks is None:
            candidates = [
                n
                for n in self.cloud.table("networks").values()
                if not n["router:external"] and n["subnets"]
            ]
            if len(candidates) != 1:
                raise conflict(
                    "Multiple possible networks found, use a Network ID to be more specific."
                    if candidates
                    else "Unable to automatically allocate a network for project"
                )
            networks = [{"uuid": candidates[0]["id"]}]
        if not isinstance(networks, list):
            raise bad_request("Invalid input for field/attribute networks.")
        ports: list[Resource] = []
        try:
            for entry in networks:
                if entry.get("port"):
                    port = self.network.find("ports", str(entry["port"]))
                    if port["device_id"]:
                        raise conflict(f"Port {port['id']} is still in use.")
                    ports.append(port)
                    continue
                network_id = str(entry.get("uuid") or "")
                if network_id not in self.cloud.table("networks"):
                    raise bad_request(f"Network {network_id} could not be found.")
                body: dict[str, Any] = {"network_id": network_id, "security_groups": group_ids}
                if entry.get("fixed_ip"):
                    body["fixed_ips"] = [{"ip_address": entry["fixed_ip"]}]
                port = self.network.create_port(project_id, body)
                server["_nova_ports"].append(port["id"])
                ports.append(port)
        except ApiFault:
            for port_id in server["_nova_ports"]:
                self.network.delete_port(port_id)
            raise
        return ports

    def update_server(self, request: Request, server_id: str) -> Reply:
        server = self.server(server_id)
        body = request.json_body("server")
        for key in ("name", "accessIPv4", "accessIPv6", "description"):
            if key in body:
                server[key] = body[key]
        server["updated"] = iso_now()
        return Reply(200, {"server": self.render_server(request, server)})

    def delete_server(self, request: Request, server_id: str) -> Reply:
        server = self.server(server_id)
        if server["_task_state"] == "deleting":
            return Reply(204)
        server["_task_state"] = "deleting"

        def deleted() -> None:
            self.remove_server(server_id)

        self.cloud.later("server-delete", self.cloud.delays.server_delete_s, deleted)
        return Reply(204)

    def remove_server(self, server_id: str) -> None:
        server = self.cloud.table("servers").pop(server_id, None)
        if server is None:
            return
        self.cloud.counts["servers_removed"] += 1
        for port in self.network.ports_of(server_id):
            if port["id"] in server["_nova_ports"]:
                self.network.delete_port(port["id"])
            else:
                port.update(device_id="", device_owner="", status="DOWN")
        self.volumes.server_gone(server_id)
        for volume_id in server.get("_bdm") or []:
            self.volumes.drop_volume(volume_id)
        for group in self.cloud.table("server_groups").values():
            if server_id in group["members"]:
                group["members"].remove(server_id)

    def server_action(self, request: Request, server_id: str) -> Reply:
        server = self.server(server_id)
        body = request.json_body()
        if len(body) != 1:
            raise bad_request("There is no such action")
        action = next(iter(body))
        delay = self.cloud.delays.server_power_s
        if action == "os-stop":
            if server["status"] != "ACTIVE" or server["_task_state"]:
                raise conflict(
                    f"Cannot 'stop' instance {server_id} while it is in vm_state "
                    f"{_VM_STATE.get(server['status'], ('?',))[0]}"
                )
            self._power(server, "powering-off", "SHUTOFF", delay)
        elif action == "os-start":
            if server["status"] != "SHUTOFF" or server["_task_state"]:
                raise conflict(
                    f"Cannot 'start' instance {server_id} while it is in vm_state "
                    f"{_VM_STATE.get(server['status'], ('?',))[0]}"
                )
            self._power(server, "powering-on", "ACTIVE", delay)
        elif action in ("addFloatingIp", "removeFloatingIp") and not request.at_least(2, 44):
            self._floating_ip_action(request, server, action)
        elif action == "reboot":
            if server["status"] not in ("ACTIVE", "SHUTOFF"):
                raise conflict(
                    f"Cannot 'reboot' instance {server_id} while it is in vm_state "
                    f"{_VM_STATE.get(server['status'], ('?',))[0]}"
                )
            self._power(server, "rebooting", "ACTIVE", delay)
        else:
            raise bad_request(f"There is no such action: {action}")
        return Reply(202)

    # -- the floating-IP proxy (below 2.36; the actions below 2.44) -------------------------
    @staticmethod
    def _proxy(request: Request) -> None:
        if request.at_least(2, 36):
            raise nova_fault(404, "The resource could not be found.")

    def _floating_view(self, fip: Resource) -> dict[str, Any]:
        networks = self.cloud.table("networks")
        port = self.cloud.table("ports").get(str(fip.get("port_id") or ""))
        return {
            "id": fip["id"],
            "ip": fip["floating_ip_address"],
            "pool": (networks.get(fip["floating_network_id"]) or {}).get("name"),
            "fixed_ip": fip.get("fixed_ip_address"),
            "instance_id": (port or {}).get("device_id") or None,
        }

    def _floating_ip(self, request: Request, fip_id: str) -> Resource:
        fip = self.cloud.table("floatingips").get(fip_id)
        if fip is None or fip.get("project_id") != request.project_id:
            raise nova_fault(404, f"Floating IP not found for ID {fip_id}")
        return fip

    def list_floating_ips(self, request: Request) -> Reply:
        self._proxy(request)
        mine = [
            f
            for f in self.cloud.table("floatingips").values()
            if f.get("project_id") == request.project_id
        ]
        return Reply(200, {"floating_ips": [self._floating_view(f) for f in mine]})

    def list_floating_ip_pools(self, request: Request) -> Reply:
        self._proxy(request)
        pools = [
            {"name": n["name"]}
            for n in self.cloud.table("networks").values()
            if n.get("router:external")
        ]
        return Reply(200, {"floating_ip_pools": pools})

    def create_floating_ip(self, request: Request) -> Reply:
        self._proxy(request)
        body = request.body if isinstance(request.body, dict) else {}
        pool = str(body.get("pool") or "nova")  # Nova's default_floating_pool
        network = next(
            (
                n
                for n in self.cloud.table("networks").values()
                if n.get("router:external") and pool in (n["name"], n["id"])
            ),
            None,
        )
        if network is None:
            raise nova_fault(404, "Floating IP pool not found.")
        try:
            fip = self.network.create_floating_ip(
                request.project_id, {"floating_network_id": network["id"]}
            )
        except ApiFault as fault:
            if fault.kind == "IpAddressGenerationFailure":
                raise nova_fault(404, f"No more floating IPs in pool {pool}.") from None
            raise
        return Reply(200, {"floating_ip": self._floating_view(fip)})

    def show_floating_ip(self, request: Request, fip_id: str) -> Reply:
        self._proxy(request)
        return Reply(200, {"floating_ip": self._floating_view(self._floating_ip(request, fip_id))})

    def delete_floating_ip(self, request: Request, fip_id: str) -> Reply:
        self._proxy(request)
        fip = self._floating_ip(request, fip_id)
        self.cloud.table("floatingips").pop(fip["id"], None)
        return Reply(202)

    def _floating_ip_action(self, request: Request, server: Resource, action: str) -> None:
        body = request.json_body(action)
        address = body.get("address")
        if not isinstance(address, str) or not address:
            raise bad_request(f"Invalid input for field/attribute {action}.")
        fip = next(
            (
                f
                for f in self.cloud.table("floatingips").values()
                if f["floating_ip_address"] == address and f.get("project_id") == request.project_id
            ),
            None,
        )
        if fip is None:
            raise nova_fault(404, f"floating IP {address} not found")
        ports = [p for p in self.cloud.table("ports").values() if p["device_id"] == server["id"]]
        if action == "removeFloatingIp":
            if not any(p["id"] == fip.get("port_id") for p in ports):
                raise conflict(
                    f"Floating IP {address} is not associated with instance {server['id']}."
                )
            self.network.associate_floating_ip(fip, None, None)
            return
        fixed = body.get("fixed_address")
        port = next(
            (p for p in ports if any(fixed in (None, ip["ip_address"]) for ip in p["fixed_ips"])),
            None,
        )
        if port is None:
            if fixed:
                raise bad_request(f"Specified fixed address {fixed} not assigned to instance")
            raise bad_request("Unable to associate floating IP: the instance has no fixed IPs")
        try:
            self.network.associate_floating_ip(fip, port["id"], fixed)
        except ApiFault as fault:
            if fault.status == 409:
                raise conflict(fault.message) from None
            raise bad_request(
                f"Unable to associate floating IP {address}: {fault.message}"
            ) from None

    def _power(self, server: Resource, task: str, target: str, delay: float) -> None:
        server["_task_state"] = task

        def done() -> None:
            if server["id"] in self.cloud.table("servers"):
                server.update(status=target, _task_state=None, updated=iso_now())

        self.cloud.later("server", delay, done)

    # -- metadata and tags -----------------------------------------------------------------
    @staticmethod
    def _metadata_body(request: Request, key: str = "metadata") -> dict[str, str]:
        body = request.json_body().get(key)
        if not _valid_metadata(body):
            raise bad_request(f"Invalid input for field/attribute {key}.")
        assert isinstance(body, dict)
        return body

    def get_metadata(self, request: Request, server_id: str) -> Reply:
        return Reply(200, {"metadata": dict(self.server(server_id)["metadata"])})

    def replace_metadata(self, request: Request, server_id: str) -> Reply:
        server = self.server(server_id)
        server["metadata"] = dict(self._metadata_body(request))
        return Reply(200, {"metadata": dict(server["metadata"])})

    def merge_metadata(self, request: Request, server_id: str) -> Reply:
        server = self.server(server_id)
        server["metadata"].update(self._metadata_body(request))
        return Reply(200, {"metadata": dict(server["metadata"])})

    def get_metadata_item(self, request: Request, server_id: str, key: str) -> Reply:
        metadata = self.server(server_id)["metadata"]
        if key not in metadata:
            raise nova_fault(404, "Metadata item was not found")
        return Reply(200, {"meta": {key: metadata[key]}})

    def set_metadata_item(self, request: Request, server_id: str, key: str) -> Reply:
        server = self.server(server_id)
        meta = self._metadata_body(request, "meta")
        if list(meta) != [key]:
            raise bad_request("Request body and URI mismatch")
        server["metadata"][key] = meta[key]
        return Reply(200, {"meta": meta})

    def delete_metadata_item(self, request: Request, server_id: str, key: str) -> Reply:
        metadata = self.server(server_id)["metadata"]
        if metadata.pop(key, None) is None:
            raise nova_fault(404, "Metadata item was not found")
        return Reply(204)

    def _tags_supported(self, request: Request) -> None:
        if not request.at_least(2, 26):
            raise nova_fault(404, "The resource could not be found.")

    def get_tags(self, request: Request, server_id: str) -> Reply:
        self._tags_supported(request)
        return Reply(200, {"tags": list(self.server(server_id)["tags"])})

    def replace_tags(self, request: Request, server_id: str) -> Reply:
        self._tags_supported(request)
        server = self.server(server_id)
        tags = request.json_body().get("tags")
        if not isinstance(tags, list) or len(tags) > 50 or not all(_valid_tag(t) for t in tags):
            raise bad_request("Invalid input for field/attribute tags.")
        server["tags"] = sorted(set(tags))
        return Reply(200, {"tags": list(server["tags"])})

    def clear_tags(self, request: Request, server_id: str) -> Reply:
        self._tags_supported(request)
        self.server(server_id)["tags"] = []
        return Reply(204)

    def has_tag(self, request: Request, server_id: str, tag: str) -> Reply:
        self._tags_supported(request)
        if tag not in self.server(server_id)["tags"]:
            raise nova_fault(404, f"Tag '{tag}' could not be found for instance {server_id}.")
        return Reply(204)

    def add_tag(self, request: Request, server_id: str, tag: str) -> Reply:
        self._tags_supported(request)
        server = self.server(server_id)
        if not _valid_tag(tag):
            raise bad_request(f"Invalid tag: {tag}")
        created = tag not in server["tags"]
        server["tags"] = sorted({*server["tags"], tag})
        return Reply(
            201 if created else 204,
            None,
            {"Location": f"{request.base_url}/v2.1/servers/{server_id}/tags/{tag}"},
        )

    def remove_tag(self, request: Request, server_id: str, tag: str) -> Reply:
        self._tags_supported(request)
        server = self.server(server_id)
        if tag not in server["tags"]:
            raise nova_fault(404, f"Tag '{tag}' could not be found for instance {server_id}.")
        server["tags"] = [t for t in server["tags"] if t != tag]
        return Reply(204)

    # -- volume attachments ----------------------------------------------------------------
    def _render_attachment(self, request: Request, attachment: Resource) -> Resource:
        body: Resource = {
            "id": attachment["volume_id"],
            "serverId": attachment["server_id"],
            "volumeId": attachment["volume_id"],
            "device": attachment["device"],
        }
        if request.at_least(2, 70):
            body["tag"] = None
        if request.at_least(2, 79):
            body["delete_on_termination"] = False
        if request.at_least(2, 89):
            body.pop("id")
            body["attachment_id"] = attachment["attachment_id"]
            body["bdm_uuid"] = attachment["attachment_id"]
        return body

    def list_attachments(self, request: Request, server_id: str) -> Reply:
        self.server(server_id)
        found = [
            self._render_attachment(request, a) for a in self.volumes.attachments_of(server_id)
        ]
        return Reply(200, {"volumeAttachments": found})

    def show_attachment(self, request: Request, server_id: str, volume_id: str) -> Reply:
        self.server(server_id)
        for attachment in self.volumes.attachments_of(server_id):
            if attachment["volume_id"] == volume_id:
                return Reply(
                    200, {"volumeAttachment": self._render_attachment(request, attachment)}
                )
        raise nova_fault(404, f"Volume {volume_id} is not attached to server {server_id}")

    def attach_volume(self, request: Request, server_id: str) -> Reply:
        server = self.server(server_id)
        body = request.json_body("volumeAttachment")
        volume_id = str(body.get("volumeId") or "")
        if (
            server["status"] not in ("ACTIVE", "SHUTOFF", "PAUSED", "SUSPENDED")
            or server["_task_state"]
        ):
            raise conflict(
                f"Cannot 'attach_volume' instance {server_id} while it is "
                f"in vm_state {_VM_STATE.get(server['status'], ('?',))[0]}"
            )
        used = {a["device"] for a in self.volumes.attachments_of(server_id)}
        device = str(body.get("device") or "")
        if not device or device in used:
            device = next(
                f"/dev/vd{chr(c)}"
                for c in range(ord("b"), ord("z") + 1)
                if f"/dev/vd{chr(c)}" not in used
            )
        attachment = self.volumes.begin_attach(volume_id, server, device)
        return Reply(200, {"volumeAttachment": self._render_attachment(request, attachment)})

    def detach_volume(self, request: Request, server_id: str, volume_id: str) -> Reply:
        server = self.server(server_id)
        if server["_task_state"]:
            raise conflict(
                f"Cannot 'detach_volume' instance {server_id} while it is "
                f"in task_state {server['_task_state']}"
            )
        self.volumes.begin_detach(volume_id, server_id)
        return Reply(202)


def _valid_tag(tag: Any) -> bool:
    return isinstance(tag, str) and 0 < len(tag) <= 60 and "/" not in tag and "," not in tag
