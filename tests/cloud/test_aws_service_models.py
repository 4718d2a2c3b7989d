"""botocore service models without documentation: what is dropped, what clients still do.

The loader is installed on every AWS driver's session, so the conformance suite's AWS backend
(moto) exercises it end to end; these tests pin what it drops and what it must keep.
"""

from __future__ import annotations

from typing import Any

import pytest

from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.service_models import slim_service_model
from devstack.backends.aws import aws_settings


def _model() -> dict[str, Any]:
    return {
        "documentation": "The service.",
        "metadata": {"protocol": "ec2"},
        "clientContextParams": {"Accelerate": {"type": "boolean", "documentation": "kept"}},
        "operations": {
            "DescribeThings": {
                "name": "DescribeThings",
                "input": {"shape": "DescribeThingsRequest", "documentation": "in"},
                "output": {"shape": "DescribeThingsResult"},
                "errors": [{"shape": "NotFound", "documentation": "gone"}],
                "documentation": "Describes things.",
                "documentationUrl": "https://example.com",
            }
        },
        "shapes": {
            "DescribeThingsRequest": {
                "type": "structure",
                "members": {"Ids": {"shape": "IdList", "documentation": "the ids"}},
                "documentation": "request",
            },
            "IdList": {"type": "list", "member": {"shape": "String", "documentation": "an id"}},
            "Tags": {
                "type": "map",
                "key": {"shape": "String", "documentation": "k"},
                "value": {"shape": "String", "documentation": "v"},
            },
        },
    }


def test_documentation_is_dropped_everywhere_botocore_only_reads_it_for_help() -> None:
    slim = slim_service_model(_model())
    assert "documentation" not in slim
    operation = slim["operations"]["DescribeThings"]
    assert operation == {
        "name": "DescribeThings",
        "input": {"shape": "DescribeThingsRequest"},
        "output": {"shape": "DescribeThingsResult"},
        "errors": [{"shape": "NotFound"}],
    }
    assert slim["shapes"]["DescribeThingsRequest"] == {
        "type": "structure",
        "members": {"Ids": {"shape": "IdList"}},
    }
    assert slim["shapes"]["IdList"]["member"] == {"shape": "String"}
    assert slim["shapes"]["Tags"]["key"] == slim["shapes"]["Tags"]["value"] == {"shape": "String"}


def test_client_context_parameters_keep_their_documentation() -> None:
    """botocore indexes ``documentation`` of each client context parameter."""
    slim = slim_service_model(_model())
    assert slim["clientContextParams"]["Accelerate"]["documentation"] == "kept"


@pytest.mark.parametrize("service", ["ec2", "elb", "elbv2", "s3", "sqs"], ids=str)
def test_driver_clients_are_built_on_the_slim_models(service: str) -> None:
    driver = AwsDriver(aws_settings("http://127.0.0.1:9"))
    model = driver.session.client(service).meta.service_model
    description = model._service_description
    assert type(description) is dict
    assert all("documentation" not in op for op in description["operations"].values())
    assert model.operation_names  # the model is whole
