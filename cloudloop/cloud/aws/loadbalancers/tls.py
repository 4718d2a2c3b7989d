"""Checks, before the first write, that what the TLS and address annotations name exists.

A certificate that does not exist (or is not issued), an unknown SSL policy or an unknown Elastic
IP would make AWS refuse a listener or an NLB after other parts were already changed; upstream
lets that happen. These reads refuse the value first (``InvalidRequest``: an Event, nothing
changed). Each is skipped when the load balancer already uses the value, and skipped with a log
line when the controller's role may not read it (``CloudAuthFailed``: upstream's IAM policy has no
``acm:DescribeCertificate``), leaving the check to the ELB API.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from cloudloop.cloud import errors
from cloudloop.cloud.aws.base import AwsBase, calling
from cloudloop.cloud.aws.loadbalancers.service_annotations import (
    EIP_ALLOCATIONS,
    SSL_CERT,
    SSL_NEGOTIATION_POLICY,
    invalid,
)

log = logging.getLogger(__name__)


class LoadBalancerChecks:
    """The checks before the first write, on the session."""

    def __init__(self, session: AwsBase) -> None:
        self.session = session

    def _refuse_missing(self, what: str, check: Callable[[], str | None]) -> None:
        """Run ``check``; a message it returns, or a not-found answer, refuses the Service."""
        try:
            problem = check()
        except errors.CloudAuthFailed as exc:
            log.warning("%s not checked (no permission; the ELB API will): %s", what, exc)
            return
        except (errors.NotFound, errors.InvalidRequest) as exc:
            problem = f"{what} not found ({exc.message})"
        if problem:
            raise invalid(problem)

    def check_certificate(self, arn: str, in_use: Iterable[str] = ()) -> None:
        if arn in set(in_use):
            return
        service = arn.split(":")[2]

        def check() -> str | None:
            if service == "iam":
                name = arn.rsplit("/", 1)[-1]
                with calling("GetServerCertificate"):
                    self.session.client("iam").get_server_certificate(ServerCertificateName=name)
                return None
            with calling("DescribeCertificate"):
                found = self.session.client("acm").describe_certificate(CertificateArn=arn)
            status = str(found.get("Certificate", {}).get("Status", "ISSUED"))
            if status != "ISSUED":
                return f"{SSL_CERT}: certificate {arn} is {status}, not ISSUED"
            return None

        self._refuse_missing(f"{SSL_CERT}: certificate {arn}", check)

    def check_classic_ssl_policy(self, policy: str) -> None:
        def check() -> str | None:
            with calling("DescribeLoadBalancerPolicies"):
                found = self.session.client("elb").describe_load_balancer_policies(
                    PolicyNames=[policy]
                )
            names = {p.get("PolicyName") for p in found.get("PolicyDescriptions", [])}
            return None if policy in names else f"{SSL_NEGOTIATION_POLICY}: {policy} not found"

        self._refuse_missing(f"{SSL_NEGOTIATION_POLICY}: {policy}", check)

    def check_nlb_ssl_policy(self, policy: str) -> None:
        def check() -> str | None:
            with calling("DescribeSSLPolicies"):
                found = self.session.client("elbv2").describe_ssl_policies(Names=[policy])
            names = {p.get("Name") for p in found.get("SslPolicies", [])}
            return None if policy in names else f"{SSL_NEGOTIATION_POLICY}: {policy} not found"

        self._refuse_missing(f"{SSL_NEGOTIATION_POLICY}: {policy}", check)

    def check_allocations(self, allocations: tuple[str, ...], ours: set[str]) -> None:
        """The Elastic IPs exist and are free (or already this NLB's: ``ours``)."""

        def check() -> str | None:
            with calling("DescribeAddresses"):
                found = self.session.client("ec2").describe_addresses(
                    AllocationIds=list(allocations)
                )["Addresses"]
            missing = sorted(set(allocations) - {str(a.get("AllocationId")) for a in found})
            if missing:
                return f"{EIP_ALLOCATIONS}: {', '.join(missing)} not found"
            used = sorted(
                str(a["AllocationId"])
                for a in found
                if a.get("AssociationId") and a["AllocationId"] not in ours
            )
            if used:
                return f"{EIP_ALLOCATIONS}: {', '.join(used)} already associated"
            return None

        self._refuse_missing(f"{EIP_ALLOCATIONS}: {', '.join(allocations)}", check)
