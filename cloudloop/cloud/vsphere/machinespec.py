"""``VSphereMachine.spec`` (CAPV ``v1beta1`` field names) parsed, and what the clone writes.

Pure: the InfraMachine spec becomes a :class:`VsphereMachineSpec` (bad spec → ``InvalidRequest``
naming every bad field) and the VM's extraConfig, CPU/memory allocation and cloud-init keys are
computed here, so they are tested without vCenter.

Rules (CAPV ``pkg/services/govmomi/vcenter/clone.go``, ``extra/config.go``; Deckhouse's template):
- ``customVMXKeys`` go to extraConfig as given; ``vhv.enable`` also sets ``nestedHVEnabled`` and
  ``tools.syncTime`` (``FALSE``/``0``) also turns ``tools.syncTimeWithHost`` off, so the API view
  of the VM agrees with its VMX.
- Cloud-init as CAPV writes it: ``guestinfo.userdata`` and ``guestinfo.metadata`` base64 with
  their ``.encoding`` keys; the metadata is ``{"instance-id", "local-hostname"}``. Always
  ``disk.EnableUUID=TRUE`` (CSI needs disk UUIDs).
- Quantities (``resources``): CPU in MHz (``1000M`` = 1000 MHz, a bare number is Hz), memory in
  MiB rounded up (``2048Mi``, ``2G``). Shares are custom shares.
- Refused (not silently ignored): ``cloneMode: linkedClone`` and ``snapshot`` (no snapshot
  support), ``storagePolicyName`` (SPBM placement is not implemented).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cloudloop.cloud import errors
from cloudloop.cloud.vsphere.mapping import PROVIDER
from cloudloop.errortext import describe_validation

MIB = 2**20
GIB = 2**30
#: VM names vCenter takes as an inventory path segment we can look up exactly.
_VM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")
_FACTORS = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
}
_FALSE = frozenset({"false", "0", "no", "off"})
_TRUE = frozenset({"true", "1", "yes", "on"})


def quantity(value: int | str) -> Decimal:
    """A Kubernetes quantity as a number (``ValueError`` when it is not one)."""
    if isinstance(value, int):
        return Decimal(value)
    found = _QUANTITY.match(value.strip())
    if found is None:
        raise ValueError("not a quantity")
    try:
        return Decimal(found.group(1)) * _FACTORS[found.group(2)]
    except InvalidOperation:
        raise ValueError("not a quantity") from None


def _ceil(value: Decimal) -> int:
    return int(-(-value // 1))


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class NetworkDevice(_Model):
    network_name: str = Field(alias="networkName", min_length=1, max_length=255)
    dhcp4: bool = False
    dhcp6: bool = False
    mac_addr: str = Field(default="", alias="macAddr")


class Network(_Model):
    devices: list[NetworkDevice] = Field(min_length=1, max_length=10)


class ResourceSpec(_Model):
    cpu: int | str | None = None
    memory: int | str | None = None

    @field_validator("cpu", "memory")
    @classmethod
    def _is_quantity(cls, value: int | str | None) -> int | str | None:
        if value is not None:
            quantity(value)
        return value

    @property
    def cpu_mhz(self) -> int | None:
        return None if self.cpu is None else _ceil(quantity(self.cpu) / 10**6)

    @property
    def memory_mib(self) -> int | None:
        return None if self.memory is None else _ceil(quantity(self.memory) / MIB)


class Shares(_Model):
    cpu: int | None = Field(default=None, ge=0)
    memory: int | None = Field(default=None, ge=0)


class Resources(_Model):
    requests: ResourceSpec = ResourceSpec()
    limits: ResourceSpec = ResourceSpec()
    shares: Shares = Shares()


class Allocation(_Model):
    """One ``ResourceAllocationInfo`` (MHz for CPU, MiB for memory); ``None`` = leave as is."""

    reservation: int | None = None
    limit: int | None = None
    shares: int | None = None


class VsphereMachineSpec(_Model):
    """``VSphereMachine.spec`` as the driver needs it (fields it does not use are ignored)."""

    template: str = Field(min_length=1, max_length=1024)
    server: str = ""
    datacenter: str = ""
    folder: str = ""
    datastore: str = ""
    resource_pool: str = Field(default="", alias="resourcePool")
    storage_policy_name: str = Field(default="", alias="storagePolicyName")
    num_cpus: int | None = Field(default=None, alias="numCPUs", ge=1, le=768)
    num_cores_per_socket: int | None = Field(default=None, alias="numCoresPerSocket", ge=0)
    memory_mib: int | None = Field(default=None, alias="memoryMiB", ge=4)
    disk_gib: int | None = Field(default=None, alias="diskGiB", ge=1, le=62 * 1024)
    clone_mode: Literal["", "fullClone", "linkedClone"] = Field(default="", alias="cloneMode")
    snapshot: str = ""
    network: Network
    custom_vmx_keys: dict[str, str] = Field(default_factory=dict, alias="customVMXKeys")
    resources: Resources = Resources()
    tag_ids: list[str] = Field(default_factory=list, alias="tagIDs")

    # -- what the VM gets ----------------------------------------------------------------------
    @property
    def nested_hv(self) -> bool | None:
        value = self.custom_vmx_keys.get("vhv.enable")
        return None if value is None else value.strip().lower() in _TRUE

    @property
    def sync_time_with_host(self) -> bool | None:
        value = self.custom_vmx_keys.get("tools.syncTime")
        return None if value is None else value.strip().lower() not in _FALSE

    @property
    def cpu_allocation(self) -> Allocation:
        r = self.resources
        return Allocation(
            reservation=r.requests.cpu_mhz, limit=r.limits.cpu_mhz, shares=r.shares.cpu
        )

    @property
    def memory_allocation(self) -> Allocation:
        r = self.resources
        return Allocation(
            reservation=r.requests.memory_mib, limit=r.limits.memory_mib, shares=r.shares.memory
        )

    @property
    def network_names(self) -> list[str]:
        return [device.network_name for device in self.network.devices]


def parse_machine_spec(provider_spec: Mapping[str, Any]) -> VsphereMachineSpec:
    """Validate ``MachineSpec.provider_spec``; anything wrong is :class:`InvalidRequest`."""
    problems: list[str] = []
    try:
        spec = VsphereMachineSpec.model_validate(dict(provider_spec))
    except ValidationError as exc:
        raise errors.InvalidRequest(
            PROVIDER, "ValidateMachineSpec", describe_validation(exc, whole="spec")
        ) from None
    if spec.clone_mode == "linkedClone" or spec.snapshot:
        problems.append("cloneMode: linkedClone (from a snapshot) is not supported; use fullClone")
    if spec.storage_policy_name:
        problems.append("storagePolicyName: storage policies are not supported; name a datastore")
    macs = [d.mac_addr for d in spec.network.devices if d.mac_addr]
    if macs:
        problems.append("network.devices[].macAddr: fixed MAC addresses are not supported")
    if problems:
        raise errors.InvalidRequest(PROVIDER, "ValidateMachineSpec", "; ".join(problems))
    return spec


def check_vm_name(name: str) -> str:
    """A VM name usable as one inventory path segment (no ``/``, no escapes needed)."""
    if not _VM_NAME.match(name):
        raise errors.InvalidRequest(
            PROVIDER, "ValidateMachineSpec", f"not a usable VM name: {name!r}"
        )
    return name


def cloud_init_config(name: str, machine_uid: str, user_data: bytes) -> dict[str, str]:
    """The ``guestinfo`` keys cloud-init's VMware datasource reads (CAPV's layout)."""
    metadata = json.dumps({"instance-id": machine_uid, "local-hostname": name}, sort_keys=True)
    return {
        "guestinfo.userdata": base64.b64encode(user_data).decode(),
        "guestinfo.userdata.encoding": "base64",
        "guestinfo.metadata": base64.b64encode(metadata.encode()).decode(),
        "guestinfo.metadata.encoding": "base64",
    }


def extra_config(
    spec: VsphereMachineSpec, name: str, machine_uid: str, user_data: bytes
) -> dict[str, str]:
    """Every extraConfig key the VM gets: VMX keys, ``disk.EnableUUID``, cloud-init."""
    keys = dict(spec.custom_vmx_keys)
    keys["disk.EnableUUID"] = "TRUE"
    keys.update(cloud_init_config(name, machine_uid, user_data))
    return keys
