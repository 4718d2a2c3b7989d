"""Pure vSphere decisions: instance type, node addresses, UUID forms, zones from tags.

Everything here works on plain data read in one property-collector retrieval
(:class:`Inventory`), so it is tested without vCenter and applied to every VM of a pass at once.

Rules (cloud-provider-vsphere ``nodemanager.go``, ``zones.go``, ``util.go``):
- providerID ``vsphere://<lower-case BIOS UUID>``; kubelet's ``systemUUID`` may have the first
  three groups byte-swapped, so a lookup also tries :func:`swap_uuid_bytes`.
- Addresses: ``Hostname`` from ``guest.hostName``; NICs with ``deviceConfigId == -1`` dropped;
  loopback/unspecified/link-local dropped; per IP family, after the exclude CIDRs: the first
  subnet match, else the first VM-network-name match (case-insensitive), else the first address
  as both InternalIP and ExternalIP. Departs from upstream: IPs named in cloud-init
  ``guestinfo.metadata`` are not moved to the front (reading ``extraConfig`` would cost a large
  property per VM in the batched read).
- Zones: both categories must be configured; chains tried in order — the VM's host and its
  ancestors, the resource pool and its ancestors, the VM and its folders — each walked upward
  from the object itself; a chain counts only if it yields both a region and a zone; the nearest
  tag of a category wins.
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

#: ``guestId`` → the OS shorthand of the instance type (upstream ``GuestOSLookup``, common IDs).
GUEST_OS: dict[str, str] = {
    "otherGuest": "other",
    "otherGuest64": "other",
    "other24xLinuxGuest": "linux",
    "other24xLinux64Guest": "linux",
    "other26xLinuxGuest": "linux",
    "other26xLinux64Guest": "linux",
    "other3xLinuxGuest": "linux",
    "other3xLinux64Guest": "linux",
    "otherLinuxGuest": "linux",
    "otherLinux64Guest": "linux",
    "genericLinuxGuest": "linux",
    "ubuntuGuest": "ubuntu",
    "ubuntu64Guest": "ubuntu",
    "debian6Guest": "debian6",
    "debian6_64Guest": "debian6",
    "debian7Guest": "debian7",
    "debian7_64Guest": "debian7",
    "debian8Guest": "debian8",
    "debian8_64Guest": "debian8",
    "debian9Guest": "debian9",
    "debian9_64Guest": "debian9",
    "debian10Guest": "debian10",
    "debian10_64Guest": "debian10",
    "debian11Guest": "debian11",
    "debian11_64Guest": "debian11",
    "debian12Guest": "debian12",
    "debian12_64Guest": "debian12",
    "centosGuest": "centos",
    "centos64Guest": "centos",
    "centos6Guest": "centos6",
    "centos6_64Guest": "centos6",
    "centos7Guest": "centos7",
    "centos7_64Guest": "centos7",
    "centos8_64Guest": "centos8",
    "centos9_64Guest": "centos9",
    "rhel5Guest": "rhel5",
    "rhel5_64Guest": "rhel5",
    "rhel6Guest": "rhel6",
    "rhel6_64Guest": "rhel6",
    "rhel7Guest": "rhel7",
    "rhel7_64Guest": "rhel7",
    "rhel8_64Guest": "rhel8",
    "rhel9_64Guest": "rhel9",
    "oracleLinuxGuest": "oraclelinux",
    "oracleLinux64Guest": "oraclelinux",
    "oracleLinux6Guest": "oraclelinux6",
    "oracleLinux6_64Guest": "oraclelinux6",
    "oracleLinux7Guest": "oraclelinux7",
    "oracleLinux7_64Guest": "oraclelinux7",
    "oracleLinux8_64Guest": "oraclelinux8",
    "oracleLinux9_64Guest": "oraclelinux9",
    "sles11Guest": "sles11",
    "sles11_64Guest": "sles11",
    "sles12Guest": "sles12",
    "sles12_64Guest": "sles12",
    "sles15_64Guest": "sles15",
    "fedoraGuest": "fedora",
    "fedora64Guest": "fedora",
    "coreos64Guest": "coreos",
    "vmwarePhoton64Guest": "photon",
    "asianux8_64Guest": "asianux8",
    "freebsd11Guest": "freebsd11",
    "freebsd11_64Guest": "freebsd11",
    "freebsd12Guest": "freebsd12",
    "freebsd12_64Guest": "freebsd12",
    "windows7Guest": "windows7",
    "windows7_64Guest": "windows7",
    "windows7Server64Guest": "windows2008r2",
    "windows8Guest": "windows8",
    "windows8_64Guest": "windows8",
    "windows8Server64Guest": "windows2012",
    "windows9Guest": "windows10",
    "windows9_64Guest": "windows10",
    "windows9Server64Guest": "windows2016",
    "windows2019srv_64Guest": "windows2019",
    "windows2019srvNext_64Guest": "windows2022",
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
    no chain yields both."""
    if not region_category or not zone_category:
        return "", ""
    chains = [vm.host, vm.resource_pool, vm.moref]
    for start in chains:
        if not start:
            continue
        region = zone = ""
        for moref in inventory.ancestors(start):
            for category, tag in tags_by_object.get(moref, ()):
                if category == region_category and not region:
                    region = tag
                elif category == zone_category and not zone:
                    zone = tag
        if region and zone:
            return region, zone
    return "", ""


