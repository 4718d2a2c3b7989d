"""EBS volumes refused as AWS refuses them, through the CSI controller and through the AWS front.

- The controller (``cloudloop.csi.server``, with the volume workflows on a test worker, moto
  behind the AWS front) answers a 100000Gi gp3 volume ``OUT_OF_RANGE`` and a bad StorageClass
  parameter ``INVALID_ARGUMENT`` listing the valid values, and no ``CreateVolume`` reaches the
  front; an expand past the volume's own type (gp2, 16384 GiB) is refused after the read, and no
  ``ModifyVolume`` reaches the front.
- The front answers boto3's ``CreateVolume``/``ModifyVolume`` outside a type's limits with AWS's
  errors (``InvalidParameterValue``, ``InvalidParameterCombination``, ``MissingParameter``) and
  lets the ones within them through to moto.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import botocore.exceptions
import grpc
import pytest
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.registry import Settings
from cloudloop.csi.v1 import csi_pb2, csi_pb2_grpc
from cloudloop.kube.api import Kube
from devstack.aws_front import stats
from devstack.backends.aws import aws_client
from devstack.local import LocalStack
from tests.csi.clouds import aws_cloud
from tests.csi.support import (
    channel,
    controller_service,
    csi_settings,
    socket_folder,
    volume_worker,
)

pytestmark = pytest.mark.stack

GIB = 1 << 30
ZONE = "us-east-1a"


def create_request(name: str, gib: int, parameters: dict[str, str]) -> csi_pb2.CreateVolumeRequest:
    mode = csi_pb2.VolumeCapability.AccessMode(
        mode=csi_pb2.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
    )
    capability = csi_pb2.VolumeCapability(
        mount=csi_pb2.VolumeCapability.MountVolume(fs_type="ext4"), access_mode=mode
    )
    request = csi_pb2.CreateVolumeRequest(
        name=name,
        capacity_range=csi_pb2.CapacityRange(required_bytes=gib * GIB),
        volume_capabilities=[capability],
        parameters=parameters,
    )
    request.accessibility_requirements.requisite.add().segments["topology.kubernetes.io/zone"] = (
        ZONE
    )
    return request


def front_requests(stack: LocalStack, action: str) -> int:
    return int(stats(stack.aws_endpoint)["requests"].get(f"ec2:{action}", 0))


async def refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


async def test_controller_refuses_before_any_cloud_call(
    request: pytest.FixtureRequest,
    settings: Settings,
    client: Client,
    kube: Kube,
    stack: LocalStack,
) -> None:
    cloud = await aws_cloud(request, settings)
    settings = csi_settings(cloud.settings, storage_classes=False)
    async with (
        socket_folder() as sockets,
        volume_worker(client, settings, cloud.driver, kube),
        controller_service(client, settings, cloud.driver, sockets.controller),
        channel(sockets.controller) as opened,
    ):
        controller = csi_pb2_grpc.ControllerStub(opened)
        creates = front_requests(stack, "CreateVolume")

        huge = await refused(
            controller.CreateVolume(create_request(f"pvc-{uuid.uuid4()}", 100000, {"type": "gp3"}))
        )
        assert huge.code() is grpc.StatusCode.OUT_OF_RANGE, huge.details()
        assert "1-65536 GiB" in (huge.details() or "")
        default_type = await refused(
            controller.CreateVolume(create_request(f"pvc-{uuid.uuid4()}", 100000, {}))
        )
        assert default_type.code() is grpc.StatusCode.OUT_OF_RANGE, default_type.details()
        bad_type = await refused(
            controller.CreateVolume(create_request(f"pvc-{uuid.uuid4()}", 10, {"type": "gp9"}))
        )
        assert bad_type.code() is grpc.StatusCode.INVALID_ARGUMENT, bad_type.details()
        assert "gp3, gp2, io1, io2, st1, sc1, standard" in (bad_type.details() or "")
        unknown = await refused(
            controller.CreateVolume(create_request(f"pvc-{uuid.uuid4()}", 10, {"colour": "red"}))
        )
        assert unknown.code() is grpc.StatusCode.INVALID_ARGUMENT, unknown.details()
        assert "iopsPerGB" in (unknown.details() or "")
        assert front_requests(stack, "CreateVolume") == creates, "a refused volume reached EC2"

        # Within the limits it is made; an expand past its type's limit reads it, changes nothing.
        made = await controller.CreateVolume(
            create_request(f"pvc-{uuid.uuid4()}", 1, {"type": "gp2"})
        )
        volume_id = made.volume.volume_id
        assert front_requests(stack, "CreateVolume") > creates
        try:
            modifies = front_requests(stack, "ModifyVolume")
            for gib, limit in ((20000, "1-16384 GiB"), (100000, "65536 GiB")):
                expand = await refused(
                    controller.ControllerExpandVolume(
                        csi_pb2.ControllerExpandVolumeRequest(
                            volume_id=volume_id,
                            capacity_range=csi_pb2.CapacityRange(required_bytes=gib * GIB),
                        )
                    )
                )
                assert expand.code() is grpc.StatusCode.OUT_OF_RANGE, expand.details()
                assert limit in (expand.details() or "")
            assert front_requests(stack, "ModifyVolume") == modifies
        finally:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await controller.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=volume_id))


def aws_error(call: Any, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        call(**kwargs)
    error = raised.value.response["Error"]
    return str(error["Code"]), str(error["Message"])


@pytest.mark.parametrize(
    ("kwargs", "code", "message"),
    [
        pytest.param(
            {"Size": 100000, "VolumeType": "gp3"},
            "InvalidParameterValue",
            "Volume of 100000GiB is too large for volume type gp3; maximum is 65536GiB",
            id="gp3-too-large",
        ),
        pytest.param(
            {"Size": 20000},
            "InvalidParameterValue",
            "too large for volume type gp2; maximum is 16384GiB",
            id="default-gp2-too-large",
        ),
        pytest.param(
            {"Size": 100, "VolumeType": "st1"},
            "InvalidParameterValue",
            "Volume of 100GiB is too small; minimum is 125GiB",
            id="st1-too-small",
        ),
        pytest.param(
            {"Size": 100, "VolumeType": "gp3", "Iops": 90000},
            "InvalidParameterValue",
            "Volume iops of 90000 is too high; maximum is 80000.",
            id="gp3-iops",
        ),
        pytest.param(
            {"Size": 20, "VolumeType": "gp3", "Iops": 15000},
            "InvalidParameterValue",
            "Iops to volume size ratio of 750.000000 is too high; maximum is 500",
            id="gp3-ratio",
        ),
        pytest.param(
            {"Size": 100, "VolumeType": "gp3", "Throughput": 1000},
            "InvalidParameterValue",
            "to iops ratio",
            id="gp3-throughput-ratio",
        ),
        pytest.param(
            {"Size": 100, "VolumeType": "io1"},
            "MissingParameter",
            "iops",
            id="io1-no-iops",
        ),
        pytest.param(
            {"Size": 100, "VolumeType": "gp2", "Iops": 300},
            "InvalidParameterCombination",
            "iops is not supported for gp2",
            id="gp2-iops",
        ),
        pytest.param(
            {"Size": 100, "VolumeType": "io2", "Iops": 1000, "Throughput": 200},
            "InvalidParameterCombination",
            "gp3",
            id="io2-throughput",
        ),
    ],
)
def test_front_refuses_volumes_as_aws(
    settings: Settings, kwargs: dict[str, Any], code: str, message: str
) -> None:
    ec2 = aws_client("ec2", AWS.section(settings).endpoint_url)
    found_code, text = aws_error(ec2.create_volume, AvailabilityZone=ZONE, **kwargs)
    assert (found_code, message in text) == (code, True), text


def test_front_checks_modify_volume_against_the_volume(settings: Settings) -> None:
    ec2 = aws_client("ec2", AWS.section(settings).endpoint_url)
    gp2 = ec2.create_volume(AvailabilityZone=ZONE, Size=100, VolumeType="gp2")["VolumeId"]
    io1 = ec2.create_volume(AvailabilityZone=ZONE, Size=100, VolumeType="io1", Iops=5000)[
        "VolumeId"
    ]
    try:
        code, text = aws_error(ec2.modify_volume, VolumeId=gp2, Size=20000)
        assert code == "InvalidParameterValue" and "maximum is 16384GiB" in text
        code, text = aws_error(ec2.modify_volume, VolumeId=gp2, Size=50)
        assert code == "InvalidParameterValue" and "smaller than existing size" in text
        # Growing within the limits passes; 20000 IOPS on 200 GiB is 100 per GiB (io1: 50); a
        # new type within its own limits passes.
        ec2.modify_volume(VolumeId=io1, Size=200)
        code, text = aws_error(ec2.modify_volume, VolumeId=io1, Iops=20000)
        assert code == "InvalidParameterValue" and "ratio" in text
        ec2.modify_volume(VolumeId=gp2, Size=20000, VolumeType="gp3")
    finally:
        for volume_id in (gp2, io1):
            with contextlib.suppress(botocore.exceptions.ClientError):
                ec2.delete_volume(VolumeId=volume_id)
