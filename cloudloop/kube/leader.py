"""Leader election on a ``coordination.k8s.io`` Lease, using the kubernetes client's elector.

:func:`run_as_leader` blocks until this process holds the Lease, runs the given coroutine, and
cancels it if the Lease is lost (the upstream controllers exit in that case; so do we, by raising
:class:`LeadershipLost`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

from kubernetes import client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

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
            return (
                False if self.released else bool(super().create(name, namespace, election_record))
            )
        except Exception as exc:
            log.warning("creating Lease %s/%s failed: %s", namespace, name, exc)
            return False

    def update(self, name: str, namespace: str, updated_record: object) -> bool:
        try:
            return False if self.released else bool(super().update(name, namespace, updated_record))
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


async def run_as_leader(
    api: client.ApiClient,
    settings: LeaderElectionSettings,
    body: Callable[[], Awaitable[None]],
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
    lock = ReleasableLeaseLock(settings.name, settings.namespace, settings.identity)
    lock.api_instance = client.CoordinationV1Api(api)
    config = electionconfig.Config(
        lock=lock,
        lease_duration=settings.lease_duration_s,
        renew_deadline=settings.renew_deadline_s,
        retry_period=settings.retry_period_s,
        onstarted_leading=lambda: _notify(loop, leading),
        onstopped_leading=lambda: _notify(loop, lost),
    )
    elector = threading.Thread(
        target=leaderelection.LeaderElection(config).run, daemon=True, name="leader-election"
    )
    elector.start()
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
