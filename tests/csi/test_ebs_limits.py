"""EBS limits per type and StorageClass parameters (pure), and the controller's contract that a
refused request starts no workflow (a fake Temporal client that fails if it is called)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cloudloop.cloud import errors
from cloudloop.cloud.aws import ebs_limits
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.aws.volumes import create_arguments, parameter_tags
from cloudloop.cloud.models import Volume, VolumeSpec
from cloudloop.csi.operations import VolumeOperations
from cloudloop.messages.volume import (
    CapacityRange,
    Code,
    CreateVolumeRequest,
    ExpandVolumeRequest,
    ModifyVolumeRequest,
)

GIB = 1 << 30


def check(size: int, **parameters: str) -> ebs_limits.EbsRequest:
    return ebs_limits.check_request(size, parameters)


@pytest.mark.parametrize(
    ("volume_type", "size"),
    [
        pytest.param("gp2", 1, id="gp2-min"),
        pytest.param("gp2", 16384, id="gp2-max"),
        pytest.param("gp3", 1, id="gp3-min"),
        pytest.param("gp3", 65536, id="gp3-max"),
        pytest.param("io1", 4, id="io1-min"),
        pytest.param("io1", 16384, id="io1-max"),
        pytest.param("io2", 4, id="io2-min"),
        pytest.param("io2", 65536, id="io2-max"),
        pytest.param("st1", 125, id="st1-min"),
        pytest.param("sc1", 16384, id="sc1-max"),
        pytest.param("standard", 1024, id="standard-max"),
    ],
)
def test_sizes_within_limits(volume_type: str, size: int) -> None:
    extra = {"iopsPerGB": "50", "allowAutoIOPSPerGBIncrease": "true"}
    params = {"type": volume_type, **(extra if volume_type.startswith("io") else {})}
    assert ebs_limits.check_request(size, params).size_gib == size


@pytest.mark.parametrize(
    ("volume_type", "size", "limit"),
    [
        pytest.param("gp2", 16385, "1-16384 GiB", id="gp2-too-large"),
        pytest.param("gp3", 100000, "1-65536 GiB", id="gp3-100000"),
        pytest.param("gp3", 0, "1-65536 GiB", id="gp3-zero"),
        pytest.param("io1", 3, "4-16384 GiB", id="io1-too-small"),
        pytest.param("io1", 16385, "4-16384 GiB", id="io1-too-large"),
        pytest.param("io2", 65537, "4-65536 GiB", id="io2-too-large"),
        pytest.param("st1", 124, "125-16384 GiB", id="st1-too-small"),
        pytest.param("sc1", 16385, "125-16384 GiB", id="sc1-too-large"),
        pytest.param("standard", 1025, "1-1024 GiB", id="standard-too-large"),
    ],
)
def test_sizes_outside_limits_are_out_of_range(volume_type: str, size: int, limit: str) -> None:
    params = {"type": volume_type}
    if volume_type.startswith("io"):
        params["iops"] = "100"
    with pytest.raises(errors.OutOfRange) as raised:
        ebs_limits.check_request(size, params)
    assert limit in raised.value.message and volume_type in raised.value.message


@pytest.mark.parametrize(
    ("size", "params", "limit"),
    [
        pytest.param(100, {"type": "gp3", "iops": "2999"}, "3000-80000 IOPS", id="gp3-iops-low"),
        pytest.param(1000, {"type": "gp3", "iops": "80001"}, "3000-80000 IOPS", id="gp3-iops-high"),
        pytest.param(
            10, {"type": "gp3", "iops": "5001"}, "500 IOPS per GiB", id="gp3-iops-per-gib"
        ),
        pytest.param(100, {"type": "io1", "iops": "99"}, "100-64000 IOPS", id="io1-iops-low"),
        pytest.param(10000, {"type": "io1", "iops": "64001"}, "100-64000 IOPS", id="io1-iops-high"),
        pytest.param(10, {"type": "io1", "iops": "501"}, "50 IOPS per GiB", id="io1-per-gib"),
        pytest.param(
            1000, {"type": "io2", "iops": "256001"}, "100-256000 IOPS", id="io2-iops-high"
        ),
        pytest.param(10, {"type": "io2", "iops": "10001"}, "1000 IOPS per GiB", id="io2-per-gib"),
        pytest.param(
            100, {"type": "gp3", "throughput": "124"}, "125-2000 MiB/s", id="gp3-tput-low"
        ),
        pytest.param(
            1000,
            {"type": "gp3", "iops": "16000", "throughput": "2001"},
            "125-2000 MiB/s",
            id="gp3-tput-high",
        ),
        pytest.param(
            100, {"type": "gp3", "throughput": "751"}, "0.25 MiB/s per IOPS", id="gp3-tput-ratio"
        ),
        pytest.param(
            10,
            {"type": "io1", "iopsPerGB": "5"},
            "minimum of 100 IOPS",
            id="io1-iops-per-gb-below-min",
        ),
    ],
)
def test_rates_outside_limits_are_out_of_range(
    size: int, params: dict[str, str], limit: str
) -> None:
    with pytest.raises(errors.OutOfRange) as raised:
        ebs_limits.check_request(size, params)
    assert limit in raised.value.message


@pytest.mark.parametrize(
    ("size", "params", "iops", "throughput"),
    [
        pytest.param(1, {"type": "gp3", "iops": "3000"}, 3000, None, id="gp3-baseline-on-1gib"),
        pytest.param(160, {"type": "gp3", "iops": "80000"}, 80000, None, id="gp3-iops-max"),
        pytest.param(
            100, {"type": "gp3", "throughput": "750"}, None, 750, id="gp3-tput-at-baseline"
        ),
        pytest.param(
            8000,
            {"type": "gp3", "iops": "8000", "throughput": "2000"},
            8000,
            2000,
            id="gp3-tput-max",
        ),
        pytest.param(
            10,
            {"type": "io1", "iopsPerGB": "5", "allowAutoIOPSPerGBIncrease": "true"},
            100,
            None,
            id="io1-auto-increase",
        ),
        pytest.param(10, {"type": "io1", "iopsPerGB": "80"}, 500, None, id="io1-per-gib-capped"),
        pytest.param(
            1000, {"type": "io2", "iopsPerGB": "1000"}, 64000, None, id="io2-capped-64000"
        ),
        pytest.param(
            1000,
            {"type": "io2", "iopsPerGB": "1000", "blockExpress": "true"},
            256000,
            None,
            id="io2-block-express",
        ),
        pytest.param(4, {"TYPE": "io2", "IOPS": "4000"}, 4000, None, id="keys-case-insensitive"),
    ],
)
def test_rates_within_limits(
    size: int, params: dict[str, str], iops: int | None, throughput: int | None
) -> None:
    request = ebs_limits.check_request(size, params)
    assert (request.iops, request.throughput) == (iops, throughput)


@pytest.mark.parametrize(
    ("params", "listed"),
    [
        pytest.param({"colour": "red"}, ebs_limits.VALID_PARAMETERS, id="unknown-key"),
        pytest.param({"blockSize": "4096"}, "tagSpecification_<n>", id="formatting-key"),
        pytest.param({"type": "gp9"}, "gp3, gp2, io1, io2, st1, sc1, standard", id="bad-type"),
        pytest.param({"type": "io1", "iopsPerGB": "ten"}, "whole number", id="iops-per-gb-nan"),
        pytest.param({"type": "io1", "iopsPerGB": "-5"}, "whole number", id="iops-per-gb-neg"),
        pytest.param({"iops": "4000.5"}, "whole number", id="iops-not-integer"),
        pytest.param({"encrypted": "yes"}, "true, false", id="bad-encrypted"),
        pytest.param(
            {"type": "io1", "iops": "100", "allowAutoIOPSPerGBIncrease": "1"},
            "true, false",
            id="bad-auto-increase",
        ),
        pytest.param({"type": "gp3", "blockExpress": "true"}, "io2", id="block-express-gp3"),
        pytest.param({"type": "io1"}, "iops or iopsPerGB", id="io1-without-iops"),
        pytest.param({"type": "io1", "iops": "100", "iopsPerGB": "10"}, "not both", id="both"),
        pytest.param({"type": "gp2", "iops": "100"}, "only gp3, io1", id="iops-on-gp2"),
        pytest.param({"type": "io1", "iops": "200", "throughput": "200"}, "gp3", id="tput-io1"),
        pytest.param({"tagSpecification_1": "no-equals"}, "key=value", id="bad-tag"),
    ],
)
def test_invalid_parameters_list_the_valid_values(params: dict[str, str], listed: str) -> None:
    with pytest.raises(errors.InvalidRequest) as raised:
        ebs_limits.check_request(100, params)
    assert listed in raised.value.message


def test_tag_specifications_become_tags() -> None:
    spec = VolumeSpec(
        name="v",
        size_gib=10,
        zone="z",
        parameters={"tagSpecification_1": "team=storage", "tagspecification_2": "cost = 7"},
    )
    assert parameter_tags(spec) == {"team": "storage", "cost": "7"}
    assert create_arguments(spec) == {"VolumeType": "gp3"}


def test_expand_sizes() -> None:
    ebs_limits.check_size(65536)
    with pytest.raises(errors.OutOfRange, match="largest EBS volume"):
        ebs_limits.check_size(65537)
    with pytest.raises(errors.OutOfRange, match="gp2 size limits"):
        ebs_limits.check_size(16385, "gp2", "ModifyVolume")
    ebs_limits.check_size(10**6, "some-future-type")  # EC2 answers for a type unknown here


class NoTemporal:
    """A Temporal client that must not be reached: the refusal comes first."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Temporal called ({name}) for a request refused up front")


