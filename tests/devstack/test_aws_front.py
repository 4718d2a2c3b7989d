"""The AWS front against the stack: real AWS limits and throttling in front of moto."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
import pytest

from cloudloop.cloud import errors
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from devstack.aws_front import set_latency, set_limits, stats, throttling_storm
from devstack.local import LocalStack

pytestmark = pytest.mark.stack


def front_client(stack: LocalStack, service: str) -> Any:
    make: Any = boto3.client
    return make(
        service,
        region_name="us-east-1",
        endpoint_url=stack.aws_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=botocore.config.Config(retries={"mode": "standard", "max_attempts": 1}),
    )


@pytest.fixture
def calm(stack: LocalStack) -> Iterator[None]:
    yield
    set_limits(stack.aws_endpoint, rate_per_s=None, storm={})


def code_of(call: Any) -> str:
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        call()
    return str(raised.value.response["Error"]["Code"])


def test_the_product_talks_to_the_front(stack: LocalStack, settings: Settings) -> None:
    assert AWS.section(settings).endpoint_url == stack.aws_endpoint != stack.moto_endpoint


def test_limits_moto_would_accept(stack: LocalStack) -> None:
    ec2 = front_client(stack, "ec2")
    values = [f"i-{i:017x}" for i in range(201)]
    assert code_of(
        lambda: ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": values}])
    ) == ("FilterLimitExceeded")
    assert ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": values[:200]}])
    assert code_of(lambda: ec2.describe_instances(MaxResults=2)) == "InvalidParameterValue"
    sqs = front_client(stack, "sqs")
    queue = sqs.create_queue(QueueName="front-limits")["QueueUrl"]
    assert (
        code_of(lambda: sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=11))
        == "InvalidParameterValue"
    )


def test_storm_answers_request_limit_exceeded(
    stack: LocalStack, settings: Settings, calm: None
) -> None:
    throttling_storm(stack.aws_endpoint, fraction=1.0, duration_s=30, services=("ec2",))
    ec2 = front_client(stack, "ec2")
    assert code_of(ec2.describe_availability_zones) == "RequestLimitExceeded"
    driver = AwsDriver(AWS.section(settings).model_copy(update={"max_attempts": 1}))
    with pytest.raises(errors.CloudThrottled):
        driver.instances.list_instances(["i-0123456789abcdef0"])
    assert front_client(stack, "elb").describe_load_balancers() is not None  # ec2 only
    refused = stats(stack.aws_endpoint)["refused"]
    assert refused.get("ec2:DescribeInstances:RequestLimitExceeded", 0) >= 1


def test_rate_limit(stack: LocalStack, calm: None) -> None:
    set_limits(stack.aws_endpoint, rate_per_s=0.01, burst=2)
    ec2 = front_client(stack, "ec2")
    ec2.describe_availability_zones()
    ec2.describe_availability_zones()
    assert code_of(ec2.describe_availability_zones) == "RequestLimitExceeded"


def test_latency_delays_each_answer_without_serialising(stack: LocalStack) -> None:
    """The cloud-latency option: every answer 0.3-0.4 s late, concurrent requests still in
    parallel (8 at once take far less than 8 x 0.3 s)."""
    ec2 = front_client(stack, "ec2")
    set_latency(stack.aws_endpoint, min_s=0.3, max_s=0.4)
    try:
        started = time.monotonic()
        ec2.describe_availability_zones()
        assert time.monotonic() - started >= 0.3
        clients = [front_client(stack, "ec2") for _ in range(8)]
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda c: c.describe_availability_zones(), clients))
        assert 0.3 <= time.monotonic() - started < 8 * 0.3
    finally:
        set_latency(stack.aws_endpoint)
