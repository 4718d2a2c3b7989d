"""Cloud activities: every call goes through the :class:`~cloudloop.cloud.driver.CloudDriver`.

Driver errors become ``ApplicationError`` with the error kind as ``type`` and the driver's
retryability, so workflows see ``CloudUnreachable``/``CloudAuthFailed``/… and never a raw SDK
exception. Credentials stay inside the driver: no input or output of these activities holds one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from temporalio import activity
from temporalio.exceptions import ApplicationError

from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.errors import CloudError, NotSupported
from cloudloop.messages.probe import CloudCallInput, ProbeActivity, ZoneList


@contextlib.contextmanager
def cloud_errors() -> Iterator[None]:
    try:
        yield
    except CloudError as exc:
        raise ApplicationError(str(exc), type=exc.kind, non_retryable=not exc.retryable) from exc


class CloudActivities:
    def __init__(self, driver: CloudDriver) -> None:
        self.driver = driver

    def _check_provider(self, provider: str) -> None:
        if provider != self.driver.provider:
            raise NotSupported(
                provider, f"provider {provider!r} on a worker for {self.driver.provider!r}"
            )

    @activity.defn(name=ProbeActivity.DISCOVER_ZONES)
    def discover_zones(self, input: CloudCallInput) -> ZoneList:
        with cloud_errors():
            self._check_provider(input.provider)
            return ZoneList(zones=self.driver.zones())

    def all(self) -> list[object]:
        return [self.discover_zones]
