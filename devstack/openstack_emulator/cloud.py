"""The emulated cloud's core: one lock, a clock, timed transitions, request records and faults.

Every resource is kept as its API representation (a JSON-ready dict) in a named table; the
service modules (:mod:`.identity`, :mod:`.compute`, :mod:`.network`, :mod:`.loadbalancer`,
:mod:`.volume`, :mod:`.image`) create, change and render them.

Rules: status changes that take time in a real cloud (a server building, an Octavia LB leaving
``PENDING_*``, a Cinder volume attaching) are scheduled transitions applied when the state is
next touched, so delays are exact and nothing runs in the background. Transitions of a kind can
be held (a resource "stuck" in ``PENDING_*``), slowed, or made to fail (``ERROR``) from the admin
API; requests can be refused per service (down, 503, 5xx) or one by one (next N matching).
"""

from __future__ import annotations

import heapq
import itertools
import re
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

Resource = dict[str, Any]

#: Fixed identities of the seed, so tests and ``cloudloop dev`` can name them in settings.
_SEED_NAMESPACE = uuid.UUID("0c9b1f0e-7c55-4f7e-9a3c-3f6b0d1e2a77")

SERVICES = ("identity", "compute", "network", "load-balancer", "block-storage", "image")


def seed_id(kind: str, name: str) -> str:
    return str(uuid.uuid5(_SEED_NAMESPACE, f"{kind}/{name}"))


def new_id() -> str:
    return str(uuid.uuid4())