def operations() -> VolumeOperations:
    return VolumeOperations(
        NoTemporal(),  # type: ignore[arg-type]
        task_queue="q",
        cluster="c",
        provider="aws",
        limits=AwsDriver(AwsSettings()).volumes,
    )


@pytest.mark.parametrize(
    ("gib", "parameters", "code"),
    [
        pytest.param(100000, {"type": "gp3"}, Code.OUT_OF_RANGE, id="100000Gi-gp3"),
        pytest.param(10, {"type": "gp9"}, Code.INVALID_ARGUMENT, id="bad-type"),
        pytest.param(10, {"type": "gp3", "iops": "99999"}, Code.OUT_OF_RANGE, id="iops"),
    ],
)
def test_operations_refuse_before_any_workflow(
    gib: int, parameters: dict[str, str], code: Code
) -> None:
    request = CreateVolumeRequest(
        name="pvc-1", capacity=CapacityRange(required_bytes=gib * GIB), parameters=parameters
    )
    result = asyncio.run(operations().create(request))
    assert result.code == code, result.message


def test_expand_beyond_any_type_is_refused_before_any_workflow() -> None:
    request = ExpandVolumeRequest(
        volume_id="vol-0123456789abcdef0", capacity=CapacityRange(required_bytes=100000 * GIB)
    )
    result = asyncio.run(operations().expand(request))
    assert result.code == Code.OUT_OF_RANGE and "65536 GiB" in result.message


