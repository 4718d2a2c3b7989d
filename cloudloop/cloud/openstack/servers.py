"""Nova servers as node-sync instances: providerID, addresses, zone, instance type (pure).

Follows cloud-provider-openstack's ``instances.go`` and ``instances_addresses.go``:

- providerID ``openstack:///<server-id>`` (``openstack://<region>/<id>`` when regional); parsed
  by ``^openstack://([^/]*)/([^/]+)$`` (a bare ID is accepted); another region is an error.
- Addresses from the server's ``addresses``: ``floating`` → ExternalIP; a network named in
  ``public-network-name`` → ExternalIP; else InternalIP when ``internal-network-name`` is empty
  or names the network, otherwise dropped; then ``accessIPv4/6`` → ExternalIP and
  ``metadata.hostname`` → Hostname; duplicates dropped; IPv6 dropped when disabled; sorted by
  ``address-sort-order``. Departure: the port list (upstream's step 1, one call per node) and
  trunk subports are not read; Nova's ``addresses`` carries the same fixed IPs in one list.
- Zone: ``OS-EXT-AZ:availability_zone`` sanitised as upstream's ``util.go``; instance type: the
  embedded flavor's ``original_name`` (microversion ≥ 2.47), else the flavor's name by ID.
- SHUTOFF is the only shut-down state; DELETED/SOFT_DELETED count as gone.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.openstack.settings import NetworkingSettings

NAME = "openstack"
PROVIDER_ID = re.compile(r"^openstack://([^/]*)/([^/]+)$")

_STATES = {
    "ACTIVE": models.InstanceState.RUNNING,
    "REBOOT": models.InstanceState.RUNNING,
    "HARD_REBOOT": models.InstanceState.RUNNING,
    "REBUILD": models.InstanceState.RUNNING,
    "RESIZE": models.InstanceState.RUNNING,
    "VERIFY_RESIZE": models.InstanceState.RUNNING,
    "REVERT_RESIZE": models.InstanceState.RUNNING,
    "MIGRATING": models.InstanceState.RUNNING,
    "PASSWORD": models.InstanceState.RUNNING,
    "RESCUE": models.InstanceState.RUNNING,
    "BUILD": models.InstanceState.PENDING,
    "SHUTOFF": models.InstanceState.STOPPED,
    "DELETED": models.InstanceState.TERMINATED,
    "SOFT_DELETED": models.InstanceState.TERMINATED,
}


def provider_id(server_id: str, region: str, *, regional: bool) -> str:
    return f"openstack://{region if regional else ''}/{server_id}"


def server_id_from_provider_id(provider_id_text: str, region: str) -> str:
    """The server ID of a providerID (upstream ``instanceIDFromProviderID``)."""
    text = provider_id_text.strip()
    if "://" not in text:
        text = f"openstack:///{text}"
    found = PROVIDER_ID.match(text)
    if found is None:
        raise errors.InvalidRequest(
            NAME, "ParseProviderID", f"not an OpenStack providerID: {provider_id_text!r}"
        )
    found_region, server_id = found.groups()
    if found_region and region and found_region != region:
        raise errors.InvalidRequest(
            NAME,
            "ParseProviderID",
            f"providerID {provider_id_text!r} is in region {found_region}, not {region}",
        )
    return server_id


def sanitize_zone(zone: str) -> str:
    """Upstream ``util.SanitizeLabel``: runs outside ``[-A-Za-z0-9_.]`` become ``-``, ends
    trimmed of ``-_.``, at most 63 characters."""
    cleaned = re.sub(r"[^-A-Za-z0-9_.]+", "-", zone)
    return cleaned[:63].strip("-_.")


def _sort_key(address: str, order: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> int:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return len(order)
    for index, network in enumerate(order):
        if ip.version == network.version and ip in network:
            return index
    return len(order)


def server_addresses(
    server: Mapping[str, Any], net: NetworkingSettings
) -> list[models.NodeAddress]:
    """The node addresses of ``server`` (upstream ``nodeAddresses`` without the port list)."""
    found: list[tuple[str, str]] = []

    def add(kind: str, address: str) -> None:
        if (kind, address) not in found:
            found.append((kind, address))

    addresses = server.get("addresses") or {}
    for network in sorted(addresses):
        for entry in addresses[network] or []:
            address = str(entry.get("addr") or "")
            if not address:
                continue
            if entry.get("OS-EXT-IPS:type") == "floating":
                add("ExternalIP", address)
            elif network in net.public_network_names:
                if ("InternalIP", address) in found:
                    found.remove(("InternalIP", address))
                add("ExternalIP", address)
            elif not net.internal_network_names or network in net.internal_network_names:
                add("InternalIP", address)
    for key in ("accessIPv4", "accessIPv6"):
        if server.get(key):
            add("ExternalIP", str(server[key]))
    hostname = (server.get("metadata") or {}).get("hostname")
    if hostname:
        add("Hostname", str(hostname))
    if net.ipv6_support_disabled:
        found = [(k, a) for k, a in found if k == "Hostname" or ":" not in a]
    if net.address_sort_order:
        order: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for cidr in net.address_sort_order:
            try:
                order.append(ipaddress.ip_network(cidr, strict=False))
            except ValueError:
                continue
        found.sort(key=lambda item: _sort_key(item[1], order))
    return [models.NodeAddress(type=kind, address=address) for kind, address in found]


def instance_type(server: Mapping[str, Any], flavor_names: Mapping[str, str]) -> str:
    flavor = server.get("flavor") or {}
    if flavor.get("original_name"):
        return str(flavor["original_name"])
    flavor_id = str(flavor.get("id") or "")
    return flavor_names.get(flavor_id, flavor_id)


def to_instance(
    server: Mapping[str, Any],
    *,
    region: str,
    regional: bool,
    networking: NetworkingSettings,
    flavor_names: Mapping[str, str] | None = None,
) -> models.Instance:
    status = str(server.get("status") or "").upper()
    metadata = {str(k): str(v) for k, v in (server.get("metadata") or {}).items()}
    return models.Instance(
        id=str(server["id"]),
        provider_id=provider_id(str(server["id"]), region, regional=regional),
        name=str(server.get("name") or ""),
        state=_STATES.get(status, models.InstanceState.UNKNOWN),
        instance_type=instance_type(server, flavor_names or {}),
        zone=sanitize_zone(str(server.get("OS-EXT-AZ:availability_zone") or "")),
        region=region,
        addresses=server_addresses(server, networking),
        tags=metadata,
    )


def name_regex(names: list[str]) -> str:
    """One Nova ``name`` filter for many exact names: ``^(a|b\\.c)$`` (Nova's is a regex)."""
    return "^(" + "|".join(re.escape(name) for name in names) + ")$"
