"""The AWS registration Secret (``d8-node-manager-cloud-provider``): Deckhouse's AWS keys (the
``aws`` provider values the machine template reads), the Cluster API keys of CAPA's kinds."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import pytest
from pydantic import SecretStr

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.registration import registration_values
from cloudloop.cloud.aws.settings import AwsNodeDefaults, AwsSettings
from cloudloop.kube.resources import SECRETS
from starters.registration import write_secrets
from tests.fakes import MemoryKube


def decoded(data: dict[str, str]) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in data.items()}


@pytest.fixture
def aws_section() -> AwsSettings:
    return AwsSettings(
        region="eu-west-1",
        access_key_id=SecretStr("AKIAEXAMPLE"),
        secret_access_key=SecretStr("s3cr3t-never-logged"),
        instances=AwsNodeDefaults(
            ami="ami-0a1b2c3d",
            additional_security_groups=["sg-0node"],
            associate_public_ip_address=True,
            iam_profile_name="pfx-node",
        ),
        zone_to_subnet_id_map={"eu-west-1b": "subnet-0b", "eu-west-1a": "subnet-0a"},
        key_name="pfx",
        tags={"team": "infra"},
        load_balancer_security_group="sg-0lb",
        ssh_public_key="ssh-ed25519 AAAA test",
    )


def test_values_as_deckhouse_renders_them(aws_section: AwsSettings) -> None:
    values = decoded(registration_values(aws_section))
    aws = json.loads(values.pop("aws"))
    assert values == {
        "type": "aws",
        "region": "eu-west-1",
        "zones": '["eu-west-1a","eu-west-1b"]',
        "instanceClassAPIVersion": "v1",
        "instanceClassKind": "AWSInstanceClass",
        "machineClassKind": "",  # no MCM: the node manager uses Cluster API
        "capiClusterKind": "AWSCluster",
        "capiClusterAPIVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "capiClusterAPIGroup": "infrastructure.cluster.x-k8s.io",
        "capiClusterName": "aws",
        "capiMachineTemplateKind": "AWSMachineTemplate",
        "capiMachineTemplateAPIVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "capiMachineTemplateAPIGroup": "infrastructure.cluster.x-k8s.io",
        "sshPublicKey": "ssh-ed25519 AAAA test",
    }
    assert aws == {
        "providerAccessKeyId": "AKIAEXAMPLE",
        "providerSecretAccessKey": "s3cr3t-never-logged",
        "region": "eu-west-1",
        "instances": {
            "ami": "ami-0a1b2c3d",
            "additionalSecurityGroups": ["sg-0node"],
            "associatePublicIPAddress": True,
            "iamProfileName": "pfx-node",
        },
        "internal": {"zoneToSubnetIdMap": {"eu-west-1a": "subnet-0a", "eu-west-1b": "subnet-0b"}},
        "loadBalancerSecurityGroup": "sg-0lb",
        "keyName": "pfx",
        "tags": {"team": "infra"},
    }


def test_the_key_pair_can_come_from_the_credentials_file(tmp_path: Path) -> None:
    path = tmp_path / "credentials"
    path.write_text(
        "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = d\n"
        "[ops]\naws_access_key_id = AKIAOPS\naws_secret_access_key = o\n"
    )
    section = AwsSettings(credentials_file=path, profile="ops", zones=["a"])
    values = decoded(registration_values(section))
    aws = json.loads(values["aws"])
    assert (aws["providerAccessKeyId"], aws["providerSecretAccessKey"]) == ("AKIAOPS", "o")
    assert values["zones"] == '["a"]'
    chain = json.loads(decoded(registration_values(AwsSettings()))["aws"])
    assert (chain["providerAccessKeyId"], chain["providerSecretAccessKey"]) == ("", "")


def test_both_secrets_are_written_once_and_the_key_never_logged(
    caplog: pytest.LogCaptureFixture, aws_section: AwsSettings
) -> None:
    kube = MemoryKube()
    caplog.set_level(logging.DEBUG)
    assert AWS.registration is not None
    bodies = AWS.registration(aws_section)
    assert write_secrets(kube, bodies) == 2
    assert write_secrets(kube, bodies) == 0  # unchanged: no write
    for name in ("d8-node-manager-cloud-provider", "d8-node-manager-cloud-provider-aws"):
        secret = kube.get(SECRETS, name, "kube-system")
        assert secret is not None
        labels = secret["metadata"]["labels"]
        assert labels["cloud-provider.deckhouse.io/registration"] == ""
        assert labels["cloud-provider.deckhouse.io/name"] == "aws"
    assert "s3cr3t-never-logged" not in caplog.text
    assert "AKIAEXAMPLE" not in caplog.text
