"""The dev stack's moto extension (``devstack/moto_ext.py``), driven only through boto3: Classic
listeners keep their instance protocol and back-end policies, the predefined SSL policies are
listed, NLB subnet mappings keep their addresses, EC2 resources show their own tags; and the
local stack's moto runs it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from devstack.backends.aws import REGION, aws_client
from devstack.local import LocalStack
from devstack.moto_ext import CLASSIC_SSL_POLICIES, install


@pytest.fixture
def aws() -> Iterator[None]:
    install()
    with mock_aws():
        yield


def _subnets(ec2: Any) -> list[str]:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    return [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=f"{REGION}{z}")[
            "Subnet"
        ]["SubnetId"]
        for i, z in ((1, "a"), (2, "b"))
    ]


def _classic(elb: Any, subnet: str, cert: str) -> None:
    elb.create_load_balancer(
        LoadBalancerName="lb",
        Listeners=[
            {
                "Protocol": "HTTPS",
                "LoadBalancerPort": 443,
                "InstanceProtocol": "HTTP",
                "InstancePort": 30443,
                "SSLCertificateId": cert,
            },
            {"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080},
        ],
        Subnets=[subnet],
    )


def test_classic_listeners_keep_instance_protocol_and_backend_policies(aws: None) -> None:
    ec2, elb, acm = aws_client("ec2"), aws_client("elb"), aws_client("acm")
    cert = acm.request_certificate(DomainName="example.com")["CertificateArn"]
    _classic(elb, _subnets(ec2)[0], cert)
    elb.create_load_balancer_listeners(
        LoadBalancerName="lb",
        Listeners=[
            {
                "Protocol": "SSL",
                "LoadBalancerPort": 8443,
                "InstanceProtocol": "TCP",
                "InstancePort": 30843,
                "SSLCertificateId": cert,
            }
        ],
    )
    elb.create_load_balancer_policy(
        LoadBalancerName="lb",
        PolicyName="proxy",
        PolicyTypeName="ProxyProtocolPolicyType",
        PolicyAttributes=[{"AttributeName": "ProxyProtocol", "AttributeValue": "true"}],
    )
    elb.set_load_balancer_policies_for_backend_server(
        LoadBalancerName="lb", InstancePort=30843, PolicyNames=["proxy"]
    )
    [described] = elb.describe_load_balancers(LoadBalancerNames=["lb"])["LoadBalancerDescriptions"]
    protocols = {
        d["Listener"]["LoadBalancerPort"]: (
            d["Listener"]["Protocol"],
            d["Listener"]["InstanceProtocol"],
        )
        for d in described["ListenerDescriptions"]
    }
    assert protocols == {443: ("HTTPS", "HTTP"), 80: ("TCP", "TCP"), 8443: ("SSL", "TCP")}
    assert described["BackendServerDescriptions"] == [
        {"InstancePort": 30843, "PolicyNames": ["proxy"]}
    ]


def test_predefined_ssl_policies(aws: None) -> None:
    elb = aws_client("elb")
    names = [p["PolicyName"] for p in elb.describe_load_balancer_policies()["PolicyDescriptions"]]
    assert names == list(CLASSIC_SSL_POLICIES)
    [one] = elb.describe_load_balancer_policies(PolicyNames=["ELBSecurityPolicy-2016-08"])[
        "PolicyDescriptions"
    ]
    assert one["PolicyTypeName"] == "SSLNegotiationPolicyType"
    with pytest.raises(ClientError) as err:
        elb.describe_load_balancer_policies(PolicyNames=["ELBSecurityPolicy-1999-01"])
    assert err.value.response["Error"]["Code"] == "PolicyNotFound"


def test_nlb_subnet_mappings_show_their_addresses(aws: None) -> None:
    ec2, v2 = aws_client("ec2"), aws_client("elbv2")
    first, second = _subnets(ec2)
    eips = [ec2.allocate_address(Domain="vpc") for _ in range(2)]
    created = v2.create_load_balancer(
        Name="public",
        Type="network",
        SubnetMappings=[
            {"SubnetId": s, "AllocationId": e["AllocationId"]}
            for s, e in zip((first, second), eips, strict=True)
        ],
    )["LoadBalancers"][0]
    [described] = v2.describe_load_balancers(Names=["public"])["LoadBalancers"]
    for found in (created, described):
        addresses = {
            z["SubnetId"]: z["LoadBalancerAddresses"][0] for z in found["AvailabilityZones"]
        }
        assert addresses == {
            s: {"IpAddress": e["PublicIp"], "AllocationId": e["AllocationId"]}
            for s, e in zip((first, second), eips, strict=True)
        }
    internal = v2.create_load_balancer(
        Name="private",
        Type="network",
        Scheme="internal",
        SubnetMappings=[{"SubnetId": first, "PrivateIPv4Address": "10.0.1.10"}],
    )["LoadBalancers"][0]
    assert internal["AvailabilityZones"][0]["LoadBalancerAddresses"] == [
        {"PrivateIPv4Address": "10.0.1.10"}
    ]
    with pytest.raises(ClientError) as err:
        v2.create_load_balancer(
            Name="bad",
            Type="network",
            SubnetMappings=[{"SubnetId": first, "AllocationId": "eipalloc-0123456789abcdef0"}],
        )
    assert err.value.response["Error"]["Code"] == "AllocationIdNotFound"


def test_the_local_stack_runs_the_extension(stack: LocalStack) -> None:
    ec2, elb = aws_client("ec2", stack.moto_endpoint), aws_client("elb", stack.moto_endpoint)
    iam = aws_client("iam", stack.moto_endpoint)
    cert = iam.upload_server_certificate(
        ServerCertificateName=f"moto-ext-{id(stack)}",
        CertificateBody="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        PrivateKey="-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----",
    )["ServerCertificateMetadata"]["Arn"]
    name = f"moto-ext-{id(stack) % 100000}"
    elb.create_load_balancer(
        LoadBalancerName=name,
        Listeners=[
            {
                "Protocol": "HTTPS",
                "LoadBalancerPort": 443,
                "InstanceProtocol": "HTTP",
                "InstancePort": 30443,
                "SSLCertificateId": cert,
            }
        ],
        Subnets=[_subnets(ec2)[0]],
    )
    try:
        [described] = elb.describe_load_balancers(LoadBalancerNames=[name])[
            "LoadBalancerDescriptions"
        ]
        assert described["ListenerDescriptions"][0]["Listener"]["InstanceProtocol"] == "HTTP"
    finally:
        elb.delete_load_balancer(LoadBalancerName=name)


def test_subnet_ipv6_association_state(aws: None) -> None:
    ec2 = aws_client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16", AmazonProvidedIpv6CidrBlock=True)["Vpc"]
    block = vpc["Ipv6CidrBlockAssociationSet"][0]["Ipv6CidrBlock"].replace("/56", "/64")
    subnet = ec2.create_subnet(VpcId=vpc["VpcId"], CidrBlock="10.0.1.0/24", Ipv6CidrBlock=block)
    [described] = ec2.describe_subnets(SubnetIds=[subnet["Subnet"]["SubnetId"]])["Subnets"]
    [association] = described["Ipv6CidrBlockAssociationSet"]
    assert association["Ipv6CidrBlockState"] == {"State": "associated"}


def test_classic_listeners_deleted_together(aws: None) -> None:
    ec2, elb, acm = aws_client("ec2"), aws_client("elb"), aws_client("acm")
    _classic(
        elb, _subnets(ec2)[0], acm.request_certificate(DomainName="x.example")["CertificateArn"]
    )
    elb.delete_load_balancer_listeners(LoadBalancerName="lb", LoadBalancerPorts=[80, 443])
    [described] = elb.describe_load_balancers(LoadBalancerNames=["lb"])["LoadBalancerDescriptions"]
    assert described["ListenerDescriptions"] == []


def test_nlb_listener_modified_to_tls_and_back(aws: None) -> None:
    ec2, v2, acm = aws_client("ec2"), aws_client("elbv2"), aws_client("acm")
    first, second = _subnets(ec2)
    cert = acm.request_certificate(DomainName="x.example")["CertificateArn"]
    lb = v2.create_load_balancer(Name="nlb", Type="network", Subnets=[first, second])
    arn = lb["LoadBalancers"][0]["LoadBalancerArn"]
    vpc = lb["LoadBalancers"][0]["VpcId"]
    group = v2.create_target_group(Name="tg", Protocol="TCP", Port=30443, VpcId=vpc)
    forward = [{"Type": "forward", "TargetGroupArn": group["TargetGroups"][0]["TargetGroupArn"]}]
    listener = v2.create_listener(
        LoadBalancerArn=arn, Protocol="TCP", Port=443, DefaultActions=forward
    )["Listeners"][0]["ListenerArn"]
    with pytest.raises(ClientError) as err:
        v2.modify_listener(ListenerArn=listener, Protocol="TLS", DefaultActions=forward)
    assert err.value.response["Error"]["Code"] == "InvalidConfigurationRequest"
    v2.modify_listener(
        ListenerArn=listener,
        Protocol="TLS",
        Certificates=[{"CertificateArn": cert}],
        SslPolicy="ELBSecurityPolicy-TLS13-1-2-2021-06",
        DefaultActions=forward,
    )
    [tls] = v2.describe_listeners(ListenerArns=[listener])["Listeners"]
    assert (tls["Protocol"], tls["Certificates"], tls["SslPolicy"]) == (
        "TLS",
        [{"CertificateArn": cert}],
        "ELBSecurityPolicy-TLS13-1-2-2021-06",
    )
    v2.modify_listener(ListenerArn=listener, Protocol="TCP", DefaultActions=forward)
    [tcp] = v2.describe_listeners(ListenerArns=[listener])["Listeners"]
    assert tcp["Protocol"] == "TCP" and not tcp.get("Certificates") and not tcp.get("SslPolicy")


def test_resources_show_their_own_tags(aws: None) -> None:
    ec2 = aws_client("ec2")
    tagged = [{"ResourceType": "instance", "Tags": [{"Key": "role", "Value": "node"}]}]
    instances = ec2.run_instances(
        ImageId="ami-12c6146b", MinCount=3, MaxCount=3, TagSpecifications=tagged
    )["Instances"]
    first, second = instances[0]["InstanceId"], instances[1]["InstanceId"]
    ec2.create_tags(Resources=[first], Tags=[{"Key": "name", "Value": "first"}])
    volume = ec2.create_volume(
        AvailabilityZone=f"{REGION}a",
        Size=1,
        TagSpecifications=[{"ResourceType": "volume", "Tags": [{"Key": "pvc", "Value": "a"}]}],
    )["VolumeId"]

    described = {
        i["InstanceId"]: {t["Key"]: t["Value"] for t in i.get("Tags", [])}
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
    }
    [[only]] = [
        r["Instances"]
        for r in ec2.describe_instances(Filters=[{"Name": "tag:name", "Values": ["first"]}])[
            "Reservations"
        ]
    ]
    [shown_volume] = ec2.describe_volumes(VolumeIds=[volume])["Volumes"]

    assert described[first] == {"role": "node", "name": "first"}
    assert described[second] == {"role": "node"}
    assert only["InstanceId"] == first
    assert shown_volume["Tags"] == [{"Key": "pvc", "Value": "a"}]
    tag_rows = ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [first]}])["Tags"]
    assert {(t["Key"], t["ResourceType"]) for t in tag_rows} == {
        ("role", "instance"),
        ("name", "instance"),
    }


class _Clock:
    """``time`` for :mod:`devstack.moto_ext`'s lifecycle: stands still until a test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_instances_pass_through_pending_and_shutting_down(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a lifecycle set, a new instance is pending, then running; a terminated one
    shutting-down (its root volume still there), then terminated with the volume gone. The
    lifecycle's clock is the test's: each transition falls due exactly when it moves it."""
    from devstack import moto_ext

    clock = _Clock()
    monkeypatch.setattr(moto_ext, "time", clock)
    ec2 = aws_client("ec2")
    moto_ext.LIFECYCLE.update(pending_s=2.0, shutting_down_s=2.0)
    try:
        [raw] = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"]
        instance = raw["InstanceId"]

        def state() -> str:
            found = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]
            return str(found["Instances"][0]["State"]["Name"])

        def volumes() -> list[Any]:
            filters = [{"Name": "attachment.instance-id", "Values": [instance]}]
            return list(ec2.describe_volumes(Filters=filters)["Volumes"])

        assert raw["State"]["Name"] == "pending" and state() == "pending"
        clock.now += 1.9
        assert state() == "pending"
        clock.now += 0.1
        assert state() == "running"
        answer = ec2.terminate_instances(InstanceIds=[instance])["TerminatingInstances"][0]
        assert answer["CurrentState"]["Name"] == "shutting-down"
        assert state() == "shutting-down" and volumes()
        clock.now += 2.0
        assert not volumes()  # listing volumes settles the termination
        assert state() == "terminated"

        # Terminated while pending: it never comes up afterwards.
        moto_ext.LIFECYCLE.update(pending_s=0.2, shutting_down_s=0.0)
        [raw] = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"]
        instance = raw["InstanceId"]
        ec2.terminate_instances(InstanceIds=[instance])
        clock.now += 0.3  # past the moment it would have come up
        assert state() == "terminated"
    finally:
        moto_ext.LIFECYCLE.update(pending_s=0.0, shutting_down_s=0.0)


def test_a_new_volume_is_creating_then_available(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from devstack import moto_ext

    clock = _Clock()
    monkeypatch.setattr(moto_ext, "time", clock)
    ec2 = aws_client("ec2")
    moto_ext.LIFECYCLE.update(volume_creating_s=3.0)
    try:
        made = ec2.create_volume(AvailabilityZone="us-east-1a", Size=1)
        assert made["State"] == "creating"

        def state() -> str:
            [found] = ec2.describe_volumes(VolumeIds=[made["VolumeId"]])["Volumes"]
            return str(found["State"])

        clock.now += 2.9
        assert state() == "creating"
        clock.now += 0.1
        assert state() == "available"
    finally:
        moto_ext.LIFECYCLE.update(volume_creating_s=0.0)


def test_launches_check_image_type_and_interface_groups(aws: None) -> None:
    ec2 = aws_client("ec2")
    [subnet] = _subnets(ec2)[:1]

    def code(**run: Any) -> str:
        with pytest.raises(ClientError) as raised:
            ec2.run_instances(MinCount=1, MaxCount=1, **{"ImageId": "ami-12c6146b", **run})
        return str(raised.value.response["Error"]["Code"])

    assert code(ImageId="ami-0000000000000000f") == "InvalidAMIID.NotFound"
    assert code(InstanceType="t9.nano").startswith("InvalidInstanceType")
    interface = {"DeviceIndex": 0, "SubnetId": subnet, "Groups": ["sg-0000000000000000f"]}
    assert code(NetworkInterfaces=[interface]) == "InvalidGroup.NotFound"


def test_image_id_filter_answers_as_moto(aws: None) -> None:
    ec2 = aws_client("ec2")

    def ids(*values: str) -> list[str]:
        filters = [{"Name": "image-id", "Values": list(values)}]
        return [i["ImageId"] for i in ec2.describe_images(Filters=filters)["Images"]]

    assert ids("ami-12c6146b") == ["ami-12c6146b"]
    assert ids("ami-0000000000000000f") == []
    assert "ami-12c6146b" in ids("ami-12c6146*")
    assert sorted(ids("ami-12c6146b", "ami-0000000000000000f")) == ["ami-12c6146b"]
    [instance] = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"]
    assert instance["ImageId"] == "ami-12c6146b"
