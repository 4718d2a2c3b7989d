"""Pod-CIDR routes as Neutron router extra routes plus allowed address pairs, as OCCM does.

Enabled with ``[Route] router-id`` and a Neutron offering ``extraroute`` or
``extraroute-atomic`` (upstream's ``routes.go``):

- ``list_routes``: the router (one GET) and the project's servers (one paged list); a route's
  nexthop names the server holding that address; a nexthop no server holds makes a blackhole
  route; several nexthops for one destination on different servers give a route without a
  target (the controller replaces it).
- ``create_route``: nexthop = the server's InternalIP of the destination's family;
  ``add_extraroutes`` (atomic, an existing pair is accepted) or, without the atomic extension,
  read-modify-write of ``routes`` under a lock; then, with port security on the node's port,
  the pod CIDR joins its ``allowed_address_pairs``. If that fails the route is removed again.
- ``delete_route``: every extra route of the destination goes (``remove_extraroutes``, missing
  is fine) and the pod CIDR leaves the allowed address pairs of the ports holding the nexthops.
"""

from __future__ import annotations

import ipaddress
import threading
from collections import defaultdict
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.openstack.base import NAME, OpenStackBase
from cloudloop.cloud.openstack.instances import OpenStackInstances
from cloudloop.cloud.openstack.servers import server_addresses

ATOMIC = "extraroute-atomic"
EXTRAROUTE = "extraroute"
PAIRS = "allowed-address-pairs"


def _normal(cidr: str) -> str:
    try:
        return str(ipaddress.ip_network(cidr.strip(), strict=False))
    except ValueError:
        return cidr.strip()


def _version(text: str) -> int:
    return ipaddress.ip_network(text, strict=False).version


