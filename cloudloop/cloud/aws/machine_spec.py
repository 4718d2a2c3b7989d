"""Pure AWS machine rules: the AWSMachine spec (CAPA's names), the tags an instance is launched
with, and how an EC2 instance reads as a Cluster API machine.

Nothing here talks to EC2 (no boto3): :mod:`cloudloop.cloud.aws.machines` makes the calls.
Why: docs/decisions/0052-aws-machines-mcm-steps-capa-names.md.

Rules:
- **Spec.** ``AWSMachine.spec`` is CAPA's for the fields cloudloop implements; anything wrong is
  one :class:`InvalidRequest` naming every bad field. Other CAPA fields are ignored, except
  ``spotMarketOptions.maxPrice``, which is refused (a Spot instance has no maximum price).
- **Identity.** An instance belongs to a machine when it carries ``Name`` = the machine name,
  the cluster tag and the ownership tag ``cloudloop.io/machine-uid`` = the InfraMachine's UID; all
  three are applied atomically at launch (TagSpecifications), so an instance a crash left behind
  is found by them and adopted; another machine's instance of the same name never is.
- **Tags.** As MCM's machine class: the cluster and role tags, then ``additionalTags`` (these
  win), ``Name`` = machine name (a ``Name`` in either is ignored), plus the ownership tag; the
  same on the instance and on its root volume.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.tags import cluster_tag_key
from cloudloop.errortext import describe_validation

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import FilterTypeDef

NAME = "aws"
OWNER_TAG = "cloudloop.io/machine-uid"
ROLE_TAG_PREFIX = "kubernetes.io/role/"
#: Instance states a machine's instance can be adopted in (MCM's GetVMs, CAPA's lookup).
LIVE_STATES = ("pending", "running", "stopping", "stopped")
#: EBS volume types RunInstances takes for a root volume.
VOLUME_TYPES = frozenset({"standard", "gp2", "gp3", "io1", "io2", "st1", "sc1"})
#: Volume types whose IOPS can be provisioned.
IOPS_TYPES = frozenset({"gp3", "io1", "io2"})
#: AWS allows 50 tags per resource; cloudloop's own take 4.
MAX_USER_TAGS = 46

_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
_AMI = re.compile(r"^ami-[0-9a-f]{8}(?:[0-9a-f]{9})?$")
_SUBNET = re.compile(r"^subnet-[0-9a-f]{8}(?:[0-9a-f]{9})?$")
_GROUP = re.compile(r"^sg-[0-9a-f]{8}(?:[0-9a-f]{9})?$")

_STATE = {
    "pending": models.InstanceState.PENDING,
    "running": models.InstanceState.RUNNING,
    "stopping": models.InstanceState.STOPPING,
    "stopped": models.InstanceState.STOPPED,
    "shutting-down": models.InstanceState.TERMINATED,
    "terminated": models.InstanceState.TERMINATED,
}


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True, frozen=True)


class ResourceRef(_Model):
    """CAPA ``AWSResourceReference`` by ID (``filters`` are not implemented)."""

    id: str = Field(min_length=1)


class RootVolume(_Model):
    """CAPA ``Volume`` for the root device."""

    size: int = Field(ge=8, le=16384)
    type: str = "gp2"
    iops: int | None = Field(default=None, ge=100, le=256000)

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in VOLUME_TYPES:
            raise ValueError(f"not an EBS volume type (one of {', '.join(sorted(VOLUME_TYPES))})")
        return value


class SpotMarketOptions(_Model):
    max_price: str = Field(default="", alias="maxPrice")

    @field_validator("max_price")
    @classmethod
    def _no_price(cls, value: str) -> str:
        if value:
            raise ValueError("a maximum Spot price is not supported (one-time Spot, no price)")
        return value


class InstanceMetadataOptions(_Model):
    """CAPA ``instanceMetadataOptions`` (the IMDS options; the cluster's apply where unset)."""

    http_tokens: Literal["optional", "required"] | None = Field(default=None, alias="httpTokens")
    http_put_response_hop_limit: int | None = Field(
        default=None, alias="httpPutResponseHopLimit", ge=1, le=64
    )


class AwsMachineSpec(_Model):
    """``AWSMachine.spec`` as the driver needs it; ``providerID``/``instanceID`` are ignored."""

    instance_type: str = Field(alias="instanceType")
    ami: ResourceRef | None = None
    iam_instance_profile: str = Field(default="", alias="iamInstanceProfile", max_length=128)
    additional_security_groups: list[ResourceRef] = Field(
        default_factory=list, alias="additionalSecurityGroups", max_length=16
    )
    subnet: ResourceRef | None = None
    public_ip: bool | None = Field(default=None, alias="publicIP")
    ssh_key_name: str = Field(default="", alias="sshKeyName", max_length=255)
    root_volume: RootVolume | None = Field(default=None, alias="rootVolume")
    spot_market_options: SpotMarketOptions | None = Field(default=None, alias="spotMarketOptions")
    additional_tags: dict[str, str] = Field(default_factory=dict, alias="additionalTags")
    instance_metadata_options: InstanceMetadataOptions | None = Field(
        default=None, alias="instanceMetadataOptions"
    )

    @property
    def http_tokens(self) -> str | None:
        options = self.instance_metadata_options
        return options.http_tokens if options is not None else None

    @property
    def http_put_response_hop_limit(self) -> int | None:
        options = self.instance_metadata_options
        return options.http_put_response_hop_limit if options is not None else None

    @field_validator("instance_type")
    @classmethod
    def _instance_type(cls, value: str) -> str:
        if not _INSTANCE_TYPE.match(value):
            raise ValueError("not an EC2 instance type")
        return value

    @field_validator("ami")
    @classmethod
    def _ami(cls, value: ResourceRef | None) -> ResourceRef | None:
        if value is not None and not _AMI.match(value.id):
            raise ValueError("not an AMI ID")
        return value

    @field_validator("subnet")
    @classmethod
    def _subnet(cls, value: ResourceRef | None) -> ResourceRef | None:
        if value is not None and not _SUBNET.match(value.id):
            raise ValueError("not a subnet ID")
        return value

    @field_validator("additional_security_groups")
    @classmethod
    def _groups(cls, value: list[ResourceRef]) -> list[ResourceRef]:
        bad = [str(i) for i, ref in enumerate(value) if not _GROUP.match(ref.id)]
        if bad:
            raise ValueError(f"not security group IDs: entries {', '.join(bad)}")
        return value

    @field_validator("additional_tags")
    @classmethod
    def _tags(cls, value: dict[str, str]) -> dict[str, str]:
        problems = [
            f"{key!r}: {why}"
            for key, val in value.items()
            if (
                why := "key longer than 128"
                if len(key) > 128
                else "aws: keys are reserved"
                if key.lower().startswith("aws:")
                else "value longer than 256"
                if len(val) > 256
                else ""
            )
        ]
        if len(value) > MAX_USER_TAGS:
            problems.append(f"{len(value)} tags, at most {MAX_USER_TAGS}")
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @property
    def spot(self) -> bool:
        return self.spot_market_options is not None


def parse_machine_spec(provider_spec: Mapping[str, Any]) -> AwsMachineSpec:
    """Validate ``MachineSpec.provider_spec``; anything wrong is :class:`InvalidRequest` naming
    every bad field."""
    try:
        spec = AwsMachineSpec.model_validate(dict(provider_spec))
    except ValidationError as exc:
        problems = describe_validation(exc, whole="spec")
        raise errors.InvalidRequest(NAME, "ValidateMachineSpec", problems) from None
    volume = spec.root_volume
    if volume is not None and volume.iops is not None and volume.type not in IOPS_TYPES:
        raise errors.InvalidRequest(
            NAME,
            "ValidateMachineSpec",
            f"rootVolume.iops: IOPS are provisioned for {', '.join(sorted(IOPS_TYPES))} only, "
            f"not {volume.type}",
        )
    return spec


# -- identity and tags ---------------------------------------------------------------------
def role_tag_key(cluster: str) -> str:
    return f"{ROLE_TAG_PREFIX}{cluster}"


def instance_tags(
    cluster: str,
    machine_name: str,
    machine_uid: str,
    cluster_tags: Mapping[str, str],
    additional_tags: Mapping[str, str],
) -> dict[str, str]:
    """The tags of the instance and its root volume (see the module's rules)."""
    tags = {cluster_tag_key(cluster): "1", role_tag_key(cluster): "1"}
    for key, value in {**cluster_tags, **additional_tags}.items():
        if key != "Name":
            tags[key] = value
    tags.update({"Name": machine_name, OWNER_TAG: machine_uid})
    return tags


def lookup_filters(
    cluster: str, machine_name: str, machine_uid: str, states: tuple[str, ...]
) -> list[FilterTypeDef]:
    """DescribeInstances filters for this machine's instances (one value per tag filter: moto
    compares multi-value tag filters as sets)."""
    return [
        {"Name": "tag:Name", "Values": [machine_name]},
        {"Name": "tag-key", "Values": [cluster_tag_key(cluster)]},
        {"Name": f"tag:{OWNER_TAG}", "Values": [machine_uid]},
        {"Name": "instance-state-name", "Values": list(states)},
    ]


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in tags.items()]


