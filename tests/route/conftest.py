"""Fixtures of the route tests: the AWS driver with its EC2 client stubbed (botocore's Stubber),
for the driver's own route calls."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.stub import Stubber
from pydantic import SecretStr

from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.settings import AwsSettings


@pytest.fixture
def stubbed() -> Iterator[tuple[AwsDriver, Stubber]]:
    driver = AwsDriver(
        AwsSettings(
            region="us-east-1",
            access_key_id=SecretStr("x"),
            secret_access_key=SecretStr("y"),
        )
    )
    stubber = Stubber(driver.session.client("ec2"))
    with stubber:
        yield driver, stubber
    stubber.assert_no_pending_responses()
