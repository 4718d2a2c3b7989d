"""The AWS API limits the product depends on, and a request-rate limiter, for the AWS front.

moto accepts what AWS refuses: 500 values in one ``DescribeInstances`` filter, ``MaxResults``
out of range, any request rate. :func:`check_limits` answers a request the way AWS does when it
breaks a documented limit the product's calls could reach; :class:`RateLimiter` answers
``RequestLimitExceeded`` (EC2) or ``Throttling`` (the others) past a configured rate, or for a
configured share of requests during a "storm". Pure logic; :mod:`devstack.aws_front` serves it.

Limits enforced (AWS API references):
- EBS ``CreateVolume``/``ModifyVolume``: size, IOPS, IOPS per GiB and gp3 throughput per volume
  type (:func:`check_ebs`, ``InvalidParameterValue`` and AWS's other codes and message shapes).
- EC2 ``Filter.N.Value.M``: at most 200 values per filter (``FilterLimitExceeded``).
- EC2 ``MaxResults``: DescribeInstances 5-1000 and never with ``InstanceId.N``
  (``InvalidParameterCombination``); DescribeSubnets, DescribeSecurityGroups,
  DescribeSecurityGroupRules 5-1000; DescribeVolumes 5-500; DescribeRouteTables,
  DescribeInstanceTypes 5-100 (``InvalidParameterValue``).
- ELB/ELBv2 ``DescribeTags``: at most 20 names/ARNs; ELBv2 ``DescribeLoadBalancers`` 20 names;
  ``PageSize`` 1-400 (``ValidationError``).
- SQS ``ReceiveMessage``: ``MaxNumberOfMessages`` 1-10, ``WaitTimeSeconds`` 0-20,
  ``VisibilityTimeout`` 0-43200; batch calls at most 10 entries.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

FILTER_VALUES_MAX = 200

#: (service, action) → (parameter, low, high) for MaxResults-like ranges.
_RANGES: dict[tuple[str, str], tuple[str, int, int]] = {
    ("ec2", "DescribeInstances"): ("MaxResults", 5, 1000),
    ("ec2", "DescribeSubnets"): ("MaxResults", 5, 1000),
    ("ec2", "DescribeSecurityGroups"): ("MaxResults", 5, 1000),
    ("ec2", "DescribeSecurityGroupRules"): ("MaxResults", 5, 1000),
    ("ec2", "DescribeVolumes"): ("MaxResults", 5, 500),
    ("ec2", "DescribeRouteTables"): ("MaxResults", 5, 100),
    ("ec2", "DescribeInstanceTypes"): ("MaxResults", 5, 100),
    ("elasticloadbalancing", "DescribeLoadBalancers"): ("PageSize", 1, 400),
    ("elasticloadbalancing", "DescribeTargetGroups"): ("PageSize", 1, 400),
    ("sqs", "ReceiveMessage"): ("MaxNumberOfMessages", 1, 10),
}
#: (service, action) → (list parameter prefix, most members).
_MEMBERS: dict[tuple[str, str], tuple[str, int]] = {
    ("elasticloadbalancing", "DescribeTags"): ("", 20),  # LoadBalancerNames / ResourceArns
    ("elasticloadbalancing", "DescribeLoadBalancers"): ("Names.member.", 20),
}
_SQS_BATCHES = {"DeleteMessageBatch", "SendMessageBatch", "ChangeMessageVisibilityBatch"}
_FILTER_VALUE = re.compile(r"^Filter\.(\d+)\.Value\.\d+$")


@dataclass(frozen=True)
class Refusal:
    """An AWS error answer: HTTP status, code, message."""

    status: int
    code: str
    message: str


def service_of(authorization: str) -> str:
    """The signing name in a SigV4 ``Authorization`` header (``ec2``, ``sqs``, ...)."""
    match = re.search(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/aws4_request", authorization)
    return match.group(1) if match else ""


def check_limits(service: str, action: str, params: dict[str, Any]) -> Refusal | None:
    """The error AWS answers for ``params`` of ``action``, or ``None`` within the limits.

    ``params`` are the flattened query parameters (EC2, ELB) or the JSON body (SQS)."""
    if service == "ec2":
        counts: Counter[str] = Counter()
        for key in params:
            match = _FILTER_VALUE.match(key)
            if match:
                counts[match.group(1)] += 1
        for index, count in counts.items():
            if count > FILTER_VALUES_MAX:
                name = params.get(f"Filter.{index}.Name", "")
                return Refusal(
                    400,
                    "FilterLimitExceeded",
                    f"The maximum number of filter values specified on a single call is "
                    f"{FILTER_VALUES_MAX} (filter {name!r} has {count})",
                )
        if (
            action == "DescribeInstances"
            and "MaxResults" in params
            and any(k.startswith("InstanceId.") for k in params)
        ):
            return Refusal(
                400,
                "InvalidParameterCombination",
                "The parameter instancesSet cannot be used with the parameter maxResults",
            )
    limit = _RANGES.get((service, action))
    if limit is not None and limit[0] in params:
        parameter, low, high = limit
        try:
            value = int(params[parameter])
        except (TypeError, ValueError):
            value = low - 1
        if not low <= value <= high:
            code = (
                "ValidationError"
                if service == "elasticloadbalancing"
                else ("InvalidParameterValue")
            )
            return Refusal(
                400,
                code,
                f"Value ({params[parameter]}) for parameter {parameter} is invalid. "
                f"Expecting a value between {low} and {high}.",
            )
    members = _MEMBERS.get((service, action))
    if members is not None:
        prefix, most = members
        count = sum(1 for k in params if ".member." in k and k.startswith(prefix))
        if count > most:
            return Refusal(400, "ValidationError", f"at most {most} names or ARNs ({count} given)")
    if service == "sqs":
        if action == "ReceiveMessage":
            for parameter, low, high in (
                ("WaitTimeSeconds", 0, 20),
                ("VisibilityTimeout", 0, 43200),
            ):
                if parameter in params and not low <= int(params[parameter]) <= high:
                    return Refusal(
                        400, "InvalidParameterValue", f"{parameter} must be in {low}..{high}"
                    )
        if action in _SQS_BATCHES and len(params.get("Entries") or []) > 10:
            return Refusal(
                400,
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
                "Maximum number of entries per request are 10",
            )
    return None


@dataclass
class Storm:
    """A share of requests refused as throttled until ``until`` (monotonic)."""

    fraction: float
    until: float
    services: frozenset[str] = frozenset()  # empty: every service


@dataclass
class RateLimiter:
    """Token bucket per service (``rate_per_s`` None: unlimited) plus an optional storm."""

    rate_per_s: float | None = None
    burst: float = 50.0
    storm: Storm | None = None
    _tokens: dict[str, tuple[float, float]] = field(default_factory=dict)  # service → (n, t)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _random: random.Random = field(default_factory=lambda: random.Random(0))

    def configure(self, settings: dict[str, Any]) -> None:
        with self._lock:
            if "rate_per_s" in settings:
                rate = settings["rate_per_s"]
                self.rate_per_s = None if rate is None else float(rate)
                self._tokens.clear()
            if "burst" in settings:
                self.burst = float(settings["burst"])
            storm = settings.get("storm")
            if storm is not None:
                self.storm = (
                    Storm(
                        fraction=float(storm.get("fraction", 0.5)),
                        until=time.monotonic() + float(storm.get("duration_s", 60)),
                        services=frozenset(storm.get("services") or ()),
                    )
                    if storm
                    else None
                )

    def admit(self, service: str) -> bool:
        """Whether a request to ``service`` may pass now."""
        now = time.monotonic()
        with self._lock:
            storm = self.storm
            if storm is not None:
                if now >= storm.until:
                    self.storm = None
                elif (
                    not storm.services or service in storm.services
                ) and self._random.random() < storm.fraction:
                    return False
            if self.rate_per_s is None:
                return True
            tokens, last = self._tokens.get(service, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate_per_s)
            if tokens < 1.0:
                self._tokens[service] = (tokens, now)
                return False
            self._tokens[service] = (tokens - 1.0, now)
            return True


def throttled(service: str) -> Refusal:
    """What AWS answers past the request rate: EC2's code, or the others' ``Throttling``."""
    if service == "ec2":
        return Refusal(503, "RequestLimitExceeded", "Request limit exceeded.")
    if service == "sqs":
        return Refusal(400, "ThrottlingException", "Rate exceeded")
    return Refusal(400, "Throttling", "Rate exceeded")


# -- EBS volume limits: CreateVolume and ModifyVolume as AWS refuses them ----------------------
# Sizes, IOPS and throughput per volume type (EC2 API Reference, CreateVolume/ModifyVolume; EBS
# User Guide, "Amazon EBS volume types"). Kept apart from the product's own table
# (cloudloop.cloud.aws.ebs_limits) on purpose: this is the cloud's side of the contract.
# (min GiB, max GiB, min IOPS, max IOPS, max IOPS per GiB, min MiB/s, max MiB/s)
EBS_TYPES: dict[str, tuple[int, int, int, int, int, int, int]] = {
    "gp2": (1, 16384, 0, 0, 0, 0, 0),
    "gp3": (1, 65536, 3000, 80000, 500, 125, 2000),
    "io1": (4, 16384, 100, 64000, 50, 0, 0),
    "io2": (4, 65536, 100, 256000, 1000, 0, 0),
    "st1": (125, 16384, 0, 0, 0, 0, 0),
    "sc1": (125, 16384, 0, 0, 0, 0, 0),
    "standard": (1, 1024, 0, 0, 0, 0, 0),
}
#: CreateVolume's default type; gp3's included IOPS and throughput, and its MiB/s per IOPS.
EBS_DEFAULT_TYPE = "gp2"
GP3_BASELINE = (3000, 125)
GP3_MIBPS_PER_IOPS = 0.25


@dataclass(frozen=True)
class EbsVolumeState:
    """What ModifyVolume changes: the volume as DescribeVolumes shows it."""

    volume_type: str
    size_gib: int
    iops: int = 0
    throughput: int = 0


def _integer(params: dict[str, Any], name: str) -> int | None:
    value = params.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _invalid_value(message: str) -> Refusal:
    return Refusal(400, "InvalidParameterValue", message)


def check_ebs(
    action: str, params: dict[str, Any], current: EbsVolumeState | None = None
) -> Refusal | None:
    """AWS's answer to an EBS ``CreateVolume``/``ModifyVolume`` outside its type's limits, or
    ``None``. ``current`` is the volume a ModifyVolume changes (None: moto answers for it)."""
    if action == "ModifyVolume" and current is None:
        return None
    if action not in ("CreateVolume", "ModifyVolume"):
        return None
    size, iops = _integer(params, "Size"), _integer(params, "Iops")
    throughput = _integer(params, "Throughput")
    if action == "CreateVolume":
        volume_type = str(params.get("VolumeType") or EBS_DEFAULT_TYPE)
        if size is None:
            return None  # from a snapshot: its size (moto checks the snapshot)
    else:
        assert current is not None
        volume_type = str(params.get("VolumeType") or current.volume_type)
        if size is not None and size < current.size_gib:
            return _invalid_value(
                f"New size cannot be smaller than existing size of {current.size_gib}GiB"
            )
        size = current.size_gib if size is None else size
    limits = EBS_TYPES.get(volume_type)
    if limits is None:
        return _invalid_value(
            f"Value ({volume_type}) for parameter volumeType is invalid. "
            f"Valid values: {', '.join(EBS_TYPES)}"
        )
    min_gib, max_gib, min_iops, max_iops, per_gib, min_mibps, max_mibps = limits
    if current is not None and volume_type == current.volume_type:
        # ModifyVolume keeps the IOPS and throughput a type that has them was given.
        if iops is None and max_iops and current.iops:
            iops = current.iops
        if throughput is None and max_mibps and current.throughput:
            throughput = current.throughput
    if size > max_gib:
        return _invalid_value(
            f"Volume of {size}GiB is too large for volume type {volume_type}; "
            f"maximum is {max_gib}GiB"
        )
    if size < min_gib:
        return _invalid_value(f"Volume of {size}GiB is too small; minimum is {min_gib}GiB")
    if iops is not None and not max_iops:
        return Refusal(
            400,
            "InvalidParameterCombination",
            f"The parameter iops is not supported for {volume_type} volumes.",
        )
    if iops is None and volume_type in ("io1", "io2") and action == "CreateVolume":
        return Refusal(400, "MissingParameter", "The request must contain the parameter iops")
    if iops is not None:
        if iops > max_iops:
            return _invalid_value(f"Volume iops of {iops} is too high; maximum is {max_iops}.")
        if iops < min_iops:
            return _invalid_value(f"Volume iops of {iops} is too low; minimum is {min_iops}.")
        floor = GP3_BASELINE[0] if volume_type == "gp3" else 0
        if iops > floor and iops > per_gib * size:
            return _invalid_value(
                f"Iops to volume size ratio of {iops / size:f} is too high; maximum is {per_gib}"
            )
    if throughput is not None and not max_mibps:
        return Refusal(
            400,
            "InvalidParameterCombination",
            "throughput can only be specified for volumeType gp3.",
        )
    if throughput is not None:
        if throughput > max_mibps:
            return _invalid_value(
                f"Volume throughput of {throughput} is too high; maximum is {max_mibps}."
            )
        if throughput < min_mibps:
            return _invalid_value(
                f"Volume throughput of {throughput} is too low; minimum is {min_mibps}."
            )
        provisioned = iops or GP3_BASELINE[0]
        if throughput > GP3_MIBPS_PER_IOPS * provisioned:
            return _invalid_value(
                f"Throughput (MiBps) to iops ratio of {throughput / provisioned:f} is too high; "
                f"maximum is {GP3_MIBPS_PER_IOPS:f} MiBps per iops."
            )
    return None
