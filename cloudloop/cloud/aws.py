"""The AWS driver: EC2 (instances, discovery) through boto3.

Every boto3 client the driver makes counts its calls in ``cloud_api_requests_total`` through
botocore's event hooks, and every botocore failure is translated into a
:mod:`cloudloop.cloud.errors` class, so callers never see a raw SDK exception.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
import botocore.session

from cloudloop.cloud import errors, models
from cloudloop.cloud.driver import Capability, CloudDriver
from cloudloop.metrics import CLOUD_API_REQUESTS
from cloudloop.settings import AwsSettings

PROVIDER = "aws"
#: DescribeInstances IDs per request (the issue's batching bound; AWS filters accept this many).
DESCRIBE_BATCH = 500

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
_STATE = {
    "pending": models.InstanceState.PENDING,
    "running": models.InstanceState.RUNNING,
    "stopping": models.InstanceState.STOPPING,
    "stopped": models.InstanceState.STOPPED,
    "shutting-down": models.InstanceState.TERMINATED,
    "terminated": models.InstanceState.TERMINATED,
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


class AwsDriver(CloudDriver):
    """AWS through boto3; clients are made lazily and shared across threads (boto3 clients are)."""

    provider = PROVIDER
    capabilities = frozenset({Capability.INSTANCES, Capability.DISCOVERY})

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

    # -- instances -------------------------------------------------------------------------
    def instance_id_from_provider_id(self, provider_id: str) -> str:
        """``aws:///<az>/<id>`` or ``aws://<az>/<id>`` or a bare ``i-…`` ID → the instance ID."""
        if not provider_id.startswith("aws://") and not provider_id.startswith("i-"):
            raise errors.InvalidRequest(
                PROVIDER, "ParseProviderID", f"not an AWS providerID: {provider_id!r}"
            )
        instance_id = provider_id.rstrip("/").rsplit("/", 1)[-1]
        if not instance_id.startswith("i-"):
            raise errors.InvalidRequest(
                PROVIDER, "ParseProviderID", f"no instance ID in {provider_id!r}"
            )
        return instance_id

    def list_instances(self, ids: Sequence[str]) -> models.InstanceListing:
        return self._describe("instance-id", ids, key=lambda i: i.id)

    def find_instances_by_name(self, names: Sequence[str]) -> models.InstanceListing:
        return self._describe("private-dns-name", names, key=lambda i: i.private_dns_name)

    def _describe(
        self, filter_name: str, values: Sequence[str], *, key: Any
    ) -> models.InstanceListing:
        listing = models.InstanceListing()
        unique = list(dict.fromkeys(values))
        ec2 = self.client("ec2")
        for start in range(0, len(unique), DESCRIBE_BATCH):
            chunk = unique[start : start + DESCRIBE_BATCH]
            token: str | None = None
            while True:
                kwargs: dict[str, Any] = {"Filters": [{"Name": filter_name, "Values": chunk}]}
                if token:
                    kwargs["NextToken"] = token
                with calling("DescribeInstances"):
                    page = ec2.describe_instances(**kwargs)
                listing.requests += 1
                for reservation in page.get("Reservations", []):
                    for raw in reservation.get("Instances", []):
                        instance = self.to_instance(raw)
                        listing.found[key(instance)] = instance
                token = page.get("NextToken")
                if not token:
                    break
        return listing

    def to_instance(self, raw: dict[str, Any]) -> models.Instance:
        zone = raw.get("Placement", {}).get("AvailabilityZone", "")
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", []) or []}
        addresses: list[models.NodeAddress] = []
        for iface in raw.get("NetworkInterfaces", []) or []:
            for private in iface.get("PrivateIpAddresses", []) or []:
                if private.get("PrivateIpAddress"):
                    addresses.append(
                        models.NodeAddress(type="InternalIP", address=private["PrivateIpAddress"])
                    )
        if not addresses and raw.get("PrivateIpAddress"):
            addresses.append(models.NodeAddress(type="InternalIP", address=raw["PrivateIpAddress"]))
        if raw.get("PublicIpAddress"):
            addresses.append(models.NodeAddress(type="ExternalIP", address=raw["PublicIpAddress"]))
        for dns_type, field in (
            ("InternalDNS", "PrivateDnsName"),
            ("Hostname", "PrivateDnsName"),
            ("ExternalDNS", "PublicDnsName"),
        ):
            if raw.get(field):
                addresses.append(models.NodeAddress(type=dns_type, address=raw[field]))
        return models.Instance(
            id=raw["InstanceId"],
            provider_id=f"aws:///{zone}/{raw['InstanceId']}",
            name=tags.get("Name", ""),
            state=_STATE.get(raw.get("State", {}).get("Name", ""), models.InstanceState.UNKNOWN),
            instance_type=raw.get("InstanceType", ""),
            zone=zone,
            region=zone[:-1] if zone else self.settings.region,
            private_dns_name=raw.get("PrivateDnsName", ""),
            addresses=addresses,
            tags=tags,
        )

    # -- discovery -------------------------------------------------------------------------
    def zones(self) -> list[models.Zone]:
        with calling("DescribeAvailabilityZones"):
            answer = self.client("ec2").describe_availability_zones()
        return [
            models.Zone(
                name=z["ZoneName"],
                region=z.get("RegionName", self.settings.region),
                state=z.get("State", "available"),
            )
            for z in answer.get("AvailabilityZones", [])
        ]

    def instance_types(self) -> list[models.InstanceType]:
        found: list[models.InstanceType] = []
        paginator = self.client("ec2").get_paginator("describe_instance_types")
        with calling("DescribeInstanceTypes"):
            for page in paginator.paginate():
                for raw in page.get("InstanceTypes", []):
                    found.append(
                        models.InstanceType(
                            name=raw["InstanceType"],
                            cpu=int(raw.get("VCpuInfo", {}).get("DefaultVCpus", 0)),
                            memory_mib=int(raw.get("MemoryInfo", {}).get("SizeInMiB", 0)),
                        )
                    )
        return found

    def discovery_data(self) -> models.DiscoveryData:
        return models.DiscoveryData(
            region=self.settings.region, zones=self.zones(), instance_types=self.instance_types()
        )
