"""AWS: EC2 instances, Classic ELB and NLB load balancers, VPC routes, EBS volumes, discovery,
and Cluster API machines for node groups (CAPA's kinds, from ``AWSInstanceClass``).

The provider record; the boto3-backed driver is :mod:`cloudloop.cloud.aws.driver` (a facade over
one object per capability, each taking the session of :mod:`cloudloop.cloud.aws.base`) and the
node termination handler's client :mod:`cloudloop.cloud.aws.termination` (its node agent reads
IMDSv2 through :mod:`cloudloop.cloud.aws.imds` alone, no credential).

Rules: importing this package loads no SDK; the factories import their modules when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cloudloop.cloud.aws.capi import INFRA_KINDS, NODE_TEMPLATES
from cloudloop.cloud.aws.discovery_schema import SCHEMAS as DISCOVERY_SCHEMAS
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.provider import Provider

if TYPE_CHECKING:
    from cloudloop.cloud.aws.termination import AwsTermination
    from cloudloop.cloud.driver import CloudDriver
    from cloudloop.cloud.layouts import LayoutPart
    from cloudloop.cloud.termination import InstanceMetadata
    from cloudloop.kube.bodies import Secret
    from cloudloop.settings import NthSettings


def _driver(settings: AwsSettings) -> CloudDriver:
    from cloudloop.cloud.aws.driver import AwsDriver

    return AwsDriver(settings)


def _termination(
    settings: AwsSettings, nth: NthSettings, driver: CloudDriver | None
) -> AwsTermination:
    from cloudloop.cloud.aws.driver import AwsDriver
    from cloudloop.cloud.aws.termination import AwsTermination

    # The driver's session when it has these settings: one EC2 client in the process, not two.
    session = driver.session if isinstance(driver, AwsDriver) else None
    return AwsTermination(
        settings, nth, session=session if session and session.settings == settings else None
    )


def _instance_metadata(endpoint: str, timeout_s: float) -> InstanceMetadata:
    from cloudloop.cloud.aws.imds import Imds

    return Imds(endpoint, timeout_s=timeout_s)


def _registration(settings: AwsSettings) -> list[Secret]:
    from cloudloop.cloud.aws.registration import registration_secrets

    return registration_secrets(settings)


def _layouts() -> LayoutPart:
    from cloudloop.cloud.aws.layout_resources import AwsLayouts

    return AwsLayouts()


PROVIDER = Provider(
    name="aws",
    discovery_schemas=DISCOVERY_SCHEMAS,
    credential_settings=("credentials_file",),
    settings=AwsSettings,
    driver=_driver,
    termination=_termination,
    instance_metadata=_instance_metadata,
    infra_kinds=INFRA_KINDS,
    registration=_registration,
    node_templates=NODE_TEMPLATES,
    layouts=_layouts,
)
