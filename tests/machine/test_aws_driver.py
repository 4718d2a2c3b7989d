"""The AWS machine driver against moto behind the dev stack's AWS front (its limits, its fault
switch): create → adopt on a second create → get → delete → nothing left, the launch request as
MCM makes it, each cloud error in its kind."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.driver import AwsDriver
from devstack.aws_front import clear_faults, ec2_lifecycle, inject_fault, stats
from devstack.backends.aws import (
    ZONES,
    MachineCloud,
    aws_client,
    machine_cloud,
    machine_instances,
    machine_volumes,
)
from devstack.local import LocalStack, StackOptions

pytestmark = pytest.mark.stack

USER_DATA = b"#cloud-config\nruncmd: [echo aws-driver]\n"


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto and the AWS front alone (no Temporal, no control plane)."""
    local = LocalStack(
        StackOptions(state_dir=tmp_path_factory.mktemp("aws-machines"), temporal=False, kube=())
    )
    local.start()
    try:
        yield local.aws_endpoint
    finally:
        local.stop()


@pytest.fixture(scope="module")
def cloud(endpoint: str) -> MachineCloud:
    return machine_cloud(endpoint, f"c{uuid.uuid4().hex[:6]}")


@pytest.fixture
def driver(endpoint: str, cloud: MachineCloud) -> Iterator[AwsDriver]:
    made = AwsDriver(cloud.settings(endpoint))
    made.cluster = cloud.cluster
    yield made
    clear_faults(endpoint)
    ec2_lifecycle(endpoint)


def machine(name: str, **provider_spec: Any) -> models.MachineSpec:
    return models.MachineSpec(
        name=name,
        namespace="ns",
        cluster="c1",
        machine_uid=str(uuid.uuid4()),
        provider_spec={"instanceType": "t3.micro", **provider_spec},
        failure_domain=ZONES[1],
    )


def describe(ec2: Any, instance_id: str) -> dict[str, Any]:
    raw: dict[str, Any] = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0][
        "Instances"
    ][0]
    return raw


def runs(endpoint: str) -> int:
    return int(stats(endpoint)["requests"].get("ec2:RunInstances", 0))


def test_create_adopt_get_delete(driver: AwsDriver, endpoint: str, cloud: MachineCloud) -> None:
    ec2 = aws_client("ec2", endpoint)
    spec = machine(
        "aws-m1",
        rootVolume={"size": 30, "type": "gp3", "iops": 3000},
        additionalTags={"cluster-owner": "the-class", "Name": "ignored"},
        spotMarketOptions={},
    )
    before = runs(endpoint)
    created = driver.machines.create_machine(spec, USER_DATA)
    assert created.provider_id == f"aws:///{ZONES[1]}/{created.id}"
    again = driver.machines.create_machine(spec, USER_DATA)
    assert again.id == created.id  # adopted, not launched twice
    assert runs(endpoint) == before + 1

    raw = describe(ec2, created.id)
    tags = {t["Key"]: t["Value"] for t in raw["Tags"]}
    assert tags == {
        "Name": "aws-m1",
        f"kubernetes.io/cluster/{cloud.cluster}": "1",
        f"kubernetes.io/role/{cloud.cluster}": "1",
        "cloudloop.io/machine-uid": spec.machine_uid,
        "cluster-owner": "the-class",  # the class's tag wins over the cluster's
    }
    [interface] = raw["NetworkInterfaces"]
    assert raw["SubnetId"] == cloud.subnets[ZONES[1]]
    assert [g["GroupId"] for g in interface["Groups"]] == [cloud.network.node_group_id]
    assert interface["Attachment"]["DeleteOnTermination"] is True
    assert raw["IamInstanceProfile"]["Arn"].endswith(f"/{cloud.profile}")
    assert raw["KeyName"] == cloud.cluster
    assert raw["InstanceLifecycle"] == "spot"
    assert raw["SourceDestCheck"] is False
    [device] = raw["BlockDeviceMappings"]
    assert device["Ebs"]["DeleteOnTermination"] is True
    [volume] = ec2.describe_volumes(VolumeIds=[device["Ebs"]["VolumeId"]])["Volumes"]
    assert (volume["Size"], volume["VolumeType"]) == (30, "gp3")
    assert {t["Key"]: t["Value"] for t in volume["Tags"]} == tags
    # A node's root volume is no data disk: discovery never reports it as orphaned.
    assert volume["VolumeId"] not in {
        d.id for d in driver.discovery.list_cluster_disks(cloud.cluster)
    }
    data = ec2.describe_instance_attribute(InstanceId=created.id, Attribute="userData")
    assert base64.b64decode(data["UserData"]["Value"]) == USER_DATA

    got = driver.machines.get_machine(spec)
    assert got is not None and got.id == created.id and got.provisioned

    # Another InfraMachine of the same name never adopts this one's instance.
    other = spec.model_copy(update={"machine_uid": str(uuid.uuid4()), "provider_spec": {
        "instanceType": "t3.micro"}})  # fmt: skip
    assert driver.machines.get_machine(other) is None
    second = driver.machines.create_machine(other, USER_DATA)
    assert second.id != created.id

    for each in (spec, other):
        assert driver.machines.delete_machine(each) is True
        assert driver.machines.delete_machine(each) is True  # idempotent
    gone = driver.machines.get_machine(spec)
    assert gone is not None and gone.failed and gone.phase == "terminated"
    assert machine_instances(ec2, cloud.cluster) == []
    assert machine_volumes(ec2, cloud.cluster) == []