class OpenStackRoutes:
    _router_lock = threading.Lock()

    def __init__(self, session: OpenStackBase, instances: OpenStackInstances) -> None:
        self.session = session
        #: The servers the routes point at.
        self.instances = instances

    def _router_id(self) -> str:
        router_id = self.session.settings.route.router_id
        if not router_id:
            raise errors.NotSupported(NAME, "routes ([Route] router-id is not set)")
        return router_id

    def _extensions(self) -> set[str]:
        cached: set[str] | None = self.__dict__.get("_neutron_extensions")
        if cached is None:
            body = self.session.request("ListExtensions", "network", "GET", "/extensions")
            cached = {str(e.get("alias")) for e in (body or {}).get("extensions") or []}
            self.__dict__["_neutron_extensions"] = cached
        if not cached & {ATOMIC, EXTRAROUTE}:
            raise errors.NotSupported(NAME, "routes (Neutron has no extraroute extension)")
        return cached

    def _router(self) -> dict[str, Any]:
        body = self.session.request("GetRouter", "network", "GET", f"/routers/{self._router_id()}")
        return dict(body["router"])

    # -- routes ----------------------------------------------------------------------------
    def list_routes(self, cluster: str) -> list[models.Route]:
        self._extensions()
        router = self._router()
        holders: dict[str, str] = {}
        for server in self.instances._servers():
            for address in server_addresses(server, self.session.settings.networking):
                holders.setdefault(address.address, str(server["id"]))
        by_destination: dict[str, list[str]] = defaultdict(list)
        for entry in router.get("routes") or []:
            by_destination[_normal(str(entry.get("destination", "")))].append(
                str(entry.get("nexthop", ""))
            )
        routes: list[models.Route] = []
        for destination, nexthops in sorted(by_destination.items()):
            targets = {holders.get(hop, "") for hop in nexthops}
            if "" in targets:
                routes.append(
                    models.Route(name=destination, destination_cidr=destination, blackhole=True)
                )
            elif len(targets) == 1:
                routes.append(
                    models.Route(
                        name=destination,
                        destination_cidr=destination,
                        target_instance_id=targets.pop(),
                    )
                )
            else:
                routes.append(models.Route(name=destination, destination_cidr=destination))
        return routes

    def _nexthop(self, server_id: str, destination: str) -> str:
        body = self.session.request(
            "GetServer",
            "compute",
            "GET",
            f"/servers/{server_id}",
            microversion=self.session.settings.compute_microversion,
        )
        family = _version(destination)
        for address in server_addresses(body["server"], self.session.settings.networking):
            if (
                address.type == "InternalIP"
                and ipaddress.ip_address(address.address).version == family
            ):
                return address.address
        raise errors.FailedPrecondition(
            NAME,
            "CreateRoute",
            f"server {server_id} has no IPv{family} InternalIP for {destination}",
        )

    def create_route(self, cluster: str, route: models.Route) -> None:
        if not route.target_instance_id:
            raise errors.InvalidRequest(
                NAME, "CreateRoute", f"route {route.destination_cidr} has no target"
            )
        extensions = self._extensions()
        destination = _normal(route.destination_cidr)
        hop = self._nexthop(route.target_instance_id, destination)
        entry = {"destination": destination, "nexthop": hop}
        self._add_routes([entry], extensions)
        if PAIRS not in extensions:
            return
        try:
            self._pair(route.target_instance_id, hop, destination, add=True)
        except errors.CloudError:
            self._remove_routes([entry], extensions)  # unwind, as upstream
            raise

    def delete_route(self, cluster: str, route: models.Route) -> None:
        extensions = self._extensions()
        destination = _normal(route.destination_cidr)
        entries = [
            {"destination": destination, "nexthop": str(e.get("nexthop"))}
            for e in self._router().get("routes") or []
            if _normal(str(e.get("destination", ""))) == destination
        ]
        if not entries:
            return
        self._remove_routes(entries, extensions)
        if PAIRS in extensions and not route.blackhole:
            for entry in entries:
                self._pair("", entry["nexthop"], destination, add=False)

    # -- router and port writes ------------------------------------------------------------
    def _add_routes(self, entries: list[dict[str, str]], extensions: set[str]) -> None:
        router_id = self._router_id()
        if ATOMIC in extensions:
            self.session.request(
                "AddExtraRoutes",
                "network",
                "PUT",
                f"/routers/{router_id}/add_extraroutes",
                json={"router": {"routes": entries}},
            )
            return
        with self._router_lock:
            routes = list(self._router().get("routes") or [])
            merged = routes + [e for e in entries if e not in routes]
            if merged != routes:
                self.session.request(
                    "UpdateRouter",
                    "network",
                    "PUT",
                    f"/routers/{router_id}",
                    json={"router": {"routes": merged}},
                )

    def _remove_routes(self, entries: list[dict[str, str]], extensions: set[str]) -> None:
        router_id = self._router_id()
        if ATOMIC in extensions:
            self.session.request(
                "RemoveExtraRoutes",
                "network",
                "PUT",
                f"/routers/{router_id}/remove_extraroutes",
                json={"router": {"routes": entries}},
            )
            return
        with self._router_lock:
            routes = list(self._router().get("routes") or [])
            kept = [
                r
                for r in routes
                if {
                    "destination": _normal(str(r.get("destination"))),
                    "nexthop": str(r.get("nexthop")),
                }
                not in entries
            ]
            if kept != routes:
                self.session.request(
                    "UpdateRouter",
                    "network",
                    "PUT",
                    f"/routers/{router_id}",
                    json={"router": {"routes": kept}},
                )

    def _pair(self, server_id: str, hop: str, destination: str, *, add: bool) -> None:
        """Add or remove ``destination`` in the allowed address pairs of the port with ``hop``."""
        params = {"fixed_ips": f"ip_address={hop}"}
        if server_id:
            params["device_id"] = server_id
        for port in self.session.list_all("ListPorts", "network", "/ports", "ports", params=params):
            if not port.get("port_security_enabled", True):
                continue
            pairs = list(port.get("allowed_address_pairs") or [])
            present = any(_normal(str(p.get("ip_address", ""))) == destination for p in pairs)
            if add and not present:
                pairs.append({"ip_address": destination})
            elif not add and present:
                pairs = [p for p in pairs if _normal(str(p.get("ip_address", ""))) != destination]
            else:
                continue
            self.session.request(
                "UpdatePort",
                "network",
                "PUT",
                f"/ports/{port['id']}",
                json={"port": {"allowed_address_pairs": pairs}},
            )