# -- addresses -------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Candidate:
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address
    network: str


def _networks(cidrs: Iterable[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    found = []
    for cidr in cidrs:
        try:
            found.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError:
            continue
    return found


def _in(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
    networks: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network],
) -> bool:
    return any(ip.version == n.version and ip in n for n in networks)


class AddressError(ValueError):
    """No suitable address: discovery of the node fails (it stays uninitialized)."""


def node_addresses(
    vm: VmProps, nodes: NodesConfig, ip_families: Sequence[str] = ("ipv4",)
) -> list[models.NodeAddress]:
    """Upstream's ``DiscoverNode`` address selection (see the module rules)."""
    if not vm.hostname:
        raise AddressError("VMware Tools report no guest host name")
    addresses: list[models.NodeAddress] = []

    def add(kind: str, address: str) -> None:
        if not any(a.type == kind and a.address == address for a in addresses):
            addresses.append(models.NodeAddress(type=kind, address=address))

    add("Hostname", vm.hostname)
    nics = [n for n in vm.nics if n.device_config_id != -1]
    internal_names = [n.lower() for n in nodes.internal_network_names]
    external_names = [n.lower() for n in nodes.external_network_names]
    present = {n.network.lower() for n in nics}
    if (
        internal_names
        and external_names
        and not (present & set(internal_names))
        and not (present & set(external_names))
    ):
        raise AddressError("the VM has neither the internal nor the external VM network")
    candidates: list[_Candidate] = []
    for nic in nics:
        for raw in nic.ips:
            try:
                ip = ipaddress.ip_address(raw.split("%")[0])
            except ValueError:
                continue
            if ip.is_loopback or ip.is_unspecified or ip.is_link_local:
                continue
            candidates.append(_Candidate(ip, nic.network))
    internal_subnets = _networks(nodes.internal_subnets)
    external_subnets = _networks(nodes.external_subnets)
    exclude_internal = _networks(nodes.exclude_internal_subnets)
    exclude_external = _networks(nodes.exclude_external_subnets)
    for family in ip_families:
        version = 6 if family == "ipv6" else 4
        matches = [c for c in candidates if c.ip.version == version]
        internal_pool = [c for c in matches if not _in(c.ip, exclude_internal)]
        external_pool = [c for c in matches if not _in(c.ip, exclude_external)]
        internal = next((c for c in internal_pool if _in(c.ip, internal_subnets)), None)
        external = next((c for c in external_pool if _in(c.ip, external_subnets)), None)
        if internal is None and internal_names:
            internal = next((c for c in internal_pool if c.network.lower() in internal_names), None)
        if external is None and external_names:
            external = next((c for c in external_pool if c.network.lower() in external_names), None)
        if internal is None and external is None:
            default = internal_pool[0] if internal_pool else None
            internal = external = default
        if internal is not None:
            add("InternalIP", str(internal.ip))
        if external is not None:
            add("ExternalIP", str(external.ip))
        if vm.nics and internal is None and external is None:
            raise AddressError(f"no suitable {family} address on the VM")
    return addresses


def instance_state(power_state: str) -> models.InstanceState:
    """poweredOn → running; poweredOff and suspended → stopped (upstream: shut down is
    ``powerState != poweredOn``)."""
    if power_state == "poweredOn":
        return models.InstanceState.RUNNING
    if power_state in ("poweredOff", "suspended"):
        return models.InstanceState.STOPPED
    return models.InstanceState.UNKNOWN
