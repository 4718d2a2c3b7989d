"""The provider table: one line per cloud, the only place outside a cloud's package naming it.

:data:`PROVIDERS` maps each provider's name to its record; settings, workers and starters find
the configured cloud through :func:`provider_for` and never import a cloud package themselves.
``Settings`` is composed here: :class:`~cloudloop.settings.CoreSettings` plus one section per
provider (``CLOUDLOOP_<NAME>__*``), so the core settings module depends on no cloud.

Rules:
- Adding a cloud is its package plus one line here (and its tests, chart values and CRDs).
- Importing this module imports only the records (light); drivers load when first built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, create_model, field_validator

from cloudloop.cloud import aws, dvp, openstack, vsphere, zvirt
from cloudloop.cloud.errors import NotSupported
from cloudloop.cloud.provider import Provider
from cloudloop.settings import CoreSettings

if TYPE_CHECKING:
    from cloudloop.cloud.capi import InfraKinds
    from cloudloop.cloud.driver import CloudDriver

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


class _RegisteredProvider(CoreSettings):
    """:class:`CoreSettings` whose ``provider`` names a registered provider."""

    provider: str = DEFAULT_PROVIDER

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, value: str) -> str:
        if value not in PROVIDERS:
            raise ValueError(f"unknown provider; one of: {', '.join(sorted(PROVIDERS))}")
        return value


def _with_provider_sections() -> type[CoreSettings]:
    """:class:`CoreSettings` plus one section per registered provider (``CLOUDLOOP_<NAME>__*``)."""
    sections: dict[str, Any] = {
        name: (record.settings, Field(default_factory=record.settings))
        for name, record in PROVIDERS.items()
    }
    return create_model("Settings", __base__=_RegisteredProvider, __module__=__name__, **sections)


if TYPE_CHECKING:
    Settings = CoreSettings
else:
    Settings = _with_provider_sections()


def provider_for(settings: CoreSettings) -> Provider[Any]:
    try:
        return PROVIDERS[settings.provider]
    except KeyError:
        raise NotSupported(settings.provider, "driver") from None


def driver_for(settings: CoreSettings) -> CloudDriver:
    """The configured provider's driver."""
    return provider_for(settings).make_driver(settings)


def infra_kinds() -> list[InfraKinds]:
    """Every provider's Cluster API kinds."""
    return [p.infra_kinds for p in PROVIDERS.values() if p.infra_kinds is not None]
