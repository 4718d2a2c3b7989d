"""The one instrumented-call wrapper every driver uses: count the call, translate its failure.

``with cloud_call(provider, operation, translate): ...`` runs one SDK request; any exception
becomes a :class:`~cloudloop.cloud.errors.CloudError` through the provider's ``translate``.

Rules:
- Every call is counted once in ``cloud_api_requests_total{provider,operation,outcome}`` with
  one outcome vocabulary for every cloud (:data:`OUTCOMES`), derived from the error class only,
  so dashboards and benchmarks read the same way whatever the SDK.
- A ``CloudError`` raised inside (a driver's own check) is counted by its class and passes as is;
  anything else is translated, and the SDK exception is kept as ``__cause__``.
- Its time, success or not, goes to ``cloud_api_request_duration_seconds{provider,operation}``.
- ``found`` turns a positive "no such thing" answer that is not an exception (an empty lookup)
  into the ``not_found`` outcome without raising.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from cloudloop.cloud import errors
from cloudloop.metrics import CLOUD_API_DURATION, CLOUD_API_REQUESTS

#: The outcomes of ``cloud_api_requests_total``, the same for every provider.
OUTCOMES = ("success", "not_found", "throttled", "unreachable", "auth_failed", "invalid", "error")

Translate = Callable[[str, BaseException], errors.CloudError]

_OUTCOME_OF: tuple[tuple[type[errors.CloudError], str], ...] = (
    (errors.NotFound, "not_found"),
    (errors.CloudThrottled, "throttled"),
    (errors.CloudUnreachable, "unreachable"),
    (errors.CloudAuthFailed, "auth_failed"),
    (errors.InvalidRequest, "invalid"),
    (errors.OutOfRange, "invalid"),
    (errors.AlreadyExists, "invalid"),
)


def outcome_for(kind: type[errors.CloudError]) -> str:
    """The counted outcome of a call that failed with an error of class ``kind``."""
    for cls, outcome in _OUTCOME_OF:
        if issubclass(kind, cls):
            return outcome
    return "error"


def outcome_of(error: errors.CloudError | None) -> str:
    """The counted outcome of a call that raised ``error`` (``None``: it succeeded)."""
    return "success" if error is None else outcome_for(type(error))


def count(provider: str, operation: str, outcome: str) -> None:
    CLOUD_API_REQUESTS.labels(provider, operation, outcome).inc()


def observe(provider: str, operation: str, seconds: float) -> None:
    """Record the time one request took (drivers that count through SDK hooks call this)."""
    CLOUD_API_DURATION.labels(provider, operation).observe(seconds)


@dataclass
class CallResult:
    """Set ``found = False`` inside the block when the cloud answered "none" without an error."""

    found: bool = True


@contextmanager
def cloud_call(provider: str, operation: str, translate: Translate) -> Iterator[CallResult]:
    """Count one cloud request and translate its failure into a ``CloudError``."""
    result = CallResult()
    started = time.monotonic()
    try:
        yield result
    except errors.CloudError as raised:
        count(provider, operation, outcome_of(raised))
        raise
    except Exception as exc:
        translated = translate(operation, exc)
        count(provider, operation, outcome_of(translated))
        raise translated from exc
    finally:
        observe(provider, operation, time.monotonic() - started)
    count(provider, operation, "success" if result.found else "not_found")
