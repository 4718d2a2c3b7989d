"""The emulated oVirt Engine: its inventory, a simulated hypervisor and the faults tests inject.

Everything here is plain data guarded by one lock; the HTTP layer (:mod:`.server`) turns requests
into calls on :class:`Engine` and its answers into XML. Status changes that take time on a real
engine (clone, boot, guest-agent IPs, shutdown, disk resize, removal) are scheduled transitions
that are applied when the state is next read, so delays are exact and nothing runs in background.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import itertools
import re
import secrets
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

GIB = 2**30

#: Fixed identities of the seed, so a test or ``cloudloop dev`` can name them in settings.
_SEED_NAMESPACE = uuid.UUID("5b0f3c1e-6a47-4c3e-9d52-0c1a0d7e9a11")


def seed_id(kind: str, name: str) -> str:
    return str(uuid.uuid5(_SEED_NAMESPACE, f"{kind}/{name}"))


BLANK_TEMPLATE_ID = "00000000-0000-0000-0000-000000000000"
SEED_DATA_CENTER = "Default"
SEED_CLUSTER = "Default"
SEED_TEMPLATE = "ubuntu-22"
SEED_TEMPLATE_DISK_GIB = 10
SEED_NETWORK = "ovirtmgmt"
SEED_VNIC_PROFILE = "ovirtmgmt"
SEED_DATA_CENTER_ID = seed_id("datacenter", SEED_DATA_CENTER)
SEED_CLUSTER_ID = seed_id("cluster", SEED_CLUSTER)
SEED_NETWORK_ID = seed_id("network", SEED_NETWORK)
SEED_VNIC_PROFILE_ID = seed_id("vnicprofile", SEED_VNIC_PROFILE)
SEED_TEMPLATE_ID = seed_id("template", SEED_TEMPLATE)
#: Storage domains as ``/storagedomains`` shows them: attached data domains carry no ``status``
#: there (it lives under the data center), only an ``external_status``.
SEED_STORAGE_DOMAINS: tuple[tuple[str, str, str | None, str], ...] = (
    # name, type, status, external_status
    ("data-fast", "data", None, "ok"),
    ("data-slow", "data", None, "failure"),
    ("iso", "iso", "unattached", "ok"),
    ("nfs-shared", "data", "active", "ok"),
)
SEED_BOOT_DOMAIN = "data-fast"

#: VM statuses of the oVirt API model (``VmStatus``).
VM_STATUSES = frozenset(
    {
        "unassigned",
        "down",
        "up",
        "powering_up",
        "paused",
        "migrating",
        "unknown",
        "not_responding",
        "wait_for_launch",
        "reboot_in_progress",
        "saving_state",
        "restoring_state",
        "suspended",
        "image_locked",
        "powering_down",
    }
)
#: Statuses from which ``start`` runs the VM.
_STARTABLE = frozenset({"down", "suspended", "paused"})
_RUNNING = frozenset(
    {"up", "powering_up", "wait_for_launch", "reboot_in_progress", "migrating", "powering_down"}
)


class ApiFault(Exception):
    """An engine answer other than success: HTTP status, ``fault.reason`` and ``fault.detail``."""

    def __init__(self, status: int, detail: str, reason: str = "Operation Failed") -> None:
        super().__init__(f"{status} {reason}: {detail}")
        self.status = status
        self.reason = reason
        self.detail = detail


def not_found(kind: str, key: str) -> ApiFault:
    return ApiFault(404, f"Entity not found: {kind}: {key}", "Not Found")


def conflict(detail: str) -> ApiFault:
    """What the engine answers when a command's validation fails (HTTP 409)."""
    return ApiFault(409, f"[{detail}]")


@dataclass(frozen=True)
class Delays:
    """Seconds each simulated hypervisor step takes (small in tests, configurable)."""

    clone_s: float = 0.3
    boot_s: float = 0.3
    guest_ip_s: float = 0.2
    shutdown_s: float = 0.2
    disk_resize_s: float = 0.1
    remove_s: float = 0.1
    #: A new disk stays ``locked`` this long (0: ``ok`` at once).
    disk_create_s: float = 0.0
    #: A hotplug (``POST /vms/{id}/diskattachments``) answers this long after it was made.
    attach_answer_s: float = 0.0


@dataclass
class DataCenter:
    id: str
    name: str


@dataclass
class Cluster:
    id: str
    name: str
    data_center_id: str


@dataclass
class Network:
    id: str
    name: str
    data_center_id: str