def iso_now() -> str:
    """Timestamps as the APIs write them (``2024-01-02T03:04:05Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cinder_now() -> str:
    """Timestamps as Cinder writes them: microseconds and no zone (``2026-12-01T21:00:00.000000``;
    gophercloud parses them with ``JSONRFC3339MilliNoZ`` and refuses a ``Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")


class ApiFault(Exception):
    """An answer other than success. ``kind`` names the fault in the service's error body
    (Nova ``itemNotFound``, Neutron ``NetworkNotFound``, ...); the service picks a default."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{status} {message}")
        self.status = status
        self.message = message
        self.kind = kind
        self.headers = headers or {}


def not_found(what: str, key: str) -> ApiFault:
    return ApiFault(404, f"{what} {key} could not be found.")


def bad_request(message: str) -> ApiFault:
    return ApiFault(400, message)


def conflict(message: str) -> ApiFault:
    return ApiFault(409, message)


@dataclass(frozen=True)
class Delays:
    """Seconds each simulated step takes (small in tests; configurable, and from the admin API)."""

    server_build_s: float = 0.3
    server_power_s: float = 0.1
    #: A deleted server stays (``task_state`` deleting) this long; transitions of kind
    #: ``server-delete`` (builds and power actions are kind ``server``).
    server_delete_s: float = 0.1
    lb_create_s: float = 0.5
    lb_update_s: float = 0.2
    lb_delete_s: float = 0.2
    volume_create_s: float = 0.1
    volume_attach_s: float = 0.2
    volume_detach_s: float = 0.2
    volume_extend_s: float = 0.1
    volume_retype_s: float = 0.1
    volume_delete_s: float = 0.1

    def with_changes(self, changes: dict[str, float]) -> Delays:
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise ValueError(f"unknown delays: {sorted(unknown)}")
        return Delays(**{**{name: getattr(self, name) for name in known}, **changes})


@dataclass
class RequestRecord:
    service: str
    method: str
    route: str
    path: str
    query: str
    status: int
    user_agent: str
    microversion: str = ""
    #: The catalog region whose endpoint was called (a second region's URLs carry a prefix).
    region: str = ""


@dataclass
class InjectedFault:
    """Answer the next ``count`` requests matching ``service``/``method``/``route`` (a regex over
    the route label, e.g. ``/v2/lbaas/loadbalancers``) with ``status`` (``count`` < 0: always)."""

    service: str
    status: int
    method: str = ""
    route: str = ""
    count: int = 1
    message: str = "Injected fault"
    retry_after_s: int | None = None
    #: Sleep this long before answering (a slow API; ``status`` 0 answers normally after it).
    latency_s: float = 0.0

    def matches(self, service: str, method: str, route: str) -> bool:
        return (
            self.service == service
            and (not self.method or self.method == method)
            and (not self.route or re.search(self.route, route) is not None)
        )


@dataclass
class HoldTrigger:
    """Hold transitions of ``kind`` once a request matching ``service``/``method``/``route`` (a
    regex over the route label) has been answered: e.g. freeze an LB in ``PENDING_UPDATE``
    right after ``POST /v2/lbaas/pools``, with no race against the client's next write."""

    service: str
    kind: str
    method: str = ""
    route: str = ""

    def matches(self, service: str, method: str, route: str) -> bool:
        return (
            self.service == service
            and (not self.method or self.method == method)
            and (not self.route or re.search(self.route, route) is not None)
        )


@dataclass(order=True)
class _Transition:
    at: float
    seq: int
    kind: str = field(compare=False)
    apply: Callable[[], None] = field(compare=False)


class Cloud:
    """Tables of resources, transitions and faults; every access holds :attr:`lock`."""

    def __init__(
        self,
        *,
        delays: Delays | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.delays = delays or Delays()
        self.clock = clock
        self.lock = threading.RLock()
        self._seq = itertools.count()
        self.reset_core()

    def reset_core(self) -> None:
        with self.lock:
            self.tables: dict[str, dict[str, Resource]] = {}
            self._transitions: list[_Transition] = []
            self.held: set[str] = set()
            #: Kinds whose next transition ends in ERROR (e.g. ``loadbalancer``), with a count.
            self.fail_next: Counter[str] = Counter()
            #: Flavors (name or ID) no host fits: their servers end in ERROR "No valid host".
            self.no_valid_host: set[str] = set()
            #: Project quotas (``compute.instances``, ``network.port``, ``volume.gigabytes``...);
            #: absent or -1: unlimited, as Nova/Neutron/Cinder read -1.
            self.quotas: dict[str, int] = {}
            #: Resources made and removed (``servers_created``, ``ports_removed``...), for tests.
            self.counts: Counter[str] = Counter()
            self.faults: list[InjectedFault] = []
            self.hold_triggers: list[HoldTrigger] = []
            self.service_modes: dict[str, str] = {name: "up" for name in SERVICES}
            self.request_counts: Counter[str] = Counter()
            self.user_agents: Counter[str] = Counter()
            self.recent: deque[RequestRecord] = deque(maxlen=5000)

    # -- tables ----------------------------------------------------------------------------
    def table(self, name: str) -> dict[str, Resource]:
        return self.tables.setdefault(name, {})

    def get(self, table: str, resource_id: str, what: str) -> Resource:
        found = self.table(table).get(resource_id)
        if found is None:
            raise not_found(what, resource_id)
        return found

    def quota(self, key: str) -> int:
        """The quota ``<service>.<resource>`` (-1: unlimited)."""
        return self.quotas.get(key, -1)

    def over_quota(self, key: str, used: int, wanted: int = 1) -> bool:
        limit = self.quota(key)
        return limit >= 0 and used + wanted > limit

    # -- transitions -----------------------------------------------------------------------
    def later(self, kind: str, delay_s: float, apply: Callable[[], None]) -> None:
        """Apply ``apply`` once ``delay_s`` has passed (and ``kind`` is not held)."""
        heapq.heappush(
            self._transitions,
            _Transition(self.clock() + max(delay_s, 0.0), next(self._seq), kind, apply),
        )

    def take_failure(self, kind: str) -> bool:
        """Whether this transition of ``kind`` must end in ERROR (consumes one injected failure)."""
        if self.fail_next[kind] > 0:
            self.fail_next[kind] -= 1
            return True
        return False

    def advance(self) -> None:
        """Apply every due transition whose kind is not held, in time order."""
        now = self.clock()
        kept: list[_Transition] = []
        while self._transitions and self._transitions[0].at <= now:
            due = heapq.heappop(self._transitions)
            if due.kind in self.held:
                kept.append(due)
                continue
            due.apply()
        for item in kept:
            heapq.heappush(self._transitions, item)

    def pending_transitions(self) -> list[str]:
        return sorted(t.kind for t in self._transitions)

    # -- requests and faults ---------------------------------------------------------------
    def record(self, entry: RequestRecord) -> None:
        with self.lock:
            self.request_counts[f"{entry.method} {entry.service} {entry.route}"] += 1
            self.user_agents[entry.user_agent] += 1
            self.recent.append(entry)

    def clear_requests(self) -> None:
        with self.lock:
            self.request_counts.clear()
            self.user_agents.clear()
            self.recent.clear()

    def answered(self, service: str, method: str, route: str, status: int) -> None:
        """A request was answered: arm the holds it triggers (successful writes only)."""
        if status >= 400:
            return
        with self.lock:
            fired = [t for t in self.hold_triggers if t.matches(service, method, route)]
            for trigger in fired:
                self.held.add(trigger.kind)
            self.hold_triggers = [t for t in self.hold_triggers if t not in fired]

    def injected(self, service: str, method: str, route: str) -> InjectedFault | None:
        """The injected fault this request meets, consuming one of its count."""
        with self.lock:
            for fault in self.faults:
                if fault.count != 0 and fault.matches(service, method, route):
                    if fault.count > 0:
                        fault.count -= 1
                    self.faults = [f for f in self.faults if f.count != 0]
                    return fault
        return None
