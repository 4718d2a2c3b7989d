"""The AWS driver: a facade over capability objects taking the session.

The session (:mod:`cloudloop.cloud.aws.base`: boto3 clients, the call wrapper, error
translation, the cluster served) is made once; machines (Cluster API), instances (node sync),
routes, discovery, load balancers (Classic ELB and NLB, each half given what it needs of the
other when it is made), EBS volumes and snapshots are objects taking it. Every boto3 client
counts its calls in ``cloud_api_requests_total`` (botocore event hooks), and every botocore
failure becomes a :mod:`cloudloop.cloud.errors` class.
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
from cloudloop.cloud.driver import CloudDriver

__all__ = ["NAME", "AwsBase", "AwsDriver", "calling", "translate"]


class AwsDriver(CloudDriver):
    """AWS through boto3."""

    provider = NAME
    machines: AwsMachines
    instances: AwsInstances
    load_balancers: AwsLoadBalancers
    routes: AwsRoutes
    discovery: AwsDiscovery
    volumes: AwsVolumes
    snapshots: AwsSnapshots

    def __init__(self, settings: AwsSettings) -> None:
        self.session = AwsBase(settings)
        self.settings = self.session.settings
        self.machines = AwsMachines(self.session)
        self.instances = AwsInstances(self.session)
        self.load_balancers = AwsLoadBalancers(self.session)
        self.routes = AwsRoutes(self.session)
        self.discovery = AwsDiscovery(self.session)
        self.volumes = AwsVolumes(self.session)
        self.snapshots = AwsSnapshots(self.session)
        self.assembled()

    @property  # the session's: instance listings and machines narrow to the cluster's tags
    def cluster(self) -> str:
        return self.session.cluster

    @cluster.setter
    def cluster(self, cluster: str) -> None:
        self.session.cluster = cluster
