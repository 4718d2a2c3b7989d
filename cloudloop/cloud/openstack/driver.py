"""The OpenStack driver, through the official SDK ``openstacksdk``.

Node sync (Nova servers), Octavia load balancers, router extra-route routes, discovery and Cinder
volumes, one mixin per capability over :mod:`cloudloop.cloud.openstack.base`. Every request is
counted in ``cloud_api_requests_total{provider="openstack"}`` and every failure becomes a
:mod:`cloudloop.cloud.errors` class. Tests run it against :mod:`devstack.openstack_emulator`.

Rules: like upstream's ``LoadBalancer()`` and ``Routes()``, load balancers are offered only with
``[LoadBalancer] enabled`` and routes only with ``[Route] router-id`` (:meth:`supports`).
"""

from __future__ import annotations

from cloudloop.cloud.driver import Capability
from cloudloop.cloud.openstack.base import NAME, OpenStackBase, translate
from cloudloop.cloud.openstack.discovery import OpenStackDiscovery
from cloudloop.cloud.openstack.loadbalancers import OpenStackLoadBalancers
from cloudloop.cloud.openstack.routes import OpenStackRoutes
from cloudloop.cloud.openstack.volumes import OpenStackVolumes

__all__ = ["NAME", "OpenStackBase", "OpenStackDriver", "translate"]


class OpenStackDriver(
    OpenStackLoadBalancers, OpenStackRoutes, OpenStackDiscovery, OpenStackVolumes
):
    """OpenStack through openstacksdk."""

    def supports(self, capability: Capability) -> bool:
        if capability is Capability.LOAD_BALANCERS and not self.settings.load_balancer.enabled:
            return False
        if capability is Capability.ROUTES and not self.settings.route.router_id:
            return False
        return super().supports(capability)
