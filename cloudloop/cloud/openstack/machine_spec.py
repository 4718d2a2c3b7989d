"""Pure OpenStack machine rules: the OpenStackMachine spec, names, ownership, the server's view.

Nothing here talks to the cloud: :mod:`cloudloop.cloud.openstack.machines` reads Nova, Neutron,
Cinder and Glance and these functions decide what the answers mean, so every rule is tested
without a cloud. The spec's fields and why ownership is so:
docs/decisions/0049-openstack-machines-follow-capo.md.

Rules (Cluster API provider OpenStack v1beta1, as Deckhouse renders it):
- The spec is CAPO's ``OpenStackMachine.spec``; ``identityRef`` is ignored; what the driver
  cannot honour is refused as :class:`InvalidRequest` naming every bad field, never dropped.
- Names as CAPO: ports ``<server>-<index>`` (``<server>-<nameSuffix>`` when set), the root
  volume ``<server>-root``.
- Ownership: the server's metadata ``cloudloop-machine-uid`` carries the InfraMachine's UID (a
  server is ours only by name *and* UID); ports carry it in their description, the root volume
  in its metadata. A retried create adopts exactly these.
- providerID: ``openstack:///<server-id>`` (``openstack://<region>/<id>`` with a regional CCM),
  as :mod:`cloudloop.cloud.openstack.servers` parses it for node sync.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cloudloop.cloud import errors, models
from cloudloop.cloud.openstack.servers import provider_id, server_addresses
from cloudloop.cloud.openstack.settings import NetworkingSettings
from cloudloop.errortext import describe_validation

NAME = "openstack"
#: Server metadata keys: the InfraMachine's UID, and who it is (``namespace/name``).
OWNER_KEY = "cloudloop-machine-uid"
MACHINE_KEY = "cloudloop-machine"
CLUSTER_KEY = "cloudloop-cluster"
_OWNER_IN_DESCRIPTION = re.compile(r"\bmachine_uid=([0-9A-Za-z-]+)")
#: Nova's fault when the scheduler finds no host for the flavor (and its hints).
NO_VALID_HOST = "No valid host was found"
#: Nova's limit on ``user_data`` (base64).
MAX_USER_DATA = 65535
_QUOTA_WORDS = ("quota exceeded", "overquota", "volumelimitexceeded", "exceedsavailablequota")


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True, frozen=True)


class Filter(_Model):
    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True, frozen=True)

    name: str = ""


class Ref(_Model):
    """A Neutron/Nova resource by ``id`` or by ``filter.name`` (exactly one match)."""

    id: str = ""
    filter: Filter | None = None

    @model_validator(mode="after")
    def _one(self) -> Ref:
        if not self.id and not (self.filter and self.filter.name):
            raise ValueError("needs id or filter.name")
        return self

    @property
    def label(self) -> str:
        return self.id or (self.filter.name if self.filter else "")


class ImageFilter(_Model):
    name: str = ""
    tags: list[str] = Field(default_factory=list)


class ImageRef(_Model):
    id: str = ""
    filter: ImageFilter | None = None
    image_ref: dict[str, Any] | None = Field(default=None, alias="imageRef")

    @model_validator(mode="after")
    def _one(self) -> ImageRef:
        if self.image_ref is not None:
            raise ValueError("imageRef (an ORC Image) is not supported; use id or filter.name")
        if not self.id and not (self.filter and self.filter.name):
            raise ValueError("needs id or filter.name")
        if self.filter is not None and self.filter.tags:
            raise ValueError("filter.tags is not supported; use filter.name")
        return self


class AddressPair(_Model):
    ip_address: str = Field(alias="ipAddress", min_length=1)
    mac_address: str = Field(default="", alias="macAddress")


class PortSpec(_Model):
    network: Ref | None = None
    description: str = Field(default="", max_length=255)
    name_suffix: str = Field(default="", alias="nameSuffix")
    security_groups: list[Ref] | None = Field(default=None, alias="securityGroups")
    allowed_address_pairs: list[AddressPair] = Field(
        default_factory=list, alias="allowedAddressPairs"
    )
    disable_port_security: bool = Field(default=False, alias="disablePortSecurity")
    tags: list[str] = Field(default_factory=list)


class VolumeZone(_Model):
    from_: Literal["Name", "Machine"] = Field(default="Name", alias="from")
    name: str = ""


class RootVolume(_Model):
    size_gib: int = Field(alias="sizeGiB", ge=1)
    type: str = ""
    availability_zone: VolumeZone | None = Field(default=None, alias="availabilityZone")


class HintValue(_Model):
    type: Literal["Bool", "String", "Number"]
    as_bool: bool | None = Field(default=None, alias="bool")
    as_number: int | float | None = Field(default=None, alias="number")
    as_string: str | None = Field(default=None, alias="string")

    def value(self) -> Any:
        return {"Bool": self.as_bool, "Number": self.as_number, "String": self.as_string}[self.type]


class SchedulerHint(_Model):
    name: str = Field(min_length=1)
    value: HintValue


class MetadataItem(_Model):
    key: str = Field(min_length=1, max_length=255)
    value: str = Field(max_length=255)


class OpenStackMachineSpec(_Model):
    """``OpenStackMachine.spec`` (CAPO ``v1beta1``) as the driver needs it."""

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True, frozen=True)

    flavor: str = ""
    flavor_id: str = Field(default="", alias="flavorID")
    image: ImageRef
    ssh_key_name: str = Field(default="", alias="sshKeyName")
    ports: list[PortSpec] = Field(default_factory=list)
    security_groups: list[Ref] = Field(default_factory=list, alias="securityGroups")
    tags: list[str] = Field(default_factory=list, max_length=50)
    server_metadata: list[MetadataItem] = Field(default_factory=list, alias="serverMetadata")
    config_drive: bool | None = Field(default=None, alias="configDrive")
    root_volume: RootVolume | None = Field(default=None, alias="rootVolume")
    server_group: Ref | None = Field(default=None, alias="serverGroup")
    scheduler_hints: list[SchedulerHint] = Field(
        default_factory=list, alias="schedulerHintAdditionalProperties"
    )
    # Accepted and ignored: the driver's own credentials and what the provider writes.
    identity_ref: dict[str, Any] | None = Field(default=None, alias="identityRef")
    provider_id: str = Field(default="", alias="providerID")
    instance_id: str = Field(default="", alias="instanceID")
    # Refused when set (never silently dropped).
    trunk: bool = False
    floating_ip_pool_ref: dict[str, Any] | None = Field(default=None, alias="floatingIPPoolRef")
    additional_block_devices: list[dict[str, Any]] = Field(
        default_factory=list, alias="additionalBlockDevices"
    )

    @model_validator(mode="after")
    def _check(self) -> OpenStackMachineSpec:
        problems = []
        if not self.flavor and not self.flavor_id:
            problems.append("flavor: one of flavor and flavorID is required")
        if self.trunk:
            problems.append("trunk: trunk ports are not supported")
        if self.floating_ip_pool_ref:
            problems.append("floatingIPPoolRef: floating IPs are not supported")
        if self.additional_block_devices:
            problems.append("additionalBlockDevices: not supported")
        problems += [f"tags: {message}" for t in self.tags if (message := tag_problem(t))]
        for index, port in enumerate(self.ports):
            problems += [
                f"ports.{index}.tags: {message}" for t in port.tags if (message := tag_problem(t))
            ]
        if problems:
            raise ValueError("; ".join(problems))
        return self


def tag_problem(tag: str) -> str:
    """Why Nova/Neutron refuse ``tag`` ("" when they take it): 1-60 characters, no ``,``/``/``."""
    if not 0 < len(tag) <= 60:
        return "a tag must have 1 to 60 characters"
    if "," in tag or "/" in tag:
        return "a tag must not contain ',' or '/'"
    return ""


def parse_machine_spec(provider_spec: Mapping[str, Any]) -> OpenStackMachineSpec:
    """Validate ``MachineSpec.provider_spec``; anything wrong is :class:`InvalidRequest` naming
    every bad field."""
    try:
        return OpenStackMachineSpec.model_validate(dict(provider_spec))
    except ValidationError as exc:
        problems = describe_validation(exc, whole="spec")
        raise errors.InvalidRequest(NAME, "ValidateMachineSpec", problems) from None


# -- names and ownership ---------------------------------------------------------------------
def check_server_name(name: str) -> str:
    if not 0 < len(name) <= 255 or name.strip() != name:
        raise errors.InvalidRequest(NAME, "ValidateMachineSpec", f"not a server name: {name!r}")
    return name


def port_name(server: str, index: int, port: PortSpec) -> str:
    return f"{server}-{port.name_suffix}" if port.name_suffix else f"{server}-{index}"


def root_volume_name(server: str) -> str:
    return f"{server}-root"


def owner_description(spec: models.MachineSpec) -> str:
    """Ports' and the root volume's description: who made it, and the UID a retry adopts by."""
    text = (
        f"cloudloop machine {spec.namespace}/{spec.name} cluster={spec.cluster} "
        f"machine_uid={spec.machine_uid}"
    )
    return text[:255]


def owner_of_description(description: str | None) -> str | None:
    found = _OWNER_IN_DESCRIPTION.search(description or "")
    return found.group(1) if found else None


def server_metadata(spec: models.MachineSpec, machine: OpenStackMachineSpec) -> dict[str, str]:
    """The spec's ``serverMetadata`` and the ownership keys (which always win)."""
    metadata = {item.key: item.value for item in machine.server_metadata}
    metadata[OWNER_KEY] = spec.machine_uid
    metadata[MACHINE_KEY] = f"{spec.namespace}/{spec.name}"[:255]
    if spec.cluster:
        metadata[CLUSTER_KEY] = spec.cluster[:255]
    return metadata


