"""Pure vSphere decisions: instance type, node addresses, UUID forms, zones from tags.

Everything here works on plain data read in one property-collector retrieval
(:class:`Inventory`), so it is tested without vCenter and applied to every VM of a pass at once.
Upstream's address and zone rules in full, and the departure:
docs/decisions/0045-vsphere-configuration-and-lookups-as-upstream.md.

Rules (cloud-provider-vsphere ``nodemanager.go``, ``zones.go``, ``util.go``):
- providerID ``vsphere://<lower-case BIOS UUID>``; kubelet's ``systemUUID`` may have the first
  three groups byte-swapped, so a lookup also tries :func:`swap_uuid_bytes`.
- Addresses as upstream's ``discoverIPs``: ``Hostname`` from ``guest.hostName`` (required, as are
  guest NICs); unusable IPs dropped; per IP family the configured subnets, else VM networks,
  else the first IP as both InternalIP and ExternalIP; a family with no address fails.
- Zones: both categories must be configured; a chain (host, resource pool, VM and folders, each
  walked upward) counts only with both a region and a zone; the nearest tag wins.
- Instance type ``vsphere-vm.cpu-<numCpu>.mem-<memoryMB // 1024>gb.os-<short>``; guest IDs not in
  :data:`GUEST_OS` give ``unknown``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cloudloop.cloud import models
from cloudloop.cloud.vsphere.config import NodesConfig

PROVIDER = "vsphere"
PROVIDER_ID_PREFIX = "vsphere://"
DISCOVERY_API_VERSION = "deckhouse.io/v1"
DISCOVERY_KIND = "VsphereCloudDiscoveryData"

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _guest_ids(short: str, *guest_ids: str) -> dict[str, str]:
    return dict.fromkeys(guest_ids, short)


def _pair(stem: str, short: str | None = None) -> dict[str, str]:
    """``<stem>Guest`` and ``<stem>_64Guest`` (VMware's 32/64-bit pair) → ``short``."""
    return _guest_ids(short or stem, f"{stem}Guest", f"{stem}_64Guest")


#: ``guestId`` → the OS shorthand of the instance type: the same answers as upstream's
#: ``GuestOSLookup`` (cloud-provider-vsphere ``types.go``), quirks included (``centos64Guest`` →
#: ``centos64``, ``sles64Guest`` → ``sles64``, mixed-case ``oracleLinux6``); any other ID (newer
#: ones such as ``debian11_64Guest`` or ``other4xLinux64Guest``) gives ``unknown`` there too.
GUEST_OS: dict[str, str] = {
    **_pair("asianux3"),
    **_pair("asianux4"),
    **_guest_ids("asianux5", "asianux5_64Guest"),
    **_guest_ids("asianux7", "asianux7_64Guest"),
    **_guest_ids("centos", "centosGuest"),
    **_guest_ids("centos64", "centos64Guest"),
    **_pair("centos6"),
    **_pair("centos7"),
    **_guest_ids("coreos", "coreos64Guest"),
    **_guest_ids(
        "darwin",
        "darwinGuest",
        "darwin64Guest",
        "darwin10Guest",
        "darwin10_64Guest",
        "darwin11Guest",
        "darwin11_64Guest",
        *(f"darwin{n}_64Guest" for n in range(12, 17)),
    ),
    **{k: v for n in range(4, 11) for k, v in _pair(f"debian{n}").items()},
    **_guest_ids("dos", "dosGuest"),
    **_guest_ids("eComStation", "eComStationGuest"),
    **_guest_ids("eComStation2", "eComStation2Guest"),
    **_guest_ids("fedora", "fedoraGuest", "fedora64Guest"),
    **_guest_ids("freebsd", "freebsdGuest", "freebsd64Guest"),
    **_guest_ids("linux", "genericLinuxGuest", "otherLinuxGuest", "otherLinux64Guest"),
    **_guest_ids(
        "linux",
        *(f"other{v}Linux{b}Guest" for v in ("24x", "26x", "3x") for b in ("", "64")),
    ),
    **_guest_ids("mandrake", "mandrakeGuest"),
    **_guest_ids("mandriva", "mandrivaGuest", "mandriva64Guest"),
    **{f"netware{n}Guest": f"netware{n}" for n in (4, 5, 6)},
    **_guest_ids("nld9", "nld9Guest"),
    **_guest_ids("oes", "oesGuest"),
    **{f"openServer{n}Guest": f"openServer{n}" for n in (5, 6)},
    **_guest_ids("opensuse", "opensuseGuest", "opensuse64Guest"),
    **_guest_ids("oracleLinux", "oracleLinuxGuest", "oracleLinux64Guest"),
    **_pair("oracleLinux6"),
    **_pair("oracleLinux7"),
    **_guest_ids("os2", "os2Guest"),
    **_guest_ids("other", "otherGuest", "otherGuest64"),
    **_guest_ids("rhel", "redhatGuest"),
    **_guest_ids("rhel2", "rhel2Guest"),
    **{k: v for n in range(3, 8) for k, v in _pair(f"rhel{n}").items()},
    **{f"rhel{n}_64Guest": f"rhel{n}" for n in (8, 9, 10)},
    **_guest_ids("sjds", "sjdsGuest"),
    **_pair("sles10"),
    **_pair("sles11"),
    **_pair("sles12"),
    **_guest_ids("sles", "slesGuest"),
    **_guest_ids("sles64", "sles64Guest"),
    **_pair("solaris10"),
    **_guest_ids("solaris11", "solaris11_64Guest"),
    **{f"solaris{n}Guest": f"solaris{n}" for n in (6, 7, 8, 9)},
    **_guest_ids("suse", "suseGuest", "suse64Guest"),
    **_guest_ids("turbolinux", "turboLinuxGuest", "turboLinux64Guest"),
    **_guest_ids("ubuntu", "ubuntuGuest", "ubuntu64Guest"),
    **_guest_ids("unixware7", "unixWare7Guest"),
    **_guest_ids("vmkernel", "vmkernelGuest"),
    **{f"vmkernel{n}Guest": f"vmkernel{n}" for n in ("5", "6", "65")},
    **_guest_ids("photon", "vmwarePhoton64Guest"),
    **_guest_ids("win2000advserv", "win2000AdvServGuest"),
    **_guest_ids("win2000pro", "win2000ProGuest"),
    **_guest_ids("win2000serv", "win2000ServGuest"),
    **{f"win{n}Guest": f"win{n}" for n in ("31", "95", "98")},
    **_pair("windows7", "win7"),
    **_guest_ids("win7server", "windows7Server64Guest"),
    **_pair("windows8", "win8"),
    **_guest_ids("win8server", "windows8Server64Guest"),
    **_pair("windows9", "win10"),
    **_guest_ids("win10server", "windows9Server64Guest"),
    **_guest_ids("windowshyperv", "windowsHyperVGuest"),
    **_guest_ids("winlonghorn", "winLonghornGuest", "winLonghorn64Guest"),
    **_guest_ids("winme", "winMeGuest"),
    **_guest_ids("winnetbusiness", "winNetBusinessGuest"),
    **_guest_ids("winnetdatacenter", "winNetDatacenterGuest", "winNetDatacenter64Guest"),
    **_guest_ids("winnetenterprise", "winNetEnterpriseGuest", "winNetEnterprise64Guest"),
    **_guest_ids("winnetstandard", "winNetStandardGuest", "winNetStandard64Guest"),
    **_guest_ids("winnetweb", "winNetWebGuest"),
    **_guest_ids("winnt", "winNTGuest"),
    **_guest_ids("winvista", "winVistaGuest", "winVista64Guest"),
    **_guest_ids("winxphome", "winXPHomeGuest"),
    **_guest_ids("winxppro", "winXPProGuest", "winXPPro64Guest"),
}


def instance_type(num_cpu: int, memory_mb: int, guest_id: str) -> str:
    os = GUEST_OS.get(guest_id, "unknown")
    return f"vsphere-vm.cpu-{num_cpu}.mem-{memory_mb // 1024}gb.os-{os}"


def is_uuid(value: str) -> bool:
    return bool(_UUID.match(value.lower()))


def swap_uuid_bytes(uuid: str) -> str:
    """Kubelet's SMBIOS form ↔ vSphere's (the first three groups byte-reversed); an involution."""
    parts = uuid.lower().split("-")
    if len(parts) != 5:
        return uuid.lower()

    def rev(group: str) -> str:
        return "".join(group[i : i + 2] for i in range(len(group) - 2, -1, -2))

    return "-".join([rev(parts[0]), rev(parts[1]), rev(parts[2]), parts[3], parts[4]])


def provider_id(uuid: str) -> str:
    return f"{PROVIDER_ID_PREFIX}{uuid.lower()}"


# -- the inventory read in one retrieval ----------------------------------------------------------
@dataclass(frozen=True)
class GuestNic:
    network: str
    device_config_id: int
    ips: tuple[str, ...]


@dataclass(frozen=True)
class VmProps:
    moref: str
    name: str
    uuid: str
    power_state: str
    host: str = ""  # moref
    resource_pool: str = ""  # moref
    parent: str = ""  # folder moref
    num_cpu: int = 0
    memory_mb: int = 0
    guest_id: str = ""
    hostname: str = ""
    nics: tuple[GuestNic, ...] = ()


@dataclass(frozen=True)
class Entity:
    """A non-VM inventory object: what it is and where it hangs."""

    moref: str
    type: str  # HostSystem, ClusterComputeResource, ResourcePool, Folder, Datacenter...
    name: str
    parent: str = ""


@dataclass
class Inventory:
    """One pass's view of vCenter: VMs by moref and their ancestors by moref."""

    vms: dict[str, VmProps] = field(default_factory=dict)
    entities: dict[str, Entity] = field(default_factory=dict)

    def ancestors(self, moref: str) -> list[str]:
        """``moref`` itself, then its parents up to the root (as govmomi's ``mo.Ancestors``
        reversed); a cycle or a dangling parent ends the walk."""
        chain: list[str] = []
        current = moref
        while current and current not in chain:
            chain.append(current)
            if current in self.vms:
                current = self.vms[current].parent
            elif current in self.entities:
                current = self.entities[current].parent
            else:
                break
        return chain

    def datacenter_of(self, moref: str) -> str:
        for ancestor in self.ancestors(moref):
            entity = self.entities.get(ancestor)
            if entity is not None and entity.type == "Datacenter":
                return entity.name
        return ""


# -- zones -----------------------------------------------------------------------------------
def zone_for(
    inventory: Inventory,
    vm: VmProps,
    tags_by_object: Mapping[str, Sequence[tuple[str, str]]],
    region_category: str,
    zone_category: str,
) -> tuple[str, str]:
    """``(region, zone)`` of ``vm`` from tags (``moref → [(category, tag)]``); ``("", "")`` when
    no chain yields both.

    As the vSphere CPI's ``GetZone``: the host's ancestors from the host up, a tag met higher
    replacing the one met below (upstream assigns without a guard), until both are known, so a
    zone tag on the host and another on its cluster give the cluster's when the region sits
    above both. Then (cloudloop's addition, for VMs whose host chain has none) the same walk
    from the resource pool and from the VM itself."""
    if not region_category or not zone_category:
        return "", ""
    chains = [vm.host, vm.resource_pool, vm.moref]
    for start in chains:
        if not start:
            continue
        region = zone = ""
        for moref in inventory.ancestors(start):
            for category, tag in tags_by_object.get(moref, ()):
                if category == zone_category:
                    zone = tag
                elif category == region_category:
                    region = tag
                if region and zone:
                    return region, zone
    return "", ""


# -- addresses -------------------------------------------------------------------------------
IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class _Candidate:
    address: str  # as VMware Tools reported it (upstream publishes the reported string)
    ip: IP  # IPv4-mapped IPv6 addresses are IPv4 here, as Go's ``To4`` sees them
    network: str


def _networks(cidrs: Iterable[str]) -> list[Network]:
    """The CIDRs (checked when the configuration was read; a bad one is skipped here)."""
    found = []
    for cidr in cidrs:
        try:
            found.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError:
            continue
    return found


def _in(ip: IP, network: Network) -> bool:
    return ip.version == network.version and ip in network


def _parse_ip(raw: str) -> IP | None:
    """An IP as Go's ``net.ParseIP`` reads it (no zone suffix), IPv4-mapped made IPv4."""
    try:
        ip = ipaddress.ip_address(raw.strip())
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _local_only(ip: IP) -> bool:
    """Upstream's ``ErrOnLocalOnlyIPAddr``: unspecified, loopback, link-local uni/multicast."""
    link_local_multicast = (
        ip in ipaddress.ip_network("224.0.0.0/24")
        if ip.version == 4
        else ip.is_multicast and (int(ip) >> 112) & 0xF == 2
    )
    return ip.is_unspecified or ip.is_loopback or ip.is_link_local or link_local_multicast


class AddressError(ValueError):
    """No suitable address: discovery of the node fails (it stays uninitialized)."""


def _first_in_subnets(
    candidates: Sequence[_Candidate], subnets: Sequence[Network]
) -> _Candidate | None:
    """Subnets in their configured order, each answered by its first candidate."""
    for subnet in subnets:
        match = next((c for c in candidates if _in(c.ip, subnet)), None)
        if match is not None:
            return match
    return None


def _first_on_network(candidates: Sequence[_Candidate], names: Sequence[str]) -> _Candidate | None:
    """The first candidate on one of the networks ``names`` (case-insensitive)."""
    wanted = {n.lower() for n in names}
    return next((c for c in candidates if c.network.lower() in wanted), None)


def select_ips(
    candidates: Sequence[_Candidate], version: int, nodes: NodesConfig
) -> tuple[_Candidate | None, _Candidate | None]:
    """Upstream's ``discoverIPs`` for one IP family: ``(internal, external)``."""
    family = [c for c in candidates if c.ip.version == version]
    exclude_internal = _networks(nodes.exclude_internal_subnets)
    exclude_external = _networks(nodes.exclude_external_subnets)
    internal_pool = [c for c in family if not any(_in(c.ip, n) for n in exclude_internal)]
    external_pool = [c for c in family if not any(_in(c.ip, n) for n in exclude_external)]
    if not internal_pool and not external_pool:
        return None, None
    internal = _first_in_subnets(internal_pool, _networks(nodes.internal_subnets))
    external = _first_in_subnets(external_pool, _networks(nodes.external_subnets))
    if internal is None and nodes.internal_network_names:
        internal = _first_on_network(internal_pool, nodes.internal_network_names)
    if external is None and nodes.external_network_names:
        external = _first_on_network(external_pool, nodes.external_network_names)
    if internal is None and external is None:  # the legacy default: the first of each pool
        internal = internal_pool[0] if internal_pool else None
        external = external_pool[0] if external_pool else None
    return internal, external


def node_addresses(
    vm: VmProps, nodes: NodesConfig, ip_families: Sequence[str] = ("ipv4",)
) -> list[models.NodeAddress]:
    """Upstream's ``DiscoverNode`` address selection (see the module rules)."""
    if not vm.hostname:
        raise AddressError("VMware Tools report no guest host name")
    if not vm.nics:
        raise AddressError("VMware Tools report no guest NICs")
    addresses: list[models.NodeAddress] = []

    def add(kind: str, address: str) -> None:
        if not any(a.type == kind and a.address == address for a in addresses):
            addresses.append(models.NodeAddress(type=kind, address=address))

    add("Hostname", vm.hostname)
    nics = [n for n in vm.nics if n.device_config_id != -1]
    present = {n.network.lower() for n in nics}
    internal_names = {n.lower() for n in nodes.internal_network_names}
    external_names = {n.lower() for n in nodes.external_network_names}
    if internal_names and external_names and not present & (internal_names | external_names):
        raise AddressError("the VM has neither the internal nor the external VM network")
    candidates = []
    for nic in nics:
        for raw in nic.ips:
            ip = _parse_ip(raw)
            if ip is not None and not _local_only(ip):
                candidates.append(_Candidate(raw.strip(), ip, nic.network))
    if not candidates:
        raise AddressError("no guest IP left after dropping local-only addresses")
    for family in ip_families:
        internal, external = select_ips(candidates, 6 if family == "ipv6" else 4, nodes)
        if internal is None and external is None:
            raise AddressError(f"no suitable {family} address on the VM")
        if internal is not None:
            add("InternalIP", internal.address)
        if external is not None:
            add("ExternalIP", external.address)
    return addresses


def instance_state(power_state: str) -> models.InstanceState:
    """poweredOn → running; poweredOff and suspended → stopped (upstream: shut down is
    ``powerState != poweredOn``)."""
    if power_state == "poweredOn":
        return models.InstanceState.RUNNING
    if power_state in ("poweredOff", "suspended"):
        return models.InstanceState.STOPPED
    return models.InstanceState.UNKNOWN