# -- ControllerModifyVolume: VolumeAttributesClass parameters ---------------------------------
@pytest.mark.parametrize(
    ("parameters", "error", "match"),
    [
        pytest.param({"encrypted": "true"}, errors.InvalidRequest, "unknown mutable", id="key"),
        pytest.param({"type": "gp9"}, errors.InvalidRequest, "not an EBS volume type", id="type"),
        pytest.param({"iops": "many"}, errors.InvalidRequest, "whole number", id="iops"),
        pytest.param({"tagSpecification_1": "x"}, errors.InvalidRequest, "key=value", id="tag"),
    ],
)
def test_mutable_parameters_refused_without_the_volume(
    parameters: dict[str, str], error: type[errors.CloudError], match: str
) -> None:
    with pytest.raises(error, match=match):
        ebs_limits.check_mutable(parameters)


def test_modification_checked_against_the_target_type_and_size() -> None:
    wanted = ebs_limits.check_modification(
        10, "gp3", 3000, {"IOPS": "4000", "throughput": "250", "tagSpecification_1": "a=b"}
    )
    assert (wanted.volume_type, wanted.iops, wanted.throughput) == ("gp3", 4000, 250)
    assert wanted.tags == {"a": "b"}
    # Out of range is INVALID_ARGUMENT for a class: the resizer then marks the PVC Infeasible.
    with pytest.raises(errors.InvalidRequest, match="IOPS per GiB"):
        ebs_limits.check_modification(1, "gp3", 3000, {"iops": "4000"})
    with pytest.raises(errors.InvalidRequest, match="MiB/s per IOPS"):
        ebs_limits.check_modification(10, "gp3", 3000, {"throughput": "900"})
    with pytest.raises(errors.InvalidRequest, match="needs iops"):
        ebs_limits.check_modification(10, "gp3", 3000, {"type": "io2"})
    with pytest.raises(errors.InvalidRequest, match="takes no throughput"):
        ebs_limits.check_modification(10, "gp3", 3000, {"type": "gp2", "throughput": "200"})


def test_changes_list_only_what_the_volume_lacks() -> None:
    volumes = AwsDriver(AwsSettings()).volumes
    assert volumes is not None
    volume = Volume(
        id="vol-0123456789abcdef0",
        size_gib=10,
        volume_type="gp3",
        iops=3000,
        throughput=125,
        tags={"team": "a"},
    )
    wanted = {"iops": "3000", "throughput": "250", "tagSpecification_1": "team=b"}
    assert volumes.volume_changes(volume, wanted) == {"throughput": "250", "tag:team": "b"}
    done = volume.model_copy(update={"throughput": 250, "tags": {"team": "b"}})
    assert volumes.volume_changes(done, wanted) == {}


@pytest.mark.parametrize(
    ("parameters", "code"),
    [
        pytest.param({}, Code.INVALID_ARGUMENT, id="none"),
        pytest.param({"kmsKeyId": "k"}, Code.INVALID_ARGUMENT, id="immutable"),
    ],
)
def test_modify_refused_before_any_workflow(parameters: dict[str, str], code: Code) -> None:
    request = ModifyVolumeRequest(volume_id="vol-0123456789abcdef0", parameters=parameters)
    result = asyncio.run(operations().modify(request))
    assert result.code == code, result.message