def test_delete_waits_out_shutting_down(
    driver: AwsDriver, endpoint: str, cloud: MachineCloud
) -> None:
    ec2 = aws_client("ec2", endpoint)
    spec = machine("aws-slow")
    ec2_lifecycle(endpoint, pending_s=0.5, shutting_down_s=4.0)
    created = driver.machines.create_machine(spec, USER_DATA)
    assert created.phase == "pending" and not created.provisioned
    driver.session.settings = driver.session.settings.model_copy(update={"delete_wait_s": 0.5})
    assert (
        driver.machines.delete_machine(spec) is False
    )  # shutting-down: the caller heartbeats, calls again
    assert describe(ec2, created.id)["State"]["Name"] == "shutting-down"
    assert machine_volumes(ec2, cloud.cluster) != []
    driver.session.settings = driver.session.settings.model_copy(update={"delete_wait_s": 10.0})
    assert driver.machines.delete_machine(spec) is True
    assert machine_instances(ec2, cloud.cluster) == []
    assert machine_volumes(ec2, cloud.cluster) == []


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("InstanceLimitExceeded", 400, errors.QuotaExceeded),
        ("VcpuLimitExceeded", 400, errors.QuotaExceeded),
        ("InsufficientInstanceCapacity", 500, errors.InsufficientCapacity),
        ("InsufficientCapacity", 500, errors.InsufficientCapacity),
        ("SpotMaxPriceTooLow", 400, errors.InsufficientCapacity),
    ],
)
def test_quota_and_capacity_errors_are_retryable(
    driver: AwsDriver,
    endpoint: str,
    cloud: MachineCloud,
    code: str,
    status: int,
    kind: type[errors.CloudError],
) -> None:
    # A 500 is retried by botocore (max_attempts retries after the first): every attempt fails.
    count = driver.settings.max_attempts + 1 if status >= 500 else 1
    inject_fault(endpoint, "RunInstances", code, f"no {code} for you", status=status, count=count)
    with pytest.raises(kind) as raised:
        driver.machines.create_machine(machine(f"aws-{code.lower()}"), USER_DATA)
    assert raised.value.retryable and f"no {code} for you" in raised.value.message
    assert machine_instances(aws_client("ec2", endpoint), cloud.cluster) == []


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"instanceType": "t9.nano"}, "t9.nano"),
        ({"ami": {"id": "ami-0000000000000000f"}}, "ami-0000000000000000f"),
        ({"subnet": {"id": "subnet-0000000000000000f"}}, "subnet-0000000000000000f"),
        ({"additionalSecurityGroups": [{"id": "sg-0000000000000000f"}]}, "sg-0000000000000000f"),
    ],
    ids=["instance-type", "ami", "subnet", "security-group"],
)
def test_unknown_cloud_objects_are_invalid_requests(
    driver: AwsDriver, endpoint: str, cloud: MachineCloud, spec: dict[str, Any], says: str
) -> None:
    with pytest.raises(errors.InvalidRequest, match=says) as raised:
        driver.machines.create_machine(machine("aws-bad", **spec), USER_DATA)
    assert not raised.value.retryable
    assert machine_instances(aws_client("ec2", endpoint), cloud.cluster) == []


def test_no_subnet_for_the_failure_domain(driver: AwsDriver) -> None:
    spec = machine("aws-nozone").model_copy(update={"failure_domain": "default"})
    with pytest.raises(errors.InvalidRequest, match="no subnet for failure domain 'default'"):
        driver.machines.create_machine(spec, USER_DATA)
