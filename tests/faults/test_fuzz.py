"""Fuzzing (hypothesis) of what users and clouds send: Service annotations, InfraMachine specs,
SQS message bodies, providerIDs and CloudProbe specs, through the loops that read them.

Each loop must never crash: a rejected input is a classified error (``InvalidRequest``,
``MalformedMessage``) that the loop turns into an Event or a condition, never an exception
that would end it. These run against in-memory fakes (seconds, in the fast suite); the
``test_fuzz_live.py`` counterpart sends a sample of each through the real stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from temporalio.client import Client

from cloudloop.cloud import errors
from cloudloop.cloud.aws.base import AwsBase
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.instances import AwsInstances
from cloudloop.cloud.aws.loadbalancers import service_annotations as ann
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.aws.termination_events import parse_message
from cloudloop.cloud.dvp.capi import INFRA_KINDS as DVP_KINDS
from cloudloop.cloud.dvp.spec import parse_spec
from cloudloop.cloud.models import InstanceListing, LoadBalancerPort, LoadBalancerSpec
from cloudloop.cloud.termination import (
    InstanceInfo,
    MalformedMessage,
    ParsedMessage,
    QueueMessage,
)
from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT_KINDS
from cloudloop.cloud.zvirt.mapping import parse_machine_spec
from cloudloop.kube.bodies import CloudProbe, InfraObject, Node
from cloudloop.kube.resources import EVENTS, SERVICES
from cloudloop.messages.termination import MANAGED_TAG, DrainResult
from cloudloop.rules import machine as capi
from cloudloop.rules import node as node_rules
from cloudloop.settings import CcmSettings, NthSettings
from devstack.machine_fixtures import dvp_machine_spec
from starters.loadbalancer import ServiceStarter
from starters.machine import MachineStarter
from starters.node import NodeSync
from starters.probe import CloudProbeStarter
from starters.termination import QueueProcessor
from tests.fakes import MemoryKube

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)


# -- fakes -------------------------------------------------------------------------------------
class RecordingKube(MemoryKube):
    """MemoryKube that also answers raw requests (a node DELETE, a PUT) and records them."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, str]] = []

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.requests.append((method, path))
        return {}


@dataclass
class FakeClient:
    starts: list[dict[str, Any]] = field(default_factory=list)

    async def start_workflow(self, *args: Any, **kwargs: Any) -> object:
        self.starts.append(kwargs)

        async def result() -> DrainResult:
            return DrainResult(node="n", action="cordon-and-drain")

        return SimpleNamespace(
            id=kwargs["id"],
            result=result,
            _start_workflow_response=SimpleNamespace(started=True),
        )


