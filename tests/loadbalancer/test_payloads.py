"""What the load-balancer starter sends: only what the cloud reads, and nothing for a change no
load balancer depends on; a large node set goes by reference (a ConfigMap).

Pure parts (the drivers' annotation and label choices, the node projection, the node-set
encoding, old workflow inputs) run without the stack; the starter's path runs against the real
kube-apiserver, Temporal and moto.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client

from activities.loadbalancer import LoadBalancerActivities
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.loadbalancers import service_annotations as ann
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.driver import LoadBalancerDefaults, LoadBalancers
from cloudloop.cloud.models import LoadBalancerPort
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.openstack.settings import LoadBalancerSettings, OpenStackSettings
from cloudloop.cloud.registry import Settings
from cloudloop.kube import nodesets
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Node
from cloudloop.kube.resources import CONFIG_MAPS, NODES, ObjectRef
from cloudloop.messages.loadbalancer import (
    ApplyRequest,
    DesiredLoadBalancer,
    LoadBalancerNode,
    LoadBalancerTarget,
    NodeSetRef,
)
from cloudloop.rules import loadbalancer as rules
from tests.fakes import MemoryKube
from tests.helpers import eventually
from tests.loadbalancer.support import AwsWorld, ingress, lb_name, make_service, service_starter
from workers.main import build_worker

AWS_DRIVER = AwsDriver(AwsSettings())
OPENSTACK_DRIVER = OpenStackDriver(
    OpenStackSettings(load_balancer=LoadBalancerSettings(node_selector="zone=a, tier"))
)
TARGET = ann.TARGET_NODE_LABELS


@pytest.mark.parametrize(
    ("load_balancers", "annotations", "kept", "labels"),
    [
        pytest.param(
            AWS_DRIVER.load_balancers,
            {TARGET: "pool=a, zone", ann.INTERNAL: "true", "team.io/owner": "x"},
            {TARGET, ann.INTERNAL},
            {"pool", "zone"},
            id="aws-target-node-labels",
        ),
        pytest.param(
            AWS_DRIVER.load_balancers,
            {ann.LEGACY_SOURCE_RANGES: "10.0.0.0/8", "loadbalancer.openstack.org/x": "1"},
            {ann.LEGACY_SOURCE_RANGES},
            set(),
            id="aws-legacy-source-ranges",
        ),
        pytest.param(
            AWS_DRIVER.load_balancers, {TARGET: "=a,,"}, {TARGET}, set(), id="aws-malformed-kept"
        ),
        pytest.param(
            OPENSTACK_DRIVER.load_balancers,
            {"loadbalancer.openstack.org/node-selector": "pool=b", ann.INTERNAL: "true"},
            {"loadbalancer.openstack.org/node-selector"},
            {"pool"},
            id="openstack-annotation-selector",
        ),
        pytest.param(
            OPENSTACK_DRIVER.load_balancers,
            {"service.beta.kubernetes.io/openstack-internal-load-balancer": "true"},
            {"service.beta.kubernetes.io/openstack-internal-load-balancer"},
            {"zone", "tier"},
            id="openstack-config-selector",
        ),
        pytest.param(
            LoadBalancerDefaults(),
            {"any.io/thing": "1"},
            {"any.io/thing"},
            set(),
            id="default-keeps-all",
        ),
    ],
)
def test_the_driver_names_what_its_load_balancers_read(
    load_balancers: LoadBalancers | LoadBalancerDefaults,
    annotations: dict[str, str],
    kept: set[str],
    labels: set[str],
) -> None:
    assert set(load_balancers.load_balancer_annotations(annotations)) == kept
    assert load_balancers.load_balancer_node_labels(annotations) == labels


def node(name: str, labels: dict[str, str], provider_id: str = "aws:///z/i-1") -> Node:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"providerID": provider_id}}


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        pytest.param(frozenset(), [{}, {}], id="no-keys"),
        pytest.param(frozenset({"pool"}), [{"pool": "a"}, {}], id="named-only"),
        pytest.param(None, [{"pool": "a", "x": "1"}, {"x": "2"}], id="all-without-keys"),
    ],
)
def test_node_labels_are_projected(keys: frozenset[str] | None, expected: list[Any]) -> None:
    found = rules.load_balancer_nodes(
        [node("b", {"x": "2"}), node("a", {"pool": "a", "x": "1"}), node("c", {}, "")], keys
    )
    assert [n.name for n in found] == ["a", "b"]
    assert [n.labels for n in found] == expected


def test_node_set_encoding_round_trips_and_digests_content() -> None:
    nodes = [
        LoadBalancerNode(name=f"n{i}", provider_id=f"aws:///z/i-{i:017x}", labels={"p": "a"})
        for i in range(300)
    ]
    assert nodesets.decode(nodesets.encode(nodes)) == nodes
    assert nodesets.digest(nodes) == nodesets.digest(list(nodes))
    assert nodesets.digest(nodes) != nodesets.digest(nodes[1:])
    assert len(nodesets.encode(nodes)) < len(nodesets.canonical(nodes)) / 2


def test_a_node_set_by_reference_is_mapped_once_per_version() -> None:
    """Every ensure of one ConfigMap version shares one backend list (built once, not once per
    activity: ~3 MB at 5,000 nodes); a new version is mapped again; inline sets as before."""
    kube = MemoryKube()
    activities = LoadBalancerActivities(AWS_DRIVER.load_balancers, AWS_DRIVER.instances, kube)
    target = LoadBalancerTarget(
        service=ObjectRef(plural="services", kind="Service", namespace="ns", name="s", uid="u"),
        cluster="c",
        provider="aws",
    )

    def stored(nodes: list[LoadBalancerNode], version: str) -> DesiredLoadBalancer:
        kube.put(
            CONFIG_MAPS,
            {
                "metadata": {"name": "cm", "resourceVersion": version},
                "binaryData": {nodesets.DATA_KEY: nodesets.encode(nodes)},
            },
            "kube-system",
        )
        ref = NodeSetRef(
            namespace="kube-system", name="cm", digest=nodesets.digest(nodes), count=len(nodes)
        )
        return DesiredLoadBalancer(ports=[LoadBalancerPort(port=80, node_port=30080)], node_set=ref)

    nodes = [
        LoadBalancerNode(name=f"n{i}", provider_id=f"aws:///us-east-1a/i-{i:017x}")
        for i in range(3)
    ]
    foreign = LoadBalancerNode(name="f", provider_id="openstack:///x")
    desired = stored([*nodes, foreign], "1")
    first, again = activities.spec(target, desired), activities.spec(target, desired)
    assert [b.node_name for b in first.backends] == ["n0", "n1", "n2"]  # another cloud's: skipped
    assert first.backend_instance_ids == [f"i-{i:017x}" for i in range(3)]
    shared = activities.backends(target, desired)
    assert activities.backends(target, desired) is shared
    assert all(a is b for a, b in zip(again.backends, first.backends, strict=True))

    newer = stored(nodes[:2], "2")
    assert [b.node_name for b in activities.spec(target, newer).backends] == ["n0", "n1"]
    assert activities.backends(target, newer) is not shared

    inline = DesiredLoadBalancer(ports=[LoadBalancerPort(port=80, node_port=30080)], nodes=nodes)
    assert activities.backends(target, inline) is not activities.backends(target, inline)
    assert activities.spec(target, inline).backend_instance_ids == first.backend_instance_ids


def test_a_desired_state_by_reference_is_small_and_the_old_shape_still_parses() -> None:
    port = LoadBalancerPort(port=80, node_port=30080)
    ref = NodeSetRef(namespace="kube-system", name="cm", digest="d" * 64, count=5000)
    by_ref = DesiredLoadBalancer(ports=[port], node_set=ref)
    assert by_ref.node_count == 5000
    assert len(ApplyRequest(desired=by_ref).model_dump_json()) < 1024
    assert by_ref.same_config(DesiredLoadBalancer(ports=[port], nodes=[]))
    old = ApplyRequest.model_validate_json(  # as recorded before node_set existed
        '{"desired": {"ports": [{"port": 80, "node_port": 30080}], "nodes": '
        '[{"name": "n", "provider_id": "aws:///z/i-1", "labels": {"a": "b"}}]}}'
    )
    assert old.desired.node_set is None and old.desired.node_count == 1


# -- the starter on the stack ---------------------------------------------------------------
def registered(world: AwsWorld, name: str) -> int:
    return len((world.classic(name) or {}).get("Instances") or [])


async def settle(seconds: float = 1.5) -> None:
    """Long enough for a watch event to reach the starter and its sync to run."""
    await asyncio.sleep(seconds)


@pytest.mark.stack
@pytest.mark.parametrize(
    "inline_max", [pytest.param(1 << 20, id="inline"), pytest.param(0, id="by-reference")]
)
async def test_only_named_labels_reach_the_load_balancer(
    kube: Kube,
    client: Client,
    lb_config: Settings,
    namespace: str,
    world: AwsWorld,
    nodes: list[str],
    inline_max: int,
) -> None:
    driver = AwsDriver(AWS.section(lb_config))
    worker = build_worker(client, lb_config, driver=driver, kube=kube)
    starter_cm = service_starter(
        kube, client, lb_config, namespace, driver=driver, inline_nodes_max_bytes=inline_max
    )
    async with worker, starter_cm as starter:
        service = await asyncio.to_thread(
            make_service,
            kube,
            namespace,
            "web",
            annotations={TARGET: "pool=a", "team.io/owner": "web"},
        )
        await eventually(lambda: ingress(kube, namespace, "web"), what="ingress")
        name = lb_name(service)
        assert registered(world, name) == len(nodes)
        sent = starter._sent[f"{namespace}/web"][2]
        assert sent is not None and sent.annotations == {TARGET: "pool=a"}
        if inline_max:
            assert sent.node_set is None
            assert {n.name: n.labels for n in sent.nodes} == {n: {"pool": "a"} for n in nodes}
        else:
            assert sent.nodes == [] and sent.node_set is not None
            assert sent.node_set.count == len(nodes)
            stored = await asyncio.to_thread(
                kube.get, CONFIG_MAPS, sent.node_set.name, sent.node_set.namespace
            )
            assert stored is not None
        signals = starter.signals_sent

        # A label no annotation names: nothing is sent.
        await asyncio.to_thread(
            kube.patch, NODES, nodes[0], {"metadata": {"labels": {"unrelated": "1"}}}
        )
        await settle()
        assert starter.signals_sent == signals

        # The label target-node-labels names: one signal, the node leaves the LB.
        await asyncio.to_thread(
            kube.patch, NODES, nodes[0], {"metadata": {"labels": {"pool": "b"}}}
        )
        await eventually(
            lambda: registered(world, name) == len(nodes) - 1 or None,
            what="the relabelled node deregistered",
        )
        assert starter.signals_sent == signals + 1
        await asyncio.to_thread(kube.delete, CONFIG_MAPS, starter.node_set_name, "kube-system")
