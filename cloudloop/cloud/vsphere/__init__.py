"""vSphere: node sync, discovery, first-class-disk volumes and Cluster API machines, one vCenter.

The provider record; the driver (:mod:`cloudloop.cloud.vsphere.driver`) talks SOAP through
pyvmomi and tags through the legacy ``/rest`` paths; tests run it against vcsim.

Rules: importing this package loads no SDK; the factories import their modules when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cloudloop.cloud.provider import Provider
from cloudloop.cloud.vsphere.capi import INFRA_KINDS, NODE_TEMPLATES
from cloudloop.cloud.vsphere.discovery_schema import SCHEMAS as DISCOVERY_SCHEMAS
from cloudloop.cloud.vsphere.settings import VsphereSettings

if TYPE_CHECKING:
    from cloudloop.cloud.driver import CloudDriver
    from cloudloop.cloud.layouts import LayoutPart
    from cloudloop.kube.bodies import Secret


def _driver(settings: VsphereSettings) -> CloudDriver:
    from cloudloop.cloud.vsphere.driver import VsphereDriver

    return VsphereDriver(settings)


def _registration(settings: VsphereSettings) -> list[Secret]:
    from cloudloop.cloud.vsphere.registration import registration_secrets

    return registration_secrets(settings)


def _layouts() -> LayoutPart:
    from cloudloop.cloud.vsphere.layout_resources import VsphereLayouts

    return VsphereLayouts()


PROVIDER = Provider(
    name="vsphere",
    discovery_schemas=DISCOVERY_SCHEMAS,
    credential_settings=("password_file", "ca_bundle"),
    settings=VsphereSettings,
    driver=_driver,
    infra_kinds=INFRA_KINDS,
    registration=_registration,
    node_templates=NODE_TEMPLATES,
    layouts=_layouts,
    load_balancer_hint=(
        "vSphere without NSX-T has no load-balancer service (as upstream's vSphere cloud "
        "provider); serve the Service with a software load balancer in the cluster "
        "(Deckhouse's metallb module, or MetalLB) or set spec.loadBalancerClass"
    ),
)