class Store:
    """The part of an informer the loops read."""

    def __init__(self, objects: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.store = objects or {}
        self.synced = SimpleNamespace(is_set=lambda: True, wait=lambda timeout=None: True)

    def start(self) -> None:
        pass

    async def wait_synced(self, timeout: float | None = None) -> bool:
        return True


@functools.cache
def dead_aws() -> AwsDriver:
    """An AWS driver whose endpoint refuses at once: only parsing can succeed."""
    return AwsDriver(
        AwsSettings(
            endpoint_url="http://127.0.0.1:9",
            access_key_id=SecretStr("testing"),
            secret_access_key=SecretStr("testing"),
            max_attempts=1,
            timeout_s=1,
        )
    )


# -- Service annotations -------------------------------------------------------------------------
ANNOTATION_KEYS = sorted(
    v for v in vars(ann).values() if isinstance(v, str) and v.startswith(ann.PREFIX)
)
ANNOTATION_VALUES = st.sampled_from(
    [
        "",
        "true",
        "false",
        "nlb",
        "external",
        "nlb-ip",
        "elb",
        "0",
        "-1",
        "5",
        "10",
        "301",
        "HTTP",
        "TCP",
        "https",
        "/healthz",
        "traffic-port",
        "a=b,c=d",
        "a=b,,=",
        "sg-1, sg-2",
        "subnet-1",
        "kubernetes.io/cluster/x=owned",
        "x" * 300,
    ]
) | st.text(max_size=40)
ANNOTATIONS = st.dictionaries(
    st.sampled_from(ANNOTATION_KEYS) | st.text(max_size=30), ANNOTATION_VALUES, max_size=6
)


@FUZZ
@given(annotations=ANNOTATIONS)
def test_service_annotations_parse_or_are_rejected(annotations: dict[str, str]) -> None:
    with contextlib.suppress(errors.InvalidRequest, errors.NotSupported):
        ann.parse_annotations(annotations)


@settings(max_examples=40, deadline=None)
@given(annotations=ANNOTATIONS)
# str.isdigit() is true of "¹", which int() refuses: a port list once crashed on it.
@example(annotations={"service.beta.kubernetes.io/aws-load-balancer-ssl-ports": "¹"})
@example(annotations={"service.beta.kubernetes.io/aws-load-balancer-ssl-ports": "443,٣"})
def test_the_driver_checks_annotations_before_any_call(annotations: dict[str, str]) -> None:
    spec = LoadBalancerSpec(
        name="a0123456789abcdef0123456789abcde",
        cluster="c",
        service="ns/web",
        service_uid="uid",
        ports=[LoadBalancerPort(port=80, node_port=30080)],
        backend_instance_ids=["i-0123456789abcdef0"],
        annotations=annotations,
    )
    with pytest.raises((errors.InvalidRequest, errors.NotSupported, errors.CloudUnreachable)):
        dead_aws().load_balancers.ensure_load_balancer(spec)


#: Ports as the API server lets them through (it validates port, nodePort and protocol).
SERVICE_PORTS = st.lists(
    st.fixed_dictionaries(
        {
            "port": st.integers(1, 65535),
            "protocol": st.sampled_from(["TCP", "UDP", "SCTP"]),
        },
        optional={"nodePort": st.integers(30000, 32767), "name": st.text(max_size=8)},
    ),
    max_size=3,
)


@FUZZ
@given(annotations=ANNOTATIONS, ports=SERVICE_PORTS, lb_class=st.none() | st.text(max_size=8))
def test_the_service_starter_never_crashes(
    annotations: dict[str, str], ports: list[dict[str, Any]], lb_class: str | None
) -> None:
    service: dict[str, Any] = {
        "metadata": {
            "name": "web",
            "namespace": "ns",
            "uid": "u-1",
            "resourceVersion": "1",
            "annotations": annotations,
            "finalizers": ["service.kubernetes.io/load-balancer-cleanup"],
        },
        "spec": {"type": "LoadBalancer", "ports": ports},
    }
    if lb_class is not None:
        service["spec"]["loadBalancerClass"] = lb_class
    kube = MemoryKube()
    kube.put(SERVICES, service, "ns")
    client = FakeClient()
    starter = ServiceStarter(
        kube,
        cast(Client, client),
        services=cast(Any, Store({"ns/web": service})),
        nodes=cast(Any, Store({})),
        task_queue="q",
        cluster="c",
        provider="aws",
    )
    asyncio.run(starter.sync("ns/web"))


# -- InfraMachine specs ---------------------------------------------------------------------------
def mutated(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A valid spec with keys dropped or replaced by anything."""

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        spec = copy.deepcopy(base)
        for key in draw(st.lists(st.sampled_from(sorted(spec)), max_size=3, unique=True)):
            if draw(st.booleans()):
                del spec[key]
            else:
                spec[key] = draw(JSON)
        spec.update(draw(st.dictionaries(st.text(max_size=10), JSON, max_size=2)))
        return spec

    return build()


ZVIRT_SPEC = {
    "template": "tmpl",
    "vnicProfileID": "0b2f3c4d-0000-4000-8000-000000000001",
    "cpu": {"sockets": 1, "cores": 2, "threads": 1},
    "memory": 2048,
    "rootDiskSizeGb": 20,
    "nicName": "nic1",
}
MACHINE_SPECS = (
    mutated(dvp_machine_spec())
    | mutated(ZVIRT_SPEC)
    | st.dictionaries(st.text(max_size=12), JSON, max_size=5)
)


@FUZZ
@given(spec=MACHINE_SPECS)
def test_machine_specs_parse_or_are_rejected(spec: dict[str, Any]) -> None:
    for parse in (parse_spec, parse_machine_spec):
        with contextlib.suppress(errors.InvalidRequest):
            parse(spec)


@FUZZ
@given(spec=MACHINE_SPECS, kinds=st.sampled_from([DVP_KINDS, ZVIRT_KINDS]))
def test_the_machine_starter_never_crashes(spec: dict[str, Any], kinds: capi.InfraKinds) -> None:
    kube = MemoryKube()
    client = FakeClient()
    starter = MachineStarter(
        kube, cast(Client, client), kinds=kinds, task_queue="q", cluster="c", namespace="ns"
    )
    infra: InfraObject = {
        "metadata": {
            "name": "m1",
            "namespace": "ns",
            "uid": "u-1",
            "resourceVersion": "1",
            "generation": 1,
            "labels": {capi.CLUSTER_NAME_LABEL: "c1"},
            "ownerReferences": [
                {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "m1"}
            ],
        },
        "spec": spec,
    }
    kube.put(kinds.machine, infra, "ns")
    starter.infra_machines.store["ns/m1"] = infra
    starter.machines.store["ns/m1"] = {
        "metadata": {"name": "m1", "namespace": "ns"},
        "spec": {"clusterName": "c1", "bootstrap": {"dataSecretName": "d"}},
    }
    starter.clusters.store["ns/c1"] = {"metadata": {"name": "c1", "namespace": "ns"}, "spec": {}}
    asyncio.run(starter.reconcile_machine("ns/m1"))
    assert len(client.starts) == 1  # the workflow reports a bad spec as a condition


# -- SQS message bodies ---------------------------------------------------------------------------
def _eventbridge(detail_type: str, detail: Any) -> dict[str, Any]:
    return {
        "version": "0",
        "id": "e-1",
        "detail-type": detail_type,
        "source": "aws.ec2",
        "time": "2026-05-01T10:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": detail,
    }


@st.composite
def sqs_bodies(draw: st.DrawFn) -> str:
    import json

    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.text(max_size=200))
    if kind == 1:
        return json.dumps(draw(JSON))
    detail_type = draw(
        st.sampled_from(
            [
                "EC2 Spot Instance Interruption Warning",
                "EC2 Instance Rebalance Recommendation",
                "EC2 Instance State-change Notification",
                "EC2 Instance-terminate Lifecycle Action",
                "AWS Health Event",
                "Something Else",
                "",
            ]
        )
    )
    detail = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "instance-id": st.sampled_from(["i-0123456789abcdef0", "i-x", ""]) | JSON,
                "state": st.sampled_from(["stopping", "running", "terminated"]) | JSON,
                "instance-action": JSON,
                "LifecycleActionToken": JSON,
                "AutoScalingGroupName": JSON,
                "LifecycleHookName": JSON,
                "EC2InstanceId": st.sampled_from(["i-0123456789abcdef0"]) | JSON,
                "LifecycleTransition": JSON,
                "service": JSON,
                "eventTypeCategory": JSON,
                "affectedEntities": JSON,
            },
        )
        | JSON
    )
    doc = _eventbridge(detail_type, detail)
    if kind == 3:
        doc = {"Message": json.dumps(doc) if draw(st.booleans()) else draw(JSON)}
    return json.dumps(doc)


class FakeSqs:
    def __init__(self, exists: bool) -> None:
        self.exists = exists
        self.deleted: list[str] = []

    def parse_message(self, body: str, *, message_id: str, now: datetime) -> ParsedMessage:
        return parse_message(body, message_id=message_id, now=now)

    def delete(self, queue_url: str, receipt_handle: str) -> None:
        self.deleted.append(receipt_handle)

    def extend(self, queue_url: str, receipt_handle: str, visibility_s: int) -> None:
        pass

    def describe_instance(self, instance_id: str) -> InstanceInfo | None:
        if not self.exists:
            return None
        return InstanceInfo(
            id=instance_id,
            state="running",
            private_dns_name="n1",
            launch_time=datetime(2020, 1, 1, tzinfo=UTC),
            tags={MANAGED_TAG: ""},
        )


@FUZZ
@given(body=sqs_bodies(), exists=st.booleans(), receives=st.integers(1, 9))
def test_sqs_bodies_never_stop_the_queue_processor(body: str, exists: bool, receives: int) -> None:
    with contextlib.suppress(MalformedMessage):
        parse_message(body, message_id="m", now=datetime.now(UTC))
    kube = MemoryKube()
    nodes = Store({"n1": {"metadata": {"name": "n1"}, "spec": {}}})
    processor = QueueProcessor(
        kube,
        cast(Client, FakeClient()),
        cast(Any, FakeSqs(exists)),
        NthSettings(queue_url="q"),
        task_queue="q",
        cluster="c",
        nodes=cast(Any, nodes),
    )
    fate = asyncio.run(
        processor.handle_message(
            QueueMessage(message_id="m", receipt_handle="r", body=body, receive_count=receives)
        )
    )
    assert fate in {"deleted", "skipped", "ignored", "malformed", "left", "poison"}


# -- providerIDs ----------------------------------------------------------------------------------
PROVIDER_IDS = (
    st.text(max_size=60)
    | st.builds(
        lambda zone, instance: f"aws:///{zone}/{instance}",
        st.sampled_from(["us-east-1a", "", "zone/x"]),
        st.text(alphabet=string.ascii_letters + string.digits + "-_/", max_size=25),
    )
    | st.sampled_from(
        ["aws:///us-east-1a/i-garbage", "aws:///us-east-1a/i-0123456789abcdef0", "i-deadbeef"]
    )
)


class EmptyInstances(AwsInstances):
    """AWS's provider IDs, every lookup answered "no such instance" without error (as for a
    deleted VM)."""

    def list_instances(self, ids: Any) -> InstanceListing:
        return InstanceListing(requests=1)

    def find_instances_by_name(self, names: Any) -> InstanceListing:
        return InstanceListing(requests=1)


@FUZZ
@given(provider_ids=st.lists(PROVIDER_IDS, min_size=1, max_size=5))
def test_a_malformed_provider_id_never_deletes_a_node(provider_ids: list[str]) -> None:
    instances = EmptyInstances(AwsBase(AwsSettings()))
    nodes: dict[str, Node] = {}
    valid: set[str] = set()
    for index, provider_id in enumerate(provider_ids):
        name = f"n{index}"
        nodes[name] = {
            "metadata": {"name": name, "uid": f"u{index}"},
            "spec": {"providerID": provider_id},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
        }
        try:
            if provider_id:  # none: looked up by name, as upstream
                instances.instance_id_from_provider_id(provider_id)
            valid.add(name)
        except errors.InvalidRequest:
            pass
    kube = RecordingKube()
    sync = NodeSync(kube, instances, cast(Any, Store(nodes)), CcmSettings())
    asyncio.run(sync.lifecycle_pass())
    deleted = {path.rsplit("/", 1)[-1] for method, path in kube.requests if method == "DELETE"}
    assert deleted <= valid
    if not node_rules.provider_id(nodes["n0"]):
        return
    warned = {
        w[2]["involvedObject"]["name"]
        for w in kube.writes
        if w[0] == "create" and w[1][0] == EVENTS.plural and w[2]["reason"] == "InvalidProviderID"
    }
    assert warned == {n for n in nodes if n not in valid and node_rules.provider_id(nodes[n])}


# -- CloudProbe specs -----------------------------------------------------------------------------
@FUZZ
@given(spec=st.dictionaries(st.sampled_from(["provider", "x", ""]), JSON, max_size=3))
def test_the_probe_starter_never_crashes(spec: dict[str, Any]) -> None:
    client = FakeClient()
    starter = CloudProbeStarter(MemoryKube(), cast(Client, client), task_queue="q", cluster="c")
    probe = {
        "apiVersion": "cloudloop.io/v1alpha1",
        "kind": "CloudProbe",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": spec,
    }
    assert asyncio.run(starter.start(cast(CloudProbe, probe))) is not None  # any spec at all
    assert len(client.starts) == 1  # the workflow answers with its Ready condition
