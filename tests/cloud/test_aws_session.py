"""The AWS session's derived sessions: other client settings on one boto3 session."""

from __future__ import annotations

from typing import Any

import pytest

from cloudloop.cloud.aws.base import AwsBase
from cloudloop.cloud.aws.settings import AwsSettings


def settings() -> AwsSettings:
    return AwsSettings.model_validate(
        {
            "region": "us-east-1",
            "endpoint_url": "http://127.0.0.1:1",
            "access_key_id": "a",
            "secret_access_key": "b",
        }
    )


def test_a_derived_session_shares_the_boto3_session_not_the_clients() -> None:
    base = AwsBase(settings())
    base.cluster = "c"
    long_poll = base.derived(timeout_s=30.0, endpoint_url="http://127.0.0.1:2")

    assert long_poll._session is base._session and long_poll._lock is base._lock
    assert long_poll.cluster == "c"
    assert (long_poll.settings.timeout_s, base.settings.timeout_s) == (30.0, 10.0)
    sqs, ec2 = long_poll.client("sqs"), base.client("ec2")
    assert sqs is long_poll.client("sqs") and "sqs" not in base._clients
    assert ec2 is base.client("ec2") and "ec2" not in long_poll._clients
    sqs_config: Any = sqs.meta.config  # botocore's Config: its stubs name no timeouts
    ec2_config: Any = ec2.meta.config
    assert sqs_config.read_timeout == 30.0
    assert sqs.meta.endpoint_url == "http://127.0.0.1:2"
    assert ec2_config.read_timeout == 10.0
    assert ec2.meta.endpoint_url == "http://127.0.0.1:1"


def test_a_derived_session_changes_client_settings_only() -> None:
    with pytest.raises(ValueError, match="region"):
        AwsBase(settings()).derived(region="eu-west-1")
