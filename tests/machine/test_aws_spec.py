"""The AWSMachine spec (CAPA's names), the launch tags and how an instance reads as a machine:
pure rules, no EC2."""

from __future__ import annotations

from typing import Any

import pytest

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.machine_spec import (
    instance_tags,
    lookup_filters,
    parse_machine_spec,
    to_machine,
)


def test_a_full_spec_parses() -> None:
    spec = parse_machine_spec(
        {
            "instanceType": "m5.large",
            "ami": {"id": "ami-0a1b2c3d"},
            "iamInstanceProfile": "pfx-node",
            "additionalSecurityGroups": [{"id": "sg-0a1b2c3d"}],
            "subnet": {"id": "subnet-0123456789abcdef0"},
            "publicIP": True,
            "sshKeyName": "pfx",
            "rootVolume": {"size": 50, "type": "io1", "iops": 4000},
            "spotMarketOptions": {},
            "additionalTags": {"team": "infra"},
            "providerID": "aws:///a/i-0123456789abcdef0",  # written back: ignored
            "instanceID": "i-0123456789abcdef0",
            "cloudInit": {"insecureSkipSecretsManager": True},  # CAPA, not implemented: ignored
        }
    )
    assert spec.spot and spec.root_volume is not None and spec.root_volume.iops == 4000
    assert parse_machine_spec({"instanceType": "t3.micro"}).spot is False


@pytest.mark.parametrize(
    ("spec", "fields"),
    [
        ({}, ["instanceType"]),
        ({"instanceType": "T3"}, ["instanceType"]),
        (
            {"instanceType": "t3.micro", "ami": {"id": "x"}, "subnet": {"id": "y"}},
            ["ami", "subnet"],
        ),
        (
            {"instanceType": "t3.micro", "rootVolume": {"size": 2, "type": "gp9"}},
            ["rootVolume.size", "rootVolume.type"],
        ),
        ({"instanceType": "t3.micro", "rootVolume": {"size": 20, "iops": "3000"}}, ["iops"]),
        ({"instanceType": "t3.micro", "spotMarketOptions": {"maxPrice": "0.1"}}, ["maxPrice"]),
        ({"instanceType": "t3.micro", "additionalTags": {"aws:x": "1"}}, ["aws: keys"]),
        # the entry named by its index, never its value
        ({"instanceType": "t3.micro", "additionalSecurityGroups": [{"id": "x"}]}, ["entries 0"]),
        ({"instanceType": "t3.micro", "rootVolume": {"size": 20, "iops": 3000}}, ["gp2"]),
    ],
    ids=["empty", "type", "ids", "volume", "iops-string", "price", "tags", "groups", "iops-gp2"],
)
def test_a_bad_spec_names_every_bad_field(spec: dict[str, Any], fields: list[str]) -> None:
    with pytest.raises(errors.InvalidRequest) as raised:
        parse_machine_spec(spec)
    assert not raised.value.retryable
    for field in fields:
        assert field in raised.value.message


def test_tags_as_mcm_with_the_ownership_tag() -> None:
    tags = instance_tags(
        "uuid",
        "m1",
        "uid-1",
        {"team": "infra", "env": "prod", "Name": "cluster"},
        {"env": "dev", "Name": "class", "kubernetes.io/cluster/uuid": "shared"},
    )
    assert tags == {
        "kubernetes.io/cluster/uuid": "shared",  # a class may say owned/shared
        "kubernetes.io/role/uuid": "1",
        "team": "infra",
        "env": "dev",
        "Name": "m1",
        "cloudloop.io/machine-uid": "uid-1",
    }
    filters = lookup_filters("uuid", "m1", "uid-1", ("running",))
    assert {"Name": "tag:cloudloop.io/machine-uid", "Values": ["uid-1"]} in filters


def test_an_instance_reads_as_a_machine() -> None:
    raw = {
        "InstanceId": "i-0123456789abcdef0",
        "State": {"Name": "running"},
        "Placement": {"AvailabilityZone": "eu-west-1a"},
        "PrivateIpAddress": "10.0.1.5",
        "PrivateDnsName": "ip-10-0-1-5.eu-west-1.compute.internal",
        "PublicIpAddress": "203.0.113.5",
    }
    machine = to_machine(raw)
    assert machine.provider_id == "aws:///eu-west-1a/i-0123456789abcdef0"
    assert machine.provisioned
    assert [a.type for a in machine.addresses] == ["InternalIP", "ExternalIP", "InternalDNS"]
    pending = to_machine({**raw, "State": {"Name": "pending"}})
    assert pending.state is models.InstanceState.PENDING and not pending.addresses
    gone = to_machine({**raw, "State": {"Name": "terminated"}, "StateReason": {"Message": "x"}})
    assert gone.failed and "terminated" in gone.message
