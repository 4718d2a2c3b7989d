"""AWS instances for node sync: batched DescribeInstances by instance ID or private DNS name.

Rules:
- **Limits.** AWS takes at most 200 values in one ``DescribeInstances`` filter (more is
  ``FilterLimitExceeded``); lookups go in chunks of :data:`DESCRIBE_BATCH` (150, as
  cloud-provider-aws), each page followed by its ``NextToken``. A lookup of more than
  :data:`TAG_LISTING_FROM` instance IDs (the lifecycle pass, the address refresh: every node of
  the cluster) first lists the cluster's instances by its tag (``kubernetes.io/cluster/<cluster>``,
  ``MaxResults`` 1,000 a page), then looks up by value only what that listing did not hold, so an
  untagged instance is never taken for a missing one: 1,000 tagged nodes cost one request, not
  seven. A lookup by private DNS name (node initialization: the new nodes of a burst, a share of
  the cluster) goes by value only, so the cloud renders the instances asked for, not the whole
  cluster for each batch of a burst (1,000 names: seven requests).
- **Identity.** A providerID names an instance only when its last segment is a well-formed
  instance ID (``i-`` and 8 or 17 hex digits); anything else is ``InvalidRequest``, never looked
  up (a filter on a malformed ID would positively find nothing, which reads as "gone").
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.aws.base import NAME, AwsBase, calling
from cloudloop.cloud.aws.tags import cluster_tag_key

#: DescribeInstances filter values per request (AWS allows 200; cloud-provider-aws uses 150).
DESCRIBE_BATCH = 150
#: Beyond this many values, one listing of the cluster's tagged instances comes first.
TAG_LISTING_FROM = 2 * DESCRIBE_BATCH
#: DescribeInstances page size of that listing (AWS allows 5 to 1,000).
LISTING_PAGE = 1000
#: An EC2 instance ID: ``i-`` and 8 (older) or 17 hexadecimal digits.
INSTANCE_ID = re.compile(r"^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$")

_STATE = {
    "pending": models.InstanceState.PENDING,
    "running": models.InstanceState.RUNNING,
    "stopping": models.InstanceState.STOPPING,
    "stopped": models.InstanceState.STOPPED,
    "shutting-down": models.InstanceState.TERMINATED,
    "terminated": models.InstanceState.TERMINATED,
}


class AwsInstances:
    """EC2 instances for node sync, on the session."""

    def __init__(self, session: AwsBase) -> None:
        self.session = session

    # -- instances -------------------------------------------------------------------------
    def instance_id_from_provider_id(self, provider_id: str) -> str:
        """``aws:///<az>/<id>`` or ``aws://<az>/<id>`` or a bare ``i-…`` ID → the instance ID."""
        if not provider_id.startswith("aws://") and not provider_id.startswith("i-"):
            raise errors.InvalidRequest(
                NAME, "ParseProviderID", f"not an AWS providerID: {provider_id!r}"
            )
        instance_id = provider_id.rstrip("/").rsplit("/", 1)[-1]
        if not INSTANCE_ID.match(instance_id):
            raise errors.InvalidRequest(
                NAME, "ParseProviderID", f"no well-formed instance ID in {provider_id!r}"
            )
        return instance_id

    def list_instances(self, ids: Sequence[str]) -> models.InstanceListing:
        return self._describe("instance-id", ids, key=lambda i: i.id)

    def find_instances_by_name(self, names: Sequence[str]) -> models.InstanceListing:
        return self._describe(
            "private-dns-name", names, key=lambda i: i.private_dns_name, tag_listing=False
        )

    def _describe(
        self, filter_name: str, values: Sequence[str], *, key: Any, tag_listing: bool = True
    ) -> models.InstanceListing:
        listing = models.InstanceListing()
        unique = list(dict.fromkeys(values))
        if tag_listing and self.session.cluster and len(unique) > TAG_LISTING_FROM:
            wanted = set(unique)
            tag_filter = {"Name": "tag-key", "Values": [cluster_tag_key(self.session.cluster)]}
            for instance in self._pages([tag_filter], listing, page_size=LISTING_PAGE):
                if key(instance) in wanted:
                    listing.found[key(instance)] = instance
            unique = [value for value in unique if value not in listing.found]
        for start in range(0, len(unique), DESCRIBE_BATCH):
            chunk = unique[start : start + DESCRIBE_BATCH]
            for instance in self._pages([{"Name": filter_name, "Values": chunk}], listing):
                listing.found[key(instance)] = instance
        return listing

    def _pages(
        self,
        filters: list[dict[str, Any]],
        listing: models.InstanceListing,
        *,
        page_size: int = 0,
    ) -> Iterator[models.Instance]:
        """Every instance matching ``filters``, page by page (each page counted)."""
        ec2 = self.session.client("ec2")
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Filters": filters}
            if page_size:
                kwargs["MaxResults"] = page_size
            if token:
                kwargs["NextToken"] = token
            with calling("DescribeInstances"):
                page = ec2.describe_instances(**kwargs)
            listing.requests += 1
            for reservation in page.get("Reservations", []):
                for raw in reservation.get("Instances", []):
                    yield self.to_instance(raw)
            token = page.get("NextToken")
            if not token:
                return

    def to_instance(self, raw: Mapping[str, Any]) -> models.Instance:
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
            region=zone[:-1] if zone else self.session.settings.region,
            private_dns_name=raw.get("PrivateDnsName", ""),
            addresses=addresses,
            tags=tags,
        )
