"""The provider table: one line per cloud, the only place outside a cloud's package naming it.

:data:`PROVIDERS` maps each provider's name to its record; settings, workers and starters find
the configured cloud through :func:`provider_for` and never import a cloud package themselves.

Rules:
- Adding a cloud is its package plus one line here (and its tests, chart values and CRDs).
- Importing this module imports only the records (light); drivers load when first built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cloudloop.cloud import aws, dvp, openstack, vsphere, zvirt
from cloudloop.cloud.errors import NotSupported
from cloudloop.cloud.provider import Provider

if TYPE_CHECKING:
    from cloudloop.cloud.capi import InfraKinds
    from cloudloop.cloud.driver import CloudDriver
    from cloudloop.settings import Settings

PROVIDERS: dict[str, Provider[Any]] = {
    p.name: p
    for p in (
        aws.PROVIDER,
        dvp.PROVIDER,
        openstack.PROVIDER,
        zvirt.PROVIDER,
        vsphere.PROVIDER,
    )
}
#: The ``provider`` setting when none is given.
DEFAULT_PROVIDER = aws.PROVIDER.name


def provider_for(settings: Settings) -> Provider[Any]:
    try:
        return PROVIDERS[settings.provider]
    except KeyError:
        raise NotSupported(settings.provider, "driver") from None


def driver_for(settings: Settings) -> CloudDriver:
    """The configured provider's driver."""
    return provider_for(settings).make_driver(settings)


def infra_kinds() -> list[InfraKinds]:
    """Every provider's Cluster API kinds."""
    return [p.infra_kinds for p in PROVIDERS.values() if p.infra_kinds is not None]
