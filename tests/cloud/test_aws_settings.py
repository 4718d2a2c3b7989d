"""Deckhouse's AWS settings, each where it lands, against moto behind the AWS front: the
cluster's ``tags`` on machines, CSI volumes and snapshots, and the CCM's load balancer and
security groups; ``zones`` in the discovery data and refusing volumes and machines elsewhere;
``load_balancer_security_group`` as a Classic ELB's group; the IMDS options on machines."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.loadbalancers import security_group_name
from devstack.backends.aws import (
    ZONES,
    MachineCloud,
    aws_client,
    launch_instance,
    machine_cloud,
)
from devstack.local import LocalStack, StackOptions

pytestmark = pytest.mark.stack

TAGS = {"team": "storage", "cost-center": "42"}


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto and the AWS front alone (no Temporal, no control plane)."""
    local = LocalStack(
        StackOptions(state_dir=tmp_path_factory.mktemp("aws-settings"), temporal=False, kube=())
    )
    local.start()
    try:
        yield local.aws_endpoint
    finally:
        local.stop()


@pytest.fixture(scope="module")
def cloud(endpoint: str) -> MachineCloud:
    return machine_cloud(endpoint, f"c{uuid.uuid4().hex[:6]}")


def driver(endpoint: str, cloud: MachineCloud, **settings: Any) -> AwsDriver:
    made = AwsDriver(cloud.settings(endpoint, tags=TAGS, **settings))
    made.cluster = cloud.cluster
    return made


def tags_of(raw: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in raw.get("Tags") or []}


def test_tags_on_csi_volumes_and_snapshots(endpoint: str, cloud: MachineCloud) -> None:
    aws = driver(endpoint, cloud)
    ec2 = aws_client("ec2", endpoint)
    volume = aws.volumes.create_volume(
        models.VolumeSpec(
            name="pvc-tags",
            size_gib=1,
            zone=ZONES[0],
            cluster=cloud.cluster,
            tags={"team": "the-class"},  # the StorageClass's tagSpecification wins
        )
    )
    [raw] = ec2.describe_volumes(VolumeIds=[volume.id])["Volumes"]
    tags = tags_of(raw)
    assert tags["team"] == "the-class" and tags["cost-center"] == "42"
    assert tags["CSIVolumeName"] == "pvc-tags"
    snapshot = aws.snapshots.create_snapshot(
        models.SnapshotSpec(name="snap-tags", source_volume_id=volume.id, cluster=cloud.cluster)
    )
    [raw] = ec2.describe_snapshots(SnapshotIds=[snapshot.id])["Snapshots"]
    assert {k: v for k, v in tags_of(raw).items() if k in TAGS} == TAGS
    aws.snapshots.delete_snapshot(snapshot.id)
    aws.volumes.delete_volume(volume.id)


def test_zones_restrict_discovery_volumes_and_machines(endpoint: str, cloud: MachineCloud) -> None:
    aws = driver(endpoint, cloud, zones=[ZONES[1]])
    assert [z.name for z in aws.discovery.discovery_data().zones] == [ZONES[1]]
    assert {z.name for z in driver(endpoint, cloud).discovery.discovery_data().zones} >= set(ZONES)
    with pytest.raises(errors.InvalidRequest, match="not one of the cluster's zones"):
        aws.volumes.create_volume(models.VolumeSpec(name="pvc-z", size_gib=1, zone=ZONES[0]))
    spec = models.MachineSpec(
        name="aws-zone",
        namespace="ns",
        cluster="c1",
        machine_uid=str(uuid.uuid4()),
        provider_spec={"instanceType": "t3.micro"},
        failure_domain=ZONES[0],
    )
    with pytest.raises(errors.InvalidRequest, match="not one of the cluster's zones"):
        aws.machines.create_machine(spec, b"")


def test_imds_options_on_machines(endpoint: str, cloud: MachineCloud) -> None:
    aws = driver(
        endpoint,
        cloud,
        instances={
            **cloud.settings(endpoint).instances.model_dump(),
            "http_tokens": "required",
            "http_put_response_hop_limit": 1,
        },
    )
    ec2 = aws_client("ec2", endpoint)
    specs = [
        models.MachineSpec(
            name=f"aws-imds-{i}",
            namespace="ns",
            cluster="c1",
            machine_uid=str(uuid.uuid4()),
            provider_spec={"instanceType": "t3.micro", **extra},
            failure_domain=ZONES[1],
        )
        for i, extra in enumerate([{}, {"instanceMetadataOptions": {"httpPutResponseHopLimit": 2}}])
    ]
    found = []
    for spec in specs:
        made = aws.machines.create_machine(spec, b"#cloud-config\n")
        [raw] = ec2.describe_instances(InstanceIds=[made.id])["Reservations"][0]["Instances"]
        options = raw["MetadataOptions"]
        found.append((options["HttpTokens"], options["HttpPutResponseHopLimit"]))
        assert {k: v for k, v in tags_of(raw).items() if k in TAGS} == TAGS
    assert found == [("required", 1), ("required", 2)]  # the machine's own option wins
    for spec in specs:
        while not aws.machines.delete_machine(spec):
            pass


def test_load_balancer_tags_and_security_group(endpoint: str, cloud: MachineCloud) -> None:
    ec2 = aws_client("ec2", endpoint)
    lb_group = ec2.create_security_group(
        GroupName=f"{cloud.cluster}-loadbalancer",
        Description="the cluster's load balancers",
        VpcId=cloud.network.vpc_id,
    )["GroupId"]
    instance = launch_instance(ec2, ZONES[0])

    def spec(name: str, annotations: dict[str, str]) -> models.LoadBalancerSpec:
        return models.LoadBalancerSpec(
            name=name,
            cluster=cloud.cluster,
            service=f"default/{name}",
            service_uid=str(uuid.uuid4()),
            ports=[models.LoadBalancerPort(port=80, node_port=30080)],
            backend_instance_ids=[instance],
            annotations=annotations,
        )

    plain = driver(endpoint, cloud)
    shared = driver(endpoint, cloud, load_balancer_security_group=lb_group)
    elb = aws_client("elb", endpoint)
    own = spec("a" + uuid.uuid4().hex[:20], {})
    plain.load_balancers.ensure_load_balancer(own)
    [found] = elb.describe_tags(LoadBalancerNames=[own.name])["TagDescriptions"]
    assert {k: v for k, v in tags_of(found).items() if k in TAGS} == TAGS
    [group] = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [security_group_name(own.name)]}]
    )["SecurityGroups"]
    assert {k: v for k, v in tags_of(group).items() if k in TAGS} == TAGS

    with_group = spec(
        "a" + uuid.uuid4().hex[:20],
        {"service.beta.kubernetes.io/aws-load-balancer-additional-resource-tags": "team=web"},
    )
    shared.load_balancers.ensure_load_balancer(with_group)
    [lb] = elb.describe_load_balancers(LoadBalancerNames=[with_group.name])[
        "LoadBalancerDescriptions"
    ]
    assert lb_group in lb["SecurityGroups"]
    assert not ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [security_group_name(with_group.name)]}]
    )["SecurityGroups"]  # no group of its own
    [found] = elb.describe_tags(LoadBalancerNames=[with_group.name])["TagDescriptions"]
    assert tags_of(found)["team"] == "web" and tags_of(found)["cost-center"] == "42"
    assert shared.load_balancers.load_balancer_drift(with_group) == []
    for each, aws in ((own, plain), (with_group, shared)):
        aws.load_balancers.delete_load_balancer(each.name)