# -- reading an instance -------------------------------------------------------------------
def provider_id(zone: str, instance_id: str) -> str:
    """``aws:///<zone>/<instance-id>``, as the CCM (``cloudloop.cloud.aws.instances``) writes it."""
    return f"aws:///{zone}/{instance_id}"


def state_name(raw: Mapping[str, Any]) -> str:
    return str((raw.get("State") or {}).get("Name", ""))


def launch_order(raw: Mapping[str, Any]) -> tuple[str, str]:
    return (str(raw.get("LaunchTime", "")), str(raw.get("InstanceId", "")))


def addresses(raw: Mapping[str, Any]) -> list[models.NodeAddress]:
    """The instance's addresses as CAPA reports them (private and public IPs and DNS names)."""
    found: list[models.NodeAddress] = []
    for iface in raw.get("NetworkInterfaces") or []:
        for private in iface.get("PrivateIpAddresses") or []:
            if private.get("PrivateIpAddress"):
                found.append(
                    models.NodeAddress(type="InternalIP", address=private["PrivateIpAddress"])
                )
    if not found and raw.get("PrivateIpAddress"):
        found.append(models.NodeAddress(type="InternalIP", address=raw["PrivateIpAddress"]))
    if raw.get("PublicIpAddress"):
        found.append(models.NodeAddress(type="ExternalIP", address=raw["PublicIpAddress"]))
    if raw.get("PrivateDnsName"):
        found.append(models.NodeAddress(type="InternalDNS", address=raw["PrivateDnsName"]))
    if raw.get("PublicDnsName"):
        found.append(models.NodeAddress(type="ExternalDNS", address=raw["PublicDnsName"]))
    return found


def to_machine(raw: Mapping[str, Any]) -> models.Machine:
    state = state_name(raw)
    zone = str((raw.get("Placement") or {}).get("AvailabilityZone", ""))
    reason = str(
        (raw.get("StateReason") or {}).get("Message", "") or raw.get("StateTransitionReason", "")
    )
    gone = state in ("shutting-down", "terminated")
    return models.Machine(
        id=str(raw["InstanceId"]),
        provider_id=provider_id(zone, str(raw["InstanceId"])),
        state=_STATE.get(state, models.InstanceState.UNKNOWN),
        phase=state,
        addresses=addresses(raw) if state == "running" else [],
        message=f"EC2 reports the instance {state}: {reason}".rstrip(": ") if gone else "",
        failed=gone,
    )
