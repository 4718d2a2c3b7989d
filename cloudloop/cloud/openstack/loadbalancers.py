"""Octavia load balancers for Services, as cloud-provider-openstack makes them.

Names and tags follow upstream, so a load balancer OCCM made is adopted: the LB
``kube_service_<cluster>_<ns>_<svc>`` (upstream's description, tags ``[<lb name>]``), children
``listener_<i>_<lb>``, ``pool_<i>_<lb>``, ``monitor_<i>_<lb>``, the floating IP described ``Floating
IP for Kubernetes external service …``; the tag ``cloudloop-lb:<a+uid>`` finds it for get and
delete. Departures: docs/decisions/0047-one-load-balancer-workflow-per-service.md.

Rules:
- Every step reads before it writes, so a retried call adopts what the interrupted one made; a new
  LB is created fully populated in one request (unless ``provider-requires-serial-api-calls``).
- Each write waits until the LB leaves ``PENDING_*`` (heartbeating); a 409 "immutable" is
  retryable. An LB in ``ERROR`` is deleted and made again; a new one ending in ``ERROR`` fails.
- Members are replaced as one set (``PUT /pools/{id}/members``) when the node set changed.
- Delete cascades and first deletes the floating IP this controller made (only such are ever
  deleted), unless ``keep-floatingip`` (the LB tag ``cloudloop-keep-floatingip``).
- ``load-balancer-id`` as OCCM: written back; naming an existing LB no other Service uses takes
  it (released, not deleted, with the Service); an unknown ID or another Service's LB is refused.
"""

from __future__ import annotations

import contextlib
import fnmatch
import ipaddress
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.driver import LoadBalancerDefaults
from cloudloop.cloud.openstack.base import NAME, OpenStackBase
from cloudloop.cloud.openstack.instances import OpenStackInstances
from cloudloop.cloud.openstack.lb_options import (
    INTERNAL_ANNOTATION,
    PREFIX,
    LoadBalancerOptions,
    invalid,
    listener_protocol,
    monitor_spec,
    node_matches,
    parse_options,
    pool_protocol,
)

log = logging.getLogger(__name__)

LB_SERVICE = "load_balancer"
IDENTITY_TAG_PREFIX = "cloudloop-lb:"
KEEP_FLOATING_IP_TAG = "cloudloop-keep-floatingip"
FIP_DESCRIPTION_PREFIX = "Floating IP for Kubernetes external service"
_GONE = ("DELETED", "PENDING_DELETE")
_TIMEOUT_KEYS = (
    "timeout_client_data",
    "timeout_member_connect",
    "timeout_member_data",
    "timeout_tcp_inspect",
)


def _cut(name: str) -> str:
    return name[:255]


def upstream_name(spec: models.LoadBalancerSpec) -> str:
    namespace, _, service = spec.service.partition("/")
    return _cut(f"kube_service_{spec.cluster}_{namespace}_{service}")


def identity_tag(name: str) -> str:
    return f"{IDENTITY_TAG_PREFIX}{name}"


def description(spec: models.LoadBalancerSpec) -> str:
    return f"Kubernetes external service {spec.service} from cluster {spec.cluster}"


def fip_description(spec: models.LoadBalancerSpec) -> str:
    return f"{FIP_DESCRIPTION_PREFIX} {spec.service} from cluster {spec.cluster}"


@dataclass(frozen=True)
class Member:
    name: str
    address: str
    port: int
    subnet_id: str
    monitor_port: int | None

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name,
            "address": self.address,
            "protocol_port": self.port,
        }
        if self.subnet_id:
            body["subnet_id"] = self.subnet_id
        if self.monitor_port:
            body["monitor_port"] = self.monitor_port
        return body

    def key(self) -> tuple[str, str, int, int | None]:
        return (self.name, self.address, self.port, self.monitor_port)


def member_key(raw: dict[str, Any]) -> tuple[str, str, int, int | None]:
    return (
        str(raw.get("name") or ""),
        str(raw["address"]),
        int(raw["protocol_port"]),
        raw.get("monitor_port"),
    )


@dataclass
class Plan:
    """Everything one ensure needs, read before the first write."""

    spec: models.LoadBalancerSpec
    options: LoadBalancerOptions
    name: str
    members: list[tuple[str, str]]  # (node name, address)
    vip: dict[str, str]
    member_subnet_id: str
    floating_network_id: str
    floating_subnet_ids: list[str]
    #: The LB is this Service's own (named for it); False for a load balancer the Service was
    #: given by ``load-balancer-id``: then only listeners tagged for the Service are ours, and
    #: a delete releases the LB instead of deleting it (OCCM).
    owned: bool = True
    #: ``spec.loadBalancerIP``'s floating IP (read in the plan, attached after the LB).
    requested_fip: dict[str, Any] | None = None

    def members_for(self, port: models.LoadBalancerPort) -> list[Member]:
        monitor_port = None
        if (
            self.options.monitor.enabled
            and self.spec.external_traffic_policy == "Local"
            and self.spec.health_check_node_port > 0
        ):
            monitor_port = self.spec.health_check_node_port
        return [
            Member(node, address, port.node_port, self.member_subnet_id, monitor_port)
            for node, address in self.members
        ]


