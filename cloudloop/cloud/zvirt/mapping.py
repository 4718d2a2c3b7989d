"""Pure zVirt rules: the ZvirtMachine spec, VM status and address mapping, discovery shaping.

Nothing here talks to the engine: the driver turns SDK objects into the small views below and
these functions decide what they mean, so every rule is tested without an engine.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cloudloop.cloud import errors, models
from cloudloop.errortext import describe_validation

NAME = "zvirt"
PROVIDER_ID_PREFIX = "zvirt://"
#: oVirt/zVirt has no regions or zones; Deckhouse mocks one of each.
ZONE = "default"
REGION = "default"
DISCOVERY_KIND = "ZvirtCloudProviderDiscoveryData"
DISCOVERY_API_VERSION = "deckhouse.io/v1"
#: A storage domain's default flag, spelled as upstream's schema admits it.
DEFAULT_KEY = "isDefaul"
MIB = 2**20
GIB = 2**30

#: Names the engine's search language accepts without quoting (and that cannot inject terms).
_SEARCHABLE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
#: The description marker that ties a VM to the InfraMachine that created it.
_OWNER_MARKER = re.compile(r"\bmachine_uid=([0-9A-Za-z-]+)")


# -- the ZvirtMachine spec ------------------------------------------------------------------
class CpuTopology(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    sockets: int = Field(default=1, ge=1, le=64)
    cores: int = Field(default=1, ge=1, le=256)
    threads: int = Field(default=1, ge=1, le=8)

    @property
    def vcpus(self) -> int:
        return self.sockets * self.cores * self.threads


class ZvirtMachineSpec(BaseModel):
    """``ZvirtMachine.spec`` (capz ``infrastructure.cluster.x-k8s.io/v1``) as the driver needs it.

    Fields the driver does not use (``id``, ``providerID``) are ignored; defaults follow the CRD.
    """

    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True, frozen=True)

    template: str = Field(min_length=1, max_length=255)
    vnic_profile_id: str = Field(alias="vnicProfileID")
    cpu: CpuTopology = CpuTopology()
    #: MiB.
    memory: int = Field(default=8192, ge=256)
    root_disk_size_gb: int = Field(default=20, alias="rootDiskSizeGb", ge=1)
    nic_name: str = Field(default="nic1", alias="nicName", min_length=1, max_length=50)

    @property
    def memory_bytes(self) -> int:
        return self.memory * MIB

    @property
    def root_disk_bytes(self) -> int:
        return self.root_disk_size_gb * GIB


def parse_machine_spec(provider_spec: Mapping[str, Any]) -> ZvirtMachineSpec:
    """Validate ``MachineSpec.provider_spec``; anything wrong is :class:`InvalidRequest`."""
    try:
        spec = ZvirtMachineSpec.model_validate(dict(provider_spec))
    except ValidationError as exc:
        problems = describe_validation(exc, whole="spec")
        raise errors.InvalidRequest(NAME, "ValidateMachineSpec", problems) from None
    if not is_uuid(spec.vnic_profile_id):
        raise errors.InvalidRequest(NAME, "ValidateMachineSpec", "vnicProfileID: not a UUID")
    return spec


def nic_name_of(provider_spec: Mapping[str, Any]) -> str:
    """``nicName`` of a spec that may not validate (reading a VM needs no valid spec)."""
    value = provider_spec.get("nicName")
    return value if isinstance(value, str) and value else "nic1"


def check_vm_name(name: str) -> str:
    """A VM name the engine accepts and the search language can look up exactly."""
    if not _SEARCHABLE_NAME.match(name):
        raise errors.InvalidRequest(NAME, "ValidateMachineSpec", f"not a usable VM name: {name!r}")
    return name


def searchable_name(name: str) -> bool:
    return bool(_SEARCHABLE_NAME.match(name))


def is_uuid(value: str) -> bool:
    """A UUID in its canonical 8-4-4-4-12 form (any case), as the engine writes IDs."""
    try:
        return str(uuid.UUID(value)) == value.lower()
    except ValueError:
        return False


def cloud_init_script(user_data: bytes) -> str:
    """The bootstrap data as the engine's ``custom_script`` (text; the SDK XML-escapes it)."""
    try:
        script = user_data.decode("utf-8")
    except UnicodeDecodeError:
        raise errors.InvalidRequest(
            NAME, "CreateMachine", "bootstrap data is not UTF-8 text (cloud-init expected)"
        ) from None
    if "\x00" in script:
        raise errors.InvalidRequest(NAME, "CreateMachine", "bootstrap data contains NUL")
    return script