def is_ours(server: Mapping[str, Any], spec: models.MachineSpec) -> bool:
    return (
        server.get("name") == spec.name
        and (server.get("metadata") or {}).get(OWNER_KEY) == spec.machine_uid
    )


def scheduler_hints(machine: OpenStackMachineSpec, group_id: str) -> dict[str, Any]:
    hints: dict[str, Any] = {h.name: h.value.value() for h in machine.scheduler_hints}
    if group_id:
        hints["group"] = group_id
    return hints


def is_quota_message(message: str) -> bool:
    lowered = message.lower().replace(" ", "")
    return any(word.replace(" ", "") in lowered for word in _QUOTA_WORDS)


# -- the server as a Machine -------------------------------------------------------------------
_STATES = {
    "ACTIVE": models.InstanceState.RUNNING,
    "BUILD": models.InstanceState.PENDING,
    "REBUILD": models.InstanceState.PENDING,
    "REBOOT": models.InstanceState.RUNNING,
    "HARD_REBOOT": models.InstanceState.RUNNING,
    "SHUTOFF": models.InstanceState.STOPPED,
    "DELETED": models.InstanceState.TERMINATED,
    "SOFT_DELETED": models.InstanceState.TERMINATED,
}


def fault_message(server: Mapping[str, Any]) -> str:
    return str((server.get("fault") or {}).get("message") or "")


def deleting(server: Mapping[str, Any]) -> bool:
    return server.get("OS-EXT-STS:task_state") == "deleting" or server.get("status") in (
        "DELETED",
        "SOFT_DELETED",
    )


def to_machine(
    server: Mapping[str, Any], *, region: str, regional: bool, networking: NetworkingSettings
) -> models.Machine:
    status = str(server.get("status") or "").upper()
    state = _STATES.get(status, models.InstanceState.UNKNOWN)
    if deleting(server):
        state = models.InstanceState.TERMINATED
    message = ""
    if status == "ERROR":
        message = fault_message(server) or "Nova reports the server in ERROR"
    elif status == "BUILD":
        message = "Nova is building the server"
    addresses = (
        [a for a in server_addresses(server, networking) if a.type in ("InternalIP", "ExternalIP")]
        if status == "ACTIVE"
        else []
    )
    return models.Machine(
        id=str(server["id"]),
        provider_id=provider_id(str(server["id"]), region, regional=regional),
        state=state,
        phase=status,
        addresses=addresses,
        message=message,
        failed=status == "ERROR",
    )
