"""The DVP driver: VMs, disks and cloud-init Secrets in one namespace of the parent DVP cluster.

One mixin per capability over a shared base (parent-cluster client, call counting, error
translation): machines for Cluster API, instances for node sync, load balancers (parent Services
fed by EndpointSlices), discovery, volumes for CSI.
"""

from __future__ import annotations

from cloudloop.cloud.dvp.base import NAME, PROVIDER_ID_PREFIX, DvpBase
from cloudloop.cloud.dvp.discovery import DvpDiscovery
from cloudloop.cloud.dvp.instances import DvpInstances
from cloudloop.cloud.dvp.loadbalancers import DvpLoadBalancers
from cloudloop.cloud.dvp.machines import DvpMachines
from cloudloop.cloud.dvp.volumes import DvpVolumes

__all__ = ["NAME", "PROVIDER_ID_PREFIX", "DvpBase", "DvpDriver"]


class DvpDriver(DvpMachines, DvpInstances, DvpLoadBalancers, DvpDiscovery, DvpVolumes):
    """DVP through the parent cluster's Kubernetes API (``virtualization.deckhouse.io``)."""
