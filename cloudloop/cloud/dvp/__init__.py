"""DVP (Deckhouse Virtualization Platform): VMs and disks in a namespace of the parent cluster.

The provider record; the driver (:mod:`cloudloop.cloud.dvp.driver`) talks to the parent
cluster's ``virtualization.deckhouse.io`` API: Cluster API machines, node sync, discovery.

Rules: importing this package loads no SDK; the factories import their modules when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cloudloop.cloud.dvp.capi import INFRA_KINDS, NODE_TEMPLATES
from cloudloop.cloud.dvp.discovery_schema import SCHEMAS as DISCOVERY_SCHEMAS
from cloudloop.cloud.dvp.settings import DvpSettings
from cloudloop.cloud.provider import Provider

if TYPE_CHECKING:
    from cloudloop.cloud.driver import CloudDriver
    from cloudloop.cloud.layouts import LayoutPart
    from cloudloop.kube.bodies import Secret


def _driver(settings: DvpSettings) -> CloudDriver:
    from cloudloop.cloud.dvp.driver import DvpDriver

    return DvpDriver(settings)


def _registration(settings: DvpSettings) -> list[Secret]:
    from cloudloop.cloud.dvp.registration import registration_secrets

    return registration_secrets(settings)


def _layouts() -> LayoutPart:
    from cloudloop.cloud.dvp.layout_resources import DvpLayouts

    return DvpLayouts()


PROVIDER = Provider(
    name="dvp",
    discovery_schemas=DISCOVERY_SCHEMAS,
    credential_settings=("kubeconfig",),
    settings=DvpSettings,
    driver=_driver,
    infra_kinds=INFRA_KINDS,
    registration=_registration,
    node_templates=NODE_TEMPLATES,
    layouts=_layouts,
)
