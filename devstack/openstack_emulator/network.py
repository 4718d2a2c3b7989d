"""Neutron v2.0: networks, subnets, ports, security groups and rules, floating IPs, routers.

Follows the Networking API v2.0 reference: ``{"network": {...}}`` envelopes, equality filters on
any field (repeatable), ``fixed_ips=ip_address=<ip>``, ``fields=``, tag filters and
``PUT .../tags``, ``limit``/``marker`` with ``<collection>_links``, errors as
``{"NeutronError": {"type", "message", "detail"}}``. IP addresses come from the subnet's
allocation pool; a floating IP attaches only to a port whose subnet has a router to the floating
network; router extra routes (``PUT routes``, ``add_extraroutes``/``remove_extraroutes``) need a
nexthop on a connected subnet and are capped at ``max_routes`` (Neutron's default 30); allowed
address pairs need port security. A subnet overlapping another of its network is 400, and so is a
router interface on a subnet without a gateway or overlapping a subnet the router already has
(Neutron's "Cidr ... overlaps with cidr ..."); a network, subnet, router or security group still
in use is 409.
"""

from __future__ import annotations

import ipaddress
import itertools
import random
from collections.abc import Callable
from typing import Any

from devstack.openstack_emulator.api import (
    ID,
    Reply,
    Request,
    Route,
    Service,
    match_tags,
)
from devstack.openstack_emulator.cloud import (
    ApiFault,
    Cloud,
    Resource,
    bad_request,
    iso_now,
    new_id,
)

EXTENSIONS = (
    ("agent", "agent"),
    ("allowed-address-pairs", "Allowed Address Pairs"),
    ("availability_zone", "Availability Zone"),
    ("binding", "Port Binding"),
    ("external-net", "Neutron external network"),
    ("extraroute", "Neutron Extra Route"),
    ("extraroute-atomic", "Atomically add/remove extra routes"),
    ("fip-port-details", "Floating IP Port Details Extension"),
    ("network-ip-availability", "Network IP Availability"),
    ("port-security", "Port Security"),
    ("quotas", "Quota management support"),
    ("router", "Neutron L3 Router"),
    ("security-group", "security-group"),
    ("standard-attr-description", "standard-attr-description"),
    ("standard-attr-tag", "Tag support for resources with standard attribute"),
    ("standard-attr-timestamp", "Resource timestamps"),
    ("subnet_allocation", "Subnet Allocation"),
    ("trunk", "Trunk Extension"),
)

#: Resource path → (singular key, table, NeutronError type prefix).
COLLECTIONS = {
    "networks": ("network", "networks", "Network"),
    "subnets": ("subnet", "subnets", "Subnet"),
    "ports": ("port", "ports", "Port"),
    "security-groups": ("security_group", "security_groups", "SecurityGroup"),
    "security-group-rules": ("security_group_rule", "security_group_rules", "SecurityGroupRule"),
    "floatingips": ("floatingip", "floatingips", "FloatingIP"),
    "routers": ("router", "routers", "Router"),
}

_UPDATABLE = {
    "networks": {"name", "description", "admin_state_up", "shared", "mtu", "port_security_enabled"},
    "subnets": {
        "name",
        "description",
        "dns_nameservers",
        "host_routes",
        "gateway_ip",
        "enable_dhcp",
    },
    "ports": {
        "name",
        "description",
        "admin_state_up",
        "allowed_address_pairs",
        "security_groups",
        "port_security_enabled",
        "device_id",
        "device_owner",
        "fixed_ips",
        "binding:host_id",
    },
    "security-groups": {"name", "description", "stateful"},
    "security-group-rules": {"description"},
    "floatingips": {"port_id", "fixed_ip_address", "description"},
    "routers": {"name", "description", "admin_state_up", "routes", "external_gateway_info"},
}


def neutron_fault(status: int, kind: str, message: str) -> ApiFault:
    return ApiFault(status, message, kind)


def _mac() -> str:
    return "fa:16:3e:" + ":".join(f"{random.randrange(256):02x}" for _ in range(3))


def render(item: Resource) -> Resource:
    """A resource as the API shows it: internal ``_`` keys dropped."""
    return {k: v for k, v in item.items() if not k.startswith("_")}


