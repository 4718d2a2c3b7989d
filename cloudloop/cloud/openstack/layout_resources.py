"""OpenStack layout resources through openstacksdk: find by name, create, repair drift, delete.

One handler per kind of :mod:`cloudloop.cloud.openstack.layout`, all on the driver's base
(:class:`~cloudloop.cloud.openstack.base.OpenStackBase`), logged in with the
``OpenStackClusterConfiguration``'s ``provider`` block; the worker's OpenStack settings give
timeouts and polling. Why: docs/decisions/0048-openstack-layouts.md.

Rules:
- Every resource is found by its name (ports by name and network, floating IPs by description)
  and created with it in the create call, so a retry finds it; two of one name: ``AlreadyExists``.
- Drift repaired in place where the cloud allows it; immutable fields are reported, never
  repaired. A second ensure of an unchanged resource makes only GET requests.
- Bootstrap data goes in ``user_data`` with its digest in the metadata key
  ``cloudloop.io:user-data-sha256``; other data later is an immutable change. Over Nova's 65535
  base64 bytes it is refused before any create.
- ``create`` and ``delete`` wait for what the next step needs; a server in ERROR is deleted and
  the step fails (retryable) with Nova's fault.
- ``adopt`` renames, never replaces; where the name is the identity it is refused when it differs.
- Cloud errors keep the cloud's message; quota refusals are ``QuotaExceeded``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from cloudloop.cloud import errors
from cloudloop.cloud.layouts import Drift, Ensured, Found, user_data_drift
from cloudloop.cloud.openstack import layout as defs
from cloudloop.cloud.openstack.base import NAME, OpenStackBase, is_conflict
from cloudloop.cloud.openstack.layout_state import STATE_TYPES
from cloudloop.cloud.openstack.settings import ConnectionSettings, OpenStackSettings
from cloudloop.layouts import bootstrap
from cloudloop.layouts.config import OpenStackClusterConfiguration
from cloudloop.layouts.model import LayoutDef, ResourceDef
from cloudloop.layouts.tfstate import StateMapping
from cloudloop.tls import ca_file

Props = dict[str, Any]
Raw = dict[str, Any]
#: Nova microversion of server requests (tags in bodies; 2.47 embeds the flavor).
COMPUTE_MICROVERSION = "2.52"
#: What a server booted with (its user data's SHA-256), in its metadata for plan to compare.
USER_DATA_KEY = "cloudloop.io:user-data-sha256"
#: Nova's limit on ``user_data`` (base64).
MAX_USER_DATA_BASE64 = 65535
#: Cinder microversion of ``os-extend`` (an in-use volume grows from 3.42).
EXTEND_MICROVERSION = "3.42"
#: Kind → the suffix of its handler methods (``_find_<s>``, ``_create_<s>``, ``_drift_<s>``,
#: ``_fix_<s>``, ``_delete_<s>``).
_HANDLERS = {
    defs.NETWORK: "network",
    defs.SUBNET: "subnet",
    defs.ROUTER: "router",
    defs.INTERFACE: "interface",
    defs.SG: "sg",
    defs.SG_RULES: "rules",
    defs.KEYPAIR: "keypair",
    defs.SERVER_GROUP: "server_group",
    defs.IMAGE: "image",
    defs.FLAVOR: "flavor",
    defs.PORT: "port",
    defs.VOLUME: "volume",
    defs.ATTACHMENT: "attachment",
    defs.SERVER: "server",
    defs.FLOATING_IP: "fip",
}
#: Kind → (operation, service, path prefix, body key, the field adoption sets to our identity)
#: of the resources adoption reads by ID; the field is ``None`` where the name is the identity
#: (a server group cannot be renamed: a different name is refused).
_BY_ID: dict[str, tuple[str, str, str, str, str | None]] = {
    defs.NETWORK: ("Network", "network", "/networks", "network", "name"),
    defs.SUBNET: ("Subnet", "network", "/subnets", "subnet", "name"),
    defs.ROUTER: ("Router", "network", "/routers", "router", "name"),
    defs.SG: ("SecurityGroup", "network", "/security-groups", "security_group", "name"),
    defs.PORT: ("Port", "network", "/ports", "port", "name"),
    defs.FLOATING_IP: ("FloatingIP", "network", "/floatingips", "floatingip", "description"),
    defs.VOLUME: ("Volume", "block_storage", "/volumes", "volume", "name"),
    defs.SERVER: ("Server", "compute", "/servers", "server", "name"),
    defs.SERVER_GROUP: ("ServerGroup", "compute", "/os-server-groups", "server_group", None),
}
_LIVE_VOLUME = ("creating", "available", "reserved", "attaching", "in-use", "detaching", "error")
_RULE_FIELDS = (
    "direction",
    "ethertype",
    "protocol",
    "port_range_min",
    "port_range_max",
    "remote_ip_prefix",
    "remote_group_id",
)


def _one(found: list[Raw], what: str, name: str) -> Raw | None:
    if len(found) > 1:
        raise errors.AlreadyExists(NAME, what, f"{len(found)} resources named {name!r}")
    return found[0] if found else None


def _rule_key(rule: dict[str, Any]) -> tuple[Any, ...]:
    values = []
    for field in _RULE_FIELDS:
        value = rule.get(field)
        if field == "protocol" and value is not None:
            value = str(value).lower()
        if field in ("port_range_min", "port_range_max") and value is not None:
            value = int(value)
        values.append(value)
    return tuple(values)


def _ipv4(fixed_ips: list[dict[str, Any]]) -> str | None:
    for ip in fixed_ips:
        if ":" not in str(ip.get("ip_address", "")):
            return str(ip["ip_address"])
    return None


def _booted_with(raw: Raw) -> dict[str, str]:
    """The server's metadata key of what it booted with (kept when metadata is repaired)."""
    booted = (raw.get("metadata") or {}).get(USER_DATA_KEY)
    return {USER_DATA_KEY: str(booted)} if booted else {}


