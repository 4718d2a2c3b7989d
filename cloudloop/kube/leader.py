"""Leader election on a ``coordination.k8s.io`` Lease, using the kubernetes client's elector.

:func:`run_as_leader` blocks until this process holds the Lease, runs the given coroutine, and
cancels it if the Lease is lost (the upstream controllers exit in that case; so do we, by raising
:class:`LeadershipLost`).

Every Lease call has a timeout (a hung API server connection must not keep the elector from
noticing that it failed to renew), and a leader whose last renewal is older than the lease
duration fails liveness (``/healthz``), as upstream's leader-election health check does: another
replica may hold the Lease by then, so this one must not go on working as if it led.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, cast

from kubernetes import client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from cloudloop.health import Health
from cloudloop.metrics import LEADER
from cloudloop.settings import LeaderElectionSettings

log = logging.getLogger(__name__)


class LeadershipLost(RuntimeError):
    pass


class ReleasableLeaseLock(LeaseLock):
    """A LeaseLock that stops renewing once released and hands the Lease over at once.

    Releasing clears ``holderIdentity``, which the elector of any other candidate treats as a
    free Lease (upstream's ``ReleaseOnCancel``), so a rolling restart fails over in one retry
    period instead of a whole lease duration.
    """

    released = False
    #: monotonic time of the last successful create or renewal of the Lease (0: never).
    renewed_at = 0.0

    def get(self, name: str, namespace: str) -> tuple[bool, object]:
        # The stock lock lets network errors escape and kill the elector thread, which would
        # leave a leader that no longer renews. A failed read is a failed attempt instead.
        if self.released:
            return False, SimpleNamespace(reason="released", body=None)
        try:
            return super().get(name, namespace)  # type: ignore[no-any-return]
        except Exception as exc:
            log.warning("reading Lease %s/%s failed: %s", namespace, name, exc)
            return False, exc

    def create(self, name: str, namespace: str, election_record: object) -> bool:
        try:
            created = (
                False if self.released else bool(super().create(name, namespace, election_record))
            )
            if created:
                self.renewed_at = time.monotonic()
            return created
        except Exception as exc:
            log.warning("creating Lease %s/%s failed: %s", namespace, name, exc)
            return False

    def update(self, name: str, namespace: str, updated_record: object) -> bool:
        try:
            updated = (
                False if self.released else bool(super().update(name, namespace, updated_record))
            )
            if updated:
                self.renewed_at = time.monotonic()
            return updated
        except Exception as exc:
            log.warning("renewing Lease %s/%s failed: %s", namespace, name, exc)
            return False

    def release(self) -> None:
        self.released = True
        try:
            lease = self.api_instance.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                self.api_instance.patch_namespaced_lease(
                    self.name, self.namespace, {"spec": {"holderIdentity": None}}
                )
        except Exception as exc:  # the Lease then simply expires
            log.warning("could not release Lease %s/%s: %s", self.namespace, self.name, exc)


class TimedLeaseApi:
    """The Lease calls of ``CoordinationV1Api`` with a request timeout on each."""

    def __init__(self, api: client.ApiClient, timeout_s: float) -> None:
        self._api = client.CoordinationV1Api(api)
        self._timeout = (min(5.0, timeout_s), timeout_s)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._api, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("_request_timeout", self._timeout)
            return method(*args, **kwargs)

        return call


def lease_liveness(
    lock: ReleasableLeaseLock, holding: threading.Event, lease_duration_s: float
) -> Callable[[], str | None]:
    """Liveness: a leader must have renewed its Lease within the lease duration."""

    def check() -> str | None:
        if not holding.is_set() or lock.released:
            return None
        age = time.monotonic() - lock.renewed_at
        if age > lease_duration_s:
            return f"leader but the Lease was not renewed for {age:.0f}s"
        return None

    return check


async def run_as_leader(
    api: client.ApiClient,
    settings: LeaderElectionSettings,
    body: Callable[[], Awaitable[None]],
    *,
    health: Health | None = None,
) -> None:
    """Run ``body`` while holding the Lease; return when ``body`` returns."""
    if not settings.enabled:
        LEADER.labels(settings.name).set(1)
        try:
            await body()
        finally:
            LEADER.labels(settings.name).set(0)
        return
    loop = asyncio.get_running_loop()
    leading, lost = asyncio.Event(), asyncio.Event()
    holding = threading.Event()
    lock = ReleasableLeaseLock(settings.name, settings.namespace, settings.identity)
    timed = TimedLeaseApi(api, max(1.0, float(settings.retry_period_s) * 2))
    lock.api_instance = cast(client.CoordinationV1Api, timed)
    if health is not None:
        health.add_liveness(
            "leader-election", lease_liveness(lock, holding, settings.lease_duration_s)
        )

    def started_leading() -> None:
        holding.set()
        _notify(loop, leading)

    def stopped_leading() -> None:
        holding.clear()
        _notify(loop, lost)

    config = electionconfig.Config(
        lock=lock,
        lease_duration=settings.lease_duration_s,
        renew_deadline=settings.renew_deadline_s,
        retry_period=settings.retry_period_s,
        onstarted_leading=started_leading,
        onstopped_leading=stopped_leading,
    )
    elector = threading.Thread(
        target=leaderelection.LeaderElection(config).run, daemon=True, name="leader-election"
    )
    elector.start()
    if health is not None:
        health.add_liveness(
            "leader-elector",
            lambda: None if elector.is_alive() or lock.released else "elector thread ended",
        )
    log.info("waiting for Lease %s/%s as %s", settings.namespace, settings.name, settings.identity)
    LEADER.labels(settings.name).set(0)
    try:
        await leading.wait()
        log.info("became leader (Lease %s/%s)", settings.namespace, settings.name)
        LEADER.labels(settings.name).set(1)
        work = asyncio.ensure_future(body())
        lost_wait = asyncio.ensure_future(lost.wait())
        try:
            await asyncio.wait({work, lost_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost_wait.cancel()
        if lost.is_set() and not work.done():
            work.cancel()
            raise LeadershipLost(f"lost Lease {settings.namespace}/{settings.name}")
        await work
    finally:
        LEADER.labels(settings.name).set(0)
        await asyncio.to_thread(lock.release)


def _notify(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
    """Set an asyncio event from the elector thread (the loop may be gone at exit)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(event.set)
