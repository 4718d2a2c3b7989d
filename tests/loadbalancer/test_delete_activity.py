"""``lb.delete`` with ``announce`` (``lb-delete-one-activity``): the lookup and the
``DeletingLoadBalancer`` Event that ``lb.get`` and an Event activity made before it.

A unit test: the driver and the Service writes are faked (the real path, Event included, is
``tests/loadbalancer/test_loadbalancers.py``); the activity runs in Temporal's
``ActivityEnvironment`` so its attempt number is real.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

import activities.loadbalancer as module
from activities.loadbalancer import LoadBalancerActivities
from cloudloop.cloud.models import LoadBalancerStatus
from cloudloop.kube.resources import SERVICES, ObjectRef
from cloudloop.messages.loadbalancer import DeleteLoadBalancerInput, LoadBalancerTarget


@dataclass
class FakeDriver:
    exists: bool
    provider: str = "aws"
    calls: list[str] = field(default_factory=list)

    def get_load_balancer(self, name: str) -> LoadBalancerStatus | None:
        self.calls.append("get")
        return LoadBalancerStatus(name=name, hostname="lb.example") if self.exists else None

    def delete_load_balancer(self, name: str) -> None:
        self.calls.append("delete")
        self.exists = False


def target() -> LoadBalancerTarget:
    service = ObjectRef.of(
        SERVICES, {"metadata": {"name": "web", "namespace": "ns", "uid": "1234-5678"}}
    )
    return LoadBalancerTarget(service=service, cluster="c1", provider="aws")


def run(
    monkeypatch: pytest.MonkeyPatch, driver: FakeDriver, *, announce: bool, attempt: int = 1
) -> list[str]:
    """The activity's calls in order: the driver's and ``event:<reason>``."""
    acts = LoadBalancerActivities.__new__(LoadBalancerActivities)
    acts.load_balancers = driver  # type: ignore[assignment]
    acts.kube = None  # type: ignore[assignment]

    def event(ref: ObjectRef, workflow_id: str, reason: str, message: str) -> None:
        driver.calls.append(f"event:{reason}")

    monkeypatch.setattr(acts, "_event", event)
    monkeypatch.setattr(acts, "_write_ingress", lambda *a, **k: True)
    monkeypatch.setattr(module, "remove_finalizer", lambda *a: True)
    env = ActivityEnvironment()
    env.info = env.info.__class__(**{**env.info.__dict__, "attempt": attempt})
    inp: Any = DeleteLoadBalancerInput(target=target(), announce=announce)
    assert env.run(acts.delete_load_balancer, inp) is True
    return driver.calls


def test_an_existing_lb_is_announced_before_the_delete(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = run(monkeypatch, FakeDriver(exists=True), announce=True)
    assert calls == ["get", "event:DeletingLoadBalancer", "delete"]


def test_a_missing_lb_is_not_announced(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(monkeypatch, FakeDriver(exists=False), announce=True) == ["get", "delete"]


def test_a_retry_does_not_announce_again(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(monkeypatch, FakeDriver(exists=True), announce=True, attempt=2) == ["delete"]


def test_without_announce_only_deletes(monkeypatch: pytest.MonkeyPatch) -> None:
    """What runs recorded before the patch ask for (they looked up and recorded it themselves)."""
    assert run(monkeypatch, FakeDriver(exists=True), announce=False) == ["delete"]
