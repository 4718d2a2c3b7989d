"""Fuzzed inputs through the real stack: Service annotations, CloudProbe specs and SQS bodies
reach the real starter and worker processes; every rejected input is answered with an Event or
a condition, and no loop crashes (no starter restart, ``/healthz`` stays 200)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import Event
from cloudloop.kube.client import api_client
from cloudloop.kube.conditions import get_condition
from cloudloop.kube.resources import CLOUD_PROBES, EVENTS, SERVICES, Resource
from devstack.backends.aws import create_cluster_network
from devstack.local import LocalStack
from tests.faults.rig import Process, aws, base_env
from tests.faults.test_fuzz import ANNOTATIONS, JSON, sqs_bodies

pytestmark = [pytest.mark.stack, pytest.mark.fault]

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
LIVE = settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Rig:
    def __init__(self, stack: LocalStack, tmp: Path) -> None:
        self.stack = stack
        self.scope = f"fuzz-{uuid.uuid4().hex[:6]}"
        self.kube = Kube(api_client(stack.kubeconfig))
        create_cluster_network(aws(stack, "ec2"), self.scope)
        self.sqs = aws(stack, "sqs")
        self.queue = self.sqs.create_queue(QueueName=self.scope)["QueueUrl"]
        self.kube.create(NAMESPACES, {"metadata": {"name": self.scope}})
        env = base_env(
            stack,
            self.scope,
            self.scope,
            CLOUDLOOP_CCM__NODE_SELECTOR=f"cloudloop-fault={self.scope}",
            CLOUDLOOP_NTH__QUEUE_URL=self.queue,
            CLOUDLOOP_NTH__WAIT_TIME_S="1",
        )
        self.worker = Process("worker", env, tmp).start()
        self.starter = Process("starter", env, tmp).start()
        self.count = 0

    def name(self) -> str:
        self.count += 1
        return f"f{self.count}"

    def wait(self, check: Any, what: str, timeout: float = 90) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            time.sleep(0.5)
        raise AssertionError(f"no {what} within {timeout}s")

    def events(self, name: str, reason: str) -> list[Event]:
        found = self.kube.list(EVENTS, self.scope, fieldSelector=f"involvedObject.name={name}")
        return [e for e in found["items"] if e["reason"] == reason]

    def alive(self) -> None:
        assert self.starter.get("/healthz")[0] == 200, self.starter.get("/healthz")
        assert self.worker.get("/healthz")[0] == 200
        assert self.starter.metric("cloudloop_starter_restarts_total") == 0
        assert not self.starter.exits and not self.worker.exits


@pytest.fixture(scope="module")
def rig(stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    made = Rig(stack, tmp_path_factory.mktemp("fuzz-live"))
    try:
        yield made
    finally:
        made.starter.stop()
        made.worker.stop()
        made.kube.delete(NAMESPACES, made.scope)


@LIVE
@given(annotations=ANNOTATIONS)
def test_fuzzed_service_annotations(rig: Rig, annotations: dict[str, str]) -> None:
    name = rig.name()
    body = {
        "metadata": {"name": name, "namespace": rig.scope, "annotations": annotations},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]},
    }
    try:
        rig.kube.create(SERVICES, body, rig.scope)
    except KubeError as exc:  # the API server refused it: answered there
        assert exc.status in (400, 422), exc
        return

    def answered() -> str | None:
        service = rig.kube.get(SERVICES, name, rig.scope) or {}
        if ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress"):
            return "ingress"
        if rig.events(name, "SyncLoadBalancerFailed"):
            return "warning"
        handled_elsewhere = annotations.get(
            "service.beta.kubernetes.io/aws-load-balancer-type", ""
        ).strip().lower() in ("external", "nlb-ip")
        return "elsewhere" if handled_elsewhere else None

    rig.wait(answered, f"an answer to Service {name} {annotations!r}")
    rig.kube.delete(SERVICES, name, rig.scope)
    rig.wait(lambda: rig.kube.get(SERVICES, name, rig.scope) is None, f"{name} deleted")
    rig.alive()


@LIVE
@given(spec=st.dictionaries(st.sampled_from(["provider", "extra"]), JSON, max_size=2))
def test_fuzzed_cloud_probe_specs(rig: Rig, spec: dict[str, Any]) -> None:
    name = rig.name()
    try:
        rig.kube.create(
            CLOUD_PROBES,
            {"metadata": {"name": name, "namespace": rig.scope}, "spec": spec},
            rig.scope,
        )
    except KubeError as exc:  # the CRD schema refused it
        assert exc.status in (400, 422), exc
        return
    ready = rig.wait(
        lambda: get_condition(rig.kube.get(CLOUD_PROBES, name, rig.scope) or {}, "Ready"),
        f"the Ready condition of CloudProbe {name} {spec!r}",
    )
    assert ready["status"] in ("True", "False")
    rig.alive()


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(bodies=st.lists(sqs_bodies(), min_size=5, max_size=15))
def test_fuzzed_sqs_bodies(rig: Rig, bodies: list[str]) -> None:
    for body in bodies:
        try:
            rig.sqs.send_message(QueueUrl=rig.queue, MessageBody=body or json.dumps(body))
        except botocore.exceptions.ClientError:  # characters SQS does not take
            continue

    def drained() -> bool:
        attrs = rig.sqs.get_queue_attributes(
            QueueUrl=rig.queue,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(v) for v in attrs.values()) == 0

    rig.wait(drained, "every message handled (deleted)", timeout=120)
    rig.alive()