class OpenStackLoadBalancers(LoadBalancerDefaults):
    provider = NAME

    def __init__(self, session: OpenStackBase, instances: OpenStackInstances) -> None:
        self.session = session
        #: The servers the members point at.
        self.instances = instances

    # -- Octavia reads ---------------------------------------------------------------------
    def _octavia(self, operation: str, method: str, url: str, **kwargs: Any) -> Any:
        return self.session.request(operation, LB_SERVICE, method, url, **kwargs)

    def _lbs(self, **params: str) -> list[dict[str, Any]]:
        found = self.session.list_all(
            "ListLoadBalancers", LB_SERVICE, "/lbaas/loadbalancers", "loadbalancers", params=params
        )
        return [lb for lb in found if lb.get("provisioning_status") not in _GONE]

    def _find(self, name: str, upstream: str = "") -> dict[str, Any] | None:
        """Our LB: by the identity tag, then upstream's name, then the legacy name."""
        candidates = self._lbs(tags=identity_tag(name))
        if not candidates and upstream:
            candidates = self._lbs(name=upstream)
        if not candidates:
            candidates = self._lbs(name=name)
        if len(candidates) > 1:
            raise errors.CloudError(
                NAME,
                "ListLoadBalancers",
                f"{len(candidates)} load balancers match {upstream or name}: "
                f"{sorted(lb['id'] for lb in candidates)}",
            )
        return candidates[0] if candidates else None

    def _get_lb(self, lb_id: str) -> dict[str, Any]:
        body = self._octavia("GetLoadBalancer", "GET", f"/lbaas/loadbalancers/{lb_id}")
        return dict(body["loadbalancer"])

    def _settled(self, lb_id: str, what: str) -> dict[str, Any]:
        """Wait until the LB is no longer ``PENDING_*``; its state then (ACTIVE or ERROR)."""
        return self.session.wait_until(
            f"{what} (load balancer {lb_id})",
            lambda: self._get_lb(lb_id),
            lambda lb: not str(lb.get("provisioning_status", "")).startswith("PENDING_"),
        )

    def _active(self, lb_id: str, what: str) -> dict[str, Any]:
        lb = self._settled(lb_id, what)
        if lb.get("provisioning_status") != "ACTIVE":
            raise errors.CloudError(
                NAME, what, f"load balancer {lb_id} is {lb.get('provisioning_status')}"
            )
        return lb

    def _write(self, operation: str, lb_id: str, method: str, url: str, **kwargs: Any) -> Any:
        """One Octavia write, then the wait for the LB to be ACTIVE again."""
        answer = self._octavia(operation, method, url, **kwargs)
        self._active(lb_id, operation)
        return answer

    def _gone(self, lb_id: str) -> None:
        def read() -> bool:
            try:
                self._get_lb(lb_id)
            except errors.NotFound:
                return True
            return False

        self.session.wait_until(f"DeleteLoadBalancer {lb_id}", read, bool)

    # -- the plan --------------------------------------------------------------------------
    def _plan(self, spec: models.LoadBalancerSpec) -> Plan:
        options = parse_options(spec, self.session.settings.load_balancer)
        if not spec.ports:
            raise invalid("the Service has no ports")
        for port in spec.ports:
            listener_protocol(port, options)
            if not 0 < port.node_port < 65536:
                raise invalid(f"port {port.port} has no node port")
        keys = [(listener_protocol(p, options), p.port) for p in spec.ports]
        if len(set(keys)) != len(keys):
            raise invalid("two ports of the Service use one protocol and port")
        name = upstream_name(spec)
        members = self._member_addresses(spec, options)
        vip = {}
        if options.port_id:
            vip = {"vip_port_id": options.port_id}
        elif options.subnet_id or options.network_id:
            vip = {
                k: v
                for k, v in (
                    ("vip_subnet_id", options.subnet_id),
                    ("vip_network_id", options.network_id),
                )
                if v
            }
        else:
            vip = {"vip_subnet_id": self._node_subnet(spec, members)}
        member_subnet = options.member_subnet_id or vip.get("vip_subnet_id", "")
        floating_network, floating_subnets = "", []
        if not options.internal:
            floating_network = options.floating_network_id or self._external_network()
            if floating_network:
                floating_subnets = self._floating_subnets(floating_network, options)
            else:
                log.warning("%s: no floating network found; the LB stays internal", spec.service)
        requested_fip = None
        if spec.load_balancer_ip and floating_network:
            found = self.session.list_all(
                "ListFloatingIPs",
                "network",
                "/floatingips",
                "floatingips",
                params={"floating_ip_address": spec.load_balancer_ip},
            )
            if not found:
                raise invalid(
                    f"loadBalancerIP {spec.load_balancer_ip} is not a floating IP of this project"
                )
            requested_fip = found[0]
        return Plan(
            spec,
            options,
            name,
            members,
            vip,
            member_subnet,
            floating_network,
            floating_subnets,
            requested_fip=requested_fip,
        )

    def _member_addresses(
        self, spec: models.LoadBalancerSpec, options: LoadBalancerOptions
    ) -> list[tuple[str, str]]:
        """(node name, address) per backend node matching the node selector, by node name."""
        backends = spec.backends or [
            models.LoadBalancerBackend(node_name=i, instance_id=i)
            for i in spec.backend_instance_ids
        ]
        chosen = [b for b in backends if node_matches(b.labels, options.node_selector)]
        if not chosen:
            return []
        found = self.instances.list_instances([b.instance_id for b in chosen]).found
        members: list[tuple[str, str]] = []
        for backend in sorted(chosen, key=lambda b: b.node_name):
            instance = found.get(backend.instance_id)
            if instance is None:
                log.warning(
                    "%s: node %s has no server; not a member", spec.service, backend.node_name
                )
                continue
            address = next(
                (
                    a.address
                    for kind in ("InternalIP", "ExternalIP")
                    for a in instance.addresses
                    if a.type == kind and ":" not in a.address
                ),
                "",
            )
            if address:
                members.append((backend.node_name, address))
        return members

    def _node_subnet(self, spec: models.LoadBalancerSpec, members: list[tuple[str, str]]) -> str:
        """Upstream's default VIP subnet: the subnet of the first node's port with its address."""
        if not members:
            raise invalid("no subnet-id is configured and no node to take the subnet from")
        address = members[0][1]
        ports = self.session.list_all(
            "ListPorts", "network", "/ports", "ports", params={"fixed_ips": f"ip_address={address}"}
        )
        for port in ports:
            for fixed in port.get("fixed_ips") or []:
                if fixed.get("ip_address") == address:
                    return str(fixed["subnet_id"])
        raise invalid(f"no port holds the node address {address}; set subnet-id")

    def _external_network(self) -> str:
        """Upstream's autodetect: the first ``router:external`` network with an IPv4 subnet."""
        networks = self.session.list_all(
            "ListNetworks", "network", "/networks", "networks", params={"router:external": "true"}
        )
        for network in networks:
            if network.get("subnets"):
                return str(network["id"])
        return ""

    def _floating_subnets(self, network_id: str, options: LoadBalancerOptions) -> list[str]:
        if options.floating_subnet_id:
            return [options.floating_subnet_id]
        if not (options.floating_subnet or options.floating_subnet_tags):
            return []
        subnets = self.session.list_all(
            "ListSubnets", "network", "/subnets", "subnets", params={"network_id": network_id}
        )
        chosen = []
        for subnet in subnets:
            name = str(subnet.get("name") or "")
            if options.floating_subnet:
                pattern = options.floating_subnet
                if pattern.startswith("~"):
                    if re.search(pattern[1:], name) is None:
                        continue
                elif not fnmatch.fnmatchcase(name, pattern):
                    continue
            if options.floating_subnet_tags:
                wanted = {t for t in options.floating_subnet_tags.split(",") if t}
                if not wanted <= set(subnet.get("tags") or []):
                    continue
            chosen.append(str(subnet["id"]))
        if not chosen:
            raise invalid("no floating subnet matches floating-subnet/floating-subnet-tags")
        return chosen

    # -- bodies ----------------------------------------------------------------------------
    def _listener_body(
        self, plan: Plan, index: int, port: models.LoadBalancerPort
    ) -> dict[str, Any]:
        options = plan.options
        protocol = listener_protocol(port, options)
        body: dict[str, Any] = {
            "name": _cut(f"listener_{index}_{plan.name}"),
            "protocol": protocol,
            "protocol_port": port.port,
            "connection_limit": options.connection_limit,
            "tags": [plan.name],
        }
        if options.provider != "ovn":
            body.update(options.timeouts)
            if plan.spec.source_ranges:
                body["allowed_cidrs"] = sorted(
                    str(ipaddress.ip_network(c, strict=False)) for c in plan.spec.source_ranges
                )
        if protocol == "HTTP" and options.x_forwarded_for:
            body["insert_headers"] = {"X-Forwarded-For": "true"}
        if protocol == "TERMINATED_HTTPS":
            body["default_tls_container_ref"] = options.default_tls_container_ref
        return body

    def _pool_body(self, plan: Plan, index: int, listener_proto: str) -> dict[str, Any]:
        return {
            "name": _cut(f"pool_{index}_{plan.name}"),
            "protocol": pool_protocol(listener_proto, plan.options),
            "lb_algorithm": "SOURCE_IP_PORT"
            if plan.options.provider == "ovn"
            else plan.options.lb_method,
        }

    def _monitor_body(self, plan: Plan, index: int, pool_proto: str) -> dict[str, Any] | None:
        body = monitor_spec(plan.spec, pool_proto, plan.options)
        if body is None:
            return None
        return {"name": _cut(f"monitor_{index}_{plan.name}"), **body}

    def _create_body(self, plan: Plan) -> dict[str, Any]:
        spec, options = plan.spec, plan.options
        tags = [plan.name, identity_tag(spec.name)]
        if options.keep_floating_ip:
            tags.append(KEEP_FLOATING_IP_TAG)
        body: dict[str, Any] = {
            "name": plan.name,
            "description": description(spec),
            "provider": options.provider,
            "tags": tags,
            **plan.vip,
        }
        if spec.load_balancer_ip and not plan.floating_network_id and "vip_port_id" not in body:
            body["vip_address"] = spec.load_balancer_ip  # an internal LB's VIP (OCCM)
        if options.flavor_id:
            body["flavor_id"] = options.flavor_id
        if options.availability_zone:
            body["availability_zone"] = options.availability_zone
        if not options.serial:
            listeners = []
            for index, port in enumerate(plan.spec.ports):
                listener = self._listener_body(plan, index, port)
                pool = self._pool_body(plan, index, listener["protocol"])
                pool["members"] = [m.body() for m in plan.members_for(port)]
                monitor = self._monitor_body(plan, index, pool["protocol"])
                if monitor is not None:
                    pool["healthmonitor"] = monitor
                listeners.append({**listener, "default_pool": pool})
            body["listeners"] = listeners
        return body

    # -- the contract ----------------------------------------------------------------------
    def _enabled(self, operation: str) -> bool:
        """``[LoadBalancer] enabled`` (upstream's ``LoadBalancer()``); ``operation`` names the
        caller for the log."""
        if not self.session.settings.load_balancer.enabled:
            log.debug("%s: load balancers are off in [LoadBalancer]", operation)
        return bool(self.session.settings.load_balancer.enabled)

    def _disabled(self) -> errors.NotSupported:
        return errors.NotSupported(NAME, "load_balancers ([LoadBalancer] enabled = false)")

    def load_balancer_annotations(self, annotations: Mapping[str, str]) -> dict[str, str]:
        """``loadbalancer.openstack.org/*`` and the internal-LB annotation: all Octavia reads."""
        return {
            k: v for k, v in annotations.items() if k.startswith(PREFIX) or k == INTERNAL_ANNOTATION
        }

    def load_balancer_node_labels(self, annotations: Mapping[str, str]) -> frozenset[str]:
        """The keys of the node selector (the annotation's, else ``[LoadBalancer]``'s)."""
        text = annotations.get(PREFIX + "node-selector", "").strip()
        text = text or self.session.settings.load_balancer.node_selector
        return frozenset(k for k in (p.partition("=")[0].strip() for p in text.split(",")) if k)

    def ensure_load_balancer(self, spec: models.LoadBalancerSpec) -> models.LoadBalancerStatus:
        if not self._enabled("EnsureLoadBalancer"):
            raise self._disabled()
        plan = self._plan(spec)
        lb = self._find(spec.name, plan.name)
        wanted_id = plan.options.load_balancer_id
        if wanted_id and (lb is None or lb["id"] != wanted_id):
            lb = self._given(plan, lb, wanted_id)
        fip = plan.requested_fip
        if fip and fip.get("port_id") and (lb is None or fip["port_id"] != lb.get("vip_port_id")):
            raise invalid(
                f"loadBalancerIP {spec.load_balancer_ip} is in use by port {fip['port_id']}"
            )
        if lb is not None:
            plan.owned = str(lb.get("name") or "") in (plan.name, spec.name)
            lb = self._settled(lb["id"], "EnsureLoadBalancer")
            if lb.get("provisioning_status") == "ERROR":
                log.warning(
                    "%s: load balancer %s is in ERROR: replacing it", spec.service, lb["id"]
                )
                self._delete_lb(lb, cascade=True)
                lb = None
        fresh = lb is None
        if lb is None:
            lb = self._create(plan)
        if not fresh or plan.options.serial:
            self._reconcile_children(plan, lb)
        lb = self._sync_lb_tags(plan, lb)
        address = self._ensure_floating_ip(plan, lb)
        return self._status(plan, address, str(lb["id"]))

    def _given(self, plan: Plan, ours: dict[str, Any] | None, lb_id: str) -> dict[str, Any]:
        """The load balancer ``load-balancer-id`` names, checked before any write (OCCM): it
        must exist, and serve no other Service (one Octavia LB per Service here)."""
        annotation = f"{PREFIX}load-balancer-id"
        if ours is not None:
            raise invalid(
                f"annotation {annotation} names {lb_id}, but this Service has load balancer "
                f"{ours['id']}; set it to {ours['id']} or remove it"
            )
        try:
            given = self._get_lb(lb_id)
        except errors.NotFound:
            given = None
        if given is None or given.get("provisioning_status") in _GONE:
            raise invalid(
                f"load balancer {lb_id} named by annotation {annotation} does not exist; "
                "remove the annotation to have a new one made"
            )
        claims = {str(t) for t in given.get("tags") or [] if str(t).startswith("kube_service_")}
        if str(given.get("name") or "").startswith("kube_service_"):
            claims.add(str(given["name"]))
        others = sorted(claims - {plan.name})
        if others:
            raise invalid(
                f"load balancer {lb_id} serves another Service ({', '.join(others)}): sharing "
                "one load balancer between Services is not supported"
            )
        log.info("%s: using load balancer %s (%s)", plan.spec.service, lb_id, annotation)
        return given

    def _create(self, plan: Plan) -> dict[str, Any]:
        created = self._octavia(
            "CreateLoadBalancer",
            "POST",
            "/lbaas/loadbalancers",
            json={"loadbalancer": self._create_body(plan)},
        )["loadbalancer"]
        log.info("%s: creating load balancer %s (%s)", plan.spec.service, created["id"], plan.name)
        lb = self._settled(created["id"], "CreateLoadBalancer")
        if lb.get("provisioning_status") != "ACTIVE":
            self._delete_lb(lb, cascade=True)
            raise errors.CloudError(
                NAME,
                "CreateLoadBalancer",
                f"load balancer {lb['id']} went to {lb.get('provisioning_status')}; deleted it",
            )
        return lb

    def _sync_lb_tags(self, plan: Plan, lb: dict[str, Any]) -> dict[str, Any]:
        """Our tags on the LB (adopting an upstream-made LB adds the identity tag)."""
        current = set(lb.get("tags") or [])
        wanted = (current - {KEEP_FLOATING_IP_TAG}) | {plan.name, identity_tag(plan.spec.name)}
        if plan.options.keep_floating_ip:
            wanted.add(KEEP_FLOATING_IP_TAG)
        if wanted == current:
            return lb
        self._write(
            "UpdateLoadBalancer",
            lb["id"],
            "PUT",
            f"/lbaas/loadbalancers/{lb['id']}",
            json={"loadbalancer": {"tags": sorted(wanted)}},
        )
        return self._get_lb(lb["id"])

    def _reconcile_children(self, plan: Plan, lb: dict[str, Any]) -> None:
        lb_id = lb["id"]
        listeners = self.session.list_all(
            "ListListeners",
            LB_SERVICE,
            "/lbaas/listeners",
            "listeners",
            params={"loadbalancer_id": lb_id},
        )
        pools = self.session.list_all(
            "ListPools", LB_SERVICE, "/lbaas/pools", "pools", params={"loadbalancer_id": lb_id}
        )
        by_key = {(str(x["protocol"]), int(x["protocol_port"])): x for x in listeners}
        wanted_keys: set[tuple[str, int]] = set()
        for index, port in enumerate(plan.spec.ports):
            body = self._listener_body(plan, index, port)
            key = (body["protocol"], port.port)
            wanted_keys.add(key)
            listener = by_key.get(key)
            if listener is None:
                clash = next(
                    (
                        x
                        for x in listeners
                        if int(x["protocol_port"]) == port.port
                        and _family(x["protocol"]) == _family(body["protocol"])
                    ),
                    None,
                )
                if clash is not None:
                    if not self._ours(plan, clash):
                        raise invalid(
                            f"port {port.port} is used by listener {clash['id']} of another owner"
                        )
                    self._delete_listener(plan, clash, pools)
                    wanted_keys.discard((str(clash["protocol"]), int(clash["protocol_port"])))
                listener = self._write(
                    "CreateListener",
                    lb_id,
                    "POST",
                    "/lbaas/listeners",
                    json={"listener": {**body, "loadbalancer_id": lb_id}},
                )["listener"]
            else:
                changes = _listener_changes(listener, body)
                if changes:
                    self._write(
                        "UpdateListener",
                        lb_id,
                        "PUT",
                        f"/lbaas/listeners/{listener['id']}",
                        json={"listener": changes},
                    )
            pool = next(
                (p for p in pools if {"id": listener["id"]} in (p.get("listeners") or [])), None
            )
            pool = self._ensure_pool(plan, lb_id, index, listener, pool)
            self._sync_members(plan, lb_id, pool["id"], plan.members_for(port))
            self._ensure_monitor(plan, lb_id, index, pool)
        for listener in listeners:
            key = (str(listener["protocol"]), int(listener["protocol_port"]))
            if key not in wanted_keys and self._ours(plan, listener):
                self._delete_listener(plan, listener, pools)

    def _ours(self, plan: Plan, listener: dict[str, Any]) -> bool:
        tags = listener.get("tags") or []
        return plan.name in tags or (not tags and plan.owned)

    def _delete_listener(
        self, plan: Plan, listener: dict[str, Any], pools: list[dict[str, Any]]
    ) -> None:
        lb_id = plan_lb_id(listener)
        for pool in pools:
            if {"id": listener["id"]} in (pool.get("listeners") or []):
                self._write("DeletePool", lb_id, "DELETE", f"/lbaas/pools/{pool['id']}")
        self._write("DeleteListener", lb_id, "DELETE", f"/lbaas/listeners/{listener['id']}")

    def _ensure_pool(
        self,
        plan: Plan,
        lb_id: str,
        index: int,
        listener: dict[str, Any],
        pool: dict[str, Any] | None,
    ) -> dict[str, Any]:
        wanted = self._pool_body(plan, index, str(listener["protocol"]))
        if pool is not None and pool.get("protocol") != wanted["protocol"]:
            self._write("DeletePool", lb_id, "DELETE", f"/lbaas/pools/{pool['id']}")
            pool = None
        if pool is None:
            return dict(
                self._write(
                    "CreatePool",
                    lb_id,
                    "POST",
                    "/lbaas/pools",
                    json={"pool": {**wanted, "listener_id": listener["id"]}},
                )["pool"]
            )
        if pool.get("lb_algorithm") != wanted["lb_algorithm"]:
            self._write(
                "UpdatePool",
                lb_id,
                "PUT",
                f"/lbaas/pools/{pool['id']}",
                json={"pool": {"lb_algorithm": wanted["lb_algorithm"]}},
            )
        return pool

    def _sync_members(self, plan: Plan, lb_id: str, pool_id: str, wanted: list[Member]) -> None:
        current = self.session.list_all(
            "ListMembers", LB_SERVICE, f"/lbaas/pools/{pool_id}/members", "members"
        )
        if sorted(member_key(m) for m in current) == sorted(m.key() for m in wanted):
            return
        if not plan.options.serial:
            self._write(
                "UpdateMembers",
                lb_id,
                "PUT",
                f"/lbaas/pools/{pool_id}/members",
                json={"members": [m.body() for m in wanted]},
            )
            return
        keep = {m.key() for m in wanted}
        for existing in current:
            if member_key(existing) not in keep:
                self._write(
                    "DeleteMember",
                    lb_id,
                    "DELETE",
                    f"/lbaas/pools/{pool_id}/members/{existing['id']}",
                )
        have = {member_key(m) for m in current}
        for member in wanted:
            if member.key() not in have:
                self._write(
                    "CreateMember",
                    lb_id,
                    "POST",
                    f"/lbaas/pools/{pool_id}/members",
                    json={"member": member.body()},
                )

    def _ensure_monitor(self, plan: Plan, lb_id: str, index: int, pool: dict[str, Any]) -> None:
        wanted = self._monitor_body(plan, index, str(pool["protocol"]))
        monitor_id = pool.get("healthmonitor_id")
        current = None
        if monitor_id:
            current = self._octavia(
                "GetHealthMonitor", "GET", f"/lbaas/healthmonitors/{monitor_id}"
            )["healthmonitor"]
        if current is not None and (wanted is None or current.get("type") != wanted["type"]):
            self._write(
                "DeleteHealthMonitor", lb_id, "DELETE", f"/lbaas/healthmonitors/{current['id']}"
            )
            current = None
        if wanted is None:
            return
        if current is None:
            self._write(
                "CreateHealthMonitor",
                lb_id,
                "POST",
                "/lbaas/healthmonitors",
                json={"healthmonitor": {**wanted, "pool_id": pool["id"]}},
            )
            return
        changes = {k: v for k, v in wanted.items() if k not in ("type",) and current.get(k) != v}
        if changes:
            self._write(
                "UpdateHealthMonitor",
                lb_id,
                "PUT",
                f"/lbaas/healthmonitors/{current['id']}",
                json={"healthmonitor": changes},
            )

    # -- floating IP and status ------------------------------------------------------------
    def _fips_on(self, port_id: str) -> list[dict[str, Any]]:
        return self.session.list_all(
            "ListFloatingIPs", "network", "/floatingips", "floatingips", params={"port_id": port_id}
        )

    def _ensure_floating_ip(self, plan: Plan, lb: dict[str, Any]) -> str:
        vip_port = str(lb.get("vip_port_id") or "")
        vip_address = str(lb.get("vip_address") or "")
        if ":" in vip_address or not vip_port:
            return vip_address
        attached = self._fips_on(vip_port)
        if not plan.floating_network_id:  # internal: our floating IP goes (or is detached)
            for fip in attached:
                if str(fip.get("description") or "").startswith(FIP_DESCRIPTION_PREFIX):
                    if plan.options.keep_floating_ip:
                        self.session.request(
                            "UpdateFloatingIP",
                            "network",
                            "PUT",
                            f"/floatingips/{fip['id']}",
                            json={"floatingip": {"port_id": None}},
                        )
                    else:
                        self.session.request(
                            "DeleteFloatingIP", "network", "DELETE", f"/floatingips/{fip['id']}"
                        )
            return vip_address
        if attached:
            return str(attached[0]["floating_ip_address"])
        if plan.requested_fip is not None:
            return self._claim_floating_ip(plan, plan.requested_fip, vip_port)
        body: dict[str, Any] = {
            "floating_network_id": plan.floating_network_id,
            "port_id": vip_port,
            "description": fip_description(plan.spec),
        }
        last: errors.CloudError | None = None
        for subnet_id in plan.floating_subnet_ids or [""]:
            if subnet_id:
                body["subnet_id"] = subnet_id
            try:
                fip = self.session.request(
                    "CreateFloatingIP", "network", "POST", "/floatingips", json={"floatingip": body}
                )["floatingip"]
            except errors.CloudError as exc:
                if isinstance(exc, errors.CloudUnreachable | errors.CloudAuthFailed):
                    raise
                last = exc
                continue
            log.info(
                "%s: floating IP %s on the VIP port", plan.spec.service, fip["floating_ip_address"]
            )
            return str(fip["floating_ip_address"])
        assert last is not None
        raise last

    def _claim_floating_ip(self, plan: Plan, fip: dict[str, Any], vip_port: str) -> str:
        """``spec.loadBalancerIP``: the project's pre-allocated floating IP of that address
        (found by the plan), attached to the VIP port (OCCM); it is the user's, so a delete
        only detaches it (the VIP port goes with the LB)."""
        wanted = plan.spec.load_balancer_ip
        self.session.request(
            "UpdateFloatingIP",
            "network",
            "PUT",
            f"/floatingips/{fip['id']}",
            json={"floatingip": {"port_id": vip_port}},
        )
        log.info("%s: floating IP %s (loadBalancerIP) on the VIP port", plan.spec.service, wanted)
        return wanted

    def _status(self, plan: Plan, address: str, lb_id: str) -> models.LoadBalancerStatus:
        """The ingress (``ipMode: Proxy`` under the PROXY protocol, as OCCM) and the
        annotations OCCM writes back: the LB's ID, and its address when a hostname hides it."""
        options = plan.options
        hostname = options.hostname
        if not hostname and options.enable_ingress_hostname and options.proxy_protocol and address:
            hostname = f"{address}.{options.ingress_hostname_suffix}"
        annotations = {f"{PREFIX}load-balancer-id": lb_id}
        if hostname and address:
            annotations[f"{PREFIX}load-balancer-address"] = address
        return models.LoadBalancerStatus(
            name=plan.name,
            ip=address if not hostname else "",
            hostname=hostname,
            ip_mode="Proxy" if options.proxy_protocol and address and not hostname else "",
            annotations=annotations,
        )

    # -- backends, lookup, delete ----------------------------------------------------------
    def update_load_balancer_backends(self, spec: models.LoadBalancerSpec) -> None:
        if not self._enabled("UpdateLoadBalancer"):
            raise self._disabled()
        options = parse_options(spec, self.session.settings.load_balancer)
        lb = self._find(spec.name, upstream_name(spec))
        if lb is None:
            raise errors.NotFound(
                NAME, "UpdateLoadBalancer", f"no load balancer for {spec.service}"
            )
        lb = self._settled(lb["id"], "UpdateLoadBalancer")
        if lb.get("provisioning_status") != "ACTIVE":
            raise errors.NotFound(
                NAME,
                "UpdateLoadBalancer",
                f"load balancer {lb['id']} is {lb.get('provisioning_status')}; ensuring it again",
            )
        plan = Plan(
            spec,
            options,
            upstream_name(spec),
            self._member_addresses(spec, options),
            {},
            "",
            "",
            [],
        )
        listeners = self.session.list_all(
            "ListListeners",
            LB_SERVICE,
            "/lbaas/listeners",
            "listeners",
            params={"loadbalancer_id": lb["id"]},
        )
        pools = self.session.list_all(
            "ListPools", LB_SERVICE, "/lbaas/pools", "pools", params={"loadbalancer_id": lb["id"]}
        )
        by_key = {(str(x["protocol"]), int(x["protocol_port"])): x for x in listeners}
        for port in spec.ports:
            listener = by_key.get((listener_protocol(port, options), port.port))
            pool = next(
                (
                    p
                    for p in pools
                    if listener and {"id": listener["id"]} in (p.get("listeners") or [])
                ),
                None,
            )
            if listener is None or pool is None:
                raise errors.NotFound(
                    NAME, "UpdateLoadBalancer", f"no listener for port {port.port}; ensuring again"
                )
            members = self.session.list_all(
                "ListMembers", LB_SERVICE, f"/lbaas/pools/{pool['id']}/members", "members"
            )
            subnet = next((str(m.get("subnet_id") or "") for m in members), "") or str(
                lb.get("vip_subnet_id") or ""
            )
            plan.member_subnet_id = options.member_subnet_id or subnet
            self._sync_members(plan, lb["id"], pool["id"], plan.members_for(port))

    def get_load_balancer(self, name: str) -> models.LoadBalancerStatus | None:
        if not self._enabled("GetLoadBalancer"):
            return None  # nothing was made while load balancers are off
        lb = self._find(name)
        if lb is None:
            return None
        fips = self._fips_on(str(lb.get("vip_port_id") or "")) if lb.get("vip_port_id") else []
        address = str(fips[0]["floating_ip_address"]) if fips else str(lb.get("vip_address") or "")
        return models.LoadBalancerStatus(name=str(lb.get("name") or name), ip=address)

    def delete_load_balancer(self, name: str) -> None:
        if not self._enabled("DeleteLoadBalancer"):
            return  # nothing was made while load balancers are off
        lb = self._find(name)
        if lb is None:
            return
        lb = self._settled(lb["id"], "DeleteLoadBalancer")
        if not (str(lb.get("name", "")).startswith("kube_service_") or lb.get("name") == name):
            self._release(lb, name)  # given by load-balancer-id: the user's, kept (OCCM)
            return
        self._delete_lb(lb, cascade=self.session.settings.load_balancer.cascade_delete)

    def _release(self, lb: dict[str, Any], name: str) -> None:
        """A load balancer the Service was given: its listeners (with their pools) and our
        floating IP go, our tags come off, the LB stays."""
        lb_id = str(lb["id"])
        tags = list(lb.get("tags") or [])
        ours = {t for t in tags if t.startswith("kube_service_")}
        pools = self.session.list_all(
            "ListPools", LB_SERVICE, "/lbaas/pools", "pools", params={"loadbalancer_id": lb_id}
        )
        for listener in self.session.list_all(
            "ListListeners",
            LB_SERVICE,
            "/lbaas/listeners",
            "listeners",
            params={"loadbalancer_id": lb_id},
        ):
            if ours & set(listener.get("tags") or []):
                for pool in pools:
                    if {"id": listener["id"]} in (pool.get("listeners") or []):
                        self._write("DeletePool", lb_id, "DELETE", f"/lbaas/pools/{pool['id']}")
                self._write("DeleteListener", lb_id, "DELETE", f"/lbaas/listeners/{listener['id']}")
        if lb.get("vip_port_id") and KEEP_FLOATING_IP_TAG not in tags:
            for fip in self._fips_on(str(lb["vip_port_id"])):
                if str(fip.get("description") or "").startswith(FIP_DESCRIPTION_PREFIX):
                    with contextlib.suppress(errors.NotFound):
                        self.session.request(
                            "DeleteFloatingIP", "network", "DELETE", f"/floatingips/{fip['id']}"
                        )
        kept = [t for t in tags if t not in ours | {identity_tag(name), KEEP_FLOATING_IP_TAG}]
        self._write(
            "UpdateLoadBalancer",
            lb_id,
            "PUT",
            f"/lbaas/loadbalancers/{lb_id}",
            json={"loadbalancer": {"tags": kept}},
        )
        log.info("released load balancer %s (kept: it was given by load-balancer-id)", lb_id)

    def _delete_lb(self, lb: dict[str, Any], *, cascade: bool) -> None:
        lb_id = str(lb["id"])
        keep = KEEP_FLOATING_IP_TAG in (lb.get("tags") or [])
        if lb.get("vip_port_id") and not keep:
            for fip in self._fips_on(str(lb["vip_port_id"])):
                if str(fip.get("description") or "").startswith(FIP_DESCRIPTION_PREFIX):
                    with contextlib.suppress(errors.NotFound):
                        self.session.request(
                            "DeleteFloatingIP", "network", "DELETE", f"/floatingips/{fip['id']}"
                        )
        try:
            if cascade or lb.get("provisioning_status") == "ERROR":
                self._octavia(
                    "DeleteLoadBalancer",
                    "DELETE",
                    f"/lbaas/loadbalancers/{lb_id}",
                    params={"cascade": "true"},
                )
            else:
                self._delete_children(lb_id)
                self._octavia("DeleteLoadBalancer", "DELETE", f"/lbaas/loadbalancers/{lb_id}")
        except errors.NotFound:
            return
        self._gone(lb_id)
        log.info("deleted load balancer %s", lb_id)

    def _delete_children(self, lb_id: str) -> None:
        pools = self.session.list_all(
            "ListPools", LB_SERVICE, "/lbaas/pools", "pools", params={"loadbalancer_id": lb_id}
        )
        for pool in pools:
            if pool.get("healthmonitor_id"):
                self._write(
                    "DeleteHealthMonitor",
                    lb_id,
                    "DELETE",
                    f"/lbaas/healthmonitors/{pool['healthmonitor_id']}",
                )
            self._write("DeletePool", lb_id, "DELETE", f"/lbaas/pools/{pool['id']}")
        for listener in self.session.list_all(
            "ListListeners",
            LB_SERVICE,
            "/lbaas/listeners",
            "listeners",
            params={"loadbalancer_id": lb_id},
        ):
            self._write("DeleteListener", lb_id, "DELETE", f"/lbaas/listeners/{listener['id']}")


