"""Errors a cloud driver raises, classified so activities can decide retry vs. fail fast.

A cloud error is never "not found": only :class:`NotFound` means the cloud positively said a
resource does not exist, and only then may a caller act on absence (fail closed). Each class's
``kind`` is a :class:`~cloudloop.cloud.error_kinds.ErrorKind` (the ``ApplicationError.type``).
"""

from __future__ import annotations

from cloudloop.cloud.error_kinds import ErrorKind


class CloudError(Exception):
    """Any failure talking to a cloud. ``retryable`` tells whether trying again can help."""

    kind = ErrorKind.CLOUD_ERROR
    retryable = True

    def __init__(self, provider: str, operation: str, message: str) -> None:
        super().__init__(f"{provider} {operation}: {message}")
        self.provider = provider
        self.operation = operation
        self.message = message


class CloudUnreachable(CloudError):
    """The endpoint did not answer (connection refused, DNS, timeout)."""

    kind = ErrorKind.CLOUD_UNREACHABLE


class CloudAuthFailed(CloudError):
    """Credentials were rejected or lack permission; retrying will not help."""

    kind = ErrorKind.CLOUD_AUTH_FAILED
    retryable = False


class CloudThrottled(CloudError):
    kind = ErrorKind.CLOUD_THROTTLED


class InvalidRequest(CloudError):
    """The cloud refused the request as invalid (bad parameter, unknown type)."""

    kind = ErrorKind.INVALID_REQUEST
    retryable = False


class NotFound(CloudError):
    """The cloud answered without error that the resource does not exist."""

    kind = ErrorKind.NOT_FOUND
    retryable = False


class AlreadyExists(CloudError):
    kind = ErrorKind.ALREADY_EXISTS
    retryable = False


class FailedPrecondition(CloudError):
    """The resource is in a state that forbids the request (e.g. deleting an attached volume)."""

    kind = ErrorKind.FAILED_PRECONDITION
    retryable = False


class OutOfRange(CloudError):
    """A size or other quantity outside what the request or the cloud allows."""

    kind = ErrorKind.OUT_OF_RANGE
    retryable = False


class ResourceExhausted(CloudError):
    """No capacity fits the request: no allowed zone, no free device name (attach limit)."""

    kind = ErrorKind.RESOURCE_EXHAUSTED
    retryable = False


class QuotaExceeded(CloudError):
    """The project's or account's quota does not fit the request (instances, cores, RAM, volumes).

    Retryable: the quota frees up when other resources go or an operator raises it, so callers
    retry with backoff and report the cloud's message meanwhile."""

    kind = ErrorKind.QUOTA_EXCEEDED


class InsufficientCapacity(CloudError):
    """The cloud has no capacity for the request right now (no Spot capacity, no host fits).

    Retryable with backoff, as upstream machine controllers do."""

    kind = ErrorKind.INSUFFICIENT_CAPACITY


class OperationPending(CloudError):
    """Another operation on the same resource is running; try again when it has finished."""

    kind = ErrorKind.OPERATION_PENDING
    retryable = False


class ModificationCooldown(OperationPending):
    """The cloud refuses another change of this volume until a cooldown has passed (EBS: six
    hours after the last ``ModifyVolume``); ``retry_after_s`` says how long, 0 when unknown."""

    def __init__(
        self, provider: str, operation: str, message: str, retry_after_s: float = 0.0
    ) -> None:
        super().__init__(provider, operation, message)
        self.retry_after_s = retry_after_s


class NotSupported(CloudError):
    """This cloud does not implement the capability (upstream's ``ImplementedElsewhere``)."""

    kind = ErrorKind.NOT_SUPPORTED
    retryable = False

    def __init__(self, provider: str, capability: str) -> None:
        super().__init__(
            provider, capability, f"{capability} is not supported by the {provider} driver"
        )
        self.capability = capability


#: Every error kind, by its ``kind`` name (the Temporal ``ApplicationError.type``).
KINDS: dict[ErrorKind, type[CloudError]] = {
    cls.kind: cls
    for cls in (
        CloudError,
        CloudUnreachable,
        CloudAuthFailed,
        CloudThrottled,
        InvalidRequest,
        NotFound,
        AlreadyExists,
        FailedPrecondition,
        OutOfRange,
        ResourceExhausted,
        QuotaExceeded,
        InsufficientCapacity,
        OperationPending,
        NotSupported,
    )
}