# -- identity ----------------------------------------------------------------------------------
def owner_description(spec: models.MachineSpec) -> str:
    """The VM description: who made it, and the ``machine_uid`` a retried create adopts by."""
    return (
        f"cloudloop machine {spec.namespace}/{spec.name} cluster={spec.cluster} "
        f"machine_uid={spec.machine_uid}"
    )


def owner_uid(description: str | None) -> str | None:
    match = _OWNER_MARKER.search(description or "")
    return match.group(1) if match else None


def provider_id(vm_id: str) -> str:
    return f"{PROVIDER_ID_PREFIX}{vm_id}"


def vm_id_from_provider_id(value: str) -> str:
    """``zvirt://<uuid>`` (or a bare UUID) → the VM's UUID."""
    vm_id = value[len(PROVIDER_ID_PREFIX) :] if value.startswith(PROVIDER_ID_PREFIX) else value
    vm_id = vm_id.strip("/").lower()
    if not is_uuid(vm_id):
        raise errors.InvalidRequest(NAME, "ParseProviderID", f"not a zVirt providerID: {value!r}")
    return vm_id


# -- views of engine objects ---------------------------------------------------------------
@dataclass(frozen=True)
class NicView:
    id: str
    name: str
    mac: str
    vnic_profile_id: str | None


@dataclass(frozen=True)
class DeviceView:
    """One device the guest agent reports: its name, MAC and IP addresses."""

    name: str
    mac: str
    ips: tuple[str, ...]


@dataclass(frozen=True)
class AttachmentView:
    disk_id: str
    bootable: bool
    active: bool


@dataclass(frozen=True)
class VmView:
    id: str
    name: str
    status: str
    description: str = ""
    cpus: int = 0
    memory_bytes: int = 0
    nics: tuple[NicView, ...] = ()
    devices: tuple[DeviceView, ...] = ()
    attachments: tuple[AttachmentView, ...] = ()
    #: The engine has started it before (its ``start_time`` is set).
    started_once: bool = False


@dataclass(frozen=True)
class DiskView:
    id: str
    provisioned_size: int
    status: str


@dataclass(frozen=True)
class StorageDomainView:
    name: str
    status: str | None
    external_status: str | None
    type: str | None = None


# -- status ------------------------------------------------------------------------------------
_STATE: dict[str, models.InstanceState] = {
    "up": models.InstanceState.RUNNING,
    "migrating": models.InstanceState.RUNNING,
    "powering_up": models.InstanceState.PENDING,
    "wait_for_launch": models.InstanceState.PENDING,
    "reboot_in_progress": models.InstanceState.PENDING,
    "restoring_state": models.InstanceState.PENDING,
    "image_locked": models.InstanceState.PENDING,
    "powering_down": models.InstanceState.STOPPING,
    "saving_state": models.InstanceState.STOPPING,
    "down": models.InstanceState.STOPPED,
}
#: Statuses capz treats as a failed machine (when it has no Node yet).
FAILED_STATUSES = frozenset({"not_responding", "paused", "suspended", "unassigned", "unknown"})


def instance_state(status: str | None) -> models.InstanceState:
    """The engine's VM status as the contract's state; only ``down`` is shut down."""
    return _STATE.get(status or "", models.InstanceState.UNKNOWN)


def status_message(status: str | None) -> str:
    if status in FAILED_STATUSES:
        return f"zVirt reports the VM as {status}"
    if status == "image_locked":
        return "zVirt is copying the VM's disks (image_locked)"
    return ""


