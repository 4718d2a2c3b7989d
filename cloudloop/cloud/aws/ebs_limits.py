"""EBS volume limits and StorageClass parameters, checked before any EC2 call.

Pure: the CSI controller calls it before it starts a workflow, and the driver again before
``CreateVolume``/``ModifyVolume`` (a workflow started by other means). The limits' sources and
the departures from aws-ebs-csi-driver: docs/decisions/0053-ebs-volume-limits.md.

Rules:
- A size, IOPS or throughput outside its type's documented range (:data:`LIMITS`) is
  :class:`~cloudloop.cloud.errors.OutOfRange` (CSI ``OUT_OF_RANGE``) naming the limit.
- An unknown StorageClass parameter or a malformed value is
  :class:`~cloudloop.cloud.errors.InvalidRequest` (CSI ``INVALID_ARGUMENT``) listing the valid
  parameters or values.
- Parameters are aws-ebs-csi-driver's, case-insensitive as there; ``iopsPerGB`` times the size is
  capped at the type's maximum (io2 without ``blockExpress: "true"`` at 64,000) and raised to its
  minimum only with ``allowAutoIOPSPerGBIncrease: "true"``; an explicit ``iops`` outside the
  range is refused. File-system formatting parameters are refused as unknown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from cloudloop.cloud import errors

NAME = "aws"


@dataclass(frozen=True)
class TypeLimits:
    """One EBS type's documented ranges; ``max_iops == 0``: IOPS cannot be set."""

    min_gib: int
    max_gib: int
    min_iops: int = 0
    max_iops: int = 0
    max_iops_per_gib: int = 0
    min_throughput: int = 0
    max_throughput: int = 0

    @property
    def takes_iops(self) -> bool:
        return self.max_iops > 0

    @property
    def takes_throughput(self) -> bool:
        return self.max_throughput > 0


LIMITS: dict[str, TypeLimits] = {
    "gp3": TypeLimits(1, 65536, 3000, 80000, 500, 125, 2000),
    "gp2": TypeLimits(1, 16384),
    "io1": TypeLimits(4, 16384, 100, 64000, 50),
    "io2": TypeLimits(4, 65536, 100, 256000, 1000),
    "st1": TypeLimits(125, 16384),
    "sc1": TypeLimits(125, 16384),
    "standard": TypeLimits(1, 1024),
}
VOLUME_TYPES = tuple(LIMITS)
#: The largest volume of any type: what an expand is checked against before its type is known.
MAX_GIB = max(limits.max_gib for limits in LIMITS.values())
#: gp3's IOPS and throughput included in the price; the per-GiB ratio applies above it.
GP3_BASELINE_IOPS = 3000
GP3_MAX_THROUGHPUT_PER_IOPS = 0.25
#: aws-ebs-csi-driver's cap of an ``iopsPerGB`` io2 volume without ``blockExpress``.
IO2_NON_BLOCK_EXPRESS_MAX_IOPS = 64000

#: The StorageClass parameters (aws-ebs-csi-driver's names), by their lower-case key.
PARAMETER_NAMES = {
    name.lower(): name
    for name in (
        "type",
        "iops",
        "iopsPerGB",
        "allowAutoIOPSPerGBIncrease",
        "throughput",
        "encrypted",
        "kmsKeyId",
        "blockExpress",
        "csi.storage.k8s.io/fstype",
    )
}
TAG_PREFIX = "tagspecification"
VALID_PARAMETERS = ", ".join([*PARAMETER_NAMES.values(), "tagSpecification_<n>"])
_TAG_KEY = re.compile(r"^tagspecification_\d+$")
_BOOLEANS = ("true", "false")


@dataclass(frozen=True)
class EbsRequest:
    """What ``CreateVolume`` is asked for, after the checks."""

    volume_type: str
    size_gib: int
    iops: int | None = None
    throughput: int | None = None
    encrypted: bool = False
    kms_key_id: str = ""
    tags: dict[str, str] = field(default_factory=dict)


