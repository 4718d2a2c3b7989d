"""The OpenStack driver, through the official SDK ``openstacksdk``.

Cluster API machines (CAPO's steps: root volume, ports, server), node sync (Nova servers),
Octavia load balancers, router extra-route routes, discovery and Cinder volumes: one object per
capability taking the session (:mod:`cloudloop.cloud.openstack.base`); load balancers and
routes take the instances part too (members and next hops are servers). Every request is
counted in ``cloud_api_requests_total{provider="openstack"}`` and every failure becomes a
:mod:`cloudloop.cloud.errors` class. Tests run it against :mod:`devstack.openstack_emulator`.

Rules: the capabilities are the parts the driver sets. As upstream's
``LoadBalancer()`` and ``Routes()``, a configuration without ``[LoadBalancer] enabled`` or
``[Route] router-id`` answers ``NotSupported`` at run time: the LB workflow then leaves the
Service alone, the route loop turns itself off.
"""

from __future__ import annotations

from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.openstack.base import NAME, OpenStackBase, translate
from cloudloop.cloud.openstack.discovery import OpenStackDiscovery
from cloudloop.cloud.openstack.instances import OpenStackInstances
from cloudloop.cloud.openstack.loadbalancers import OpenStackLoadBalancers
from cloudloop.cloud.openstack.machines import OpenStackMachines
from cloudloop.cloud.openstack.routes import OpenStackRoutes
from cloudloop.cloud.openstack.settings import OpenStackSettings
from cloudloop.cloud.openstack.volumes import OpenStackVolumes

__all__ = ["NAME", "OpenStackBase", "OpenStackDriver", "translate"]


class OpenStackDriver(CloudDriver):
    """OpenStack through openstacksdk."""

    provider = NAME
    machines: OpenStackMachines
    instances: OpenStackInstances
    load_balancers: OpenStackLoadBalancers
    routes: OpenStackRoutes
    discovery: OpenStackDiscovery
    volumes: OpenStackVolumes

    def __init__(self, settings: OpenStackSettings) -> None:
        self.session = OpenStackBase(settings)
        self.settings = self.session.settings
        self.machines = OpenStackMachines(self.session)
        self.instances = OpenStackInstances(self.session)
        self.load_balancers = OpenStackLoadBalancers(self.session, self.instances)
        self.routes = OpenStackRoutes(self.session, self.instances)
        self.discovery = OpenStackDiscovery(self.session)
        self.volumes = OpenStackVolumes(self.session)
        self.assembled()

    def close(self) -> None:
        self.session.close()
