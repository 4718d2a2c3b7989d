"""OpenStack instances for node sync: one paged server list per pass, one regex lookup by name.

``list_instances`` reads the project's servers once (``GET /servers/detail``, Nova's pages of
up to 1000, at microversion 2.47 so the flavor is embedded: no flavor GET per node) and keeps
the requested IDs; an ID absent from a complete, error-free listing does not exist.
``find_instances_by_name`` asks Nova once per batch with ``name=^(a|b|...)$`` (Nova's name filter
is a regex; upstream asks ``^name$`` per node). A name no server has, or two servers have, is
undecided (upstream answers an error, not "does not exist"), so node sync never deletes on it.
A cloud without microversion 2.47 costs one flavor list more.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.openstack.base import OpenStackBase, status_of
from cloudloop.cloud.openstack.servers import (
    name_regex,
    server_id_from_provider_id,
    to_instance,
)

log = logging.getLogger(__name__)

#: Names per regex lookup (keeps the URL well under common 8 KiB limits).
NAME_BATCH = 100


class OpenStackInstances:
    def __init__(self, session: OpenStackBase) -> None:
        self.session = session

    def instance_id_from_provider_id(self, provider_id: str) -> str:
        return server_id_from_provider_id(provider_id, self.session.settings.connection.region)

    def _servers(self, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        microversion = self.session.settings.compute_microversion
        try:
            return self.session.list_all(
                "ListServers",
                "compute",
                "/servers/detail",
                "servers",
                params=params,
                microversion=microversion,
            )
        except errors.InvalidRequest as exc:
            if exc.__cause__ is None or status_of(exc.__cause__) != 406:
                raise
            return self.session.list_all(
                "ListServers", "compute", "/servers/detail", "servers", params=params
            )

    def _flavor_names(self, servers: list[dict[str, Any]]) -> dict[str, str]:
        """Flavor ID → name, read only when a server carries no embedded flavor (< 2.47)."""
        if all((s.get("flavor") or {}).get("original_name") for s in servers):
            return {}
        flavors = self.session.list_all("ListFlavors", "compute", "/flavors/detail", "flavors")
        return {str(f["id"]): str(f.get("name") or f["id"]) for f in flavors}

    def _to_instances(self, servers: list[dict[str, Any]]) -> list[models.Instance]:
        settings = self.session.settings
        names = self._flavor_names(servers)
        return [
            to_instance(
                server,
                region=settings.connection.region,
                regional=settings.regional_provider_id,
                networking=settings.networking,
                flavor_names=names,
            )
            for server in servers
        ]

    def list_instances(self, ids: Sequence[str]) -> models.InstanceListing:
        listing = models.InstanceListing()
        wanted = set(ids)
        if not wanted:
            return listing
        servers = self._servers()
        listing.requests = max(1, (len(servers) // 1000) + 1)
        for instance in self._to_instances([s for s in servers if s.get("id") in wanted]):
            listing.found[instance.id] = instance
        return listing

    def find_instances_by_name(self, names: Sequence[str]) -> models.InstanceListing:
        """Servers named like the nodes; a miss or two servers with one name is *undecided*
        (upstream: a by-name miss is an error, not "does not exist"), never absent."""
        listing = models.InstanceListing()
        unique = list(dict.fromkeys(n for n in names if n))
        for start in range(0, len(unique), NAME_BATCH):
            batch = unique[start : start + NAME_BATCH]
            servers = [
                s for s in self._servers({"name": name_regex(batch)}) if s.get("name") in batch
            ]
            listing.requests += 1
            by_name: dict[str, list[dict[str, Any]]] = {}
            for server in servers:
                by_name.setdefault(str(server["name"]), []).append(server)
            for name in batch:
                matches = by_name.get(name, [])
                if len(matches) != 1:
                    if matches:
                        why = (
                            f"{len(matches)} servers are named {name!r} "
                            f"({', '.join(str(m['id']) for m in matches)}); "
                            "set the node's providerID"
                        )
                        log.warning("%s", why)
                    else:
                        why = f"no server is named {name!r}"
                    listing.undecide(name, why)
            unique_servers = [m[0] for m in by_name.values() if len(m) == 1]
            for instance in self._to_instances(unique_servers):
                listing.found[instance.name] = instance
        return listing