def plan_lb_id(item: dict[str, Any]) -> str:
    """The load balancer an Octavia child belongs to (``loadbalancers: [{id}]``)."""
    owners = item.get("loadbalancers") or []
    return str(owners[0]["id"]) if owners else ""


def _family(protocol: str) -> str:
    return "UDP" if protocol in ("UDP", "SCTP") else "TCP"


def _listener_changes(current: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """The updatable listener fields that differ (``tags``, limits, timeouts, CIDRs, headers)."""
    changes: dict[str, Any] = {}
    for key in ("connection_limit", "default_tls_container_ref", *_TIMEOUT_KEYS):
        if key in wanted and current.get(key) != wanted[key]:
            changes[key] = wanted[key]
    if sorted(current.get("tags") or []) != sorted(wanted["tags"]):
        changes["tags"] = wanted["tags"]
    wanted_cidrs = wanted.get("allowed_cidrs")
    current_cidrs = current.get("allowed_cidrs")
    if sorted(current_cidrs or []) != sorted(wanted_cidrs or []) and not (
        not wanted_cidrs and current_cidrs in (None, ["0.0.0.0/0"], [])
    ):
        changes["allowed_cidrs"] = wanted_cidrs or None
    wanted_headers = wanted.get("insert_headers") or {}
    if (current.get("insert_headers") or {}) != wanted_headers:
        changes["insert_headers"] = wanted_headers
    return changes