# -- addresses ---------------------------------------------------------------------------------
def _usable(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast:
        return None
    return ip


def node_addresses(
    vm: VmView, *, nic_name: str | None = None, hostname: bool = True
) -> list[models.NodeAddress]:
    """The VM's addresses from its reported devices, as the zVirt CCM shapes them.

    Only devices whose MAC belongs to one of the VM's NICs count (``nic_name`` narrows it to one
    NIC); when the guest agent reports no MAC that matches, every device does. Loopback and
    link-local addresses never count. Non-global addresses (RFC 1918, ULA, CGNAT) are
    ``InternalIP``, global ones ``ExternalIP`` (and also ``InternalIP`` when there is no other);
    IPv4 before IPv6, the VM's NICs in order.
    """
    nic_order = {
        n.mac.lower(): index
        for index, n in enumerate(vm.nics)
        if nic_name is None or n.name == nic_name
    }
    devices = [d for d in vm.devices if d.mac.lower() in nic_order] or list(vm.devices)
    devices.sort(key=lambda d: nic_order.get(d.mac.lower(), len(nic_order)))
    usable = [ip for d in devices for raw in d.ips if (ip := _usable(raw)) is not None]
    ordered = sorted(dict.fromkeys(usable), key=lambda ip: ip.version)
    private = [str(ip) for ip in ordered if not ip.is_global]
    public = [str(ip) for ip in ordered if ip.is_global]
    addresses = [models.NodeAddress(type="ExternalIP", address=ip) for ip in public]
    addresses += [models.NodeAddress(type="InternalIP", address=ip) for ip in private or public]
    if hostname:
        addresses.append(models.NodeAddress(type="Hostname", address=vm.name))
    return addresses


def to_machine(vm: VmView, nic_name: str) -> models.Machine:
    return models.Machine(
        id=vm.id,
        provider_id=provider_id(vm.id),
        state=instance_state(vm.status),
        phase=vm.status,
        addresses=node_addresses(vm, nic_name=nic_name, hostname=False)
        if vm.status == "up"
        else [],
        message=status_message(vm.status),
        failed=vm.status in FAILED_STATUSES,
    )


def instance_type(vm: VmView) -> str:
    """oVirt has no instance type a VM keeps (instance types are templates applied once), so
    the node's type is its shape, in the vSphere CPI's form: ``zvirt-vm.cpu-4.mem-8gb``."""
    if not vm.cpus or not vm.memory_bytes:
        return ""
    return f"zvirt-vm.cpu-{vm.cpus}.mem-{vm.memory_bytes // 2**30}gb"


def to_instance(vm: VmView) -> models.Instance:
    return models.Instance(
        id=vm.id,
        provider_id=provider_id(vm.id),
        name=vm.name,
        state=instance_state(vm.status),
        instance_type=instance_type(vm),
        zone=ZONE,
        region=REGION,
        addresses=node_addresses(vm) if vm.status in ("up", "migrating") else [],
    )


# -- discovery ---------------------------------------------------------------------------------
def storage_domain_enabled(domain: StorageDomainView) -> bool:
    """Deckhouse: ``active``, or no status (attached domains show none) with external ``ok``."""
    if domain.status == "active":
        return True
    return not domain.status and domain.external_status == "ok"


def storage_domains(domains: Iterable[StorageDomainView]) -> list[dict[str, Any]]:
    """``storageDomains`` of ``ZvirtCloudProviderDiscoveryData``: sorted, first is default.

    The default flag is ``isDefaul``, upstream schema's spelling: its closed item schema refuses
    the ``IsDefault`` Deckhouse's Go struct marshals, and the document has no ``zones``.
    """
    entries = [
        {"name": d.name, "isEnabled": storage_domain_enabled(d), DEFAULT_KEY: False}
        for d in sorted(domains, key=lambda d: d.name)
    ]
    if entries:
        entries[0][DEFAULT_KEY] = True
    return entries


def discovery_document(domains: Sequence[StorageDomainView]) -> dict[str, Any]:
    """The whole ``ZvirtCloudProviderDiscoveryData`` document (what the discoverer writes)."""
    return {
        "apiVersion": DISCOVERY_API_VERSION,
        "kind": DISCOVERY_KIND,
        "storageDomains": storage_domains(domains),
    }


@dataclass
class Batch:
    """Search terms for one ``GET /vms`` (the engine caps a search at 100 results by default)."""

    terms: list[str] = field(default_factory=list)

    def query(self, field_name: str) -> str:
        return " or ".join(f"{field_name}={term}" for term in self.terms)


#: The engine's default ``SearchResultsLimit``: one search never returns more than this.
SEARCH_BATCH = 100


def batches(values: Sequence[str]) -> list[Batch]:
    unique = list(dict.fromkeys(values))
    return [Batch(unique[i : i + SEARCH_BATCH]) for i in range(0, len(unique), SEARCH_BATCH)]
