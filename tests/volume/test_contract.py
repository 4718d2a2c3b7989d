"""Volume workflow identity and the mapping of cloud errors onto CSI codes."""

from __future__ import annotations

from typing import Any

import botocore.exceptions
import pytest

from cloudloop.cloud import errors
from cloudloop.cloud.aws.volumes import ebs_calling, is_volume_id
from cloudloop.messages.volume import (
    Code,
    code_for,
    create_workflow_id,
    operation_name,
    volume_workflow_id,
)


@pytest.mark.parametrize(
    ("made", "expected"),
    [
        pytest.param(create_workflow_id("pvc-1"), "volume-create/pvc-1", id="create"),
        pytest.param(volume_workflow_id("vol-1"), "volume/vol-1", id="per-volume"),
        pytest.param(operation_name("attach", "vol-1", "i-1"), "attach/vol-1/i-1", id="attach"),
        pytest.param(operation_name("detach", "vol-1", "i-1"), "detach/vol-1/i-1", id="detach"),
        pytest.param(operation_name("expand", "vol-1"), "expand/vol-1", id="expand"),
        pytest.param(operation_name("volume-delete", "vol-1"), "volume-delete/vol-1", id="delete"),
    ],
)
def test_workflow_identity(made: str, expected: str) -> None:
    assert made == expected


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        pytest.param("NotFound", Code.NOT_FOUND, id="not-found"),
        pytest.param("AlreadyExists", Code.ALREADY_EXISTS, id="already-exists"),
        pytest.param("FailedPrecondition", Code.FAILED_PRECONDITION, id="failed-precondition"),
        pytest.param("OutOfRange", Code.OUT_OF_RANGE, id="out-of-range"),
        pytest.param("ResourceExhausted", Code.RESOURCE_EXHAUSTED, id="resource-exhausted"),
        pytest.param("OperationPending", Code.ABORTED, id="operation-pending"),
        pytest.param("InvalidRequest", Code.INVALID_ARGUMENT, id="invalid"),
        pytest.param("NotSupported", Code.UNIMPLEMENTED, id="not-supported"),
        pytest.param("CloudUnreachable", Code.UNAVAILABLE, id="unreachable"),
        pytest.param("CloudAuthFailed", Code.PERMISSION_DENIED, id="auth"),
        pytest.param("SomethingNew", Code.INTERNAL, id="unknown"),
        pytest.param(None, Code.INTERNAL, id="none"),
    ],
)
def test_error_kind_to_csi_code(kind: str | None, code: Code) -> None:
    assert code_for(kind) is code


def test_every_cloud_error_kind_has_a_code() -> None:
    assert all(code_for(kind) is not Code.INTERNAL for kind in errors.KINDS)


def _client_error(code: str, status: int = 400) -> botocore.exceptions.ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return botocore.exceptions.ClientError(response, "AttachVolume")


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        pytest.param("VolumeInUse", errors.FailedPrecondition, id="volume-in-use"),
        pytest.param("IncorrectState", errors.FailedPrecondition, id="incorrect-state"),
        pytest.param("InvalidVolume.ZoneMismatch", errors.FailedPrecondition, id="zone-mismatch"),
        pytest.param("AttachmentLimitExceeded", errors.ResourceExhausted, id="attach-limit"),
        pytest.param("InvalidVolume.NotFound", errors.NotFound, id="volume-not-found"),
        pytest.param("InvalidParameterValue", errors.InvalidRequest, id="bad-parameter"),
        pytest.param("RequestLimitExceeded", errors.CloudThrottled, id="throttled"),
    ],
)
def test_ebs_error_codes(code: str, kind: type[errors.CloudError]) -> None:
    with pytest.raises(kind), ebs_calling("AttachVolume"):
        raise _client_error(code)


@pytest.mark.parametrize(
    ("volume_id", "valid"),
    [
        pytest.param("vol-0123456789abcdef0", True, id="long"),
        pytest.param("vol-12345678", True, id="short"),
        pytest.param("fake-vol-id", False, id="csi-sanity-fake"),
        pytest.param("vol-XYZ", False, id="not-hex"),
        pytest.param("", False, id="empty"),
    ],
)
def test_volume_id_shape(volume_id: str, valid: bool) -> None:
    assert is_volume_id(volume_id) is valid
