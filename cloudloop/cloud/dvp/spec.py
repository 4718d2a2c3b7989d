"""The DeckhouseMachine spec the driver builds a VM from, validated like Deckhouse's CRD.

The CRD's schema rejects most mistakes at admission; this catches what reaches the driver anyway
(an older CRD, a hand-made object) as :class:`~cloudloop.cloud.errors.InvalidRequest`.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from kubernetes.utils import parse_quantity
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cloudloop.cloud.errors import InvalidRequest
from cloudloop.errortext import describe_validation

CPU_FRACTION_PATTERN = r"^100%$|^[1-9][0-9]?%$"
RUN_POLICIES = Literal["AlwaysOn", "AlwaysOff", "Manual", "AlwaysOnUnlessStoppedManually"]
LIVE_MIGRATION_POLICIES = Literal["AlwaysSafe", "PreferSafe", "AlwaysForced", "PreferForced"]


def quantity(value: Any) -> str:
    """A positive Kubernetes quantity, kept as written (``8Gi``, ``21474836480``)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError("must be a quantity (e.g. 20Gi)")
    try:
        parsed = parse_quantity(value)  # type: ignore[no-untyped-call]
    except (ValueError, InvalidOperation) as exc:
        raise ValueError("not a quantity") from exc
    if parsed <= Decimal(0):
        raise ValueError("must be positive")
    return str(value)


class _Spec(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


class CpuSpec(_Spec):
    cores: int = Field(default=4, ge=1)
    cpu_fraction: str = Field(default="100%", alias="cpuFraction", pattern=CPU_FRACTION_PATTERN)


class AdditionalDisk(_Spec):
    size: str
    storage_class: str = Field(alias="storageClass", min_length=1)

    _size = field_validator("size", mode="before")(quantity)


class BootDiskImageRef(_Spec):
    kind: Literal["ClusterVirtualImage", "VirtualImage", "VirtualDiskSnapshot"] = "VirtualImage"
    name: str = Field(min_length=1)


class DeckhouseMachineSpec(_Spec):
    vm_class_name: str = Field(alias="vmClassName", min_length=1)
    cpu: CpuSpec
    memory: str = "8Gi"
    root_disk_size: str = Field(alias="rootDiskSize")
    root_disk_storage_class: str = Field(alias="rootDiskStorageClass", min_length=1)
    additional_disks: list[AdditionalDisk] = Field(default_factory=list, alias="additionalDisks")
    boot_disk_image_ref: BootDiskImageRef = Field(alias="bootDiskImageRef")
    bootloader: Literal["BIOS", "EFI", "EFIWithSecureBoot"] = "EFI"
    run_policy: RUN_POLICIES | None = Field(default=None, alias="runPolicy")
    live_migration_policy: LIVE_MIGRATION_POLICIES | None = Field(
        default=None, alias="liveMigrationPolicy"
    )
    # Placement and metadata of the VM (cloudloop's extension, from the DVPInstanceClass).
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    priority_class_name: str = Field(default="", alias="priorityClassName")
    additional_labels: dict[str, str] = Field(default_factory=dict, alias="additionalLabels")
    additional_annotations: dict[str, str] = Field(
        default_factory=dict, alias="additionalAnnotations"
    )

    _quantities = field_validator("memory", "root_disk_size", mode="before")(quantity)


def parse_spec(provider_spec: dict[str, Any]) -> DeckhouseMachineSpec:
    """The DeckhouseMachine spec, or :class:`InvalidRequest` naming every bad field."""
    try:
        return DeckhouseMachineSpec.model_validate(provider_spec)
    except ValidationError as exc:
        problems = describe_validation(exc, prefix="spec")
        raise InvalidRequest("dvp", "ValidateDeckhouseMachine", problems) from None
