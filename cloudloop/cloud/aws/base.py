"""The AWS driver's base: boto3 session and clients, call counting, error translation.

Every boto3 client the driver makes counts its calls in ``cloud_api_requests_total`` through
botocore's event hooks, and every botocore failure is translated into a
:mod:`cloudloop.cloud.errors` class, so callers never see a raw SDK exception.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
import botocore.session

from cloudloop.cloud import errors
from cloudloop.cloud.driver import CloudDriver
from cloudloop.metrics import CLOUD_API_REQUESTS
from cloudloop.settings import AwsSettings

PROVIDER = "aws"

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
_THROTTLE_CODES = {
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
}


def _count_call(event_name: str = "", http_response: Any = None, **_: Any) -> None:
    """botocore ``after-call.<service>.<Operation>``: one API call answered (after SDK retries)."""
    status = getattr(http_response, "status_code", 0) or 0
    outcome = "success" if 200 <= status < 300 else ("throttled" if status == 429 else "error")
    CLOUD_API_REQUESTS.labels(PROVIDER, event_name.rsplit(".", 1)[-1], outcome).inc()


def _count_error(event_name: str = "", **_: Any) -> None:
    """botocore ``after-call-error.<service>.<Operation>``: the call got no answer at all."""
    CLOUD_API_REQUESTS.labels(PROVIDER, event_name.rsplit(".", 1)[-1], "unreachable").inc()


def translate(operation: str, exc: Exception) -> errors.CloudError:
    """Map a botocore exception onto the contract's error classes."""
    if isinstance(
        exc, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError
    ):
        return errors.CloudAuthFailed(PROVIDER, operation, "no usable credentials")
    if isinstance(exc, botocore.exceptions.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        message = str(exc.response.get("Error", {}).get("Message", code))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in _AUTH_CODES:
            return errors.CloudAuthFailed(PROVIDER, operation, f"{code}: {message}")
        if code in _THROTTLE_CODES:
            return errors.CloudThrottled(PROVIDER, operation, f"{code}: {message}")
        if code.endswith(".NotFound") or code.endswith("NotFound"):
            return errors.NotFound(PROVIDER, operation, f"{code}: {message}")
        if code.endswith("AlreadyExists") or code.endswith(".Duplicate"):
            return errors.AlreadyExists(PROVIDER, operation, f"{code}: {message}")
        if 400 <= status < 500:
            return errors.InvalidRequest(PROVIDER, operation, f"{code}: {message}")
        return errors.CloudError(PROVIDER, operation, f"{code or status}: {message}")
    if isinstance(
        exc,
        botocore.exceptions.EndpointConnectionError
        | botocore.exceptions.ConnectionError
        | botocore.exceptions.ConnectTimeoutError
        | botocore.exceptions.ReadTimeoutError,
    ):
        return errors.CloudUnreachable(PROVIDER, operation, type(exc).__name__)
    if isinstance(exc, botocore.exceptions.BotoCoreError):
        return errors.CloudError(PROVIDER, operation, type(exc).__name__)
    return errors.CloudError(PROVIDER, operation, f"{type(exc).__name__}: {exc}")


@contextlib.contextmanager
def calling(operation: str) -> Iterator[None]:
    try:
        yield
    except errors.CloudError:
        raise
    except Exception as exc:
        raise translate(operation, exc) from exc


class AwsBase(CloudDriver):
    """Session and lazily made boto3 clients, shared across threads (boto3 clients are)."""

    provider = PROVIDER

    def __init__(self, settings: AwsSettings) -> None:
        self.settings = settings
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._session = self._make_session()

    def _make_session(self) -> boto3.Session:
        core = botocore.session.Session(profile=self.settings.profile)
        if self.settings.credentials_file is not None:
            core.set_config_variable("credentials_file", str(self.settings.credentials_file))
        key, secret = self.settings.access_key_id, self.settings.secret_access_key
        if key is not None and secret is not None:
            core.set_credentials(key.get_secret_value(), secret.get_secret_value())
        return boto3.Session(botocore_session=core, region_name=self.settings.region)

    def client(self, service: str) -> Any:
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
                client.meta.events.register("after-call", _count_call)
                client.meta.events.register("after-call-error", _count_error)
                self._clients[service] = client
            return self._clients[service]
