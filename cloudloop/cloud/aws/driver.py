"""The AWS driver, one mixin per capability over a shared boto3 base (machines for Cluster API
in :mod:`cloudloop.cloud.aws.machines`).

Every boto3 client counts its calls in ``cloud_api_requests_total`` (botocore event hooks), and
every botocore failure becomes a :mod:`cloudloop.cloud.errors` class.
"""

from __future__ import annotations

from cloudloop.cloud.aws.base import NAME, AwsBase, calling, translate
from cloudloop.cloud.aws.discovery import AwsDiscovery
from cloudloop.cloud.aws.instances import AwsInstances
from cloudloop.cloud.aws.loadbalancers import AwsLoadBalancers
from cloudloop.cloud.aws.machines import AwsMachines
from cloudloop.cloud.aws.routes import AwsRoutes
from cloudloop.cloud.aws.snapshots import AwsSnapshots
from cloudloop.cloud.aws.volumes import AwsVolumes

__all__ = ["NAME", "AwsBase", "AwsDriver", "calling", "translate"]


class AwsDriver(
    AwsMachines, AwsInstances, AwsDiscovery, AwsRoutes, AwsLoadBalancers, AwsVolumes, AwsSnapshots
):
    """AWS through boto3."""
