"""AWS layout steps repeat (finding first) while AWS settles, and fail at once otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from cloudloop.cloud import errors
from cloudloop.cloud.aws.layout_resources import AwsLayoutResources
from cloudloop.cloud.aws.settings import AwsSettings


def resources() -> AwsLayoutResources:
    return AwsLayoutResources(AwsSettings(endpoint_url="http://127.0.0.1:9"), poll_s=0, wait_s=5)


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(
            errors.InvalidRequest("aws", "DeleteSubnet", "DependencyViolation: in use"),
            id="dependency",
        ),
        pytest.param(
            errors.InvalidRequest("aws", "DeleteRole", "DeleteConflict: profile"), id="iam-conflict"
        ),
        pytest.param(
            errors.NotFound("aws", "AssociateAddress", "InvalidInstanceID.NotFound: i-1"),
            id="unseen-id",
        ),
    ],
)
def test_a_settling_refusal_repeats_the_step(error: errors.CloudError) -> None:
    calls: list[int] = []

    def step() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise error
        return "done"

    assert resources()._patiently(step) == "done"
    assert len(calls) == 3


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(
            errors.InvalidRequest("aws", "RunInstances", "InvalidParameterValue: type"),
            id="invalid",
        ),
        pytest.param(
            errors.NotFound("aws", "DescribeImages", "InvalidAMIID.NotFound: ami-1"), id="no-image"
        ),
        pytest.param(errors.CloudAuthFailed("aws", "CreateVpc", "AuthFailure"), id="auth"),
    ],
)
def test_any_other_error_ends_the_step_at_once(error: errors.CloudError) -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        raise error

    with pytest.raises(type(error)):
        resources()._patiently(step)
    assert len(calls) == 1


def test_iam_policies_compare_as_iam_does() -> None:
    """A lone value is a one-element list, actions and statements are unordered (Terraform's
    ``awspolicyequivalence``): an adopted upstream policy is not rewritten on every converge."""
    from cloudloop.cloud.aws.layout_resources import equivalent_policy

    ours: dict[str, Any] = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["ec2:DescribeTags", "ec2:A"], "Resource": "*"},
            {"Effect": "Allow", "Action": "s3:Get", "Resource": "*"},
        ],
    }
    upstream: dict[str, Any] = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:Get"], "Resource": ["*"]},
            {"Effect": "Allow", "Action": ["ec2:A", "ec2:DescribeTags"], "Resource": ["*"]},
        ],
    }
    assert equivalent_policy(ours) == equivalent_policy(upstream)
    lone = {"Version": "2012-10-17", "Statement": upstream["Statement"][0]}
    assert equivalent_policy(lone) == equivalent_policy(
        {"Version": "2012-10-17", "Statement": [ours["Statement"][1]]}
    )
    narrower = {**upstream, "Statement": [{**upstream["Statement"][0], "Resource": ["arn:x"]}]}
    assert equivalent_policy(narrower) != equivalent_policy(upstream)
