"""The parent DVP cluster's load-balancer controller, in miniature (MetalLB's part of it).

Watches Services of ``type: LoadBalancer`` in the parent cluster and gives each one an address
from a pool, a little later, the way a real LB controller does: ``status.loadBalancer.ingress``
gets one IP (``spec.loadBalancerIP`` when set), written through the status subresource once per
Service UID; a Service with ``spec.loadBalancerClass`` is someone else's and left alone. Test
stack only: the product never imports this.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.informer import Informer
from cloudloop.kube.resources import Resource

log = logging.getLogger(__name__)

SERVICES = Resource("", "v1", "services", "Service")
#: Addresses the parent hands out to load balancers.
LB_POOL = ipaddress.ip_network("10.67.0.0/16")


@dataclass
class ParentLoadBalancers:
    """Assigns ingress addresses to the parent's LoadBalancer Services (own thread)."""

    kube: Kube
    assign_s: float = 0.05
    tick_s: float = 0.02
    _addresses: dict[str, str] = field(default_factory=dict)
    _seen: dict[str, float] = field(default_factory=dict)
    _done: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    #: Assignments made, by Service UID (tests count them).
    assigned: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.services = Informer(self.kube, SERVICES)

    def start(self) -> ParentLoadBalancers:
        self.services.start()
        if not self.services.synced.wait(30):
            raise RuntimeError("parent load balancers: Services did not sync")
        self._thread = threading.Thread(target=self._run, name="parent-lb", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.services.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                for service in list(self.services.store.values()):
                    self._service(service)
            except Exception:  # must outlive a bad object or a race
                log.exception("parent load balancers: tick failed")

    def _address(self, uid: str, spec: dict[str, Any]) -> str:
        wanted = str(spec.get("loadBalancerIP") or "")
        if wanted:
            return wanted
        if uid not in self._addresses:
            self._addresses[uid] = str(LB_POOL[len(self._addresses) + 10])
        return self._addresses[uid]

    def _service(self, service: dict[str, Any]) -> None:
        meta, spec = service["metadata"], service.get("spec") or {}
        uid = str(meta.get("uid", ""))
        if (
            spec.get("type") != "LoadBalancer"
            or spec.get("loadBalancerClass")
            or meta.get("deletionTimestamp")
            or uid in self._done
        ):
            return
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress")
        if ingress:
            self._done.add(uid)
            return
        first = self._seen.setdefault(uid, time.monotonic())
        if time.monotonic() - first < self.assign_s:
            return
        address = self._address(uid, spec)
        try:
            self.kube.patch(
                SERVICES,
                meta["name"],
                {
                    "metadata": {"uid": uid},
                    "status": {"loadBalancer": {"ingress": [{"ip": address}]}},
                },
                meta.get("namespace"),
                subresource="status",
            )
        except KubeError:  # gone or replaced meanwhile: the next tick looks again
            return
        self._done.add(uid)
        self.assigned[uid] = address
