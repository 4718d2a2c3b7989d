"""The OpenStack driver, through the official SDK ``openstacksdk``.

Cluster API machines (CAPO's steps: root volume, ports, server), node sync (Nova servers),
Octavia load balancers, router extra-route routes, discovery and Cinder volumes, one mixin per
capability over :mod:`cloudloop.cloud.openstack.base`. Every request is
counted in ``cloud_api_requests_total{provider="openstack"}`` and every failure becomes a
:mod:`cloudloop.cloud.errors` class. Tests run it against :mod:`devstack.openstack_emulator`.

Rules: the capabilities are the contract's (derived from the mixins). As upstream's
``LoadBalancer()`` and ``Routes()``, a configuration without ``[LoadBalancer] enabled`` or
``[Route] router-id`` answers ``NotSupported`` at run time: the LB workflow then leaves the
Service alone, the route loop turns itself off.
"""

from __future__ import annotations

from cloudloop.cloud.openstack.base import NAME, OpenStackBase, translate
from cloudloop.cloud.openstack.discovery import OpenStackDiscovery
from cloudloop.cloud.openstack.loadbalancers import OpenStackLoadBalancers
from cloudloop.cloud.openstack.machines import OpenStackMachines
from cloudloop.cloud.openstack.routes import OpenStackRoutes
from cloudloop.cloud.openstack.volumes import OpenStackVolumes

__all__ = ["NAME", "OpenStackBase", "OpenStackDriver", "translate"]


class OpenStackDriver(
    OpenStackMachines,
    OpenStackLoadBalancers,
    OpenStackRoutes,
    OpenStackDiscovery,
    OpenStackVolumes,
):
    """OpenStack through openstacksdk."""
