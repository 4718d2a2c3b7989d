"""The AWS session: boto3 session and clients, call counting, error translation.

The session is what every capability object of the driver (:mod:`cloudloop.cloud.aws.driver`)
takes; the node termination handler and the layout resources make their own.

Every boto3 client the driver makes counts its HTTP requests in ``cloud_api_requests_total``
through botocore's event hooks (each page and each SDK retry is one request), with the shared
outcome vocabulary of :mod:`cloudloop.cloud.calls`, and times them in
``cloud_api_request_duration_seconds``; every botocore failure is translated into a
:mod:`cloudloop.cloud.errors` class, so callers never see a raw SDK exception. Service models
load without their documentation (:mod:`cloudloop.cloud.aws.service_models`): a client's model
stays resident for the client's lifetime.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, overload

import boto3
import botocore.config
import botocore.exceptions
import botocore.session

from cloudloop.cloud import errors
from cloudloop.cloud.aws.service_models import use_slim_models
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.calls import count, observe, outcome_for

if TYPE_CHECKING:  # the mypy_boto3 stubs: types only, never imported at run time
    from mypy_boto3_autoscaling import AutoScalingClient
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_sqs import SQSClient

NAME = "aws"

_AUTH_CODES = {
    "AuthFailure",
    "UnauthorizedOperation",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "AccessDeniedException",
    "ExpiredToken",
    "OptInRequired",
}
#: The account's limits (retryable: they free up or are raised).
_QUOTA_CODES = {"InstanceLimitExceeded", "VcpuLimitExceeded"}
#: No capacity for the request right now (retryable with backoff, as CAPA/MCM requeue).
_CAPACITY_CODES = {"InsufficientInstanceCapacity", "InsufficientCapacity", "SpotMaxPriceTooLow"}
_THROTTLE_CODES = {
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
}


#: When this thread's current boto3 call began (``before-call``), for its duration.
_call_started = threading.local()


def _start_call(**_: Any) -> None:
    """botocore ``before-call.<service>.<Operation>``: a call begins on this thread."""
    _call_started.at = time.monotonic()


def _observe(event_name: str) -> None:
    started = getattr(_call_started, "at", None)
    if started is not None:
        _call_started.at = None
        observe(NAME, event_name.rsplit(".", 1)[-1], time.monotonic() - started)


def _count_call(
    event_name: str = "", http_response: Any = None, parsed: Any = None, **_: Any
) -> None:
    """botocore ``after-call.<service>.<Operation>``: one HTTP request answered."""
    _observe(event_name)
    status = getattr(http_response, "status_code", 0) or 0
    if 200 <= status < 300:
        outcome = "success"
    else:
        code = (
            str(((parsed or {}).get("Error") or {}).get("Code", ""))
            if isinstance(parsed, dict)
            else ""
        )
        outcome = outcome_for(error_class(code, status))
    count(NAME, event_name.rsplit(".", 1)[-1], outcome)


def _count_error(event_name: str = "", **_: Any) -> None:
    """botocore ``after-call-error.<service>.<Operation>``: the request got no answer at all."""
    _observe(event_name)
    count(NAME, event_name.rsplit(".", 1)[-1], "unreachable")


#: "Does not exist" answers whose code does not end in ``NotFound`` (SQS: a queue looked up by
#: name before it is made, or deleted behind the termination handler's back).
_NOT_FOUND_CODES = frozenset({"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue"})


def error_class(code: str, status: int) -> type[errors.CloudError]:
    """The contract's error class for an AWS error code and HTTP status."""
    if code in _AUTH_CODES:
        return errors.CloudAuthFailed
    if code in _THROTTLE_CODES or status == 429:
        return errors.CloudThrottled
    if code in _QUOTA_CODES:
        return errors.QuotaExceeded
    if code in _CAPACITY_CODES:
        return errors.InsufficientCapacity
    if code.endswith("NotFound") or code in _NOT_FOUND_CODES:
        return errors.NotFound
    if code.endswith("AlreadyExists") or code.endswith(".Duplicate"):
        return errors.AlreadyExists
    if 400 <= status < 500:
        return errors.InvalidRequest
    return errors.CloudError