class Network(Service):
    type = "network"
    max_limit = 0  # Neutron: no page size unless the client asks (pagination_max_limit -1)

    def __init__(self, cloud: Cloud, *, max_routes: int = 30) -> None:
        self.max_routes = max_routes
        super().__init__(cloud)

    def fault_body(self, fault: ApiFault) -> Any:
        kinds = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound"}
        return {
            "NeutronError": {
                "type": fault.kind or kinds.get(fault.status, "HTTPError"),
                "message": fault.message,
                "detail": "",
            }
        }

    def routes(self) -> list[Route]:
        routes = [
            Route("GET", "", self.versions, public=True),
            Route("GET", "/v2.0", self.resources),
            Route("GET", "/v2.0/extensions", self.list_extensions),
            Route("GET", f"/v2.0/extensions/{ID}", self.get_extension),
            Route("PUT", f"/v2.0/routers/{ID}/add_router_interface", self.add_interface),
            Route("PUT", f"/v2.0/routers/{ID}/remove_router_interface", self.remove_interface),
            Route("PUT", f"/v2.0/routers/{ID}/add_extraroutes", self.add_extra_routes),
            Route("PUT", f"/v2.0/routers/{ID}/remove_extraroutes", self.remove_extra_routes),
        ]
        for path in COLLECTIONS:
            routes += [
                Route("GET", f"/v2.0/({path})", self.list_items),
                Route("POST", f"/v2.0/({path})", self.create),
                Route("GET", f"/v2.0/({path})/{ID}", self.show),
                Route("PUT", f"/v2.0/({path})/{ID}", self.update),
                Route("DELETE", f"/v2.0/({path})/{ID}", self.delete),
                Route("GET", f"/v2.0/({path})/{ID}/tags", self.get_tags),
                Route("PUT", f"/v2.0/({path})/{ID}/tags", self.replace_tags),
                Route("DELETE", f"/v2.0/({path})/{ID}/tags", self.clear_tags),
                Route("GET", f"/v2.0/({path})/{ID}/tags/{ID}", self.has_tag),
                Route("PUT", f"/v2.0/({path})/{ID}/tags/{ID}", self.add_tag),
                Route("DELETE", f"/v2.0/({path})/{ID}/tags/{ID}", self.remove_tag),
            ]
        return routes

    # -- discovery -------------------------------------------------------------------------
    def versions(self, request: Request) -> Reply:
        return Reply(
            200,
            {
                "versions": [
                    {
                        "id": "v2.0",
                        "status": "CURRENT",
                        "links": [{"href": f"{request.base_url}/v2.0/", "rel": "self"}],
                    }
                ]
            },
        )

    def resources(self, request: Request) -> Reply:
        return Reply(
            200,
            {
                "resources": [
                    {
                        "name": singular,
                        "collection": path,
                        "links": [{"href": f"{request.base_url}/v2.0/{path}", "rel": "self"}],
                    }
                    for path, (singular, _, _) in COLLECTIONS.items()
                ]
            },
        )

    def list_extensions(self, request: Request) -> Reply:
        return Reply(200, {"extensions": [self._extension(a, n) for a, n in EXTENSIONS]})

    def get_extension(self, request: Request, alias: str) -> Reply:
        for known, name in EXTENSIONS:
            if known == alias:
                return Reply(200, {"extension": self._extension(known, name)})
        raise neutron_fault(
            404, "ExtensionNotFound", f"Extension with alias {alias} does not exist"
        )

    @staticmethod
    def _extension(alias: str, name: str) -> dict[str, Any]:
        return {
            "alias": alias,
            "name": name,
            "description": name,
            "updated": "2013-01-20T00:00:00-00:00",
            "links": [],
        }

    # -- generic CRUD ----------------------------------------------------------------------
    def _table(self, path: str) -> dict[str, Resource]:
        return self.cloud.table(COLLECTIONS[path][1])

    def find(self, path: str, resource_id: str) -> Resource:
        found = self._table(path).get(resource_id)
        if found is None:
            singular, _, kind = COLLECTIONS[path]
            label = singular.replace("_", " ")
            raise neutron_fault(
                404, f"{kind}NotFound", f"{label.capitalize()} {resource_id} could not be found."
            )
        return found

    def list_items(self, request: Request, path: str) -> Reply:
        items = [item for item in self._table(path).values() if self._matches(item, request)]
        page, links = self.page(request, items, path, link_path=f"/v2.0/{path}")
        fields = request.args("fields")
        rendered = [self._fields(render(item), fields) for item in page]
        body: dict[str, Any] = {path.replace("-", "_"): rendered}
        if links:
            body[f"{path.replace('-', '_')}_links"] = links
        return Reply(200, body)

    @staticmethod
    def _fields(item: Resource, fields: list[str]) -> Resource:
        if not fields:
            return item
        return {k: v for k, v in item.items() if k in fields or k == "id"}

    def _matches(self, item: Resource, request: Request) -> bool:
        if not match_tags(item, request):
            return False
        for name, wanted in request.query.items():
            if name in ("limit", "marker", "fields", "sort_key", "sort_dir", "page_reverse"):
                continue
            if name in ("tags", "tags-any", "not-tags", "not-tags-any"):
                continue
            if name == "fixed_ips":
                if not all(self._fixed_ip_matches(item, w) for w in wanted):
                    return False
                continue
            value = item.get(name)
            if isinstance(value, bool):  # Neutron reads booleans as True/true/1 alike
                value = "true" if value else "false"
                wanted = [{"1": "true", "0": "false"}.get(w.lower(), w.lower()) for w in wanted]
            elif value is None:
                value = ""
            if str(value) not in wanted:
                return False
        return True

    @staticmethod
    def _fixed_ip_matches(item: Resource, wanted: str) -> bool:
        key, _, value = wanted.partition("=")
        return any(str(ip.get(key)) == value for ip in item.get("fixed_ips") or [])

    def show(self, request: Request, path: str, resource_id: str) -> Reply:
        singular = COLLECTIONS[path][0]
        return Reply(
            200,
            {singular: self._fields(render(self.find(path, resource_id)), request.args("fields"))},
        )

    def create(self, request: Request, path: str) -> Reply:
        singular = COLLECTIONS[path][0]
        body = request.json_body()
        if f"{singular}s" in body and isinstance(body[f"{singular}s"], list):  # bulk create
            made = [self._create(request, path, dict(one)) for one in body[f"{singular}s"]]
            return Reply(201, {path.replace("-", "_"): [render(m) for m in made]})
        return Reply(
            201, {singular: render(self._create(request, path, dict(request.json_body(singular))))}
        )

    def _create(self, request: Request, path: str, body: dict[str, Any]) -> Resource:
        creators: dict[str, Callable[[str, dict[str, Any]], Resource]] = {
            "networks": self.create_network,
            "subnets": self.create_subnet,
            "ports": self.create_port,
            "security-groups": self.create_security_group,
            "security-group-rules": self.create_rule,
            "floatingips": self.create_floating_ip,
            "routers": self.create_router,
        }
        return creators[path](request.project_id, body)

    def update(self, request: Request, path: str, resource_id: str) -> Reply:
        singular = COLLECTIONS[path][0]
        item = self.find(path, resource_id)
        changes = dict(request.json_body(singular))
        unknown = set(changes) - _UPDATABLE[path]
        if unknown:
            raise bad_request(f"Cannot update read-only attribute {sorted(unknown)[0]}")
        if path == "ports":
            self._update_port(item, changes)
        elif path == "floatingips":
            self._update_floating_ip(item, changes)
        elif path == "routers":
            self._update_router(item, changes)
        else:
            item.update(changes)
        self._touch(item)
        return Reply(200, {singular: render(item)})

    def delete(self, request: Request, path: str, resource_id: str) -> Reply:
        item = self.find(path, resource_id)
        if path == "networks":
            if any(p["network_id"] == resource_id for p in self.cloud.table("ports").values()):
                raise neutron_fault(
                    409,
                    "NetworkInUse",
                    (
                        f"Unable to complete operation on network {resource_id}. "
                        "There are one or more ports still in use on the network."
                    ),
                )
            for subnet_id in item["subnets"]:
                self.cloud.table("subnets").pop(subnet_id, None)
        elif path == "subnets":
            in_use = any(
                ip["subnet_id"] == resource_id
                for p in self.cloud.table("ports").values()
                for ip in p["fixed_ips"]
            )
            if in_use:
                raise neutron_fault(
                    409,
                    "SubnetInUse",
                    (
                        f"Unable to complete operation on subnet {resource_id}: One "
                        "or more ports have an IP allocation from this subnet."
                    ),
                )
            network = self.cloud.table("networks").get(item["network_id"])
            if network is not None:
                network["subnets"].remove(resource_id)
        elif path == "ports":
            self.delete_port(resource_id)
            return Reply(204)
        elif path == "routers":
            if any(p["device_id"] == resource_id for p in self.cloud.table("ports").values()):
                raise neutron_fault(409, "RouterInUse", f"Router {resource_id} still has ports")
        elif path == "security-groups":
            in_use = any(
                resource_id in (p.get("security_groups") or [])
                for p in self.cloud.table("ports").values()
            )
            if in_use:
                raise neutron_fault(
                    409, "SecurityGroupInUse", f"Security Group {resource_id} in use."
                )
            for rule_id in [r["id"] for r in item["security_group_rules"]]:
                self.cloud.table("security_group_rules").pop(rule_id, None)
        elif path == "security-group-rules":
            group = self.cloud.table("security_groups").get(item["security_group_id"])
            if group is not None:
                group["security_group_rules"] = [
                    r for r in group["security_group_rules"] if r["id"] != resource_id
                ]
        self._table(path).pop(resource_id, None)
        return Reply(204)

    # -- tags ------------------------------------------------------------------------------
    def get_tags(self, request: Request, path: str, resource_id: str) -> Reply:
        return Reply(200, {"tags": list(self.find(path, resource_id)["tags"])})

    def replace_tags(self, request: Request, path: str, resource_id: str) -> Reply:
        item = self.find(path, resource_id)
        tags = request.json_body().get("tags")
        if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
            raise bad_request("Invalid tags body")
        item["tags"] = sorted(set(tags))
        self._touch(item)
        return Reply(200, {"tags": item["tags"]})

    def clear_tags(self, request: Request, path: str, resource_id: str) -> Reply:
        self.find(path, resource_id)["tags"] = []
        return Reply(204)

    def has_tag(self, request: Request, path: str, resource_id: str, tag: str) -> Reply:
        if tag not in self.find(path, resource_id)["tags"]:
            raise neutron_fault(
                404, "TagNotFound", f"Tag {tag} could not be found for {path} {resource_id}."
            )
        return Reply(204)

    def add_tag(self, request: Request, path: str, resource_id: str, tag: str) -> Reply:
        item = self.find(path, resource_id)
        if tag not in item["tags"]:
            item["tags"] = sorted({*item["tags"], tag})
            self._touch(item)
        return Reply(201)

    def remove_tag(self, request: Request, path: str, resource_id: str, tag: str) -> Reply:
        item = self.find(path, resource_id)
        if tag not in item["tags"]:
            raise neutron_fault(
                404, "TagNotFound", f"Tag {tag} could not be found for {path} {resource_id}."
            )
        item["tags"] = [t for t in item["tags"] if t != tag]
        return Reply(204)

    # -- creation --------------------------------------------------------------------------
    @staticmethod
    def _standard(project_id: str, body: dict[str, Any], **defaults: Any) -> Resource:
        now = iso_now()
        item: Resource = {
            "id": new_id(),
            "name": "",
            "description": "",
            "tags": [],
            "project_id": project_id,
            "tenant_id": project_id,
            "created_at": now,
            "updated_at": now,
            "revision_number": 0,
        }
        item.update(defaults)
        item.update({k: v for k, v in body.items() if k not in ("id", "tenant_id", "project_id")})
        return item

    @staticmethod
    def _touch(item: Resource) -> None:
        item["updated_at"] = iso_now()
        item["revision_number"] = int(item.get("revision_number", 0)) + 1

    def create_network(self, project_id: str, body: dict[str, Any]) -> Resource:
        item = self._standard(
            project_id,
            body,
            status="ACTIVE",
            admin_state_up=True,
            shared=False,
            mtu=1450,
            subnets=[],
            availability_zones=["nova"],
            availability_zone_hints=[],
            port_security_enabled=True,
            **{"router:external": False, "provider:network_type": "vxlan"},
        )
        item["subnets"] = []
        self.cloud.table("networks")[item["id"]] = item
        return item

    def create_subnet(self, project_id: str, body: dict[str, Any]) -> Resource:
        network = self.find("networks", str(body.get("network_id", "")))
        try:
            cidr = ipaddress.ip_network(str(body.get("cidr", "")), strict=True)
        except ValueError as exc:
            raise bad_request(f"Invalid input for cidr: {exc}") from None
        for other_id in network["subnets"]:
            other = self.cloud.table("subnets")[other_id]
            if cidr.overlaps(ipaddress.ip_network(other["cidr"])):
                raise bad_request(
                    f"Invalid input for operation: Requested subnet with cidr: {cidr} for "
                    f"network: {network['id']} overlaps with another subnet."
                )
        hosts = list(cidr.hosts()) if cidr.num_addresses <= 65536 else []
        gateway = body.get("gateway_ip", str(hosts[0]) if hosts else None)
        pools = body.get("allocation_pools") or (
            [{"start": str(hosts[1]), "end": str(hosts[-1])}] if len(hosts) > 1 else []
        )
        item = self._standard(
            project_id,
            body,
            ip_version=cidr.version,
            cidr=str(cidr),
            gateway_ip=gateway,
            allocation_pools=pools,
            enable_dhcp=True,
            dns_nameservers=[],
            host_routes=[],
            ipv6_address_mode=None,
            ipv6_ra_mode=None,
            subnetpool_id=None,
        )
        self.cloud.table("subnets")[item["id"]] = item
        network["subnets"].append(item["id"])
        return item

    def _allocate(self, subnet: Resource, wanted: str | None = None) -> str:
        used = {
            ip["ip_address"]
            for p in self.cloud.table("ports").values()
            for ip in p["fixed_ips"]
            if ip["subnet_id"] == subnet["id"]
        }
        used |= {
            f["floating_ip_address"]
            for f in self.cloud.table("floatingips").values()
            if f.get("_subnet_id") == subnet["id"]
        }
        network = ipaddress.ip_network(subnet["cidr"])
        if wanted is not None:
            if ipaddress.ip_address(wanted) not in network:
                raise bad_request(
                    f"IP address {wanted} is not a valid IP for the specified subnet."
                )
            if wanted in used:
                raise neutron_fault(
                    409,
                    "IpAddressAlreadyAllocated",
                    f"IP address {wanted} already allocated in subnet {subnet['id']}",
                )
            return wanted
        if subnet["gateway_ip"]:
            used.add(subnet["gateway_ip"])
        # Scan from just after the last allocation (as Neutron's IPAM does not, but the result
        # is the same set of free addresses and a thousand ports stay cheap to make).
        cursor = int(subnet.get("_cursor", 0))
        ranges: list[range] = []
        for pool in subnet["allocation_pools"]:
            start = int(ipaddress.ip_address(pool["start"]))
            end = int(ipaddress.ip_address(pool["end"]))
            ranges += [range(max(start, cursor + 1), end + 1), range(start, min(cursor, end) + 1)]
        for value in itertools.chain.from_iterable(ranges):
            candidate = str(ipaddress.ip_address(value))
            if candidate not in used:
                subnet["_cursor"] = value
                return candidate
        raise neutron_fault(
            409,
            "IpAddressGenerationFailure",
            f"No more IP addresses available on network {subnet['network_id']}.",
        )

    def create_port(self, project_id: str, body: dict[str, Any]) -> Resource:
        network = self.find("networks", str(body.get("network_id", "")))
        ports = self.cloud.table("ports")
        used = sum(1 for p in ports.values() if p["project_id"] == project_id)
        if self.cloud.over_quota("network.port", used):
            raise neutron_fault(409, "OverQuota", "Quota exceeded for resources: ['port'].")
        for group_id in body.get("security_groups") or []:
            self.find("security-groups", str(group_id))
        requested = body.pop("fixed_ips", None)
        fixed_ips: list[dict[str, str]] = []
        if requested:
            for entry in requested:
                subnet_id = entry.get("subnet_id")
                if subnet_id is None:
                    subnet_id = self._subnet_for_ip(network, entry.get("ip_address"))
                subnet = self.find("subnets", subnet_id)
                if subnet["network_id"] != network["id"]:
                    raise bad_request(
                        "Invalid input for operation: Failed to create port on network "
                        f"{network['id']}, because fixed_ips included invalid subnet "
                        f"{subnet_id}."
                    )
                fixed_ips.append(
                    {
                        "subnet_id": subnet_id,
                        "ip_address": self._allocate(subnet, entry.get("ip_address")),
                    }
                )
        else:
            for subnet_id in network["subnets"]:
                subnet = self.cloud.table("subnets")[subnet_id]
                if subnet["ip_version"] == 4 or not fixed_ips:
                    fixed_ips.append({"subnet_id": subnet_id, "ip_address": self._allocate(subnet)})
                    break
        security = body.get("port_security_enabled", network["port_security_enabled"])
        default_groups = [] if not security else [self.default_security_group(project_id)["id"]]
        pairs = body.get("allowed_address_pairs") or []
        if pairs and not security:
            raise neutron_fault(
                409,
                "AddressPairAndPortSecurityRequired",
                "Port Security must be enabled in order to have allowed address pairs on a port.",
            )
        item = self._standard(
            project_id,
            body,
            network_id=network["id"],
            admin_state_up=True,
            status="DOWN",
            mac_address=_mac(),
            fixed_ips=fixed_ips,
            device_id="",
            device_owner="",
            allowed_address_pairs=[],
            port_security_enabled=security,
            security_groups=body.get("security_groups", default_groups),
            **{
                "binding:vnic_type": "normal",
                "binding:host_id": "",
                "binding:vif_type": "unbound",
            },
        )
        item["allowed_address_pairs"] = [self._pair(item, p) for p in pairs]
        item["fixed_ips"] = fixed_ips
        ports[item["id"]] = item
        self.cloud.counts["ports_created"] += 1
        return item

    def _subnet_for_ip(self, network: Resource, address: str | None) -> str:
        for subnet_id in network["subnets"]:
            subnet = self.cloud.table("subnets")[subnet_id]
            if address is None or ipaddress.ip_address(address) in ipaddress.ip_network(
                subnet["cidr"]
            ):
                return str(subnet_id)
        raise bad_request(
            f"IP address {address} is not a valid IP for any subnet on network {network['id']}."
        )

    @staticmethod
    def _pair(port: Resource, pair: Any) -> dict[str, str]:
        if not isinstance(pair, dict) or "ip_address" not in pair:
            raise bad_request("Invalid input for allowed_address_pairs: missing ip_address")
        try:
            ipaddress.ip_network(str(pair["ip_address"]), strict=False)
        except ValueError:
            raise bad_request(
                f"Invalid input for ip_address: '{pair['ip_address']}' is not a valid IP address"
            ) from None
        return {
            "ip_address": str(pair["ip_address"]),
            "mac_address": str(pair.get("mac_address") or port["mac_address"]),
        }

    def _update_port(self, port: Resource, changes: dict[str, Any]) -> None:
        security = changes.get("port_security_enabled", port["port_security_enabled"])
        if "allowed_address_pairs" in changes:
            pairs = changes.pop("allowed_address_pairs") or []
            if pairs and not security:
                raise neutron_fault(
                    409,
                    "AddressPairAndPortSecurityRequired",
                    (
                        "Port Security must be enabled in order to have allowed "
                        "address pairs on a port."
                    ),
                )
            seen = [self._pair(port, p) for p in pairs]
            if len({(p["ip_address"], p["mac_address"]) for p in seen}) != len(seen):
                raise bad_request("Request contains duplicate address pair")
            port["allowed_address_pairs"] = seen
        if not security and (port["allowed_address_pairs"] or changes.get("security_groups")):
            raise neutron_fault(
                409,
                "PortSecurityAndIPRequiredForSecurityGroups",
                (
                    "Port security must be enabled and port must have an IP "
                    "address in order to use security groups."
                ),
            )
        if "fixed_ips" in changes:
            network = self.find("networks", port["network_id"])
            fixed: list[dict[str, str]] = []
            for entry in changes.pop("fixed_ips") or []:
                subnet_id = entry.get("subnet_id") or self._subnet_for_ip(
                    network, entry.get("ip_address")
                )
                current = next(
                    (ip for ip in port["fixed_ips"] if ip["ip_address"] == entry.get("ip_address")),
                    None,
                )
                fixed.append(
                    current
                    or {
                        "subnet_id": subnet_id,
                        "ip_address": self._allocate(
                            self.find("subnets", subnet_id), entry.get("ip_address")
                        ),
                    }
                )
            port["fixed_ips"] = fixed
        port.update(changes)

    def delete_port(self, port_id: str) -> None:
        if self.cloud.table("ports").pop(port_id, None) is not None:
            self.cloud.counts["ports_removed"] += 1
        for fip in self.cloud.table("floatingips").values():
            if fip["port_id"] == port_id:
                self._disassociate(fip)

    def default_security_group(self, project_id: str) -> Resource:
        for group in self.cloud.table("security_groups").values():
            if group["name"] == "default" and group["project_id"] == project_id:
                return group
        group = self.create_security_group(
            project_id, {"name": "default", "description": "Default security group"}
        )
        return group

    def create_security_group(self, project_id: str, body: dict[str, Any]) -> Resource:
        item = self._standard(project_id, body, security_group_rules=[], stateful=True)
        item["security_group_rules"] = []
        self.cloud.table("security_groups")[item["id"]] = item
        for ethertype in ("IPv4", "IPv6"):
            self.create_rule(
                project_id,
                {"security_group_id": item["id"], "direction": "egress", "ethertype": ethertype},
            )
        return item

    def create_rule(self, project_id: str, body: dict[str, Any]) -> Resource:
        group = self.find("security-groups", str(body.get("security_group_id", "")))
        if body.get("direction") not in ("ingress", "egress"):
            raise bad_request(f"Invalid input for direction: {body.get('direction')!r}")
        body.setdefault("ethertype", "IPv4")
        protocol = body.get("protocol")
        if protocol is not None:
            protocol = str(protocol).lower()
            body["protocol"] = protocol
        low, high = body.get("port_range_min"), body.get("port_range_max")
        if low is not None and high is not None and int(low) > int(high):
            raise bad_request("For TCP/UDP protocols, port_range_min must be <= port_range_max")
        item = self._standard(
            project_id,
            body,
            protocol=None,
            port_range_min=None,
            port_range_max=None,
            remote_ip_prefix=None,
            remote_group_id=None,
            remote_address_group_id=None,
        )
        key = (
            "direction",
            "ethertype",
            "protocol",
            "port_range_min",
            "port_range_max",
            "remote_ip_prefix",
            "remote_group_id",
        )
        for existing in group["security_group_rules"]:
            if all(existing.get(k) == item.get(k) for k in key):
                raise neutron_fault(
                    409,
                    "SecurityGroupRuleExists",
                    f"Security group rule already exists. Rule id is {existing['id']}.",
                )
        item.pop("name", None)
        item.pop("tags", None)
        item["tags"] = []
        self.cloud.table("security_group_rules")[item["id"]] = item
        group["security_group_rules"].append(item)
        return item

    # -- floating IPs ----------------------------------------------------------------------
    def create_floating_ip(self, project_id: str, body: dict[str, Any]) -> Resource:
        network = self.find("networks", str(body.get("floating_network_id", "")))
        if not network["router:external"]:
            raise bad_request(
                f"Bad floatingip request: Network {network['id']} is not a valid external network."
            )
        subnet_ids = [body["subnet_id"]] if body.get("subnet_id") else list(network["subnets"])
        address: str | None = None
        chosen = ""
        for subnet_id in subnet_ids:
            subnet = self.find("subnets", subnet_id)
            if subnet["network_id"] != network["id"]:
                raise bad_request(
                    f"Bad floatingip request: subnet {subnet_id} is not on network {network['id']}."
                )
            if body.get("floating_ip_address") and ipaddress.ip_address(
                body["floating_ip_address"]
            ) not in ipaddress.ip_network(subnet["cidr"]):
                continue
            try:
                address = self._allocate(subnet, body.get("floating_ip_address"))
            except ApiFault as fault:
                if fault.kind == "IpAddressGenerationFailure":
                    continue
                raise
            chosen = subnet_id
            break
        if address is None:
            raise neutron_fault(
                409,
                "IpAddressGenerationFailure",
                f"No more IP addresses available on network {network['id']}.",
            )
        item = self._standard(
            project_id,
            {
                k: v
                for k, v in body.items()
                if k not in ("subnet_id", "port_id", "fixed_ip_address")
            },
            floating_ip_address=address,
            floating_network_id=network["id"],
            port_id=None,
            fixed_ip_address=None,
            router_id=None,
            status="DOWN",
            port_details=None,
            qos_policy_id=None,
            port_forwardings=[],
            dns_domain="",
            dns_name="",
        )
        item["_subnet_id"] = chosen
        item.pop("name", None)
        self.cloud.table("floatingips")[item["id"]] = item
        if body.get("port_id"):
            try:
                self._associate(item, str(body["port_id"]), body.get("fixed_ip_address"))
            except ApiFault:
                self.cloud.table("floatingips").pop(item["id"], None)
                raise
        return item

    def associate_floating_ip(
        self, fip: Resource, port_id: str | None, fixed_ip: str | None
    ) -> None:
        """Nova's floating-IP proxy: associate (``port_id``) or disassociate (``None``)."""
        if port_id is None:
            self._disassociate(fip)
        else:
            self._associate(fip, port_id, fixed_ip)
        self._touch(fip)

    def _update_floating_ip(self, fip: Resource, changes: dict[str, Any]) -> None:
        if "port_id" in changes:
            if changes["port_id"] is None:
                self._disassociate(fip)
            else:
                self._associate(fip, str(changes["port_id"]), changes.get("fixed_ip_address"))
        if "description" in changes:
            fip["description"] = changes["description"]

    def _associate(self, fip: Resource, port_id: str, fixed_ip: str | None) -> None:
        port = self.find("ports", port_id)
        v4 = [ip for ip in port["fixed_ips"] if ipaddress.ip_address(ip["ip_address"]).version == 4]
        chosen = next((ip for ip in v4 if fixed_ip in (None, ip["ip_address"])), None)
        if chosen is None:
            raise bad_request(
                f"Bad floatingip request: Port {port_id} does not have fixed ip {fixed_ip}."
            )
        for other in self.cloud.table("floatingips").values():
            if (
                other["id"] != fip["id"]
                and other["port_id"] == port_id
                and other["fixed_ip_address"] == chosen["ip_address"]
                and other["floating_network_id"] == fip["floating_network_id"]
            ):
                raise neutron_fault(
                    409,
                    "FloatingIPPortAlreadyAssociated",
                    (
                        f"Cannot associate floating IP {fip['floating_ip_address']} "
                        f"({fip['id']}) with port {port_id} using fixed IP {chosen['ip_address']}, "
                        "as that fixed IP already has a floating IP on external "
                        f"network {fip['floating_network_id']}."
                    ),
                )
        router = self._router_between(chosen["subnet_id"], fip["floating_network_id"])
        if router is None:
            raise neutron_fault(
                404,
                "ExternalGatewayForFloatingIPNotFound",
                (
                    f"External network {fip['floating_network_id']} is not reachable "
                    f"from subnet {chosen['subnet_id']}.  Therefore, cannot associate "
                    f"Port {port_id} with a Floating IP."
                ),
            )
        fip.update(
            port_id=port_id,
            fixed_ip_address=chosen["ip_address"],
            router_id=router["id"],
            status="ACTIVE",
            port_details={
                "name": port["name"],
                "network_id": port["network_id"],
                "mac_address": port["mac_address"],
                "admin_state_up": port["admin_state_up"],
                "status": port["status"],
                "device_id": port["device_id"],
                "device_owner": port["device_owner"],
            },
        )

    @staticmethod
    def _disassociate(fip: Resource) -> None:
        fip.update(
            port_id=None, fixed_ip_address=None, router_id=None, status="DOWN", port_details=None
        )

    def _router_between(self, subnet_id: str, external_network_id: str) -> Resource | None:
        for router in self.cloud.table("routers").values():
            gateway = router.get("external_gateway_info") or {}
            if gateway.get("network_id") != external_network_id:
                continue
            if any(
                p["device_id"] == router["id"]
                and p["device_owner"] == "network:router_interface"
                and any(ip["subnet_id"] == subnet_id for ip in p["fixed_ips"])
                for p in self.cloud.table("ports").values()
            ):
                return router
        return None

    # -- routers ---------------------------------------------------------------------------
    def create_router(self, project_id: str, body: dict[str, Any]) -> Resource:
        gateway = body.pop("external_gateway_info", None)
        routes = body.pop("routes", [])
        item = self._standard(
            project_id,
            body,
            status="ACTIVE",
            admin_state_up=True,
            external_gateway_info=None,
            routes=[],
            distributed=False,
            ha=False,
            availability_zones=["nova"],
            availability_zone_hints=[],
            flavor_id=None,
        )
        self.cloud.table("routers")[item["id"]] = item
        if gateway:
            self._set_gateway(item, gateway)
        if routes:
            item["routes"] = self._valid_routes(item, routes)
        return item

    def _set_gateway(self, router: Resource, gateway: dict[str, Any] | None) -> None:
        if not gateway:
            router["external_gateway_info"] = None
            return
        network = self.find("networks", str(gateway.get("network_id", "")))
        if not network["router:external"]:
            raise bad_request(
                f"Bad router request: Network {network['id']} is not an external network."
            )
        subnet = self.find("subnets", network["subnets"][0])
        router["external_gateway_info"] = {
            "network_id": network["id"],
            "enable_snat": gateway.get("enable_snat", True),
            "external_fixed_ips": [
                {"subnet_id": subnet["id"], "ip_address": self._allocate(subnet)}
            ],
        }

    def _update_router(self, router: Resource, changes: dict[str, Any]) -> None:
        if "external_gateway_info" in changes:
            self._set_gateway(router, changes.pop("external_gateway_info"))
        if "routes" in changes:
            router["routes"] = self._valid_routes(router, changes.pop("routes") or [])
        router.update(changes)

    def _connected(self, router: Resource) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        subnets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for port in self.cloud.table("ports").values():
            if port["device_id"] == router["id"]:
                for ip in port["fixed_ips"]:
                    subnet = self.cloud.table("subnets").get(ip["subnet_id"])
                    if subnet is not None:
                        subnets.append(ipaddress.ip_network(subnet["cidr"]))
        for ip in (router.get("external_gateway_info") or {}).get("external_fixed_ips", []):
            subnet = self.cloud.table("subnets").get(ip["subnet_id"])
            if subnet is not None:
                subnets.append(ipaddress.ip_network(subnet["cidr"]))
        return subnets

    def _valid_routes(self, router: Resource, routes: Any) -> list[dict[str, str]]:
        if not isinstance(routes, list):
            raise bad_request("Invalid input for routes: not a list")
        connected = self._connected(router)
        seen: list[dict[str, str]] = []
        for route in routes:
            if not isinstance(route, dict):
                raise bad_request(f"Invalid input for routes: {route!r} is not a dictionary")
            try:
                destination = ipaddress.ip_network(str(route.get("destination")), strict=True)
                nexthop = ipaddress.ip_address(str(route.get("nexthop")))
            except ValueError as exc:
                raise bad_request(f"Invalid input for routes: {exc}") from None
            if not any(nexthop in subnet for subnet in connected):
                raise neutron_fault(
                    400,
                    "InvalidRoutes",
                    f"Invalid format for routes: {route}, the nexthop is not connected with router",
                )
            entry = {"destination": str(destination), "nexthop": str(nexthop)}
            if entry not in seen:
                seen.append(entry)
        if len(seen) > self.max_routes:
            raise neutron_fault(
                400,
                "RoutesExhausted",
                (
                    f"Unable to complete operation for {router['id']}. The number "
                    f"of routes exceeds the maximum {self.max_routes}."
                ),
            )
        return seen

    def _routes_body(self, request: Request) -> list[dict[str, str]]:
        router = request.json_body("router")
        routes = router.get("routes")
        if not isinstance(routes, list):
            raise bad_request("Invalid input: router.routes must be a list")
        return [dict(r) for r in routes]

    def add_extra_routes(self, request: Request, router_id: str) -> Reply:
        router = self.find("routers", router_id)
        added = self._valid_routes(router, self._routes_body(request))
        router["routes"] = self._valid_routes(
            router, router["routes"] + [r for r in added if r not in router["routes"]]
        )
        self._touch(router)
        return Reply(200, {"router": render(router)})

    def remove_extra_routes(self, request: Request, router_id: str) -> Reply:
        router = self.find("routers", router_id)
        removed = self._routes_body(request)
        normal = []
        for route in removed:
            try:
                normal.append(
                    {
                        "destination": str(
                            ipaddress.ip_network(str(route.get("destination")), strict=False)
                        ),
                        "nexthop": str(ipaddress.ip_address(str(route.get("nexthop")))),
                    }
                )
            except ValueError as exc:
                raise bad_request(f"Invalid input for routes: {exc}") from None
        router["routes"] = [r for r in router["routes"] if r not in normal]
        self._touch(router)
        return Reply(200, {"router": render(router)})

    def add_interface(self, request: Request, router_id: str) -> Reply:
        router = self.find("routers", router_id)
        body = request.json_body()
        if body.get("port_id"):
            port = self.find("ports", str(body["port_id"]))
            if port["device_id"]:
                raise neutron_fault(409, "PortInUse", f"Port {port['id']} is in use.")
        else:
            subnet = self.find("subnets", str(body.get("subnet_id", "")))
            if not subnet["gateway_ip"]:
                raise bad_request(
                    f"Bad router request: Subnet {subnet['id']} does not have a gateway IP."
                )
            self._check_router_overlap(router, subnet)
            for existing in self.cloud.table("ports").values():
                if existing["device_id"] == router_id and any(
                    ip["subnet_id"] == subnet["id"] for ip in existing["fixed_ips"]
                ):
                    raise bad_request(
                        f"Bad router request: Router already has a port on subnet {subnet['id']}."
                    )
            port = self.create_port(
                request.project_id,
                {
                    "network_id": subnet["network_id"],
                    "fixed_ips": [{"subnet_id": subnet["id"], "ip_address": subnet["gateway_ip"]}],
                },
            )
        port.update(
            device_id=router_id,
            device_owner="network:router_interface",
            status="ACTIVE",
            port_security_enabled=False,
            security_groups=[],
        )
        self._touch(router)
        subnet_id = port["fixed_ips"][0]["subnet_id"]
        return Reply(
            200,
            {
                "id": router_id,
                "tenant_id": router["project_id"],
                "project_id": router["project_id"],
                "port_id": port["id"],
                "subnet_id": subnet_id,
                "subnet_ids": [subnet_id],
                "network_id": port["network_id"],
                "tags": [],
            },
        )

    def _check_router_overlap(self, router: Resource, subnet: Resource) -> None:
        """Neutron refuses a router interface whose subnet overlaps one the router has."""
        wanted = ipaddress.ip_network(subnet["cidr"])
        for port in self.cloud.table("ports").values():
            if port["device_id"] != router["id"]:
                continue
            for ip in port["fixed_ips"]:
                other = self.cloud.table("subnets").get(ip["subnet_id"])
                if other is None or other["id"] == subnet["id"]:
                    continue
                if wanted.overlaps(ipaddress.ip_network(other["cidr"])):
                    raise bad_request(
                        f"Bad router request: Cidr {subnet['cidr']} of subnet {subnet['id']} "
                        f"overlaps with cidr {other['cidr']} of subnet {other['id']}."
                    )

    def remove_interface(self, request: Request, router_id: str) -> Reply:
        router = self.find("routers", router_id)
        body = request.json_body()
        for port in list(self.cloud.table("ports").values()):
            if port["device_id"] != router_id or port["device_owner"] != "network:router_interface":
                continue
            if port["id"] == body.get("port_id") or any(
                ip["subnet_id"] == body.get("subnet_id") for ip in port["fixed_ips"]
            ):
                subnet_id = port["fixed_ips"][0]["subnet_id"]
                self.delete_port(port["id"])
                self._touch(router)
                return Reply(
                    200,
                    {
                        "id": router_id,
                        "port_id": port["id"],
                        "subnet_id": subnet_id,
                        "subnet_ids": [subnet_id],
                        "network_id": port["network_id"],
                        "tenant_id": router["project_id"],
                        "project_id": router["project_id"],
                        "tags": [],
                    },
                )
        raise neutron_fault(
            404,
            "RouterInterfaceNotFoundForSubnet",
            f"Router {router_id} has no interface on subnet {body.get('subnet_id')}",
        )

    # -- helpers for the other services ----------------------------------------------------
    def ports_of(self, device_id: str) -> list[Resource]:
        return [p for p in self.cloud.table("ports").values() if p["device_id"] == device_id]

    def floating_ips_of(self, port_id: str) -> list[Resource]:
        return [f for f in self.cloud.table("floatingips").values() if f["port_id"] == port_id]
