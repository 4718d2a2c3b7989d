"""OpenStack: node sync, Octavia load balancers, router routes, discovery, Cinder volumes and the
four Deckhouse layouts (``Standard``, ``StandardWithNoRouter``, ``Simple``,
``SimpleWithInternalNetwork``).

The provider record; the driver (:mod:`cloudloop.cloud.openstack.driver`) goes through the
official SDK ``openstacksdk``; its settings read upstream's ``cloud.conf`` and Deckhouse's
``OpenStackClusterConfiguration``; tests run it against the dev stack's OpenStack emulator.

Rules: importing this package loads no SDK; the factories import their modules when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cloudloop.cloud.openstack.capi import INFRA_KINDS, NODE_TEMPLATES
from cloudloop.cloud.openstack.discovery_schema import SCHEMAS as DISCOVERY_SCHEMAS
from cloudloop.cloud.openstack.settings import OpenStackSettings
from cloudloop.cloud.provider import Provider

if TYPE_CHECKING:
    from cloudloop.cloud.driver import CloudDriver
    from cloudloop.cloud.layouts import LayoutPart
    from cloudloop.kube.bodies import Secret


def _driver(settings: OpenStackSettings) -> CloudDriver:
    from cloudloop.cloud.openstack.driver import OpenStackDriver

    return OpenStackDriver(settings)


def _registration(settings: OpenStackSettings) -> list[Secret]:
    from cloudloop.cloud.openstack.registration import registration_secrets

    return registration_secrets(settings)


def _layouts() -> LayoutPart:
    from cloudloop.cloud.openstack.layout_resources import OpenStackLayouts

    return OpenStackLayouts()


PROVIDER = Provider(
    name="openstack",
    discovery_schemas=DISCOVERY_SCHEMAS,
    credential_settings=("cloud_config_file",),
    settings=OpenStackSettings,
    driver=_driver,
    infra_kinds=INFRA_KINDS,
    registration=_registration,
    node_templates=NODE_TEMPLATES,
    layouts=_layouts,
)
