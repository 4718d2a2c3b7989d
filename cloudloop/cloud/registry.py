"""Builds the configured provider's driver from settings (the only place that names drivers)."""

from __future__ import annotations

from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.errors import NotSupported
from cloudloop.settings import Settings


def driver_for(settings: Settings) -> CloudDriver:
    if settings.provider == "aws":
        from cloudloop.cloud.aws import AwsDriver

        return AwsDriver(settings.aws)
    if settings.provider == "dvp":
        from cloudloop.cloud.dvp import DvpDriver

        return DvpDriver(settings.dvp)
    if settings.provider == "zvirt":
        from cloudloop.cloud.zvirt import ZvirtDriver

        return ZvirtDriver(settings.zvirt)
    raise NotSupported(settings.provider, "driver")
