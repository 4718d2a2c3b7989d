"""The AWS limits the front enforces, and its rate limiter (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.aws_limits import RateLimiter, check_limits, service_of, throttled


def filter_values(count: int, name: str = "instance-id") -> dict[str, Any]:
    params: dict[str, Any] = {"Action": "DescribeInstances", "Filter.1.Name": name}
    params.update({f"Filter.1.Value.{i + 1}": f"i-{i:017x}" for i in range(count)})
    return params


@pytest.mark.parametrize(
    ("service", "action", "params", "code"),
    [
        pytest.param("ec2", "DescribeInstances", filter_values(200), None, id="200-values"),
        pytest.param(
            "ec2", "DescribeInstances", filter_values(201), "FilterLimitExceeded", id="201-values"
        ),
        pytest.param(
            "ec2", "DescribeInstances", {"MaxResults": "4"}, "InvalidParameterValue", id="max-4"
        ),
        pytest.param("ec2", "DescribeInstances", {"MaxResults": "1000"}, None, id="max-1000"),
        pytest.param(
            "ec2",
            "DescribeInstances",
            {"MaxResults": "10", "InstanceId.1": "i-1"},
            "InvalidParameterCombination",
            id="max-with-ids",
        ),
        pytest.param(
            "ec2", "DescribeRouteTables", {"MaxResults": "101"}, "InvalidParameterValue", id="rt"
        ),
        pytest.param(
            "sqs", "ReceiveMessage", {"MaxNumberOfMessages": 11}, "InvalidParameterValue", id="sqs"
        ),
        pytest.param(
            "sqs", "ReceiveMessage", {"WaitTimeSeconds": 21}, "InvalidParameterValue", id="wait"
        ),
        pytest.param(
            "sqs",
            "DeleteMessageBatch",
            {"Entries": [{}] * 11},
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            id="batch",
        ),
        pytest.param(
            "elasticloadbalancing",
            "DescribeTags",
            {f"LoadBalancerNames.member.{i}": "x" for i in range(1, 22)},
            "ValidationError",
            id="elb-tags",
        ),
    ],
)
def test_limits(service: str, action: str, params: dict[str, Any], code: str | None) -> None:
    refusal = check_limits(service, action, params)
    assert (refusal.code if refusal else None) == code


def test_service_from_the_signature() -> None:
    header = "AWS4-HMAC-SHA256 Credential=testing/20240501/us-east-1/ec2/aws4_request, X=y"
    assert service_of(header) == "ec2"
    assert service_of("") == ""


@pytest.mark.parametrize(
    ("service", "status", "code"),
    [
        pytest.param("ec2", 503, "RequestLimitExceeded", id="ec2"),
        pytest.param("elasticloadbalancing", 400, "Throttling", id="elb"),
        pytest.param("sqs", 400, "ThrottlingException", id="sqs"),
    ],
)
def test_throttled_answers(service: str, status: int, code: str) -> None:
    refusal = throttled(service)
    assert (refusal.status, refusal.code) == (status, code)


def test_rate_limit_refuses_past_the_burst() -> None:
    limiter = RateLimiter(rate_per_s=0.001, burst=3)
    assert [limiter.admit("ec2") for _ in range(5)] == [True, True, True, False, False]
    assert limiter.admit("sqs")  # per service


def test_storm_refuses_a_share_then_ends() -> None:
    limiter = RateLimiter()
    limiter.configure({"storm": {"fraction": 0.5, "duration_s": 60}})
    admitted = sum(limiter.admit("ec2") for _ in range(1000))
    assert 400 < admitted < 600
    limiter.configure({"storm": {}})
    assert all(limiter.admit("ec2") for _ in range(100))
