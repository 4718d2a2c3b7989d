"""Errors a cloud driver raises, classified so activities can decide retry vs. fail fast.

A cloud error is never "not found": only :class:`NotFound` means the cloud positively said a
resource does not exist, and only then may a caller act on absence (fail closed).
"""

from __future__ import annotations


class CloudError(Exception):
    """Any failure talking to a cloud. ``retryable`` tells whether trying again can help."""

    kind = "CloudError"
    retryable = True

    def __init__(self, provider: str, operation: str, message: str) -> None:
        super().__init__(f"{provider} {operation}: {message}")
        self.provider = provider
        self.operation = operation
        self.message = message


class CloudUnreachable(CloudError):
    """The endpoint did not answer (connection refused, DNS, timeout)."""

    kind = "CloudUnreachable"


class CloudAuthFailed(CloudError):
    """Credentials were rejected or lack permission; retrying will not help."""

    kind = "CloudAuthFailed"
    retryable = False


class CloudThrottled(CloudError):
    kind = "CloudThrottled"


class InvalidRequest(CloudError):
    """The cloud refused the request as invalid (bad parameter, unknown type)."""

    kind = "InvalidRequest"
    retryable = False


class NotFound(CloudError):
    """The cloud answered without error that the resource does not exist."""

    kind = "NotFound"
    retryable = False


class AlreadyExists(CloudError):
    kind = "AlreadyExists"
    retryable = False


class FailedPrecondition(CloudError):
    """The resource is in a state that forbids the request (e.g. deleting an attached volume)."""

    kind = "FailedPrecondition"
    retryable = False


class OutOfRange(CloudError):
    """A size or other quantity outside what the request or the cloud allows."""

    kind = "OutOfRange"
    retryable = False


class ResourceExhausted(CloudError):
    """No capacity fits the request: no allowed zone, no free device name (attach limit)."""

    kind = "ResourceExhausted"
    retryable = False


class QuotaExceeded(CloudError):
    """The project's or account's quota does not fit the request (instances, cores, RAM, volumes).

    Retryable: the quota frees up when other resources go or an operator raises it, so callers
    retry with backoff and report the cloud's message meanwhile."""

    kind = "QuotaExceeded"


class InsufficientCapacity(CloudError):
    """The cloud has no capacity for the request right now (no Spot capacity, no host fits).

    Retryable with backoff, as upstream machine controllers do."""

    kind = "InsufficientCapacity"


class OperationPending(CloudError):
    """Another operation on the same resource is running; try again when it has finished."""

    kind = "OperationPending"
    retryable = False


class NotSupported(CloudError):
    """This cloud does not implement the capability (upstream's ``ImplementedElsewhere``)."""

    kind = "NotSupported"
    retryable = False

    def __init__(self, provider: str, capability: str) -> None:
        super().__init__(
            provider, capability, f"{capability} is not supported by the {provider} driver"
        )
        self.capability = capability


#: Every error kind, by its ``kind`` name (the Temporal ``ApplicationError.type``).
KINDS: dict[str, type[CloudError]] = {
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
