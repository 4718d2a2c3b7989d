"""Octavia v2: load balancers, listeners, pools, members, health monitors, with their states.

Follows the Load Balancer API v2 reference (root versions list up to v2.27). Every write moves
the load balancer to ``PENDING_UPDATE`` (``PENDING_CREATE`` on creation, ``PENDING_DELETE`` on
deletion) and the written entity to ``PENDING_*``; after ``lb_update_s`` (``lb_create_s``,
``lb_delete_s``) they are ``ACTIVE`` again (gone on delete), or ``ERROR`` when a failure was
injected. While the load balancer is not ``ACTIVE`` any write answers 409 "Load Balancer <id> is
immutable and cannot be updated."; delete also works on ``ERROR``. A load balancer owns a real
Neutron VIP port (floating IPs attach to ``vip_port_id``). Supported: fully populated create,
``DELETE ?cascade=true``, the batch member update ``PUT /pools/{id}/members``, the status tree,
tags, ``limit``/``marker`` with ``<collection>_links``, errors as ``{faultcode, faultstring}``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from devstack.openstack_emulator.api import (
    ID,
    Reply,
    Request,
    Route,
    Service,
    match_filters,
    match_tags,
)
from devstack.openstack_emulator.cloud import ApiFault, Cloud, Resource, iso_now, new_id, seed_id

if TYPE_CHECKING:
    from devstack.openstack_emulator.network import Network

API_VERSIONS = tuple(f"v2.{minor}" for minor in range(28))
PROVIDERS = {
    "amphora": "Amphora driver.",
    "octavia": "Amphora driver.",
    "ovn": "OVN provider driver.",
}
LISTENER_PROTOCOLS = ("HTTP", "HTTPS", "TCP", "UDP", "TERMINATED_HTTPS", "SCTP", "PROMETHEUS")
POOL_PROTOCOLS = ("HTTP", "HTTPS", "TCP", "UDP", "PROXY", "PROXYV2", "SCTP")
ALGORITHMS = ("ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT")
MONITOR_TYPES = ("HTTP", "HTTPS", "PING", "TCP", "TLS-HELLO", "UDP-CONNECT", "SCTP")
#: Pool protocols a listener protocol accepts (Octavia's ``VALID_LISTENER_POOL_PROTOCOL_MAP``).
_POOL_FOR_LISTENER = {
    "TCP": ("HTTP", "HTTPS", "PROXY", "PROXYV2", "TCP"),
    "HTTP": ("HTTP", "PROXY", "PROXYV2"),
    "HTTPS": ("HTTPS", "PROXY", "PROXYV2", "TCP"),
    "TERMINATED_HTTPS": ("HTTP", "PROXY", "PROXYV2"),
    "UDP": ("UDP",),
    "SCTP": ("SCTP",),
    "PROMETHEUS": (),
}
#: URL collection → (singular key, table, human name).
KINDS = {
    "loadbalancers": ("loadbalancer", "lb_loadbalancers", "Load Balancer"),
    "listeners": ("listener", "lb_listeners", "Listener"),
    "pools": ("pool", "lb_pools", "Pool"),
    "healthmonitors": ("healthmonitor", "lb_healthmonitors", "Health Monitor"),
}
_TIMEOUT_MAX = 31536000
#: Octavia serves its API under both ``/v2`` and ``/v2.0`` (openstacksdk uses the latter).
V2 = r"/v2(?:\.0)?"


def octavia_fault(status: int, message: str) -> ApiFault:
    return ApiFault(status, message)


def immutable(lb_id: str) -> ApiFault:
    return ApiFault(409, f"Load Balancer {lb_id} is immutable and cannot be updated.")


def invalid(message: str) -> ApiFault:
    return ApiFault(400, f"Validation failure: {message}")


def _public(item: Resource) -> Resource:
    return {k: v for k, v in item.items() if not k.startswith("_")}


class LoadBalancing(Service):
    type = "load-balancer"
    max_limit = 1000

    def __init__(self, cloud: Cloud, *, zones: tuple[str, ...]) -> None:
        self.network: Network
        super().__init__(cloud)
        self.reset(zones)

    def reset(self, zones: tuple[str, ...]) -> None:
        flavors = self.cloud.table("lb_flavors")
        for name, description in (
            ("amphora-single", "Single amphora"),
            ("amphora-ha", "Active/standby"),
        ):
            flavor_id = seed_id("lb-flavor", name)
            flavors[flavor_id] = {
                "id": flavor_id,
                "name": name,
                "description": description,
                "enabled": True,
                "flavor_profile_id": seed_id("lb-flavor-profile", name),
            }
        azs = self.cloud.table("lb_availability_zones")
        for zone in zones:
            azs[zone] = {
                "name": zone,
                "description": f"Octavia zone {zone}",
                "enabled": True,
                "availability_zone_profile_id": seed_id("lb-az-profile", zone),
            }

    def fault_body(self, fault: ApiFault) -> Any:
        return {
            "faultcode": "Server" if fault.status >= 500 else "Client",
            "faultstring": fault.message,
            "debuginfo": None,
        }

    def routes(self) -> list[Route]:
        lb = f"{V2}/lbaas/loadbalancers/{ID}"
        pool_members = f"{V2}/lbaas/pools/{ID}/members"
        return [
            Route("GET", "", self.versions, public=True),
            Route("GET", V2, self.versions, public=True),
            Route("GET", f"{V2}/lbaas/loadbalancers", self.list_loadbalancers),
            Route("POST", f"{V2}/lbaas/loadbalancers", self.create_loadbalancer),
            Route("GET", lb, self.show_loadbalancer),
            Route("PUT", lb, self.update_loadbalancer),
            Route("DELETE", lb, self.delete_loadbalancer),
            Route("GET", f"{lb}/status", self.status_tree),
            Route("GET", f"{lb}/stats", self.stats),
            Route("GET", f"{V2}/lbaas/listeners", self.list_listeners),
            Route("POST", f"{V2}/lbaas/listeners", self.create_listener),
            Route("GET", f"{V2}/lbaas/listeners/{ID}", self.show_listener),
            Route("PUT", f"{V2}/lbaas/listeners/{ID}", self.update_listener),
            Route("DELETE", f"{V2}/lbaas/listeners/{ID}", self.delete_listener),
            Route("GET", f"{V2}/lbaas/pools", self.list_pools),
            Route("POST", f"{V2}/lbaas/pools", self.create_pool),
            Route("GET", f"{V2}/lbaas/pools/{ID}", self.show_pool),
            Route("PUT", f"{V2}/lbaas/pools/{ID}", self.update_pool),
            Route("DELETE", f"{V2}/lbaas/pools/{ID}", self.delete_pool),
            Route("GET", pool_members, self.list_members),
            Route("POST", pool_members, self.create_member),
            Route("PUT", pool_members, self.batch_update_members),
            Route("GET", f"{pool_members}/{ID}", self.show_member),
            Route("PUT", f"{pool_members}/{ID}", self.update_member),
            Route("DELETE", f"{pool_members}/{ID}", self.delete_member),
            Route("GET", f"{V2}/lbaas/healthmonitors", self.list_monitors),
            Route("POST", f"{V2}/lbaas/healthmonitors", self.create_monitor),
            Route("GET", f"{V2}/lbaas/healthmonitors/{ID}", self.show_monitor),
            Route("PUT", f"{V2}/lbaas/healthmonitors/{ID}", self.update_monitor),
            Route("DELETE", f"{V2}/lbaas/healthmonitors/{ID}", self.delete_monitor),
            Route("GET", f"{V2}/lbaas/flavors", self.list_flavors),
            Route("GET", f"{V2}/lbaas/flavors/{ID}", self.show_flavor),
            Route("GET", f"{V2}/lbaas/availabilityzones", self.list_availability_zones),
            Route("GET", f"{V2}/lbaas/providers", self.list_providers),
        ]

    def versions(self, request: Request) -> Reply:
        return Reply(
            200,
            {
                "versions": [
                    {
                        "id": version,
                        "status": "CURRENT" if version == API_VERSIONS[-1] else "SUPPORTED",
                        "updated": "2023-01-01T00:00:00Z",
                        "links": [{"href": f"{request.base_url}/v2", "rel": "self"}],
                    }
                    for version in API_VERSIONS
                ]
            },
        )

    # -- lookups ---------------------------------------------------------------------------
    def _get(self, kind: str, item_id: str) -> Resource:
        _, table, human = KINDS[kind]
        found = self.cloud.table(table).get(item_id)
        if found is None or found["provisioning_status"] == "DELETED":
            raise octavia_fault(404, f"{human} {item_id} not found.")
        return found

    def _member(self, pool_id: str, member_id: str) -> Resource:
        member = self.cloud.table("lb_members").get(member_id)
        if member is None or member["_pool_id"] != pool_id:
            raise octavia_fault(404, f"Member {member_id} not found.")
        return member

    def _lb_of(self, item: Resource) -> Resource:
        return self._get("loadbalancers", item["_lb_id"])

    def _listeners_of(self, lb_id: str) -> list[Resource]:
        return [x for x in self.cloud.table("lb_listeners").values() if x["_lb_id"] == lb_id]

    def _pools_of(self, lb_id: str) -> list[Resource]:
        return [x for x in self.cloud.table("lb_pools").values() if x["_lb_id"] == lb_id]

    def _members_of(self, pool_id: str) -> list[Resource]:
        return [x for x in self.cloud.table("lb_members").values() if x["_pool_id"] == pool_id]

    # -- rendering -------------------------------------------------------------------------
    def render_lb(self, lb: Resource) -> Resource:
        body = _public(lb)
        body["listeners"] = [{"id": x["id"]} for x in self._listeners_of(lb["id"])]
        body["pools"] = [{"id": x["id"]} for x in self._pools_of(lb["id"])]
        return body

    def render_listener(self, listener: Resource) -> Resource:
        body = _public(listener)
        body["loadbalancers"] = [{"id": listener["_lb_id"]}]
        body["default_pool_id"] = listener["_default_pool_id"]
        return body

    def render_pool(self, pool: Resource) -> Resource:
        body = _public(pool)
        body["loadbalancers"] = [{"id": pool["_lb_id"]}]
        body["listeners"] = [
            {"id": x["id"]}
            for x in self._listeners_of(pool["_lb_id"])
            if x["_default_pool_id"] == pool["id"]
        ]
        body["members"] = [{"id": m["id"]} for m in self._members_of(pool["id"])]
        body["healthmonitor_id"] = pool["_monitor_id"]
        return body

    def render_member(self, member: Resource) -> Resource:
        return _public(member)

    def render_monitor(self, monitor: Resource) -> Resource:
        body = _public(monitor)
        body["pools"] = [{"id": monitor["_pool_id"]}]
        return body

    def _render(self, kind: str, item: Resource) -> Resource:
        renderers: dict[str, Callable[[Resource], Resource]] = {
            "loadbalancers": self.render_lb,
            "listeners": self.render_listener,
            "pools": self.render_pool,
            "healthmonitors": self.render_monitor,
        }
        return renderers[kind](item)

    def _list(
        self, request: Request, kind: str, items: list[Resource], fields: tuple[str, ...], path: str
    ) -> Reply:
        rendered = [self._render(kind, x) for x in items if x["provisioning_status"] != "DELETED"]
        rendered = [
            x for x in rendered if match_filters(x, request, fields) and match_tags(x, request)
        ]
        lb_id = request.arg("loadbalancer_id")
        if lb_id is not None and kind != "loadbalancers":
            rendered = [x for x in rendered if {"id": lb_id} in x.get("loadbalancers", [])]
        rendered.sort(key=lambda x: (x["created_at"], x["id"]))
        page, links = self.page(request, rendered, kind, link_path=path)
        body: dict[str, Any] = {kind: page}
        if links:
            body[f"{kind}_links"] = links
        return Reply(200, body)

    # -- the state machine -----------------------------------------------------------------
    def _mutable(self, lb: Resource) -> None:
        if lb["provisioning_status"] != "ACTIVE":
            raise immutable(lb["id"])

    @staticmethod
    def _stamp(item: Resource, status: str) -> None:
        item["provisioning_status"] = status
        item["updated_at"] = iso_now()

    def _change(
        self,
        lb: Resource,
        changed: list[Resource],
        pending: str,
        finish: Callable[[bool], None],
    ) -> None:
        """LB → ``PENDING_UPDATE`` and ``changed`` → ``pending``; after ``lb_update_s`` both are
        ``ACTIVE`` (or ``ERROR`` on an injected failure) and ``finish(failed)`` applies the rest."""
        self._mutable(lb)
        listeners = [
            x for x in self._listeners_of(lb["id"]) if x["provisioning_status"] == "ACTIVE"
        ]
        self._stamp(lb, "PENDING_UPDATE")
        for item in changed:
            self._stamp(item, pending)
        for listener in listeners:
            if listener not in changed:
                self._stamp(listener, "PENDING_UPDATE")

        def done() -> None:
            if lb["id"] not in self.cloud.table("lb_loadbalancers"):
                return
            failed = self.cloud.take_failure("loadbalancer")
            for listener in listeners:
                if listener["provisioning_status"] == "PENDING_UPDATE":
                    self._stamp(listener, "ACTIVE")
            finish(failed)
            self._stamp(lb, "ERROR" if failed else "ACTIVE")
            if failed:
                lb["operating_status"] = "ERROR"

        self.cloud.later("loadbalancer", self.cloud.delays.lb_update_s, done)

    def _settle(self, items: list[Resource], failed: bool) -> None:
        for item in items:
            self._stamp(item, "ERROR" if failed else "ACTIVE")
            item["operating_status"] = "ERROR" if failed else self._online(item)

    def _online(self, item: Resource) -> str:
        if "_pool_id" in item and "address" in item:  # a member
            pool = self.cloud.table("lb_pools").get(item["_pool_id"])
            return "ONLINE" if pool is not None and pool["_monitor_id"] else "NO_MONITOR"
        return "ONLINE"

    def _common(self, request: Request, body: dict[str, Any], **defaults: Any) -> Resource:
        now = iso_now()
        item: Resource = {
            "id": new_id(),
            "name": "",
            "description": "",
            "admin_state_up": True,
            "provisioning_status": "PENDING_CREATE",
            "operating_status": "OFFLINE",
            "project_id": request.project_id,
            "tenant_id": request.project_id,
            "created_at": now,
            "updated_at": None,
            "tags": [],
        }
        item.update(defaults)
        for key, value in body.items():
            if key in item or key in defaults:
                item[key] = value
        if not isinstance(item["tags"], list) or not all(isinstance(t, str) for t in item["tags"]):
            raise invalid("tags must be a list of strings")
        if not isinstance(item["name"], str) and item["name"] is not None:
            raise invalid("name must be a string")
        return item

    # -- load balancers --------------------------------------------------------------------
    def list_loadbalancers(self, request: Request) -> Reply:
        fields = (
            "id",
            "name",
            "description",
            "provisioning_status",
            "operating_status",
            "vip_address",
            "vip_port_id",
            "vip_subnet_id",
            "vip_network_id",
            "provider",
            "flavor_id",
            "availability_zone",
            "project_id",
            "admin_state_up",
        )
        return self._list(
            request,
            "loadbalancers",
            list(self.cloud.table("lb_loadbalancers").values()),
            fields,
            request.path,
        )

    def show_loadbalancer(self, request: Request, lb_id: str) -> Reply:
        return Reply(200, {"loadbalancer": self.render_lb(self._get("loadbalancers", lb_id))})

    def create_loadbalancer(self, request: Request) -> Reply:
        body = dict(request.json_body("loadbalancer"))
        provider = body.get("provider") or "amphora"
        if provider not in PROVIDERS:
            raise invalid(f"Provider '{provider}' is not enabled.")
        if body.get("flavor_id") and body["flavor_id"] not in self.cloud.table("lb_flavors"):
            raise invalid("Invalid flavor_id.")
        if body.get("availability_zone") and body["availability_zone"] not in self.cloud.table(
            "lb_availability_zones"
        ):
            raise invalid("Invalid availability zone.")
        listeners = body.pop("listeners", None) or []
        pools = body.pop("pools", None) or []
        vip = self._vip_port(request, body)
        lb = self._common(
            request,
            {k: v for k, v in body.items() if not k.startswith("vip_")},
            provider=provider,
            flavor_id=body.get("flavor_id"),
            availability_zone=body.get("availability_zone"),
            vip_address=vip["fixed_ips"][0]["ip_address"],
            vip_port_id=vip["id"],
            vip_subnet_id=vip["fixed_ips"][0]["subnet_id"],
            vip_network_id=vip["network_id"],
            vip_qos_policy_id=body.get("vip_qos_policy_id"),
            additional_vips=[],
        )
        lb["_owns_vip"] = not body.get("vip_port_id")
        vip.update(
            name=vip["name"] or f"octavia-lb-{lb['id']}",
            device_id=f"lb-{lb['id']}",
            device_owner="Octavia",
        )
        created: list[Resource] = []
        try:
            self.cloud.table("lb_loadbalancers")[lb["id"]] = lb
            named_pools: dict[str, Resource] = {}
            for pool_body in pools:
                pool = self._new_pool(request, lb, dict(pool_body), None)
                created += self._populate_pool(request, lb, pool, pool_body)
                named_pools[str(pool_body.get("name") or pool["id"])] = pool
            for listener_body in listeners:
                listener_body = dict(listener_body)
                default_pool = listener_body.pop("default_pool", None)
                pool_name = listener_body.pop("default_pool_name", None)
                listener = self._new_listener(request, lb, listener_body)
                created.append(listener)
                if default_pool:
                    pool = self._new_pool(request, lb, dict(default_pool), listener)
                    created += self._populate_pool(request, lb, pool, default_pool)
                elif pool_name:
                    if pool_name not in named_pools:
                        raise invalid(f"default_pool_name {pool_name} does not match any pool")
                    listener["_default_pool_id"] = named_pools[pool_name]["id"]
        except ApiFault:
            self._drop(lb)
            raise
        created += [p for p in self._pools_of(lb["id"]) if p not in created]

        def done() -> None:
            if lb["id"] not in self.cloud.table("lb_loadbalancers"):
                return
            failed = self.cloud.take_failure("loadbalancer")
            self._settle([*created, lb], failed)

        self.cloud.later("loadbalancer", self.cloud.delays.lb_create_s, done)
        return Reply(201, {"loadbalancer": self._render_full(lb)})

    def _render_full(self, lb: Resource) -> Resource:
        body = self.render_lb(lb)
        listeners = []
        for listener in self._listeners_of(lb["id"]):
            rendered = self.render_listener(listener)
            listeners.append(rendered)
        body["listeners"] = listeners
        body["pools"] = [self.render_pool(p) for p in self._pools_of(lb["id"])]
        return body

    def _populate_pool(
        self, request: Request, lb: Resource, pool: Resource, body: dict[str, Any]
    ) -> list[Resource]:
        made = [pool]
        for member_body in body.get("members") or []:
            made.append(self._new_member(request, lb, pool, dict(member_body)))
        if body.get("healthmonitor"):
            made.append(self._new_monitor(request, lb, pool, dict(body["healthmonitor"])))
        return made

    def _vip_port(self, request: Request, body: dict[str, Any]) -> Resource:
        network = self.network
        if body.get("vip_port_id"):
            port = network.find("ports", str(body["vip_port_id"]))
            if port["device_id"]:
                raise invalid(f"Port {port['id']} is in use.")
            return port
        subnet_id = body.get("vip_subnet_id")
        network_id = body.get("vip_network_id")
        if not subnet_id and not network_id:
            raise invalid("VIP must contain one of: vip_port_id, vip_network_id, vip_subnet_id.")
        if subnet_id:
            subnet = self.cloud.table("subnets").get(str(subnet_id))
            if subnet is None:
                raise invalid(f"Subnet {subnet_id} not found.")
            if network_id and subnet["network_id"] != network_id:
                raise invalid(f"Subnet {subnet_id} is not on network {network_id}.")
            network_id = subnet["network_id"]
        elif str(network_id) not in self.cloud.table("networks"):
            raise invalid(f"Network {network_id} not found.")
        fixed: dict[str, Any] = {}
        if subnet_id:
            fixed["subnet_id"] = subnet_id
        if body.get("vip_address"):
            fixed["ip_address"] = body["vip_address"]
        port_body: dict[str, Any] = {"network_id": network_id, "name": "", "admin_state_up": False}
        if fixed:
            port_body["fixed_ips"] = [fixed]
        try:
            return network.create_port(request.project_id, port_body)
        except ApiFault as fault:
            if fault.status == 409:
                raise ApiFault(
                    409,
                    f"IP address {body.get('vip_address')} already allocated in subnet {subnet_id}",
                ) from None
            raise

    def update_loadbalancer(self, request: Request, lb_id: str) -> Reply:
        lb = self._get("loadbalancers", lb_id)
        body = request.json_body("loadbalancer")
        allowed = {"name", "description", "admin_state_up", "tags", "vip_qos_policy_id"}
        if set(body) - allowed:
            raise invalid(f"Attributes {sorted(set(body) - allowed)} cannot be updated.")
        changes = dict(body)

        def finish(failed: bool) -> None:
            if not failed:
                lb.update(changes)

        self._change(lb, [], "PENDING_UPDATE", finish)
        # Octavia applies the new values to the DB record at once.
        lb.update(changes)
        return Reply(200, {"loadbalancer": self.render_lb(lb)})

    def delete_loadbalancer(self, request: Request, lb_id: str) -> Reply:
        lb = self._get("loadbalancers", lb_id)
        if lb["provisioning_status"] not in ("ACTIVE", "ERROR"):
            raise immutable(lb_id)
        children = self._listeners_of(lb_id) + self._pools_of(lb_id)
        if children and not request.flag("cascade"):
            raise octavia_fault(400, f"Cannot delete Load Balancer {lb_id} - it has children")
        everything = [lb, *children]
        for pool in self._pools_of(lb_id):
            everything += self._members_of(pool["id"])
            if pool["_monitor_id"]:
                everything.append(self.cloud.table("lb_healthmonitors")[pool["_monitor_id"]])
        for item in everything:
            self._stamp(item, "PENDING_DELETE")

        def done() -> None:
            self._drop(lb)

        self.cloud.later("loadbalancer", self.cloud.delays.lb_delete_s, done)
        return Reply(204)

    def _drop(self, lb: Resource) -> None:
        lb_id = lb["id"]
        for pool in self._pools_of(lb_id):
            self._drop_pool(pool)
        for listener in self._listeners_of(lb_id):
            self.cloud.table("lb_listeners").pop(listener["id"], None)
        self.cloud.table("lb_loadbalancers").pop(lb_id, None)
        if lb.get("_owns_vip"):
            self.network.delete_port(lb["vip_port_id"])
        else:
            port = self.cloud.table("ports").get(lb["vip_port_id"])
            if port is not None:
                port.update(device_id="", device_owner="")

    def _drop_pool(self, pool: Resource) -> None:
        for member in self._members_of(pool["id"]):
            self.cloud.table("lb_members").pop(member["id"], None)
        if pool["_monitor_id"]:
            self.cloud.table("lb_healthmonitors").pop(pool["_monitor_id"], None)
        for listener in self._listeners_of(pool["_lb_id"]):
            if listener["_default_pool_id"] == pool["id"]:
                listener["_default_pool_id"] = None
        self.cloud.table("lb_pools").pop(pool["id"], None)

    def status_tree(self, request: Request, lb_id: str) -> Reply:
        lb = self._get("loadbalancers", lb_id)

        def status(item: Resource, **extra: Any) -> Resource:
            return {
                "id": item["id"],
                "name": item["name"],
                "provisioning_status": item["provisioning_status"],
                "operating_status": item["operating_status"],
                **extra,
            }

        listeners = []
        for listener in self._listeners_of(lb_id):
            pools = []
            for pool in self._pools_of(lb_id):
                if pool["id"] != listener["_default_pool_id"]:
                    continue
                extra: dict[str, Any] = {
                    "members": [
                        status(m, address=m["address"], protocol_port=m["protocol_port"])
                        for m in self._members_of(pool["id"])
                    ]
                }
                if pool["_monitor_id"]:
                    monitor = self.cloud.table("lb_healthmonitors")[pool["_monitor_id"]]
                    extra["health_monitor"] = status(monitor, type=monitor["type"])
                pools.append(status(pool, **extra))
            listeners.append(status(listener, pools=pools))
        return Reply(200, {"statuses": {"loadbalancer": status(lb, listeners=listeners)}})

    def stats(self, request: Request, lb_id: str) -> Reply:
        self._get("loadbalancers", lb_id)
        return Reply(
            200,
            {
                "stats": {
                    "active_connections": 0,
                    "bytes_in": 0,
                    "bytes_out": 0,
                    "request_errors": 0,
                    "total_connections": 0,
                }
            },
        )

    # -- listeners -------------------------------------------------------------------------
    def _listener_fields(self, body: dict[str, Any], protocol: str) -> None:
        for name in (
            "timeout_client_data",
            "timeout_member_connect",
            "timeout_member_data",
            "timeout_tcp_inspect",
        ):
            value = body.get(name)
            if value is not None and (not isinstance(value, int) or not 0 <= value <= _TIMEOUT_MAX):
                raise invalid(f"Invalid input for field/attribute {name}. Value: '{value}'.")
        limit = body.get("connection_limit")
        if limit is not None and (not isinstance(limit, int) or limit < -1):
            raise invalid(f"Invalid input for field/attribute connection_limit. Value: '{limit}'.")
        headers = body.get("insert_headers")
        if headers and protocol not in ("HTTP", "TERMINATED_HTTPS"):
            raise invalid(
                f"The following headers may not be used with the {protocol} "
                f"protocol: {sorted(headers)}"
            )
        for cidr in body.get("allowed_cidrs") or []:
            try:
                ipaddress.ip_network(str(cidr), strict=True)
            except ValueError:
                raise invalid(
                    f"Invalid input for field/attribute allowed_cidrs. Value: '{cidr}'."
                ) from None
        if protocol == "TERMINATED_HTTPS" and not body.get("default_tls_container_ref"):
            raise invalid(
                "An SNI or default certificate container reference must "
                "be provided for TERMINATED_HTTPS listeners."
            )

    def _new_listener(self, request: Request, lb: Resource, body: dict[str, Any]) -> Resource:
        protocol = str(body.get("protocol") or "")
        if protocol not in LISTENER_PROTOCOLS:
            raise invalid(
                f"Invalid input for field/attribute protocol. Value: '{protocol}'. "
                f"Value should be one of: {', '.join(LISTENER_PROTOCOLS)}"
            )
        port = body.get("protocol_port")
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise invalid(f"Invalid input for field/attribute protocol_port. Value: '{port}'.")
        self._listener_fields(body, protocol)
        family = "UDP" if protocol in ("UDP", "SCTP") else "TCP"
        for other in self._listeners_of(lb["id"]):
            other_family = "UDP" if other["protocol"] in ("UDP", "SCTP") else "TCP"
            if other["protocol_port"] == port and other_family == family:
                raise octavia_fault(
                    409,
                    f"Another Listener on this Load Balancer is already using protocol_port {port}",
                )
        listener = self._common(
            request,
            body,
            protocol=protocol,
            protocol_port=port,
            connection_limit=-1,
            default_tls_container_ref=None,
            sni_container_refs=[],
            l7policies=[],
            insert_headers={},
            timeout_client_data=50000,
            timeout_member_connect=5000,
            timeout_member_data=50000,
            timeout_tcp_inspect=0,
            client_ca_tls_container_ref=None,
            client_authentication="NONE",
            client_crl_container_ref=None,
            allowed_cidrs=None,
            tls_ciphers=None,
            tls_versions=None,
            alpn_protocols=None,
        )
        listener["_lb_id"] = lb["id"]
        listener["_default_pool_id"] = None
        self.cloud.table("lb_listeners")[listener["id"]] = listener
        return listener

    def list_listeners(self, request: Request) -> Reply:
        fields = (
            "id",
            "name",
            "description",
            "protocol",
            "protocol_port",
            "provisioning_status",
            "operating_status",
            "default_pool_id",
            "project_id",
            "admin_state_up",
            "connection_limit",
        )
        return self._list(
            request,
            "listeners",
            list(self.cloud.table("lb_listeners").values()),
            fields,
            request.path,
        )

    def show_listener(self, request: Request, listener_id: str) -> Reply:
        return Reply(200, {"listener": self.render_listener(self._get("listeners", listener_id))})

    def create_listener(self, request: Request) -> Reply:
        body = dict(request.json_body("listener"))
        lb = self._get("loadbalancers", str(body.pop("loadbalancer_id", "")))
        self._mutable(lb)
        default_pool_id = body.pop("default_pool_id", None)
        listener = self._new_listener(request, lb, body)
        if default_pool_id:
            pool = self._get("pools", str(default_pool_id))
            listener["_default_pool_id"] = pool["id"]
        self._change(
            lb, [listener], "PENDING_CREATE", lambda failed: self._settle([listener], failed)
        )
        return Reply(201, {"listener": self.render_listener(listener)})

    def update_listener(self, request: Request, listener_id: str) -> Reply:
        listener = self._get("listeners", listener_id)
        lb = self._lb_of(listener)
        body = dict(request.json_body("listener"))
        forbidden = {"protocol", "protocol_port", "loadbalancer_id"} & set(body)
        if forbidden:
            raise invalid(f"Attributes {sorted(forbidden)} cannot be updated.")
        self._listener_fields(body, listener["protocol"])
        default_pool_id = body.pop("default_pool_id", listener["_default_pool_id"])
        if default_pool_id:
            self._get("pools", str(default_pool_id))
        self._change(
            lb, [listener], "PENDING_UPDATE", lambda failed: self._settle([listener], failed)
        )
        for key, value in body.items():
            if (
                key in listener
                and not key.startswith("_")
                and key not in ("id", "provisioning_status", "operating_status")
            ):
                listener[key] = value
        listener["_default_pool_id"] = default_pool_id
        return Reply(200, {"listener": self.render_listener(listener)})

    def delete_listener(self, request: Request, listener_id: str) -> Reply:
        listener = self._get("listeners", listener_id)
        lb = self._lb_of(listener)

        def finish(failed: bool) -> None:
            if failed:
                self._stamp(listener, "ERROR")
            else:
                self.cloud.table("lb_listeners").pop(listener_id, None)

        self._change(lb, [listener], "PENDING_DELETE", finish)
        return Reply(204)

    # -- pools -----------------------------------------------------------------------------
    def _new_pool(
        self, request: Request, lb: Resource, body: dict[str, Any], listener: Resource | None
    ) -> Resource:
        protocol = str(body.get("protocol") or "")
        if protocol not in POOL_PROTOCOLS:
            raise invalid(f"Invalid input for field/attribute protocol. Value: '{protocol}'.")
        algorithm = str(body.get("lb_algorithm") or "")
        if algorithm not in ALGORITHMS:
            raise invalid(f"Invalid input for field/attribute lb_algorithm. Value: '{algorithm}'.")
        if lb["provider"] == "ovn" and algorithm != "SOURCE_IP_PORT":
            raise invalid(
                "Provider 'ovn' does not support a requested option: OVN "
                f"provider does not support {algorithm} algorithm"
            )
        if lb["provider"] != "ovn" and algorithm == "SOURCE_IP_PORT":
            raise invalid(
                f"Provider '{lb['provider']}' does not support a requested option: SOURCE_IP_PORT"
            )
        persistence = body.get("session_persistence")
        if persistence is not None and (
            not isinstance(persistence, dict)
            or persistence.get("type") not in ("SOURCE_IP", "HTTP_COOKIE", "APP_COOKIE")
        ):
            raise invalid(
                f"Invalid input for field/attribute session_persistence. Value: '{persistence}'."
            )
        if listener is not None:
            if protocol not in _POOL_FOR_LISTENER.get(listener["protocol"], ()):
                raise invalid(
                    f"The pool protocol '{protocol}' is invalid while the listener "
                    f"protocol is '{listener['protocol']}'."
                )
            if listener["_default_pool_id"]:
                raise octavia_fault(409, f"Listener {listener['id']} already has a default pool")
        pool = self._common(
            request,
            body,
            protocol=protocol,
            lb_algorithm=algorithm,
            session_persistence=persistence,
            tls_container_ref=None,
            ca_tls_container_ref=None,
            crl_container_ref=None,
            tls_enabled=False,
            tls_ciphers=None,
            tls_versions=None,
            alpn_protocols=None,
        )
        pool["_lb_id"] = lb["id"]
        pool["_monitor_id"] = None
        self.cloud.table("lb_pools")[pool["id"]] = pool
        if listener is not None:
            listener["_default_pool_id"] = pool["id"]
        return pool

    def list_pools(self, request: Request) -> Reply:
        fields = (
            "id",
            "name",
            "description",
            "protocol",
            "lb_algorithm",
            "provisioning_status",
            "operating_status",
            "healthmonitor_id",
            "project_id",
            "admin_state_up",
        )
        return self._list(
            request, "pools", list(self.cloud.table("lb_pools").values()), fields, request.path
        )

    def show_pool(self, request: Request, pool_id: str) -> Reply:
        return Reply(200, {"pool": self.render_pool(self._get("pools", pool_id))})

    def create_pool(self, request: Request) -> Reply:
        body = dict(request.json_body("pool"))
        listener: Resource | None = None
        listener_id = body.pop("listener_id", None)
        lb_id = body.pop("loadbalancer_id", None)
        if listener_id:
            listener = self._get("listeners", str(listener_id))
            lb = self._lb_of(listener)
        elif lb_id:
            lb = self._get("loadbalancers", str(lb_id))
        else:
            raise invalid("loadbalancer_id or listener_id must be specified.")
        self._mutable(lb)
        members = body.pop("members", None)
        monitor = body.pop("healthmonitor", None)
        pool = self._new_pool(request, lb, body, listener)
        made = self._populate_pool(
            request, lb, pool, {"members": members, "healthmonitor": monitor}
        )
        self._change(lb, made, "PENDING_CREATE", lambda failed: self._settle(made, failed))
        return Reply(201, {"pool": self.render_pool(pool)})

    def update_pool(self, request: Request, pool_id: str) -> Reply:
        pool = self._get("pools", pool_id)
        lb = self._lb_of(pool)
        body = dict(request.json_body("pool"))
        forbidden = {"protocol", "loadbalancer_id", "listener_id"} & set(body)
        if forbidden:
            raise invalid(f"Attributes {sorted(forbidden)} cannot be updated.")
        if "lb_algorithm" in body and body["lb_algorithm"] not in ALGORITHMS:
            raise invalid(
                f"Invalid input for field/attribute lb_algorithm. Value: '{body['lb_algorithm']}'."
            )
        self._change(lb, [pool], "PENDING_UPDATE", lambda failed: self._settle([pool], failed))
        for key, value in body.items():
            if (
                key in pool
                and not key.startswith("_")
                and key not in ("id", "provisioning_status", "operating_status")
            ):
                pool[key] = value
        return Reply(200, {"pool": self.render_pool(pool)})

    def delete_pool(self, request: Request, pool_id: str) -> Reply:
        pool = self._get("pools", pool_id)
        lb = self._lb_of(pool)

        def finish(failed: bool) -> None:
            if failed:
                self._stamp(pool, "ERROR")
            else:
                self._drop_pool(pool)

        self._change(lb, [pool], "PENDING_DELETE", finish)
        return Reply(204)

    # -- members ---------------------------------------------------------------------------
    def _member_fields(self, body: dict[str, Any]) -> None:
        try:
            ipaddress.ip_address(str(body.get("address")))
        except ValueError:
            raise invalid(
                f"Invalid input for field/attribute address. Value: '{body.get('address')}'."
            ) from None
        port = body.get("protocol_port")
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise invalid(f"Invalid input for field/attribute protocol_port. Value: '{port}'.")
        monitor_port = body.get("monitor_port")
        if monitor_port is not None and (
            not isinstance(monitor_port, int) or not 1 <= monitor_port <= 65535
        ):
            raise invalid(
                f"Invalid input for field/attribute monitor_port. Value: '{monitor_port}'."
            )
        weight = body.get("weight")
        if weight is not None and (not isinstance(weight, int) or not 0 <= weight <= 256):
            raise invalid(f"Invalid input for field/attribute weight. Value: '{weight}'.")
        subnet_id = body.get("subnet_id")
        if subnet_id and subnet_id not in self.cloud.table("subnets"):
            raise invalid(f"Subnet {subnet_id} not found.")

    def _new_member(
        self, request: Request, lb: Resource, pool: Resource, body: dict[str, Any]
    ) -> Resource:
        self._member_fields(body)
        for other in self._members_of(pool["id"]):
            if (
                other["address"] == body["address"]
                and other["protocol_port"] == body["protocol_port"]
            ):
                raise octavia_fault(
                    409,
                    (
                        "Another member on this pool is already using ip address "
                        f"{body['address']} on protocol_port {body['protocol_port']}"
                    ),
                )
        member = self._common(
            request,
            body,
            address=str(body["address"]),
            protocol_port=body["protocol_port"],
            weight=1,
            backup=False,
            subnet_id=None,
            monitor_address=None,
            monitor_port=None,
            vnic_type="normal",
        )
        member["_pool_id"] = pool["id"]
        member["_lb_id"] = lb["id"]
        self.cloud.table("lb_members")[member["id"]] = member
        return member

    def list_members(self, request: Request, pool_id: str) -> Reply:
        self._get("pools", pool_id)
        fields = (
            "id",
            "name",
            "address",
            "protocol_port",
            "subnet_id",
            "weight",
            "provisioning_status",
            "operating_status",
            "monitor_port",
            "project_id",
            "admin_state_up",
            "backup",
        )
        members = [self.render_member(m) for m in self._members_of(pool_id)]
        members = [
            m for m in members if match_filters(m, request, fields) and match_tags(m, request)
        ]
        members.sort(key=lambda m: (m["created_at"], m["id"]))
        page, links = self.page(request, members, "members", link_path=request.path)
        body: dict[str, Any] = {"members": page}
        if links:
            body["members_links"] = links
        return Reply(200, body)

    def show_member(self, request: Request, pool_id: str, member_id: str) -> Reply:
        return Reply(200, {"member": self.render_member(self._member(pool_id, member_id))})

    def create_member(self, request: Request, pool_id: str) -> Reply:
        pool = self._get("pools", pool_id)
        lb = self._lb_of(pool)
        self._mutable(lb)
        member = self._new_member(request, lb, pool, dict(request.json_body("member")))
        self._change(
            lb,
            [pool, member],
            "PENDING_UPDATE",
            lambda failed: self._settle([pool, member], failed),
        )
        self._stamp(member, "PENDING_CREATE")
        return Reply(201, {"member": self.render_member(member)})

    def update_member(self, request: Request, pool_id: str, member_id: str) -> Reply:
        pool = self._get("pools", pool_id)
        member = self._member(pool_id, member_id)
        lb = self._lb_of(pool)
        body = dict(request.json_body("member"))
        forbidden = {"address", "protocol_port", "subnet_id"} & set(body)
        if forbidden:
            raise invalid(f"Attributes {sorted(forbidden)} cannot be updated.")
        self._change(lb, [member], "PENDING_UPDATE", lambda failed: self._settle([member], failed))
        for key, value in body.items():
            if (
                key in member
                and not key.startswith("_")
                and key not in ("id", "provisioning_status", "operating_status")
            ):
                member[key] = value
        return Reply(200, {"member": self.render_member(member)})

    def delete_member(self, request: Request, pool_id: str, member_id: str) -> Reply:
        pool = self._get("pools", pool_id)
        member = self._member(pool_id, member_id)
        lb = self._lb_of(pool)

        def finish(failed: bool) -> None:
            if failed:
                self._stamp(member, "ERROR")
            else:
                self.cloud.table("lb_members").pop(member_id, None)

        self._change(lb, [member], "PENDING_DELETE", finish)
        return Reply(204)

    def batch_update_members(self, request: Request, pool_id: str) -> Reply:
        """``PUT /pools/{id}/members``: the set replaces the pool's members (matched on
        address and port): new ones created, changed ones updated, missing ones deleted."""
        pool = self._get("pools", pool_id)
        lb = self._lb_of(pool)
        self._mutable(lb)
        wanted = request.json_body().get("members")
        if not isinstance(wanted, list):
            raise invalid("members must be a list")
        seen: set[tuple[str, int]] = set()
        for body in wanted:
            if not isinstance(body, dict):
                raise invalid("each member must be an object")
            self._member_fields(body)
            key = (str(body["address"]), int(body["protocol_port"]))
            if key in seen:
                raise octavia_fault(
                    409,
                    (
                        "Another member on this pool is already using ip address "
                        f"{key[0]} on protocol_port {key[1]}"
                    ),
                )
            seen.add(key)
        existing = {(m["address"], m["protocol_port"]): m for m in self._members_of(pool_id)}
        created: list[Resource] = []
        updated: list[tuple[Resource, dict[str, Any]]] = []
        for body in wanted:
            key = (str(body["address"]), int(body["protocol_port"]))
            if key in existing:
                changes = {
                    k: v
                    for k, v in body.items()
                    if k not in ("address", "protocol_port", "subnet_id", "id")
                }
                updated.append((existing[key], changes))
            else:
                created.append(self._new_member(request, lb, pool, dict(body)))
        deleted = [m for key, m in existing.items() if key not in seen]

        def finish(failed: bool) -> None:
            self._settle([pool, *created, *(m for m, _ in updated)], failed)
            if not failed:
                for member in deleted:
                    self.cloud.table("lb_members").pop(member["id"], None)

        self._change(lb, [pool], "PENDING_UPDATE", finish)
        for member in created:
            self._stamp(member, "PENDING_CREATE")
        for member, changes in updated:
            self._stamp(member, "PENDING_UPDATE")
            for field, value in changes.items():
                if field in member and not field.startswith("_"):
                    member[field] = value
        for member in deleted:
            self._stamp(member, "PENDING_DELETE")
        return Reply(202)

    # -- health monitors -------------------------------------------------------------------
    def _monitor_fields(self, body: dict[str, Any], *, creating: bool) -> None:
        for name in ("delay", "timeout", "max_retries"):
            value = body.get(name)
            if value is None and not creating:
                continue
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or value < (1 if name != "delay" else 0)
            ):
                raise invalid(f"Invalid input for field/attribute {name}. Value: '{value}'.")
        if body.get("max_retries") is not None and not 1 <= body["max_retries"] <= 10:
            raise invalid(
                f"Invalid input for field/attribute max_retries. Value: '{body['max_retries']}'."
            )
        down = body.get("max_retries_down")
        if down is not None and (not isinstance(down, int) or not 1 <= down <= 10):
            raise invalid(f"Invalid input for field/attribute max_retries_down. Value: '{down}'.")
        if (
            body.get("delay") is not None
            and body.get("timeout") is not None
            and body["timeout"] > body["delay"]
        ):
            raise invalid(
                "The request timeout value must be less than or equal to the delay value."
            )

    def _new_monitor(
        self, request: Request, lb: Resource, pool: Resource, body: dict[str, Any]
    ) -> Resource:
        kind = str(body.get("type") or "")
        if kind not in MONITOR_TYPES:
            raise invalid(f"Invalid input for field/attribute type. Value: '{kind}'.")
        if kind == "UDP-CONNECT" and pool["protocol"] != "UDP":
            raise invalid(
                "The associated pool protocol is not UDP, so a UDP-CONNECT "
                "health monitor is not supported."
            )
        self._monitor_fields(body, creating=True)
        if pool["_monitor_id"]:
            raise octavia_fault(409, f"Pool {pool['id']} already has a health monitor")
        http = kind in ("HTTP", "HTTPS")
        monitor = self._common(
            request,
            body,
            type=kind,
            delay=body["delay"],
            timeout=body["timeout"],
            max_retries=body["max_retries"],
            max_retries_down=3,
            http_method="GET" if http else None,
            url_path="/" if http else None,
            expected_codes="200" if http else None,
            http_version=None,
            domain_name=None,
        )
        monitor["_pool_id"] = pool["id"]
        monitor["_lb_id"] = lb["id"]
        self.cloud.table("lb_healthmonitors")[monitor["id"]] = monitor
        pool["_monitor_id"] = monitor["id"]
        return monitor

    def list_monitors(self, request: Request) -> Reply:
        fields = (
            "id",
            "name",
            "type",
            "delay",
            "timeout",
            "max_retries",
            "provisioning_status",
            "operating_status",
            "project_id",
            "admin_state_up",
        )
        monitors = list(self.cloud.table("lb_healthmonitors").values())
        pool_id = request.arg("pool_id")
        if pool_id is not None:
            monitors = [m for m in monitors if m["_pool_id"] == pool_id]
        return self._list(request, "healthmonitors", monitors, fields, request.path)

    def show_monitor(self, request: Request, monitor_id: str) -> Reply:
        return Reply(
            200, {"healthmonitor": self.render_monitor(self._get("healthmonitors", monitor_id))}
        )

    def create_monitor(self, request: Request) -> Reply:
        body = dict(request.json_body("healthmonitor"))
        pool = self._get("pools", str(body.pop("pool_id", "")))
        lb = self._lb_of(pool)
        self._mutable(lb)
        monitor = self._new_monitor(request, lb, pool, body)
        self._change(
            lb,
            [monitor],
            "PENDING_CREATE",
            lambda failed: self._settle([monitor, *self._members_of(pool["id"])], failed),
        )
        return Reply(201, {"healthmonitor": self.render_monitor(monitor)})

    def update_monitor(self, request: Request, monitor_id: str) -> Reply:
        monitor = self._get("healthmonitors", monitor_id)
        lb = self._lb_of(monitor)
        body = dict(request.json_body("healthmonitor"))
        forbidden = {"type", "pool_id"} & set(body)
        if forbidden:
            raise invalid(f"Attributes {sorted(forbidden)} cannot be updated.")
        merged = {**{k: monitor[k] for k in ("delay", "timeout", "max_retries")}, **body}
        self._monitor_fields(merged, creating=False)
        self._change(
            lb, [monitor], "PENDING_UPDATE", lambda failed: self._settle([monitor], failed)
        )
        for key, value in body.items():
            if key in monitor and not key.startswith("_"):
                monitor[key] = value
        return Reply(200, {"healthmonitor": self.render_monitor(monitor)})

    def delete_monitor(self, request: Request, monitor_id: str) -> Reply:
        monitor = self._get("healthmonitors", monitor_id)
        lb = self._lb_of(monitor)

        def finish(failed: bool) -> None:
            if failed:
                self._stamp(monitor, "ERROR")
                return
            self.cloud.table("lb_healthmonitors").pop(monitor_id, None)
            pool = self.cloud.table("lb_pools").get(monitor["_pool_id"])
            if pool is not None:
                pool["_monitor_id"] = None
                for member in self._members_of(pool["id"]):
                    member["operating_status"] = "NO_MONITOR"

        self._change(lb, [monitor], "PENDING_DELETE", finish)
        return Reply(204)

    # -- flavors, zones, providers ---------------------------------------------------------
    def list_flavors(self, request: Request) -> Reply:
        return Reply(200, {"flavors": list(self.cloud.table("lb_flavors").values())})

    def show_flavor(self, request: Request, flavor_id: str) -> Reply:
        found = self.cloud.table("lb_flavors").get(flavor_id)
        if found is None:
            raise octavia_fault(404, f"Flavor {flavor_id} not found.")
        return Reply(200, {"flavor": found})

    def list_availability_zones(self, request: Request) -> Reply:
        return Reply(
            200, {"availability_zones": list(self.cloud.table("lb_availability_zones").values())}
        )

    def list_providers(self, request: Request) -> Reply:
        return Reply(
            200, {"providers": [{"name": n, "description": d} for n, d in PROVIDERS.items()]}
        )

    # -- admin -----------------------------------------------------------------------------
    def force_status(self, ref: str, status: str) -> Resource:
        """Put a load balancer (by ID or name) into ``status`` (e.g. ``ERROR``)."""
        for lb in self.cloud.table("lb_loadbalancers").values():
            if ref in (lb["id"], lb["name"]):
                self._stamp(lb, status)
                if status == "ERROR":
                    lb["operating_status"] = "ERROR"
                return lb
        raise KeyError(ref)