def _invalid(operation: str, message: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(NAME, operation, message)


def _out_of_range(operation: str, message: str) -> errors.OutOfRange:
    return errors.OutOfRange(NAME, operation, message)


def _whole(name: str, value: str, operation: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise _invalid(operation, f"{name}={value!r} is not valid: give a whole number ≥ 1")
    return number


def _boolean(name: str, value: str, operation: str) -> bool:
    if value.lower() not in _BOOLEANS:
        raise _invalid(operation, f"{name}={value!r} is not valid: valid values are true, false")
    return value.lower() == "true"


def check_type(volume_type: str, operation: str = "CreateVolume") -> TypeLimits:
    limits = LIMITS.get(volume_type)
    if limits is None:
        raise _invalid(
            operation,
            f"type={volume_type!r} is not an EBS volume type: valid values are "
            f"{', '.join(VOLUME_TYPES)}",
        )
    return limits


def check_size(size_gib: int, volume_type: str = "", operation: str = "CreateVolume") -> None:
    """``OutOfRange`` for a size outside ``volume_type``'s range (any type's when it is "";
    a type this module does not know is left to EC2)."""
    if not volume_type:
        if size_gib > MAX_GIB:
            raise _out_of_range(
                operation,
                f"{size_gib} GiB exceeds the largest EBS volume ({MAX_GIB} GiB, io2 and gp3)",
            )
        return
    limits = LIMITS.get(volume_type)
    if limits is None:
        return
    if not limits.min_gib <= size_gib <= limits.max_gib:
        raise _out_of_range(
            operation,
            f"{size_gib} GiB is outside the {volume_type} size limits: "
            f"{limits.min_gib}-{limits.max_gib} GiB",
        )


def _iops(
    volume_type: str,
    limits: TypeLimits,
    size_gib: int,
    params: Mapping[str, str],
    operation: str,
) -> int | None:
    iops_value, per_gib_value = params.get("iops", ""), params.get("iopspergb", "")
    auto_increase = _boolean(
        "allowAutoIOPSPerGBIncrease", params.get("allowautoiopspergbincrease", "false"), operation
    )
    block_express = _boolean("blockExpress", params.get("blockexpress", "false"), operation)
    if block_express and volume_type != "io2":
        raise _invalid(operation, f"blockExpress is for io2 volumes only, not {volume_type}")
    if not iops_value and not per_gib_value:
        if volume_type in ("io1", "io2"):
            raise _invalid(operation, f"{volume_type} volumes need iops or iopsPerGB")
        return None
    if iops_value and per_gib_value:
        raise _invalid(operation, "give either iops or iopsPerGB, not both")
    if not limits.takes_iops:
        raise _invalid(
            operation, f"{volume_type} takes no iops/iopsPerGB (only gp3, io1 and io2 do)"
        )
    if iops_value:
        iops = _whole("iops", iops_value, operation)
        if not limits.min_iops <= iops <= limits.max_iops:
            raise _out_of_range(
                operation,
                f"iops={iops} is outside the {volume_type} limits: "
                f"{limits.min_iops}-{limits.max_iops} IOPS",
            )
        floor = GP3_BASELINE_IOPS if volume_type == "gp3" else 0
        if iops > floor and iops > limits.max_iops_per_gib * size_gib:
            raise _out_of_range(
                operation,
                f"iops={iops} on {size_gib} GiB is {iops / size_gib:g} IOPS per GiB, over the "
                f"{volume_type} limit of {limits.max_iops_per_gib} IOPS per GiB",
            )
        return iops
    per_gib = _whole("iopsPerGB", per_gib_value, operation)
    most = limits.max_iops
    if volume_type == "io2" and not block_express:
        most = IO2_NON_BLOCK_EXPRESS_MAX_IOPS
    iops = min(per_gib, limits.max_iops_per_gib) * size_gib
    iops = min(iops, most)
    if iops < limits.min_iops:
        if not auto_increase:
            raise _out_of_range(
                operation,
                f"iopsPerGB={per_gib} on {size_gib} GiB = {iops} IOPS is below the {volume_type} "
                f'minimum of {limits.min_iops} IOPS (allowAutoIOPSPerGBIncrease: "true" '
                "raises it)",
            )
        iops = limits.min_iops
    return iops


def _throughput(
    volume_type: str, limits: TypeLimits, iops: int | None, params: Mapping[str, str], op: str
) -> int | None:
    value = params.get("throughput", "")
    if not value:
        return None
    if not limits.takes_throughput:
        raise _invalid(op, f"{volume_type} takes no throughput (only gp3 does)")
    throughput = _whole("throughput", value, op)
    if not limits.min_throughput <= throughput <= limits.max_throughput:
        raise _out_of_range(
            op,
            f"throughput={throughput} is outside the {volume_type} limits: "
            f"{limits.min_throughput}-{limits.max_throughput} MiB/s",
        )
    provisioned = iops or GP3_BASELINE_IOPS
    if throughput > GP3_MAX_THROUGHPUT_PER_IOPS * provisioned:
        raise _out_of_range(
            op,
            f"throughput={throughput} MiB/s with {provisioned} IOPS is over the {volume_type} "
            f"limit of {GP3_MAX_THROUGHPUT_PER_IOPS} MiB/s per IOPS "
            f"(at most {int(GP3_MAX_THROUGHPUT_PER_IOPS * provisioned)} MiB/s)",
        )
    return throughput


def _tags(params: Mapping[str, str], original: Mapping[str, str], op: str) -> dict[str, str]:
    tags: dict[str, str] = {}
    for key, value in params.items():
        if not _TAG_KEY.match(key):
            continue
        tag_key, sep, tag_value = value.partition("=")
        if not sep or not tag_key.strip():
            raise _invalid(op, f"{original[key]}={value!r} is not valid: give key=value")
        tags[tag_key.strip()] = tag_value.strip()
    return tags


def _keyed(
    parameters: Mapping[str, str],
    names: Mapping[str, str],
    what: str,
    valid: str,
    operation: str,
) -> tuple[dict[str, str], dict[str, str]]:
    """(lower-case key → value, lower-case key → the key as given); ``InvalidRequest`` for a
    key that is neither one of ``names`` nor ``tagSpecification_<n>``."""
    lowered: dict[str, str] = {}
    original: dict[str, str] = {}
    for key, value in parameters.items():
        lower = key.lower()
        if lower not in names and not _TAG_KEY.match(lower):
            raise _invalid(operation, f"unknown {what} {key!r}: valid parameters are {valid}")
        lowered[lower] = value
        original[lower] = key
    return lowered, original


def check_request(
    size_gib: int,
    parameters: Mapping[str, str],
    volume_type: str = "",
    *,
    default_type: str = "gp3",
    operation: str = "CreateVolume",
) -> EbsRequest:
    """The checked ``CreateVolume`` request of a StorageClass's ``parameters`` and a size.

    ``volume_type`` (the request's own) wins over the ``type`` parameter; neither: the default.
    """
    lowered, original = _keyed(
        parameters, PARAMETER_NAMES, "StorageClass parameter", VALID_PARAMETERS, operation
    )
    chosen = volume_type or lowered.get("type", "") or default_type
    limits = check_type(chosen, operation)
    check_size(size_gib, chosen, operation)
    iops = _iops(chosen, limits, size_gib, lowered, operation)
    throughput = _throughput(chosen, limits, iops, lowered, operation)
    encrypted = _boolean("encrypted", lowered.get("encrypted", "false"), operation)
    tags = _tags(lowered, original, operation)
    return EbsRequest(
        volume_type=chosen,
        size_gib=size_gib,
        iops=iops,
        throughput=throughput,
        encrypted=encrypted,
        kms_key_id=lowered.get("kmskeyid", "") if encrypted else "",
        tags=tags,
    )


# -- ControllerModifyVolume: the VolumeAttributesClass parameters EBS ModifyVolume changes ------
#: The mutable parameters (aws-ebs-csi-driver's), by their lower-case key; plus tags.
MUTABLE_NAMES = {name.lower(): name for name in ("type", "iops", "throughput")}
VALID_MUTABLE = ", ".join([*MUTABLE_NAMES.values(), "tagSpecification_<n>"])


@dataclass(frozen=True)
class EbsModification:
    """What ``ModifyVolume`` (and ``CreateTags``) is asked for, after the checks."""

    volume_type: str
    iops: int | None = None
    throughput: int | None = None
    tags: dict[str, str] = field(default_factory=dict)


def _mutable(parameters: Mapping[str, str], op: str) -> tuple[dict[str, str], dict[str, str]]:
    return _keyed(parameters, MUTABLE_NAMES, "mutable parameter", VALID_MUTABLE, op)


def check_mutable(parameters: Mapping[str, str], operation: str = "ModifyVolume") -> None:
    """``InvalidRequest`` for a key ModifyVolume cannot change or a malformed value, without
    knowing the volume (the CSI controller's check before any workflow starts)."""
    lowered, original = _mutable(parameters, operation)
    if "type" in lowered:
        check_type(lowered["type"], operation)
    for name in ("iops", "throughput"):
        if name in lowered:
            _whole(name, lowered[name], operation)
    _tags(lowered, original, operation)


def check_modification(
    size_gib: int,
    current_type: str,
    current_iops: int,
    parameters: Mapping[str, str],
    operation: str = "ModifyVolume",
) -> EbsModification:
    """The checked change of a volume of ``size_gib`` and ``current_type`` to ``parameters``:
    the target type's IOPS and throughput ranges, as :func:`check_request` checks a new one
    (an unchanged IOPS counts for the throughput ratio). A value out of range is
    ``InvalidRequest`` here: the class can never be applied, and external-resizer marks a PVC
    ``Infeasible`` only for ``INVALID_ARGUMENT``."""
    try:
        return _modification(size_gib, current_type, current_iops, parameters, operation)
    except errors.OutOfRange as err:
        raise _invalid(operation, err.message) from err


def _modification(
    size_gib: int,
    current_type: str,
    current_iops: int,
    parameters: Mapping[str, str],
    operation: str,
) -> EbsModification:
    lowered, original = _mutable(parameters, operation)
    target = lowered.get("type", "") or current_type
    limits = check_type(target, operation)
    check_size(size_gib, target, operation)
    iops: int | None = None
    if "iops" in lowered:
        iops = _iops(target, limits, size_gib, {"iops": lowered["iops"]}, operation)
    elif target != current_type and target in ("io1", "io2") and current_type not in ("io1", "io2"):
        raise _invalid(operation, f"a change to {target} needs iops")
    throughput = None
    if "throughput" in lowered:
        provisioned = iops if iops is not None else (current_iops or None)
        throughput = _throughput(
            target, limits, provisioned, {"throughput": lowered["throughput"]}, operation
        )
    return EbsModification(
        volume_type=target,
        iops=iops,
        throughput=throughput,
        tags=_tags(lowered, original, operation),
    )