@dataclass
class VnicProfile:
    id: str
    name: str
    network_id: str


@dataclass
class StorageDomain:
    id: str
    name: str
    type: str
    status: str | None
    external_status: str
    available: int = 900 * GIB
    used: int = 100 * GIB


@dataclass
class TemplateDisk:
    name: str
    provisioned_size: int
    bootable: bool
    storage_domain_id: str


@dataclass
class Template:
    id: str
    name: str
    cluster_id: str | None
    memory: int
    sockets: int
    cores: int
    threads: int
    disks: list[TemplateDisk] = field(default_factory=list)
    version_number: int = 1
    description: str = ""


@dataclass
class Disk:
    id: str
    name: str
    provisioned_size: int
    storage_domain_id: str
    status: str = "ok"  # ok | locked | illegal
    actual_size: int = 0
    format: str = "cow"
    sparse: bool = True
    description: str = ""
    #: ``(at, status)`` the disk reaches at monotonic time ``at``.
    pending: tuple[float, str] | None = None


@dataclass
class DiskAttachment:
    """A disk attached to a VM; as in the engine, its ID is the disk's ID."""

    disk_id: str
    vm_id: str
    bootable: bool
    active: bool = True
    interface: str = "virtio_scsi"


@dataclass
class Nic:
    id: str
    vm_id: str
    name: str
    vnic_profile_id: str | None
    mac: str
    ipv4: str
    interface: str = "virtio"


@dataclass
class StartRequest:
    """What the last ``start`` action asked for (run-once initialization is not kept on the VM)."""

    use_cloud_init: bool
    custom_script: str | None
    host_name: str | None


@dataclass
class Vm:
    id: str
    name: str
    cluster_id: str
    template_id: str
    status: str
    memory: int
    sockets: int
    cores: int
    threads: int
    description: str = ""
    comment: str = ""
    vm_type: str = "server"
    memory_guaranteed: int | None = None
    memory_max: int | None = None
    ballooning: bool | None = None
    cloned: bool = False
    creation_time: float = field(default_factory=time.time)
    start_time: float | None = None
    stop_time: float | None = None
    #: Scheduled status changes: ``(at, status)`` in time order; ``"<removed>"`` deletes the VM.
    pending: list[tuple[float, str]] = field(default_factory=list)
    #: Monotonic time from which the guest agent reports the VM's IP addresses.
    guest_ips_at: float | None = None
    #: A status injected by a test; the VM keeps it until an action changes it.
    stuck: bool = False
    last_start: StartRequest | None = None
    starts: int = 0


@dataclass
class ReportedIp:
    address: str
    version: str


@dataclass
class ReportedDevice:
    id: str
    name: str
    mac: str
    ips: list[ReportedIp]


@dataclass
class RequestRecord:
    method: str
    route: str
    path: str
    query: str
    user_agent: str
    status: int


_REMOVED = "<removed>"
_SEARCH_TERM = re.compile(r"^\s*([\w.]+)\s*(!=|=)\s*(.*?)\s*$")


Fields = Callable[[str], str | None]
#: A parsed search: alternatives (``or``) of terms (``and``): ``(field, operator, pattern)``.
Search = list[list[tuple[str, str, str]]]


def parse_search(search: str | None) -> Search:
    """The oVirt search language as far as the emulator needs it.

    ``field=value`` terms (``*`` wildcards, case-insensitive, ``!=``) joined by ``and`` and
    ``or`` (``and`` binds tighter), e.g. ``name=a or name=b`` or ``status=up and name=web*``.
    """
    if search is None or not search.strip():
        return []
    parsed: Search = []
    for alternative in re.split(r"\s+or\s+", search.strip(), flags=re.IGNORECASE):
        terms: list[tuple[str, str, str]] = []
        for term in re.split(r"\s+and\s+", alternative, flags=re.IGNORECASE):
            match = _SEARCH_TERM.match(term)
            if match is None:
                raise ApiFault(400, f"Invalid search query: {term!r}", "Bad Request")
            terms.append((match.group(1).lower(), match.group(2), match.group(3).strip('"')))
        parsed.append(terms)
    return parsed


def _matches(search: Search, fields: Fields) -> bool:
    if not search:
        return True
    return any(all(_term_matches(term, fields) for term in terms) for terms in search)


def _term_matches(term: tuple[str, str, str], fields: Fields) -> bool:
    name, operator, pattern = term
    actual = fields(name)
    hit = actual is not None and fnmatch.fnmatchcase(actual.lower(), pattern.lower())
    return hit if operator == "=" else not hit