def translate(operation: str, exc: BaseException) -> errors.CloudError:
    """Map a botocore exception onto the contract's error classes."""
    if isinstance(
        exc, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError
    ):
        return errors.CloudAuthFailed(NAME, operation, "no usable credentials")
    if isinstance(exc, botocore.exceptions.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        message = str(exc.response.get("Error", {}).get("Message", code))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        kind = error_class(code, status)
        detail = (
            f"{code}: {message}"
            if kind is not errors.CloudError
            else f"{code or status}: {message}"
        )
        return kind(NAME, operation, detail)
    if isinstance(
        exc,
        botocore.exceptions.EndpointConnectionError
        | botocore.exceptions.ConnectionError
        | botocore.exceptions.ConnectTimeoutError
        | botocore.exceptions.ReadTimeoutError,
    ):
        return errors.CloudUnreachable(NAME, operation, type(exc).__name__)
    if isinstance(exc, botocore.exceptions.BotoCoreError):
        return errors.CloudError(NAME, operation, type(exc).__name__)
    return errors.CloudError(NAME, operation, f"{type(exc).__name__}: {exc}")


@contextlib.contextmanager
def calling(operation: str) -> Iterator[None]:
    """Translate a boto3 failure; the requests themselves are counted by the botocore hooks."""
    try:
        yield
    except errors.CloudError:
        raise
    except Exception as exc:
        raise translate(operation, exc) from exc


#: Settings a boto3 client takes (not its session): :meth:`AwsBase.derived` may change them.
CLIENT_SETTINGS = frozenset({"timeout_s", "max_attempts", "endpoint_url"})


class AwsBase:
    """The session: settings and lazily made boto3 clients, shared across threads (boto3
    clients are), and the cluster the driver serves (set through the driver's ``cluster``)."""

    provider = NAME

    def __init__(self, settings: AwsSettings) -> None:
        self.settings = settings
        #: The cluster the driver serves (``CloudDriver.cluster``); empty: unknown.
        self.cluster = ""
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._session = self._make_session()

    def derived(self, **update: Any) -> AwsBase:
        """A session whose clients differ from this one's only in ``update`` (the client-level
        settings ``CLIENT_SETTINGS``: timeouts, retries, endpoint), on this one's boto3 session:
        its credentials, and the models and endpoint data it loaded (a boto3 session of its own
        loads them again, about 6 MB resident for an SQS client). Clients are made under one
        lock (a boto3 session makes no two at once safely)."""
        unknown = set(update) - CLIENT_SETTINGS
        if unknown:
            raise ValueError(f"not client-level settings: {sorted(unknown)}")
        other = copy.copy(self)  # the cluster, the lock and the boto3 session shared
        other.settings = self.settings.model_copy(update=update)
        other._clients = {}
        return other

    def _make_session(self) -> boto3.Session:
        core = botocore.session.Session(profile=self.settings.profile)
        use_slim_models(core)
        if self.settings.credentials_file is not None:
            core.set_config_variable("credentials_file", str(self.settings.credentials_file))
        key, secret = self.settings.access_key_id, self.settings.secret_access_key
        if key is not None and secret is not None:
            core.set_credentials(key.get_secret_value(), secret.get_secret_value())
        return boto3.Session(botocore_session=core, region_name=self.settings.region)

    @overload
    def client(self, service: Literal["ec2"]) -> EC2Client: ...
    @overload
    def client(self, service: Literal["autoscaling"]) -> AutoScalingClient: ...
    @overload
    def client(self, service: Literal["sqs"]) -> SQSClient: ...
    @overload
    def client(self, service: str) -> Any: ...
    def client(self, service: str) -> Any:
        """The boto3 client of ``service``: EC2's, Auto Scaling's and SQS's typed by their
        mypy_boto3 stubs (the others' answers are still plain dicts)."""
        with self._lock:
            if service not in self._clients:
                config = botocore.config.Config(
                    connect_timeout=self.settings.timeout_s,
                    read_timeout=self.settings.timeout_s,
                    retries={"mode": "standard", "max_attempts": self.settings.max_attempts},
                    max_pool_connections=50,
                )
                session: Any = self._session
                client = session.client(
                    service, endpoint_url=self.settings.endpoint_url, config=config
                )
                client.meta.events.register("before-call", _start_call)
                client.meta.events.register("after-call", _count_call)
                client.meta.events.register("after-call-error", _count_error)
                self._clients[service] = client
            return self._clients[service]
