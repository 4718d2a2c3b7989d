"""The DVP driver: VMs, disks and cloud-init Secrets in one namespace of the parent DVP cluster.

One session (:class:`~cloudloop.cloud.dvp.base.DvpBase`: parent-cluster client, call counting,
error translation) and one object per capability taking it: machines for Cluster API, instances
for node sync, load balancers (parent Services fed by EndpointSlices), discovery, volumes for
CSI. The parts do not call each other.
"""

from __future__ import annotations

from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.dvp.base import NAME, PROVIDER_ID_PREFIX, DvpBase
from cloudloop.cloud.dvp.discovery import DvpDiscovery
from cloudloop.cloud.dvp.instances import DvpInstances
from cloudloop.cloud.dvp.loadbalancers import DvpLoadBalancers
from cloudloop.cloud.dvp.machines import DvpMachines
from cloudloop.cloud.dvp.settings import DvpSettings
from cloudloop.cloud.dvp.volumes import DvpVolumes
from cloudloop.kube.api import Kube

__all__ = ["NAME", "PROVIDER_ID_PREFIX", "DvpBase", "DvpDriver"]


class DvpDriver(CloudDriver):
    """DVP through the parent cluster's Kubernetes API (``virtualization.deckhouse.io``)."""

    provider = NAME
    machines: DvpMachines
    instances: DvpInstances
    load_balancers: DvpLoadBalancers
    discovery: DvpDiscovery
    volumes: DvpVolumes

    def __init__(self, settings: DvpSettings, *, kube: Kube | None = None) -> None:
        self.session = DvpBase(settings, kube=kube)
        self.settings = settings
        self.machines = DvpMachines(self.session)
        self.instances = DvpInstances(self.session)
        self.load_balancers = DvpLoadBalancers(self.session)
        self.discovery = DvpDiscovery(self.session)
        self.volumes = DvpVolumes(self.session)
        self.assembled()
