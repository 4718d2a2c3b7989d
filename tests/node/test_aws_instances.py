"""The AWS driver's pure parts: providerID parsing and botocore error classification."""

from __future__ import annotations

from typing import Any

import botocore.exceptions
import pytest

from cloudloop.cloud import errors
from cloudloop.cloud.aws.driver import AwsDriver, translate
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.models import MachineSpec


@pytest.mark.parametrize(
    ("provider_id", "instance_id"),
    [
        pytest.param(
            "aws:///us-east-1a/i-0123456789abcdef0", "i-0123456789abcdef0", id="with-zone"
        ),
        pytest.param("aws:////i-0abc1234", "i-0abc1234", id="empty-zone"),
        pytest.param("aws://us-east-1a/i-0abc1234", "i-0abc1234", id="two-slashes"),
        pytest.param("i-0abc1234", "i-0abc1234", id="bare-short-id"),
    ],
)
def test_instance_id_from_provider_id(provider_id: str, instance_id: str) -> None:
    assert (
        AwsDriver(AwsSettings()).instances.instance_id_from_provider_id(provider_id) == instance_id
    )


@pytest.mark.parametrize(
    "provider_id",
    [
        pytest.param("gce://project/zone/name", id="other-cloud"),
        pytest.param("aws:///us-east-1a/", id="no-instance"),
        pytest.param("", id="empty"),
        pytest.param("aws:///us-east-1a/i-garbage", id="garbage-id"),
        pytest.param("aws:///us-east-1a/i-0123456789ABCDEF0", id="upper-case"),
        pytest.param("aws:///us-east-1a/i-0123456789abcdef", id="sixteen-digits"),
        pytest.param("aws:///us-east-1a/i-0123456789abcdef0/x", id="trailing-segment"),
    ],
)
def test_bad_provider_id_is_invalid_request(provider_id: str) -> None:
    with pytest.raises(errors.InvalidRequest):
        AwsDriver(AwsSettings()).instances.instance_id_from_provider_id(provider_id)


def _client_error(code: str, status: int) -> botocore.exceptions.ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return botocore.exceptions.ClientError(response, "DescribeInstances")


@pytest.mark.parametrize(
    ("exc", "kind", "retryable"),
    [
        pytest.param(_client_error("AuthFailure", 401), errors.CloudAuthFailed, False, id="auth"),
        pytest.param(
            _client_error("UnauthorizedOperation", 403),
            errors.CloudAuthFailed,
            False,
            id="forbidden",
        ),
        pytest.param(
            _client_error("RequestLimitExceeded", 503), errors.CloudThrottled, True, id="throttled"
        ),
        pytest.param(
            _client_error("InvalidInstanceID.NotFound", 400), errors.NotFound, False, id="not-found"
        ),
        pytest.param(
            _client_error("InvalidParameterValue", 400), errors.InvalidRequest, False, id="invalid"
        ),
        pytest.param(_client_error("InternalError", 500), errors.CloudError, True, id="server"),
        pytest.param(
            botocore.exceptions.EndpointConnectionError(endpoint_url="http://x"),
            errors.CloudUnreachable,
            True,
            id="unreachable",
        ),
        pytest.param(
            botocore.exceptions.ReadTimeoutError(endpoint_url="http://x"),
            errors.CloudUnreachable,
            True,
            id="timeout",
        ),
        pytest.param(
            botocore.exceptions.NoCredentialsError(),
            errors.CloudAuthFailed,
            False,
            id="no-credentials",
        ),
    ],
)
def test_translate(exc: Exception, kind: type[errors.CloudError], retryable: bool) -> None:
    translated = translate("DescribeInstances", exc)
    assert type(translated) is kind
    assert translated.retryable is retryable
    assert translated.provider == "aws"


def test_unreachable_is_never_not_found() -> None:
    """Fail closed: an unanswered call must not look like a positive "does not exist"."""
    exc = botocore.exceptions.ConnectTimeoutError(endpoint_url="http://x")
    assert not isinstance(translate("DescribeInstances", exc), errors.NotFound)


def test_machines_are_a_capability_and_need_a_cluster_name() -> None:
    """AWS drives Cluster API machines (node groups); without a cluster name it refuses rather
    than tag instances for no cluster."""
    driver = AwsDriver(AwsSettings())
    assert "machines" in driver.capabilities
    with pytest.raises(errors.InvalidRequest, match="cluster name"):
        driver.machines.delete_machine(
            MachineSpec(name="m-1", namespace="ns", cluster="c", machine_uid="u")
        )
