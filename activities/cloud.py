"""Cloud activities: the probe, and what every cloud activity shares (errors, provider check).

Driver errors become ``ApplicationError`` with the error kind as ``type`` and the driver's
retryability, so workflows see ``CloudUnreachable``/``CloudAuthFailed``/… and never a raw SDK
exception. Credentials stay inside the driver: no input or output of these activities holds one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from temporalio import activity
from temporalio.exceptions import ApplicationError

from cloudloop.cloud.driver import Discovery
from cloudloop.cloud.errors import CloudError, NotSupported
from cloudloop.messages.probe import CloudCallInput, ProbeActivity, ZoneList


@contextlib.contextmanager
def cloud_errors() -> Iterator[None]:
    try:
        yield
    except CloudError as exc:
        raise ApplicationError(str(exc), type=exc.kind, non_retryable=not exc.retryable) from exc


def check_provider(requested: str, served: str) -> None:
    """``NotSupported`` for work of another cloud (``requested``) on this cloud's worker."""
    if requested != served:
        raise NotSupported(requested, f"provider {requested!r} on a worker for {served!r}")


class CloudActivities:
    """The cloud probe: the zones, through the discovery capability."""

    def __init__(self, discovery: Discovery, *, provider: str) -> None:
        self.discovery = discovery
        self.provider = provider

    @activity.defn(name=ProbeActivity.DISCOVER_ZONES)
    def discover_zones(self, input: CloudCallInput) -> ZoneList:
        with cloud_errors():
            check_provider(input.provider, self.provider)
            return ZoneList(zones=self.discovery.zones())

    def all(self) -> list[object]:
        return [self.discover_zones]
