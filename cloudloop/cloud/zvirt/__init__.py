"""zVirt (oVirt Engine): Cluster API machines from templates, node sync and discovery.

The provider record; the driver (:mod:`cloudloop.cloud.zvirt.driver`) goes through the official
SDK ``ovirtsdk4``; tests run it against the dev stack's oVirt Engine emulator.

Rules: importing this package loads no SDK; the factories import their modules when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cloudloop.cloud.provider import Provider
from cloudloop.cloud.zvirt.capi import INFRA_KINDS, NODE_TEMPLATES
from cloudloop.cloud.zvirt.discovery_schema import SCHEMAS as DISCOVERY_SCHEMAS
from cloudloop.cloud.zvirt.settings import ZvirtSettings

if TYPE_CHECKING:
    from cloudloop.cloud.driver import CloudDriver
    from cloudloop.cloud.layouts import LayoutPart
    from cloudloop.kube.bodies import Secret


def _driver(settings: ZvirtSettings) -> CloudDriver:
    from cloudloop.cloud.zvirt.driver import ZvirtDriver

    return ZvirtDriver(settings)


def _registration(settings: ZvirtSettings) -> list[Secret]:
    from cloudloop.cloud.zvirt.registration import registration_secrets

    return registration_secrets(settings)


def _layouts() -> LayoutPart:
    from cloudloop.cloud.zvirt.layout_resources import ZvirtLayouts

    return ZvirtLayouts()


PROVIDER = Provider(
    name="zvirt",
    discovery_schemas=DISCOVERY_SCHEMAS,
    credential_settings=("password_file", "ca_bundle"),
    settings=ZvirtSettings,
    driver=_driver,
    infra_kinds=INFRA_KINDS,
    registration=_registration,
    node_templates=NODE_TEMPLATES,
    layouts=_layouts,
    load_balancer_hint=(
        "oVirt has no load-balancer service; serve the Service with a software load balancer "
        "in the cluster (Deckhouse's metallb module, or MetalLB in L2 mode) or set "
        "spec.loadBalancerClass for the controller that serves it"
    ),
)