def _fields(values: dict[str, str]) -> Fields:
    return values.get


class Engine:
    """The engine's inventory and simulated hypervisor; every public method is thread-safe."""

    def __init__(
        self,
        *,
        username: str = "admin@internal",
        password: str = "engine-password",
        delays: Delays | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.username = username
        self.password = password
        self.delays = delays or Delays()
        self._clock = clock
        self._lock = threading.RLock()
        self.reset()

    # -- seed ------------------------------------------------------------------------------
    def reset(self) -> None:
        """Back to the seed: one data center, cluster, network, vNIC profile, template, domains."""
        with self._lock:
            self.tokens: set[str] = set()
            self.data_centers = {SEED_DATA_CENTER_ID: DataCenter(SEED_DATA_CENTER_ID, "Default")}
            self.clusters = {
                SEED_CLUSTER_ID: Cluster(SEED_CLUSTER_ID, SEED_CLUSTER, SEED_DATA_CENTER_ID)
            }
            self.networks = {
                SEED_NETWORK_ID: Network(SEED_NETWORK_ID, SEED_NETWORK, SEED_DATA_CENTER_ID)
            }
            self.vnic_profiles = {
                SEED_VNIC_PROFILE_ID: VnicProfile(
                    SEED_VNIC_PROFILE_ID, SEED_VNIC_PROFILE, SEED_NETWORK_ID
                )
            }
            self.storage_domains: dict[str, StorageDomain] = {}
            for name, sd_type, status, external in SEED_STORAGE_DOMAINS:
                sd_id = seed_id("storagedomain", name)
                self.storage_domains[sd_id] = StorageDomain(sd_id, name, sd_type, status, external)
            self.templates = {
                BLANK_TEMPLATE_ID: Template(
                    BLANK_TEMPLATE_ID, "Blank", None, 1 * GIB, 1, 1, 1, description="Blank"
                ),
                SEED_TEMPLATE_ID: Template(
                    SEED_TEMPLATE_ID,
                    SEED_TEMPLATE,
                    SEED_CLUSTER_ID,
                    2 * GIB,
                    1,
                    1,
                    1,
                    disks=[
                        TemplateDisk(
                            f"{SEED_TEMPLATE}_Disk1",
                            SEED_TEMPLATE_DISK_GIB * GIB,
                            True,
                            seed_id("storagedomain", SEED_BOOT_DOMAIN),
                        )
                    ],
                    description="Ubuntu 22.04 cloud image",
                ),
            }
            self.vms: dict[str, Vm] = {}
            self.disks: dict[str, Disk] = {}
            self.attachments: dict[str, DiskAttachment] = {}  # by disk ID
            self.nics: dict[str, Nic] = {}
            self._mac_counter = itertools.count(1)
            self._ip_counter = itertools.count(10)
            self.requests: list[RequestRecord] = []
            self.request_counts: Counter[str] = Counter()
            self.user_agents: Counter[str] = Counter()
            self.engine_mode = "up"  # up | refuse | proxy_503

    # -- authentication --------------------------------------------------------------------
    def issue_token(self, username: str, password: str) -> str | None:
        with self._lock:
            if username != self.username or password != self.password:
                return None
            token = secrets.token_urlsafe(24)
            self.tokens.add(token)
            return token

    def token_valid(self, token: str) -> bool:
        with self._lock:
            return token in self.tokens

    def revoke_token(self, token: str) -> None:
        with self._lock:
            self.tokens.discard(token)

    def revoke_all_tokens(self) -> None:
        with self._lock:
            self.tokens.clear()

    def set_password(self, password: str) -> None:
        with self._lock:
            self.password = password

    # -- bookkeeping -----------------------------------------------------------------------
    def record(self, entry: RequestRecord) -> None:
        with self._lock:
            self.requests.append(entry)
            if len(self.requests) > 10_000:
                del self.requests[:5_000]
            self.request_counts[f"{entry.method} {entry.route}"] += 1
            self.user_agents[entry.user_agent] += 1

    # -- simulated time --------------------------------------------------------------------
    def _advance(self) -> None:
        """Apply every scheduled transition whose time has come."""
        now = self._clock()
        for disk in self.disks.values():
            if disk.pending is not None and disk.pending[0] <= now:
                disk.status, disk.pending = disk.pending[1], None
        for vm in list(self.vms.values()):
            while vm.pending and vm.pending[0][0] <= now:
                _, status = vm.pending.pop(0)
                if status == _REMOVED:
                    self._drop_vm(vm)
                    break
                self._set_status(vm, status)

    def _set_status(self, vm: Vm, status: str) -> None:
        vm.status = status
        if status == "up":
            vm.start_time = time.time()
            vm.guest_ips_at = self._clock() + self.delays.guest_ip_s
        if status == "down":
            vm.stop_time = time.time()
            vm.guest_ips_at = None

    def _schedule(self, vm: Vm, *steps: tuple[float, str]) -> None:
        now = self._clock()
        vm.pending = [(now + delay, status) for delay, status in steps]

    # -- lookups ---------------------------------------------------------------------------
    def _vm(self, vm_id: str) -> Vm:
        vm = self.vms.get(vm_id)
        if vm is None:
            raise not_found("VM", vm_id)
        return vm

    def attachments_of(self, vm_id: str) -> list[DiskAttachment]:
        return [a for a in self.attachments.values() if a.vm_id == vm_id]

    def nics_of(self, vm_id: str) -> list[Nic]:
        return sorted((n for n in self.nics.values() if n.vm_id == vm_id), key=lambda n: n.name)

    def _drop_vm(self, vm: Vm) -> None:
        for attachment in self.attachments_of(vm.id):
            self.attachments.pop(attachment.disk_id, None)
            self.disks.pop(attachment.disk_id, None)
        for nic in self.nics_of(vm.id):
            self.nics.pop(nic.id, None)
        self.vms.pop(vm.id, None)

    def read(self, reader: Callable[[Engine], Any]) -> Any:
        """Run ``reader`` on an up-to-date, locked view (the HTTP layer renders inside it)."""
        with self._lock:
            self._advance()
            return reader(self)

    def list_vms(self, search: str | None) -> list[Vm]:
        with self._lock:
            self._advance()
            query = parse_search(search)
            found = [vm for vm in self.vms.values() if _matches(query, self._vm_field(vm))]
            return sorted(found, key=lambda vm: vm.name)

    def _vm_field(self, vm: Vm) -> Fields:
        def field_value(name: str) -> str | None:
            cluster = self.clusters.get(vm.cluster_id)
            template = self.templates.get(vm.template_id)
            return {
                "name": vm.name,
                "id": vm.id,
                "status": vm.status.replace("_", ""),
                "description": vm.description,
                "comment": vm.comment,
                "cluster": cluster.name if cluster else None,
                "template": template.name if template else None,
            }.get(name)

        return field_value

    def get_vm(self, vm_id: str) -> Vm:
        with self._lock:
            self._advance()
            return self._vm(vm_id)

    def list_templates(self, search: str | None) -> list[Template]:
        query = parse_search(search)
        with self._lock:
            found = [
                t
                for t in self.templates.values()
                if _matches(query, _fields({"name": t.name, "id": t.id}))
            ]
            return sorted(found, key=lambda t: (t.name, t.version_number))

    def get_template(self, template_id: str) -> Template:
        with self._lock:
            template = self.templates.get(template_id)
            if template is None:
                raise not_found("Template", template_id)
            return template

    def list_storage_domains(self, search: str | None) -> list[StorageDomain]:
        query = parse_search(search)
        with self._lock:
            found = [
                sd
                for sd in self.storage_domains.values()
                if _matches(query, _fields({"name": sd.name, "id": sd.id}))
            ]
            return sorted(found, key=lambda sd: sd.name)

    # -- VMs -------------------------------------------------------------------------------
    def add_vm(
        self,
        *,
        name: str | None,
        cluster: tuple[str | None, str | None],
        template: tuple[str | None, str | None],
        clone: bool,
        memory: int | None = None,
        topology: tuple[int | None, int | None, int | None] = (None, None, None),
        description: str | None = None,
        comment: str | None = None,
        vm_type: str | None = None,
        memory_policy: tuple[int | None, int | None, bool | None] = (None, None, None),
    ) -> Vm:
        """``POST /vms``: a new VM from a template, ``image_locked`` until its disks are copied."""
        with self._lock:
            self._advance()
            if not name:
                raise ApiFault(
                    400, "Incomplete parameters: Vm [name] required for add", "Bad Request"
                )
            if not re.fullmatch(r"[\w.-]{1,64}", name):
                raise ApiFault(400, f"Invalid VM name: {name!r}", "Bad Request")
            if any(vm.name == name for vm in self.vms.values()):
                raise conflict("Cannot add VM. Name is already in use")
            found_cluster = self._by_id_or_name(self.clusters, cluster, "Cluster")
            found_template = self._by_id_or_name(self.templates, template, "Template")
            sockets, cores, threads = topology
            vm = Vm(
                id=str(uuid.uuid4()),
                name=name,
                cluster_id=found_cluster.id,
                template_id=found_template.id,
                status="image_locked",
                memory=memory or found_template.memory,
                sockets=sockets or found_template.sockets,
                cores=cores or found_template.cores,
                threads=threads or found_template.threads,
                description=description or "",
                comment=comment or "",
                vm_type=vm_type or "server",
                memory_guaranteed=memory_policy[0],
                memory_max=memory_policy[1],
                ballooning=memory_policy[2],
                cloned=clone,
            )
            if vm.memory <= 0 or min(vm.sockets, vm.cores, vm.threads) <= 0:
                raise ApiFault(400, "Memory and CPU topology must be positive", "Bad Request")
            self.vms[vm.id] = vm
            for template_disk in found_template.disks:
                disk = Disk(
                    id=str(uuid.uuid4()),
                    name=template_disk.name if clone else f"{name}_{template_disk.name}",
                    provisioned_size=template_disk.provisioned_size,
                    storage_domain_id=template_disk.storage_domain_id,
                    status="locked",
                    actual_size=template_disk.provisioned_size // 4,
                    sparse=not clone,
                )
                disk.pending = (self._clock() + self.delays.clone_s, "ok")
                self.disks[disk.id] = disk
                self.attachments[disk.id] = DiskAttachment(disk.id, vm.id, template_disk.bootable)
            self._schedule(vm, (self.delays.clone_s, "down"))
            return vm

    def update_vm(
        self, vm_id: str, *, name: str | None = None, description: str | None = None
    ) -> Vm:
        """``PUT /vms/{id}``: a new name and/or description (the fields the request carries;
        the rest of the VM is kept). A locked VM and a name in use are conflicts, as in the
        engine; a running VM may be renamed (the engine applies a name at once)."""
        with self._lock:
            self._advance()
            vm = self._vm(vm_id)
            if vm.status == "image_locked":
                raise conflict("Cannot edit VM. VM is locked. Please try again in a few minutes.")
            if name is not None and name != vm.name:
                if not re.fullmatch(r"[\w.-]{1,64}", name):
                    raise ApiFault(400, f"Invalid VM name: {name!r}", "Bad Request")
                if any(other.name == name for other in self.vms.values()):
                    raise conflict("Cannot edit VM. Name is already in use")
                vm.name = name
            if description is not None:
                vm.description = description
            return vm

    @staticmethod
    def _by_id_or_name(items: dict[str, Any], ref: tuple[str | None, str | None], kind: str) -> Any:
        ref_id, ref_name = ref
        if ref_id:
            if ref_id not in items:
                raise not_found(kind, ref_id)
            return items[ref_id]
        if ref_name:
            named = [item for item in items.values() if item.name == ref_name]
            if not named:
                raise not_found(kind, f"name={ref_name}")
            return max(named, key=lambda item: getattr(item, "version_number", 0))
        raise ApiFault(
            400, f"Incomplete parameters: Vm [{kind.lower()}.id|name] required", "Bad Request"
        )

    def start_vm(
        self, vm_id: str, *, use_cloud_init: bool, script: str | None, host: str | None
    ) -> None:
        with self._lock:
            self._advance()
            vm = self._vm(vm_id)
            if vm.status == "image_locked":
                raise conflict("Cannot run VM. VM is being created or its disks are locked")
            if vm.status not in _STARTABLE:
                raise conflict(f"Cannot run VM. VM {vm.name} is {vm.status}")
            attachments = self.attachments_of(vm.id)
            if not any(a.bootable and a.active for a in attachments):
                raise conflict("Cannot run VM without at least one bootable disk")
            for attachment in attachments:
                disk = self.disks.get(attachment.disk_id)
                if disk is not None and disk.status != "ok":
                    raise conflict(f"Cannot run VM. Disk {disk.name} is {disk.status}")
            vm.stuck = False
            vm.last_start = StartRequest(use_cloud_init, script, host)
            vm.starts += 1
            vm.status = "powering_up"
            self._schedule(vm, (self.delays.boot_s, "up"))

    def shutdown_vm(self, vm_id: str) -> None:
        """Guest shutdown: ``powering_down``, then ``down``."""
        with self._lock:
            self._advance()
            vm = self._vm(vm_id)
            if vm.status not in _RUNNING or vm.stuck:
                raise conflict(f"Cannot shutdown VM. VM {vm.name} is {vm.status}")
            vm.status = "powering_down"
            self._schedule(vm, (self.delays.shutdown_s, "down"))

    def stop_vm(self, vm_id: str) -> None:
        """Power off: ``down`` at once, whatever the guest does."""
        with self._lock:
            self._advance()
            vm = self._vm(vm_id)
            if vm.status in ("down", "image_locked"):
                raise conflict(f"Cannot stop VM. VM {vm.name} is {vm.status}")
            vm.stuck = False
            vm.pending = []
            self._set_status(vm, "down")

    def remove_vm(self, vm_id: str, *, detach_only: bool) -> None:
        """Delete the VM with its attached disks (only detach them with ``detach_only``)."""
        with self._lock:
            self._advance()
            vm = self._vm(vm_id)
            if vm.status == "image_locked":
                raise conflict(f"Cannot remove VM. VM {vm.name} is locked")
            if vm.status != "down":
                raise conflict(f"Cannot remove VM. VM {vm.name} is running")
            if detach_only:
                for attachment in self.attachments_of(vm.id):
                    self.attachments.pop(attachment.disk_id, None)
            vm.status = "image_locked"
            for attachment in self.attachments_of(vm.id):
                disk = self.disks.get(attachment.disk_id)
                if disk is not None:
                    disk.status = "locked"
            self._schedule(vm, (self.delays.remove_s, _REMOVED))

    # -- disks -----------------------------------------------------------------------------
    def list_attachments(self, vm_id: str) -> list[DiskAttachment]:
        with self._lock:
            self._advance()
            self._vm(vm_id)
            return sorted(self.attachments_of(vm_id), key=lambda a: (not a.bootable, a.disk_id))

    def get_attachment(self, vm_id: str, disk_id: str) -> DiskAttachment:
        with self._lock:
            self._advance()
            attachment = self.attachments.get(disk_id)
            if attachment is None or attachment.vm_id != vm_id:
                raise not_found("DiskAttachment", disk_id)
            return attachment

    def attach_disk(
        self,
        vm_id: str,
        *,
        disk_id: str | None,
        new_disk: tuple[str, int, str | None] | None,
        bootable: bool,
        active: bool,
        interface: str | None,
    ) -> DiskAttachment:
        """``POST /vms/{id}/diskattachments``: attach an existing disk or a new one."""
        with self._lock:
            self._advance()
            vm = self._vm(vm_id)
            if vm.status == "image_locked":
                raise conflict(f"Cannot attach disk. VM {vm.name} is locked")
            if disk_id:
                if disk_id not in self.disks:
                    raise not_found("Disk", disk_id)
                if disk_id in self.attachments:
                    raise conflict("Cannot attach Virtual Disk. The disk is already attached")
            elif new_disk is not None:
                disk_id = self.add_disk(*new_disk).id
            else:
                raise ApiFault(400, "Incomplete parameters: DiskAttachment [disk]", "Bad Request")
            attachment = DiskAttachment(
                disk_id, vm_id, bootable, active, interface or "virtio_scsi"
            )
            self.attachments[disk_id] = attachment
            return attachment

    def detach_disk(self, vm_id: str, disk_id: str, *, detach_only: bool) -> None:
        with self._lock:
            self._advance()
            attachment = self.get_attachment(vm_id, disk_id)
            self.attachments.pop(attachment.disk_id, None)
            if not detach_only:
                self.disks.pop(attachment.disk_id, None)

    def list_disks(self, search: str | None) -> list[Disk]:
        with self._lock:
            self._advance()
            query = parse_search(search)
            found = [
                d
                for d in self.disks.values()
                if _matches(query, _fields({"name": d.name, "alias": d.name, "id": d.id}))
            ]
            return sorted(found, key=lambda d: (d.name, d.id))

    def get_disk(self, disk_id: str) -> Disk:
        with self._lock:
            self._advance()
            disk = self.disks.get(disk_id)
            if disk is None:
                raise not_found("Disk", disk_id)
            return disk

    def add_disk(
        self,
        name: str,
        provisioned_size: int,
        storage_domain_id: str | None,
        *,
        description: str = "",
        sparse: bool = True,
    ) -> Disk:
        with self._lock:
            domain_id = storage_domain_id or seed_id("storagedomain", SEED_BOOT_DOMAIN)
            if domain_id not in self.storage_domains:
                raise not_found("StorageDomain", domain_id)
            if provisioned_size <= 0:
                raise ApiFault(400, "Disk provisioned_size must be positive", "Bad Request")
            disk = Disk(
                str(uuid.uuid4()),
                name,
                provisioned_size,
                domain_id,
                description=description,
                sparse=sparse,
                format="cow" if sparse else "raw",
            )
            if self.delays.disk_create_s > 0:
                disk.status = "locked"
                disk.pending = (self._clock() + self.delays.disk_create_s, "ok")
            self.disks[disk.id] = disk
            return disk

    def resize_disk(self, disk_id: str, provisioned_size: int) -> Disk:
        """``PUT /disks/{id}``: grow only; the disk is ``locked`` while the volume is extended."""
        with self._lock:
            disk = self.get_disk(disk_id)
            if disk.status != "ok":
                raise conflict(f"Cannot edit Virtual Disk. Disk {disk.name} is {disk.status}")
            if provisioned_size < disk.provisioned_size:
                raise conflict(
                    "Cannot edit Virtual Disk. New disk size must be larger than the current size"
                )
            if provisioned_size > disk.provisioned_size:
                disk.provisioned_size = provisioned_size
                disk.status = "locked"
                disk.pending = (self._clock() + self.delays.disk_resize_s, "ok")
            return disk

    def update_disk(
        self, disk_id: str, *, alias: str | None = None, description: str | None = None
    ) -> Disk:
        """``PUT /disks/{id}`` with a new alias and/or description (a locked disk is a
        conflict, as in the engine; aliases need not be unique there)."""
        with self._lock:
            disk = self.get_disk(disk_id)
            if disk.status != "ok":
                raise conflict(f"Cannot edit Virtual Disk. Disk {disk.name} is {disk.status}")
            if alias is not None:
                disk.name = alias
            if description is not None:
                disk.description = description
            return disk

    def remove_disk(self, disk_id: str) -> None:
        with self._lock:
            disk = self.get_disk(disk_id)
            attachment = self.attachments.get(disk.id)
            if attachment is not None:
                vm = self.vms.get(attachment.vm_id)
                if vm is not None and vm.status != "down":
                    raise conflict("Cannot remove Virtual Disk. The VM is not down")
                self.attachments.pop(disk.id, None)
            self.disks.pop(disk.id, None)

    # -- NICs ------------------------------------------------------------------------------
    def list_nics(self, vm_id: str) -> list[Nic]:
        with self._lock:
            self._advance()
            self._vm(vm_id)
            return self.nics_of(vm_id)

    def get_nic(self, vm_id: str, nic_id: str) -> Nic:
        with self._lock:
            nic = self.nics.get(nic_id)
            if nic is None or nic.vm_id != vm_id:
                raise not_found("Nic", nic_id)
            return nic

    def add_nic(
        self, vm_id: str, *, name: str | None, vnic_profile_id: str | None, interface: str | None
    ) -> Nic:
        with self._lock:
            self._advance()
            vm = self._vm(vm_id)
            if not name:
                raise ApiFault(400, "Incomplete parameters: Nic [name] required", "Bad Request")
            if vm.status == "image_locked":
                raise conflict(f"Cannot add Interface. VM {vm.name} is locked")
            if any(n.name == name for n in self.nics_of(vm_id)):
                raise conflict("Cannot add Interface. The interface name is already in use")
            if vnic_profile_id is not None and vnic_profile_id not in self.vnic_profiles:
                raise not_found("VnicProfile", vnic_profile_id)
            serial = next(self._mac_counter)
            nic = Nic(
                id=str(uuid.uuid4()),
                vm_id=vm_id,
                name=name,
                vnic_profile_id=vnic_profile_id,
                mac="56:6f:" + ":".join(f"{(serial >> bits) & 255:02x}" for bits in (24, 16, 8, 0)),
                ipv4=str(ipaddress.IPv4Address("10.77.0.0") + next(self._ip_counter)),
                interface=interface or "virtio",
            )
            self.nics[nic.id] = nic
            return nic

    def remove_nic(self, vm_id: str, nic_id: str) -> None:
        with self._lock:
            self.get_nic(vm_id, nic_id)
            self.nics.pop(nic_id, None)

    # -- guest agent -----------------------------------------------------------------------
    def reported_devices(self, vm_id: str) -> list[ReportedDevice]:
        """What the guest agent reports: ``lo`` and one device per NIC, once the VM is up."""
        with self._lock:
            self._advance()
            vm = self._vm(vm_id)
            return self.devices_of(vm)

    def devices_of(self, vm: Vm) -> list[ReportedDevice]:
        if vm.status != "up" or vm.guest_ips_at is None or self._clock() < vm.guest_ips_at:
            return []
        devices = [
            ReportedDevice(
                seed_id("reporteddevice", f"{vm.id}/lo"),
                "lo",
                "00:00:00:00:00:00",
                [ReportedIp("127.0.0.1", "v4"), ReportedIp("::1", "v6")],
            )
        ]
        for index, nic in enumerate(self.nics_of(vm.id)):
            link_local = f"fe80::546f:ff:fe{index:02x}:{nic.mac.replace(':', '')[-4:]}"
            devices.append(
                ReportedDevice(
                    seed_id("reporteddevice", f"{vm.id}/{nic.id}"),
                    f"eth{index}",
                    nic.mac,
                    [ReportedIp(nic.ipv4, "v4"), ReportedIp(link_local, "v6")],
                )
            )
        return devices

    def fqdn(self, vm: Vm) -> str | None:
        return vm.name if self.devices_of(vm) else None

    # -- faults ----------------------------------------------------------------------------
    def force_vm_status(self, name: str, status: str) -> Vm:
        """Put the VM named ``name`` into ``status`` and keep it there until an action moves it."""
        if status not in VM_STATUSES:
            raise ValueError(f"unknown VM status {status!r}")
        with self._lock:
            self._advance()
            vm = next((v for v in self.vms.values() if v.name == name), None)
            if vm is None:
                raise KeyError(name)
            vm.pending = []
            vm.stuck = True
            vm.status = status
            return vm

    # -- inspection ------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-ready data, for the admin API."""
        with self._lock:
            self._advance()
            return {
                "engine_mode": self.engine_mode,
                "vms": [
                    self._vm_summary(vm) for vm in sorted(self.vms.values(), key=lambda vm: vm.name)
                ],
                "disks": [
                    {
                        "id": d.id,
                        "name": d.name,
                        "provisioned_size": d.provisioned_size,
                        "status": d.status,
                        "storage_domain_id": d.storage_domain_id,
                        "attached_to": (
                            self.attachments[d.id].vm_id if d.id in self.attachments else None
                        ),
                    }
                    for d in sorted(self.disks.values(), key=lambda d: (d.name, d.id))
                ],
                "seed": {
                    "data_center_id": SEED_DATA_CENTER_ID,
                    "cluster_id": SEED_CLUSTER_ID,
                    "template": SEED_TEMPLATE,
                    "template_id": SEED_TEMPLATE_ID,
                    "vnic_profile_id": SEED_VNIC_PROFILE_ID,
                    "storage_domains": [sd.name for sd in self.storage_domains.values()],
                },
                "request_counts": dict(self.request_counts),
                "user_agents": dict(self.user_agents),
                "requests_total": sum(self.request_counts.values()),
            }

    def _vm_summary(self, vm: Vm) -> dict[str, Any]:
        return {
            "id": vm.id,
            "name": vm.name,
            "status": vm.status,
            "description": vm.description,
            "cluster_id": vm.cluster_id,
            "template_id": vm.template_id,
            "cloned": vm.cloned,
            "type": vm.vm_type,
            "memory": vm.memory,
            "memory_policy": {
                "guaranteed": vm.memory_guaranteed,
                "max": vm.memory_max,
                "ballooning": vm.ballooning,
            },
            "cpu": {"sockets": vm.sockets, "cores": vm.cores, "threads": vm.threads},
            "nics": [
                {"name": n.name, "vnic_profile_id": n.vnic_profile_id, "mac": n.mac}
                for n in self.nics_of(vm.id)
            ],
            "disk_attachments": [
                {
                    "disk_id": a.disk_id,
                    "bootable": a.bootable,
                    "active": a.active,
                    "provisioned_size": self.disks[a.disk_id].provisioned_size
                    if a.disk_id in self.disks
                    else None,
                }
                for a in self.attachments_of(vm.id)
            ],
            "starts": vm.starts,
            "last_start": None
            if vm.last_start is None
            else {
                "use_cloud_init": vm.last_start.use_cloud_init,
                "custom_script": vm.last_start.custom_script,
                "host_name": vm.last_start.host_name,
            },
            "ips": [ip.address for d in self.devices_of(vm) for ip in d.ips],
        }

    def clear_requests(self) -> None:
        with self._lock:
            self.requests.clear()
            self.request_counts.clear()
            self.user_agents.clear()

    def recent_requests(self, limit: int) -> list[dict[str, Any]]:
        with self._lock:
            return [vars(r).copy() for r in self.requests[-limit:]]
