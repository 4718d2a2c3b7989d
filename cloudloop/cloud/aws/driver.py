"""The AWS driver: a facade over capability objects taking the session
(:mod:`cloudloop.cloud.aws.base`: clients, the call wrapper, error translation); machines for
Cluster API in :mod:`cloudloop.cloud.aws.machines`.

Transition: the capabilities not yet moved are mixins of the driver sharing one ``self``
(:class:`~cloudloop.cloud.aws.base.AwsDriverPart`); their calls go through the same session.

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
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.aws.snapshots import AwsSnapshots
from cloudloop.cloud.aws.volumes import AwsVolumes

__all__ = ["NAME", "AwsBase", "AwsDriver", "calling", "translate"]


class AwsDriver(AwsLoadBalancers):
    """AWS through boto3."""

    snapshots: AwsSnapshots
    discovery: AwsDiscovery
    routes: AwsRoutes
    instances: AwsInstances
    machines: AwsMachines
    volumes: AwsVolumes

    def __init__(self, settings: AwsSettings) -> None:
        super().__init__(settings)
        self.snapshots = AwsSnapshots(self.session)
        self.discovery = AwsDiscovery(self.session)
        self.routes = AwsRoutes(self.session)
        self.instances = AwsInstances(self.session)
        self.machines = AwsMachines(self.session)
        self.volumes = AwsVolumes(self.session)
        self.assembled()
