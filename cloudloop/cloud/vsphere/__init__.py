"""vSphere: node sync, discovery and first-class-disk volumes over one vCenter.

The provider record; the driver (:mod:`cloudloop.cloud.vsphere.driver`) talks SOAP through
pyvmomi and tags through the legacy ``/rest`` paths; tests run it against vcsim.

Rules: importing this package loads no SDK; the factories import their modules when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cloudloop.cloud.provider import Provider
from cloudloop.cloud.vsphere.settings import VsphereSettings

if TYPE_CHECKING:
    from cloudloop.cloud.driver import CloudDriver


def _driver(settings: VsphereSettings) -> CloudDriver:
    from cloudloop.cloud.vsphere.driver import VsphereDriver

    return VsphereDriver(settings)


def _registration(settings: VsphereSettings) -> list[dict[str, Any]]:
    from cloudloop.cloud.vsphere.registration import registration_secrets

    return registration_secrets(settings)


PROVIDER = Provider(
    name="vsphere",
    settings=VsphereSettings,
    driver=_driver,
    registration=_registration,
    load_balancer_hint=(
        "vSphere without NSX-T has no load-balancer service (as upstream's vSphere cloud "
        "provider); serve the Service with a software load balancer in the cluster "
        "(Deckhouse's metallb module, or MetalLB) or set spec.loadBalancerClass"
    ),
)
