"""Error kinds: the ``ApplicationError.type`` of every classified failure, as one enum.

Drivers raise :class:`cloudloop.cloud.errors.CloudError` subclasses whose ``kind`` is a member;
activities raise them as ``ApplicationError(type=kind)``; workflows and the CSI code table compare
against the members, never against string literals (a test checks), so a renamed kind is one edit.
The drivers' layer owns it; :mod:`cloudloop.messages.errors` re-exports it for workflows.

Rules: pure data, imports nothing but the standard library; the values are the wire names and
never change.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorKind(StrEnum):
    CLOUD_ERROR = "CloudError"
    CLOUD_UNREACHABLE = "CloudUnreachable"
    CLOUD_AUTH_FAILED = "CloudAuthFailed"
    CLOUD_THROTTLED = "CloudThrottled"
    INVALID_REQUEST = "InvalidRequest"
    NOT_FOUND = "NotFound"
    ALREADY_EXISTS = "AlreadyExists"
    FAILED_PRECONDITION = "FailedPrecondition"
    OUT_OF_RANGE = "OutOfRange"
    RESOURCE_EXHAUSTED = "ResourceExhausted"
    QUOTA_EXCEEDED = "QuotaExceeded"
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    OPERATION_PENDING = "OperationPending"
    NOT_SUPPORTED = "NotSupported"
    #: Not a cloud error: a Kubernetes write kept conflicting (the drain's taints).
    CONFLICT = "Conflict"
