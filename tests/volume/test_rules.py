"""The CSI volume rules: capacity rounding, zone choice, create compatibility, request checks."""

from __future__ import annotations

import pytest

from cloudloop.cloud.models import Volume
from cloudloop.messages.volume import (
    AttachVolumeRequest,
    CapacityRange,
    Code,
    CreateVolumeInput,
    CreateVolumeRequest,
    DeleteVolumeRequest,
    DetachVolumeRequest,
    ExpandVolumeRequest,
    Topology,
)
from cloudloop.rules.requests import fingerprint
from cloudloop.rules.volume import (
    GIB,
    RequestRejected,
    check_request,
    choose_zone,
    incompatibility,
    size_gib,
)

MIB = 1 << 20


@pytest.mark.parametrize(
    ("required", "limit", "gib"),
    [
        pytest.param(0, 0, 1, id="unset-gives-default"),
        pytest.param(1, 0, 1, id="one-byte-rounds-up"),
        pytest.param(GIB, 0, 1, id="exact-gib"),
        pytest.param(GIB + 1, 0, 2, id="just-over-gib"),
        pytest.param(10 * GIB - MIB, 0, 10, id="mib-under-ten"),
        pytest.param(GIB + 1, 2 * GIB, 2, id="rounded-within-limit"),
        pytest.param(0, 5 * GIB, 1, id="limit-only"),
        pytest.param(3 * GIB, 3 * GIB, 3, id="required-equals-limit"),
    ],
)
def test_size_is_rounded_up_to_whole_gib(required: int, limit: int, gib: int) -> None:
    assert size_gib(CapacityRange(required_bytes=required, limit_bytes=limit)) == gib


@pytest.mark.parametrize(
    ("required", "limit"),
    [
        pytest.param(2 * GIB, GIB, id="required-over-limit"),
        pytest.param(GIB + 1, GIB + MIB, id="rounding-passes-limit"),
        pytest.param(0, MIB, id="default-over-limit"),
        pytest.param(-1, 0, id="negative"),
    ],
)
def test_size_outside_the_range_is_out_of_range(required: int, limit: int) -> None:
    with pytest.raises(RequestRejected) as err:
        size_gib(CapacityRange(required_bytes=required, limit_bytes=limit))
    assert err.value.code is Code.OUT_OF_RANGE


ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]


@pytest.mark.parametrize(
    ("requisite", "preferred", "zone"),
    [
        pytest.param([], [], "us-east-1a", id="no-topology-first-zone"),
        pytest.param(["us-east-1c"], [], "us-east-1c", id="requisite-only"),
        pytest.param(["us-east-1b", "us-east-1c"], ["us-east-1c"], "us-east-1c", id="preferred"),
        pytest.param(
            ["us-east-1b", "us-east-1c"],
            ["us-east-1a", "us-east-1c"],
            "us-east-1c",
            id="preferred-outside-requisite-skipped",
        ),
        pytest.param(
            ["eu-west-1a", "us-east-1b"], [], "us-east-1b", id="unknown-requisite-skipped"
        ),
        pytest.param([], ["us-east-1b"], "us-east-1b", id="preferred-without-requisite"),
        pytest.param(["eu-west-1a"], ["eu-west-1a"], None, id="nothing-fits"),
    ],
)
def test_zone_choice(requisite: list[str], preferred: list[str], zone: str | None) -> None:
    topology = Topology(requisite=requisite, preferred=preferred)
    assert choose_zone(topology, ZONES) == zone


def test_no_zones_at_all() -> None:
    assert choose_zone(Topology(), []) is None


def _input(**changes: object) -> CreateVolumeInput:
    base = CreateVolumeInput(cluster="c", provider="aws", name="pvc-1", size_gib=4)
    return base.model_copy(update=changes)


EXISTING = Volume(id="vol-0123456789abcdef0", size_gib=4, zone="us-east-1b", volume_type="gp3")


@pytest.mark.parametrize(
    ("input", "compatible"),
    [
        pytest.param(_input(), True, id="same"),
        pytest.param(_input(volume_type="gp3"), True, id="same-type"),
        pytest.param(_input(topology=Topology(requisite=["us-east-1b"])), True, id="in-requisite"),
        pytest.param(_input(size_gib=8), False, id="other-size"),
        pytest.param(_input(volume_type="io2"), False, id="other-type"),
        pytest.param(_input(topology=Topology(requisite=["us-east-1a"])), False, id="other-zone"),
    ],
)
def test_existing_volume_compatibility(input: CreateVolumeInput, compatible: bool) -> None:
    reason = incompatibility(EXISTING, input)
    assert (reason is None) is compatible
    if reason:
        assert EXISTING.id in reason


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(CreateVolumeRequest(name=""), id="create-without-name"),
        pytest.param(DeleteVolumeRequest(volume_id=""), id="delete-without-id"),
        pytest.param(AttachVolumeRequest(volume_id="vol-1", node_id=""), id="attach-without-node"),
        pytest.param(AttachVolumeRequest(volume_id="", node_id="i-1"), id="attach-without-id"),
        pytest.param(DetachVolumeRequest(volume_id=""), id="detach-without-id"),
        pytest.param(
            ExpandVolumeRequest(volume_id="vol-1", capacity=CapacityRange()),
            id="expand-without-capacity",
        ),
    ],
)
def test_missing_fields_are_invalid_argument(
    request_: CreateVolumeRequest
    | DeleteVolumeRequest
    | AttachVolumeRequest
    | DetachVolumeRequest
    | ExpandVolumeRequest,
) -> None:
    with pytest.raises(RequestRejected) as err:
        check_request(request_)
    assert err.value.code is Code.INVALID_ARGUMENT


def test_complete_requests_pass() -> None:
    check_request(CreateVolumeRequest(name="x" * 128))
    check_request(DetachVolumeRequest(volume_id="vol-1"))  # no node: detach from all


def test_fingerprint_tells_requests_apart() -> None:
    assert fingerprint(_input()) == fingerprint(_input())
    assert fingerprint(_input()) != fingerprint(_input(size_gib=5))