class OpenStackLayoutResources(OpenStackBase):
    """The OpenStack :class:`~cloudloop.cloud.layouts.LayoutResources`."""

    # -- the contract ----------------------------------------------------------------------
    def layout_zones(self) -> list[str]:
        body = self.request("ListAvailabilityZones", "compute", "GET", "/os-availability-zone")
        return sorted(
            str(z["zoneName"])
            for z in (body or {}).get("availabilityZoneInfo") or []
            if (z.get("zoneState") or {}).get("available")
        )

    def _handler(self, resource: ResourceDef) -> tuple[Callable[..., Any], ...]:
        suffix = _HANDLERS.get(resource.kind)
        if suffix is None:
            raise errors.NotSupported(NAME, f"layout resource {resource.kind}")
        return tuple(
            getattr(self, f"_{verb}_{suffix}", None) or getattr(self, f"_{verb}_none")
            for verb in ("find", "create", "drift", "fix", "delete")
        )

    def refusals(self, resource: ResourceDef, properties: Props) -> list[str]:
        """A server's user data over Nova's limit (65535 bytes once base64-encoded)."""
        if resource.kind != defs.SERVER:
            return []
        encoded = 4 * ((bootstrap.size_of(properties.get("user_data")) + 2) // 3)
        if encoded > MAX_USER_DATA_BASE64:
            return [
                f"{resource.key}: user data of {encoded} bytes in base64 is over Nova's "
                f"{MAX_USER_DATA_BASE64}"
            ]
        return []

    def inspect(self, resource: ResourceDef, properties: Props) -> Found | None:
        with _classified():
            find, _, drift, _, _ = self._handler(resource)
            raw = find(resource, properties)
            if raw is None:
                return None
            return Found(
                outputs=self._outputs(resource, raw), drift=drift(resource, properties, raw)
            )

    def ensure(self, resource: ResourceDef, properties: Props) -> Ensured:
        with _classified():
            find, create, drift, fix, _ = self._handler(resource)
            raw = find(resource, properties)
            if raw is None:
                raw = create(resource, properties)
                return Ensured("created", self._outputs(resource, raw))
            raw = self._settled(resource, properties, raw)
            changed = drift(resource, properties, raw)
            repairable = [d for d in changed if not d.immutable]
            if not repairable:
                return Ensured("unchanged", self._outputs(resource, raw), changed)
            fix(resource, properties, raw, repairable)
            raw = find(resource, properties) or raw
            return Ensured("updated", self._outputs(resource, raw), changed)

    def delete(self, resource: ResourceDef, properties: Props) -> bool:
        with _classified():
            find, _, _, _, delete = self._handler(resource)
            raw = find(resource, properties)
            if raw is None:
                return False
            delete(resource, properties, raw)
            return True

    def adopt(self, resource: ResourceDef, properties: Props, cloud_id: str) -> Found | None:
        """The resource the Terraform state names, given our name (a port its port name, a
        floating IP its description) so ``inspect`` finds it; ``None`` when the cloud has no
        such resource. A key pair's or server group's name is its identity: a different one
        is refused. Another resource already found under our name is refused too."""
        with _classified():
            if resource.kind in _BY_ID:
                if not self._adopt_by_id(resource, properties, cloud_id):
                    return None
            elif resource.kind == defs.KEYPAIR and cloud_id != resource.name:
                raise errors.InvalidRequest(
                    NAME,
                    "adopt",
                    f"{resource.key}: the state's is named {cloud_id!r} (the name is its identity)",
                )
            elif resource.kind == defs.SG_RULES and cloud_id != properties.get("group_id"):
                raise errors.InvalidRequest(
                    NAME,
                    "adopt",
                    f"{resource.key}: the state's rules are of group {cloud_id}, "
                    f"the layout's of {properties.get('group_id')}",
                )
            found = self.inspect(resource, properties)
            if (
                found is not None
                and resource.kind in (*_BY_ID, defs.INTERFACE)
                and found.outputs.get("id", cloud_id) != cloud_id
            ):
                raise errors.AlreadyExists(
                    NAME, "adopt", f"{resource.key} is {found.outputs.get('id')}, not {cloud_id}"
                )
            return found

    def _adopt_by_id(self, resource: ResourceDef, props: Props, cloud_id: str) -> bool:
        operation, service, path, key, field = _BY_ID[resource.kind]
        microversion = COMPUTE_MICROVERSION if resource.kind == defs.SERVER else None
        try:
            body = self.request(
                f"Get{operation}", service, "GET", f"{path}/{cloud_id}", microversion=microversion
            )
        except errors.NotFound:
            return False
        raw = dict(body[key])
        if resource.kind == defs.SERVER and raw.get("status") == "DELETED":
            return False
        if resource.kind == defs.VOLUME and raw.get("status") not in _LIVE_VOLUME:
            return False
        want = {
            defs.PORT: props.get("port_name"),
            defs.FLOATING_IP: props.get("description"),
            defs.SG: props.get("name", resource.name),
        }.get(resource.kind, resource.name)
        have = raw.get(field or "name")
        if have == want:
            return True
        if field is None:
            raise errors.InvalidRequest(
                NAME,
                "adopt",
                f"{resource.key}: {cloud_id} is named {have!r} (the name is its identity)",
            )
        other = self._handler(resource)[0](resource, props)
        if other is not None and other.get("id") != cloud_id:
            raise errors.AlreadyExists(
                NAME,
                "adopt",
                f"{resource.key} is {other.get('id')} already; the state names {cloud_id}",
            )
        self.request(
            f"Update{operation}",
            service,
            "PUT",
            f"{path}/{cloud_id}",
            json={key: {field: want}},
        )
        return True

    def blockers(self, layout: LayoutDef, found: dict[str, dict[str, Any]]) -> list[str]:
        """Load balancers on the layout's subnet, servers on its network it did not make, the
        cluster's CSI volumes."""
        ours = {r.name for m in layout.modules for r in m.resources}
        blockers: list[str] = []
        subnet = (found.get(f"{defs.SUBNET}/{layout.prefix}") or {}).get("id")
        network = (found.get(f"{defs.NETWORK}/{layout.prefix}") or {}).get("id")
        if subnet:
            lbs = self.list_all(
                "ListLoadBalancers",
                "load_balancer",
                "/lbaas/loadbalancers",
                "loadbalancers",
                params={"vip_subnet_id": subnet},
            )
            blockers += [f"load balancer {lb.get('name') or lb['id']}" for lb in lbs]
        if network:
            ports = self.list_all(
                "ListPorts", "network", "/ports", "ports", params={"network_id": network}
            )
            for port in ports:
                owner = str(port.get("device_owner") or "")
                if owner.startswith("compute:") and port.get("device_id"):
                    server = self._server_by_id(str(port["device_id"]))
                    if server is not None and server.get("name") not in ours:
                        blockers.append(f"server {server.get('name')} ({server['id']})")
        volumes = self.list_all(
            "ListVolumes",
            "block_storage",
            "/volumes/detail",
            "volumes",
            params={"metadata": json.dumps({"cinder.csi.openstack.org/cluster": layout.uuid})},
        )
        blockers += [f"volume {v.get('name') or v['id']}" for v in volumes]
        return sorted(set(blockers))

    # -- outputs ---------------------------------------------------------------------------
    def _outputs(self, resource: ResourceDef, raw: Raw) -> dict[str, Any]:
        values = {
            "id": raw.get("id"),
            "name": raw.get("name") or resource.name,
            "cidr": raw.get("cidr"),
            "network_id": raw.get("network_id"),
            "ip": raw.get("_ip"),
            "address": raw.get("floating_ip_address"),
            "device": raw.get("device"),
        }
        return {k: values.get(k) for k in resource.outputs}

    def _settled(self, resource: ResourceDef, props: Props, raw: Raw) -> Raw:
        """A found resource in a transition the next step cannot use yet, waited for."""
        if resource.kind == defs.SERVER and raw.get("status") != "ACTIVE":
            return self._wait_server(str(raw["id"]))
        if resource.kind == defs.VOLUME and raw.get("status") == "creating":
            return self._wait_volume(str(raw["id"]), ("available", "in-use"))
        return raw

    # -- shared ----------------------------------------------------------------------------
    def _drift_none(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        return []

    def _fix_none(self, *_: Any) -> None:
        return None

    def _delete_none(self, *_: Any) -> None:
        return None

    def _create_none(self, resource: ResourceDef, props: Props) -> Raw:
        raise errors.NotFound(NAME, "Find", f"{resource.key} is looked up, never created")

    def _named(self, operation: str, path: str, key: str, **params: Any) -> list[Raw]:
        return self.list_all(operation, "network", path, key, params=params)

    def _immutable(self, raw: Raw, props: Props, *fields: tuple[str, str]) -> list[Drift]:
        return [
            Drift(field, raw.get(have), props[field], immutable=True)
            for field, have in fields
            if props.get(field) is not None and raw.get(have) != props[field]
        ]

    def _gone(self, what: str, read: Callable[[], Any]) -> None:
        self.wait_until(what, read, lambda value: value is None)

    # -- lookups ---------------------------------------------------------------------------
    def _find_image(self, resource: ResourceDef, props: Props) -> Raw | None:
        found = self.list_all(
            "ListImages", "image", "/images", "images", params={"name": props["name"]}
        )
        live = [i for i in found if i.get("status", "active") == "active"]
        return _one(live, "ListImages", props["name"])

    def _find_flavor(self, resource: ResourceDef, props: Props) -> Raw | None:
        flavors = self.list_all("ListFlavors", "compute", "/flavors/detail", "flavors")
        return _one(
            [f for f in flavors if f.get("name") == props["name"]], "ListFlavors", props["name"]
        )

    # -- networks, subnets -----------------------------------------------------------------
    def _find_network(self, resource: ResourceDef, props: Props) -> Raw | None:
        if resource.read_only and props.get("network_id"):
            try:
                body = self.request(
                    "GetNetwork", "network", "GET", f"/networks/{props['network_id']}"
                )
            except errors.NotFound:
                return None
            return dict(body["network"])
        name = props.get("name", resource.name)
        return _one(
            self._named("ListNetworks", "/networks", "networks", name=name), "ListNetworks", name
        )

    def _create_network(self, resource: ResourceDef, props: Props) -> Raw:
        body = {"name": resource.name, "admin_state_up": bool(props.get("admin_state_up", True))}
        made = self.request("CreateNetwork", "network", "POST", "/networks", json={"network": body})
        return dict(made["network"])

    def _drift_network(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        if resource.read_only or raw.get("admin_state_up") == props.get("admin_state_up", True):
            return []
        return [Drift("admin_state_up", raw.get("admin_state_up"), props["admin_state_up"])]

    def _fix_network(
        self, resource: ResourceDef, props: Props, raw: Raw, drift: list[Drift]
    ) -> None:
        self.request(
            "UpdateNetwork",
            "network",
            "PUT",
            f"/networks/{raw['id']}",
            json={"network": {"admin_state_up": props["admin_state_up"]}},
        )

    def _delete_network(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        self.request("DeleteNetwork", "network", "DELETE", f"/networks/{raw['id']}")

    def _find_subnet(self, resource: ResourceDef, props: Props) -> Raw | None:
        if resource.read_only:
            found = self._named("ListSubnets", "/subnets", "subnets", name=props["name"])
            return _one(found, "ListSubnets", props["name"])
        found = self._named(
            "ListSubnets",
            "/subnets",
            "subnets",
            name=resource.name,
            network_id=props["network_id"],
        )
        return _one(found, "ListSubnets", resource.name)

    def _create_subnet(self, resource: ResourceDef, props: Props) -> Raw:
        body = {k: v for k, v in props.items() if v is not None or k == "gateway_ip"}
        body["name"] = resource.name
        made = self.request("CreateSubnet", "network", "POST", "/subnets", json={"subnet": body})
        return dict(made["subnet"])

    def _drift_subnet(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        if resource.read_only:
            return []
        drift = self._immutable(raw, props, ("cidr", "cidr"))
        if raw.get("gateway_ip") != props.get("gateway_ip"):
            drift.append(Drift("gateway_ip", raw.get("gateway_ip"), props.get("gateway_ip")))
        if "dns_nameservers" in props and list(raw.get("dns_nameservers") or []) != list(
            props["dns_nameservers"]
        ):
            drift.append(
                Drift("dns_nameservers", raw.get("dns_nameservers"), props["dns_nameservers"])
            )
        if "enable_dhcp" in props and raw.get("enable_dhcp") != props["enable_dhcp"]:
            drift.append(Drift("enable_dhcp", raw.get("enable_dhcp"), props["enable_dhcp"]))
        return drift

    def _fix_subnet(
        self, resource: ResourceDef, props: Props, raw: Raw, drift: list[Drift]
    ) -> None:
        update = {d.field: props.get(d.field) for d in drift}
        self.request(
            "UpdateSubnet", "network", "PUT", f"/subnets/{raw['id']}", json={"subnet": update}
        )

    def _delete_subnet(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        self.request("DeleteSubnet", "network", "DELETE", f"/subnets/{raw['id']}")

    # -- router and interface ---------------------------------------------------------------
    def _find_router(self, resource: ResourceDef, props: Props) -> Raw | None:
        found = self._named("ListRouters", "/routers", "routers", name=resource.name)
        return _one(found, "ListRouters", resource.name)

    def _gateway(self, props: Props) -> dict[str, Any]:
        return {"network_id": props["external_network_id"]}

    def _create_router(self, resource: ResourceDef, props: Props) -> Raw:
        body = {
            "name": resource.name,
            "admin_state_up": True,
            "external_gateway_info": self._gateway(props),
        }
        made = self.request("CreateRouter", "network", "POST", "/routers", json={"router": body})
        return dict(made["router"])

    def _drift_router(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        have = (raw.get("external_gateway_info") or {}).get("network_id")
        if have == props["external_network_id"]:
            return []
        return [Drift("external_network_id", have, props["external_network_id"])]

    def _fix_router(
        self, resource: ResourceDef, props: Props, raw: Raw, drift: list[Drift]
    ) -> None:
        self.request(
            "UpdateRouter",
            "network",
            "PUT",
            f"/routers/{raw['id']}",
            json={"router": {"external_gateway_info": self._gateway(props)}},
        )

    def _delete_router(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        self.request("DeleteRouter", "network", "DELETE", f"/routers/{raw['id']}")

    def _find_interface(self, resource: ResourceDef, props: Props) -> Raw | None:
        ports = self._named(
            "ListPorts",
            "/ports",
            "ports",
            device_id=props["router_id"],
            device_owner="network:router_interface",
        )
        for port in ports:
            if any(ip.get("subnet_id") == props["subnet_id"] for ip in port.get("fixed_ips", [])):
                return port
        return None

    def _create_interface(self, resource: ResourceDef, props: Props) -> Raw:
        made = self.request(
            "AddRouterInterface",
            "network",
            "PUT",
            f"/routers/{props['router_id']}/add_router_interface",
            json={"subnet_id": props["subnet_id"]},
        )
        return {"id": made.get("port_id")}

    def _delete_interface(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        self.request(
            "RemoveRouterInterface",
            "network",
            "PUT",
            f"/routers/{props['router_id']}/remove_router_interface",
            json={"subnet_id": props["subnet_id"]},
        )

    # -- security groups --------------------------------------------------------------------
    def _find_sg(self, resource: ResourceDef, props: Props) -> Raw | None:
        name = props.get("name", resource.name)
        found = self._named("ListSecurityGroups", "/security-groups", "security_groups", name=name)
        return _one(found, "ListSecurityGroups", name)

    def _create_sg(self, resource: ResourceDef, props: Props) -> Raw:
        body = {"name": resource.name, "description": props.get("description", "")}
        made = self.request(
            "CreateSecurityGroup",
            "network",
            "POST",
            "/security-groups",
            json={"security_group": body},
        )
        return dict(made["security_group"])

    def _delete_sg(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        self.request("DeleteSecurityGroup", "network", "DELETE", f"/security-groups/{raw['id']}")

    def _find_rules(self, resource: ResourceDef, props: Props) -> Raw | None:
        try:
            body = self.request(
                "GetSecurityGroup", "network", "GET", f"/security-groups/{props['group_id']}"
            )
        except errors.NotFound:
            return None
        group = body["security_group"]
        return {"id": group["id"], "rules": list(group.get("security_group_rules") or [])}

    def _create_rules(self, resource: ResourceDef, props: Props) -> Raw:
        raise errors.NotFound(NAME, "GetSecurityGroup", f"security group {props['group_id']}")

    def _rule_sets(self, props: Props, raw: Raw) -> tuple[list[Raw], list[Raw]]:
        """(missing rules, our ingress rules that are not wanted)."""
        wanted = {_rule_key(r): r for r in props["ingress"]}
        have = [r for r in raw["rules"] if r.get("direction") == "ingress"]
        have_keys = {_rule_key(r) for r in have}
        missing = [r for k, r in wanted.items() if k not in have_keys]
        extra = [r for r in have if _rule_key(r) not in wanted]
        return missing, extra

    def _drift_rules(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        missing, extra = self._rule_sets(props, raw)
        drift: list[Drift] = []
        if missing:
            drift.append(Drift("ingress.missing", None, [list(_rule_key(r)) for r in missing]))
        if extra:
            drift.append(Drift("ingress.unexpected", [list(_rule_key(r)) for r in extra], None))
        return drift

    def _fix_rules(self, resource: ResourceDef, props: Props, raw: Raw, drift: list[Drift]) -> None:
        missing, extra = self._rule_sets(props, raw)
        for rule in extra:
            self.request(
                "DeleteSecurityGroupRule",
                "network",
                "DELETE",
                f"/security-group-rules/{rule['id']}",
            )
        for rule in missing:
            body = {k: v for k, v in rule.items() if v is not None}
            body["security_group_id"] = props["group_id"]
            try:
                self.request(
                    "CreateSecurityGroupRule",
                    "network",
                    "POST",
                    "/security-group-rules",
                    json={"security_group_rule": body},
                )
            except errors.CloudError as exc:
                if not is_conflict(exc):  # 409: made by an earlier attempt
                    raise

    def _delete_rules(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        return None  # they go with their group

    # -- key pair, server group --------------------------------------------------------------
    def _find_keypair(self, resource: ResourceDef, props: Props) -> Raw | None:
        try:
            body = self.request("GetKeypair", "compute", "GET", f"/os-keypairs/{resource.name}")
        except errors.NotFound:
            return None
        return {**body["keypair"], "id": resource.name}

    def _create_keypair(self, resource: ResourceDef, props: Props) -> Raw:
        body = {"name": resource.name, "public_key": props["public_key"]}
        made = self.request(
            "CreateKeypair", "compute", "POST", "/os-keypairs", json={"keypair": body}
        )
        return {**made["keypair"], "id": resource.name}

    def _drift_keypair(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        have = str(raw.get("public_key") or "").strip()
        if have.split()[:2] == props["public_key"].split()[:2]:
            return []
        return [Drift("public_key", have, props["public_key"], immutable=True)]

    def _delete_keypair(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        self.request("DeleteKeypair", "compute", "DELETE", f"/os-keypairs/{resource.name}")

    def _find_server_group(self, resource: ResourceDef, props: Props) -> Raw | None:
        body = self.request("ListServerGroups", "compute", "GET", "/os-server-groups")
        found = [
            g for g in (body or {}).get("server_groups") or [] if g.get("name") == resource.name
        ]
        return _one(found, "ListServerGroups", resource.name)

    def _create_server_group(self, resource: ResourceDef, props: Props) -> Raw:
        body = {"name": resource.name, "policies": [props["policy"]]}
        made = self.request(
            "CreateServerGroup", "compute", "POST", "/os-server-groups", json={"server_group": body}
        )
        return dict(made["server_group"])

    def _delete_server_group(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        self.request("DeleteServerGroup", "compute", "DELETE", f"/os-server-groups/{raw['id']}")

    # -- ports -----------------------------------------------------------------------------
    def _find_port(self, resource: ResourceDef, props: Props) -> Raw | None:
        found = self._named(
            "ListPorts", "/ports", "ports", name=props["port_name"], network_id=props["network_id"]
        )
        raw = _one(found, "ListPorts", props["port_name"])
        if raw is not None:
            raw["_ip"] = _ipv4(raw.get("fixed_ips") or [])
        return raw

    def _create_port(self, resource: ResourceDef, props: Props) -> Raw:
        body: dict[str, Any] = {
            "name": props["port_name"],
            "network_id": props["network_id"],
            "admin_state_up": True,
        }
        if props.get("subnet_id"):
            body["fixed_ips"] = [{"subnet_id": props["subnet_id"]}]
        if props.get("security_group_ids") is not None:
            body["security_groups"] = props["security_group_ids"]
        if props.get("allowed_address_pairs"):
            body["allowed_address_pairs"] = [
                {"ip_address": ip} for ip in props["allowed_address_pairs"]
            ]
        made = dict(
            self.request("CreatePort", "network", "POST", "/ports", json={"port": body})["port"]
        )
        made["_ip"] = _ipv4(made.get("fixed_ips") or [])
        return made

    def _drift_port(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        drift: list[Drift] = []
        if props.get("security_group_ids") is not None:
            have = sorted(raw.get("security_groups") or [])
            if have != sorted(props["security_group_ids"]):
                drift.append(Drift("security_group_ids", have, sorted(props["security_group_ids"])))
        if props.get("allowed_address_pairs") is not None:
            have = sorted(p["ip_address"] for p in raw.get("allowed_address_pairs") or [])
            if have != sorted(props["allowed_address_pairs"]):
                drift.append(
                    Drift("allowed_address_pairs", have, sorted(props["allowed_address_pairs"]))
                )
        if props.get("subnet_id") and not any(
            ip.get("subnet_id") == props["subnet_id"] for ip in raw.get("fixed_ips") or []
        ):
            drift.append(
                Drift("subnet_id", raw.get("fixed_ips"), props["subnet_id"], immutable=True)
            )
        return drift

    def _fix_port(self, resource: ResourceDef, props: Props, raw: Raw, drift: list[Drift]) -> None:
        update: dict[str, Any] = {}
        fields = {d.field for d in drift}
        if "security_group_ids" in fields:
            update["security_groups"] = props["security_group_ids"]
        if "allowed_address_pairs" in fields:
            update["allowed_address_pairs"] = [
                {"ip_address": ip} for ip in props["allowed_address_pairs"]
            ]
        self.request("UpdatePort", "network", "PUT", f"/ports/{raw['id']}", json={"port": update})

    def _delete_port(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        self.request("DeletePort", "network", "DELETE", f"/ports/{raw['id']}")

    # -- floating IPs ----------------------------------------------------------------------
    def _find_fip(self, resource: ResourceDef, props: Props) -> Raw | None:
        found = self._named(
            "ListFloatingIPs",
            "/floatingips",
            "floatingips",
            description=props["description"],
            floating_network_id=props["floating_network_id"],
        )
        return _one(found, "ListFloatingIPs", props["description"])

    def _create_fip(self, resource: ResourceDef, props: Props) -> Raw:
        body = {
            "floating_network_id": props["floating_network_id"],
            "description": props["description"],
            "port_id": props["port_id"],
        }
        made = self.request(
            "CreateFloatingIP", "network", "POST", "/floatingips", json={"floatingip": body}
        )
        return dict(made["floatingip"])

    def _drift_fip(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        if raw.get("port_id") == props["port_id"]:
            return []
        return [Drift("port_id", raw.get("port_id"), props["port_id"])]

    def _fix_fip(self, resource: ResourceDef, props: Props, raw: Raw, drift: list[Drift]) -> None:
        self.request(
            "UpdateFloatingIP",
            "network",
            "PUT",
            f"/floatingips/{raw['id']}",
            json={"floatingip": {"port_id": props["port_id"]}},
        )

    def _delete_fip(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        self.request("DeleteFloatingIP", "network", "DELETE", f"/floatingips/{raw['id']}")

    # -- volumes ---------------------------------------------------------------------------
    def _volume(self, volume_id: str) -> Raw | None:
        try:
            body = self.request("GetVolume", "block_storage", "GET", f"/volumes/{volume_id}")
        except errors.NotFound:
            return None
        return dict(body["volume"])

    def _wait_volume(self, volume_id: str, wanted: tuple[str, ...]) -> Raw:
        def done(volume: Raw | None) -> bool:
            if volume is not None and str(volume.get("status")).startswith("error"):
                raise errors.CloudError(
                    NAME, "GetVolume", f"volume {volume_id} is {volume.get('status')}"
                )
            return volume is not None and volume.get("status") in wanted

        found = self.wait_until("GetVolume", lambda: self._volume(volume_id), done)
        assert found is not None
        return found

    def _find_volume(self, resource: ResourceDef, props: Props) -> Raw | None:
        found = self.list_all(
            "ListVolumes",
            "block_storage",
            "/volumes/detail",
            "volumes",
            params={"name": resource.name},
        )
        live = [
            v for v in found if v.get("name") == resource.name and v.get("status") in _LIVE_VOLUME
        ]
        return _one(live, "ListVolumes", resource.name)

    def _create_volume(self, resource: ResourceDef, props: Props) -> Raw:
        body: dict[str, Any] = {
            "name": resource.name,
            "size": props["size"],
            "availability_zone": props["availability_zone"],
            "metadata": props.get("metadata") or {},
        }
        for field, key in (
            ("volume_type", "volume_type"),
            ("image_id", "imageRef"),
            ("description", "description"),
        ):
            if props.get(field):
                body[key] = props[field]
        made = self.request(
            "CreateVolume", "block_storage", "POST", "/volumes", json={"volume": body}
        )
        return self._wait_volume(str(made["volume"]["id"]), ("available", "in-use"))

    def _drift_volume(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        drift = self._immutable(raw, props, ("volume_type", "volume_type"))
        have = int(raw.get("size") or 0)
        if have != props["size"]:
            # upstream's enable_online_resize: a volume grows in place, it never shrinks
            drift.append(Drift("size", have, props["size"], immutable=have > props["size"]))
        return drift

    def _fix_volume(
        self, resource: ResourceDef, props: Props, raw: Raw, drift: list[Drift]
    ) -> None:
        if any(d.field == "size" for d in drift):
            status = str(raw.get("status"))
            self.request(
                "ExtendVolume",
                "block_storage",
                "POST",
                f"/volumes/{raw['id']}/action",
                json={"os-extend": {"new_size": props["size"]}},
                microversion=EXTEND_MICROVERSION,
            )

            def extended(volume: Raw | None) -> bool:
                if volume is not None and str(volume.get("status")).startswith("error"):
                    raise errors.CloudError(
                        NAME, "ExtendVolume", f"volume {raw['id']} is {volume.get('status')}"
                    )
                return volume is not None and volume.get("status") == status

            self.wait_until("ExtendVolume", lambda: self._volume(str(raw["id"])), extended)

    def _delete_volume(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        volume_id = str(raw["id"])
        if raw.get("attachments") or raw.get("status") in ("attaching", "detaching", "reserved"):
            self._wait_volume(volume_id, ("available", "error"))
        self.request("DeleteVolume", "block_storage", "DELETE", f"/volumes/{volume_id}")
        self._gone("DeleteVolume", lambda: self._volume(volume_id))

    def _find_attachment(self, resource: ResourceDef, props: Props) -> Raw | None:
        volume = self._volume(props["volume_id"])
        if volume is None:
            return None
        for attachment in volume.get("attachments") or []:
            if attachment.get("server_id") == props["server_id"]:
                return {
                    "id": f"{props['volume_id']}:{props['server_id']}",
                    "device": attachment.get("device"),
                }
            raise errors.FailedPrecondition(
                NAME,
                "AttachVolume",
                f"volume {props['volume_id']} is attached to {attachment.get('server_id')}",
            )
        return None

    def _create_attachment(self, resource: ResourceDef, props: Props) -> Raw:
        self.request(
            "AttachVolume",
            "compute",
            "POST",
            f"/servers/{props['server_id']}/os-volume_attachments",
            json={"volumeAttachment": {"volumeId": props["volume_id"]}},
        )
        self._wait_volume(props["volume_id"], ("in-use",))
        found = self._find_attachment(resource, props)
        assert found is not None
        return found

    def _delete_attachment(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        try:
            self.request(
                "DetachVolume",
                "compute",
                "DELETE",
                f"/servers/{props['server_id']}/os-volume_attachments/{props['volume_id']}",
            )
        except errors.NotFound:
            return
        self._wait_volume(props["volume_id"], ("available",))

    # -- servers ---------------------------------------------------------------------------
    def _server_by_id(self, server_id: str) -> Raw | None:
        try:
            body = self.request(
                "GetServer",
                "compute",
                "GET",
                f"/servers/{server_id}",
                microversion=COMPUTE_MICROVERSION,
            )
        except errors.NotFound:
            return None
        return dict(body["server"])

    def _server_ip(self, server: Raw) -> str | None:
        ports = self._named("ListPorts", "/ports", "ports", device_id=server["id"])
        for port in ports:
            ip = _ipv4(port.get("fixed_ips") or [])
            if ip:
                return ip
        return None

    def _wait_server(self, server_id: str) -> Raw:
        def done(server: Raw | None) -> bool:
            if server is None:
                raise errors.CloudError(NAME, "GetServer", f"server {server_id} disappeared")
            if server.get("status") == "ERROR":
                self._fail_over(server)
            return server.get("status") == "ACTIVE"

        found = self.wait_until("GetServer", lambda: self._server_by_id(server_id), done)
        assert found is not None
        found["_ip"] = self._server_ip(found)
        return found

    def _fail_over(self, server: Raw) -> None:
        """A server in ERROR is deleted (its ports and volumes stay for the next attempt, as
        upstream machine controllers do) and the step fails with Nova's fault: the retry
        makes a new one, and nothing broken is left behind."""
        server_id = str(server["id"])
        fault = str((server.get("fault") or {}).get("message") or "no fault reported")
        self.request("DeleteServer", "compute", "DELETE", f"/servers/{server_id}")
        self._gone("DeleteServer", lambda: self._server_by_id(server_id))
        if "No valid host" in fault:
            raise errors.InsufficientCapacity(NAME, "CreateServer", fault)
        raise errors.CloudError(NAME, "CreateServer", f"server in ERROR: {fault}")

    def _find_server(self, resource: ResourceDef, props: Props) -> Raw | None:
        found = self.list_all(
            "ListServers",
            "compute",
            "/servers/detail",
            "servers",
            params={"name": f"^{resource.name}$"},
            microversion=COMPUTE_MICROVERSION,
        )
        live = [
            s
            for s in found
            if s.get("name") == resource.name
            and s.get("status") != "DELETED"
            and s.get("OS-EXT-STS:task_state") != "deleting"
        ]
        raw = _one(live, "ListServers", resource.name)
        if raw is not None and raw.get("status") == "ACTIVE":
            raw["_ip"] = self._server_ip(raw)
        return raw

    def _create_server(self, resource: ResourceDef, props: Props) -> Raw:
        server: dict[str, Any] = {
            "name": resource.name,
            "flavorRef": props["flavor_id"],
            "key_name": props["key_name"],
            "availability_zone": props["availability_zone"],
            "config_drive": bool(props.get("config_drive")),
            "metadata": props.get("metadata") or {},
        }
        user_data = bootstrap.loaded(props.get("user_data"))
        if user_data is not None:
            server["user_data"] = base64.b64encode(user_data.data).decode()
            server["metadata"] = {**server["metadata"], USER_DATA_KEY: user_data.sha256}
        if props.get("ports"):
            server["networks"] = [{"port": port} for port in props["ports"]]
        else:
            server["networks"] = [{"uuid": net} for net in props.get("networks") or []]
        if props.get("security_groups"):
            server["security_groups"] = [{"name": g} for g in props["security_groups"]]
        if props.get("root_volume_id"):
            server["block_device_mapping_v2"] = [
                {
                    "uuid": props["root_volume_id"],
                    "boot_index": 0,
                    "source_type": "volume",
                    "destination_type": "volume",
                    # the root volume is a resource of its own (deleted by its own step): a
                    # server that fails over leaves it for the next attempt
                    "delete_on_termination": False,
                }
            ]
        else:
            server["imageRef"] = props["image_id"]
        body: dict[str, Any] = {"server": server}
        if props.get("server_group_id"):
            body["os:scheduler_hints"] = {"group": props["server_group_id"]}
        made = self.request(
            "CreateServer",
            "compute",
            "POST",
            "/servers",
            json=body,
            microversion=COMPUTE_MICROVERSION,
        )
        return self._wait_server(str(made["server"]["id"]))

    def _drift_server(self, resource: ResourceDef, props: Props, raw: Raw) -> list[Drift]:
        drift: list[Drift] = []
        if raw.get("key_name") != props["key_name"]:
            drift.append(Drift("key_name", raw.get("key_name"), props["key_name"], immutable=True))
        zone = raw.get("OS-EXT-AZ:availability_zone")
        if zone and zone != props["availability_zone"]:
            drift.append(
                Drift("availability_zone", zone, props["availability_zone"], immutable=True)
            )
        # below 2.47 the server names its flavor's ID; from 2.47 it embeds the flavor, named by
        # ``original_name`` (no ID): compare what the answer has
        flavor = raw.get("flavor") or {}
        if flavor.get("id") and flavor["id"] != props["flavor_id"]:
            drift.append(Drift("flavor_id", flavor["id"], props["flavor_id"], immutable=True))
        named = flavor.get("original_name")
        if not flavor.get("id") and named and props.get("flavor_name") not in (None, named):
            drift.append(Drift("flavor_name", named, props["flavor_name"], immutable=True))
        want = props.get("metadata") or {}
        have = {k: v for k, v in (raw.get("metadata") or {}).items() if k != USER_DATA_KEY}
        if have != want:
            drift.append(Drift("metadata", have, want))
        booted = (raw.get("metadata") or {}).get(USER_DATA_KEY)
        drift += user_data_drift(booted, props)
        return drift

    def _fix_server(
        self, resource: ResourceDef, props: Props, raw: Raw, drift: list[Drift]
    ) -> None:
        if any(d.field == "metadata" for d in drift):
            self.request(
                "SetServerMetadata",
                "compute",
                "PUT",
                f"/servers/{raw['id']}/metadata",
                json={"metadata": {**(props.get("metadata") or {}), **_booted_with(raw)}},
            )

    def _delete_server(self, resource: ResourceDef, props: Props, raw: Raw) -> None:
        server_id = str(raw["id"])
        self.request("DeleteServer", "compute", "DELETE", f"/servers/{server_id}")
        self._gone("DeleteServer", lambda: self._server_by_id(server_id))


@contextmanager
def _classified() -> Iterator[None]:
    """Cloud errors as the layout reports them: a quota is a quota, whatever the status."""
    try:
        yield
    except errors.QuotaExceeded:
        raise
    except errors.CloudError as exc:
        message = exc.message
        if "Quota exceeded" in message or "OverQuota" in message:
            raise errors.QuotaExceeded(NAME, exc.operation, message) from exc
        raise


class OpenStackLayouts:
    """The OpenStack :class:`~cloudloop.cloud.layouts.LayoutPart` (and ``AdoptingPart``)."""

    layouts: tuple[str, ...] = defs.LAYOUTS
    state_types: Mapping[str, StateMapping] = STATE_TYPES

    def define(self, config: Any, cluster: Any, zones: list[str]) -> LayoutDef:
        return defs.define(config, cluster, zones)

    def connect(self, config: Any, section: Any) -> OpenStackLayoutResources:
        """A session logged in with the document's ``provider`` block; the worker's OpenStack
        section gives timeouts and polling (its own login and files are not used)."""
        assert isinstance(config, OpenStackClusterConfiguration)
        base = section if isinstance(section, OpenStackSettings) else OpenStackSettings()
        p = config.provider
        ca_path = ca_file(p.caCert) if p.caCert else None
        connection = ConnectionSettings(
            auth_url=p.authURL,
            username=p.username,
            password=p.password,
            tenant_name=p.tenantName or "",
            tenant_id=p.tenantID or "",
            domain_name=p.domainName,
            region=p.region,
            ca_file=ca_path,
        )
        settings = base.model_copy(
            update={
                "connection": connection,
                "cloud_config_file": None,
                "cluster_configuration_file": None,
            }
        )
        return OpenStackLayoutResources(settings)
