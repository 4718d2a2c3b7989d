"""The service controller's pure rules: which Services want an LB, the LB node set, workflow IDs."""

from __future__ import annotations

import pytest

from cloudloop.cloud.models import LoadBalancerPort
from cloudloop.kube.bodies import LoadBalancerIngress, Node, ObjectMeta, Service, ServiceSpec
from cloudloop.kube.resources import SERVICES, ObjectRef
from cloudloop.messages.loadbalancer import (
    LB_FINALIZER,
    DesiredLoadBalancer,
    LoadBalancerNode,
    default_load_balancer_name,
    workflow_id,
)
from cloudloop.rules import loadbalancer as rules


def service(
    *,
    type: str = "LoadBalancer",
    lb_class: str | None = None,
    finalizers: list[str] | None = None,
    deleting: bool = False,
) -> Service:
    meta: ObjectMeta = {"name": "web", "namespace": "shop", "uid": "u-1"}
    if finalizers is not None:
        meta["finalizers"] = finalizers
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: ServiceSpec = {"type": type, "ports": [{"port": 80, "nodePort": 30080}]}
    if lb_class is not None:
        spec["loadBalancerClass"] = lb_class
    return {"metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    ("obj", "wants", "cleanup"),
    [
        pytest.param(service(), True, False, id="lb"),
        pytest.param(service(lb_class="x/y"), False, False, id="class-set"),
        pytest.param(service(type="ClusterIP"), False, False, id="cluster-ip"),
        pytest.param(service(finalizers=[LB_FINALIZER]), True, False, id="lb-with-finalizer"),
        pytest.param(service(finalizers=[LB_FINALIZER], deleting=True), True, True, id="deleting"),
        pytest.param(
            service(type="NodePort", finalizers=[LB_FINALIZER]), False, True, id="type-changed"
        ),
        pytest.param(service(deleting=True), True, False, id="deleting-without-finalizer"),
    ],
)
def test_wants_and_cleanup(obj: Service, wants: bool, cleanup: bool) -> None:
    assert rules.wants_load_balancer(obj) is wants
    assert rules.needs_cleanup(obj) is cleanup


def node(
    *,
    provider_id: str = "aws:///us-east-1a/i-1",
    labels: dict[str, str] | None = None,
    taints: list[str] | None = None,
    deleting: bool = False,
    ready: str = "True",
) -> Node:
    meta: ObjectMeta = {"name": "n1", "labels": labels or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {
            "providerID": provider_id,
            "taints": [{"key": t, "effect": "NoSchedule"} for t in taints or []],
        },
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


@pytest.mark.parametrize(
    ("obj", "included"),
    [
        pytest.param(node(), True, id="plain"),
        pytest.param(node(ready="False"), True, id="not-ready-still-included"),
        pytest.param(node(deleting=True), False, id="deleting"),
        pytest.param(node(labels={rules.EXCLUDE_FROM_LB_LABEL: "true"}), False, id="excluded"),
        pytest.param(node(labels={rules.EXCLUDE_FROM_LB_LABEL: "T"}), False, id="excluded-go-T"),
        pytest.param(node(labels={rules.EXCLUDE_FROM_LB_LABEL: "false"}), True, id="label-false"),
        pytest.param(
            node(labels={rules.EXCLUDE_FROM_LB_LABEL: "maybe"}), False, id="label-unparsable"
        ),
        pytest.param(node(labels={rules.EXCLUDE_FROM_LB_LABEL: ""}), False, id="label-empty"),
        pytest.param(node(taints=[rules.TO_BE_DELETED_TAINT]), False, id="autoscaler-taint"),
        pytest.param(node(taints=["other"]), True, id="other-taint"),
        pytest.param(node(provider_id=""), False, id="no-provider-id"),
    ],
)
def test_lb_node_set(obj: Node, included: bool) -> None:
    assert (rules.load_balancer_node(obj) is not None) is included


def test_node_set_is_sorted_and_keeps_labels() -> None:
    second = node(labels={"pool": "a"})
    second["metadata"]["name"] = "a-node"
    found = rules.load_balancer_nodes([node(), second])
    assert [n.name for n in found] == ["a-node", "n1"]
    assert found[0].labels == {"pool": "a"}


def test_desired_state_from_service() -> None:
    obj = service()
    obj["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": "{...}",
        "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
    }
    obj["spec"]["loadBalancerSourceRanges"] = ["10.0.0.0/8", "1.2.3.4/32"]
    desired = rules.desired_load_balancer(obj, [])
    assert desired.annotations == {"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}
    assert desired.ports == [LoadBalancerPort(name="", protocol="TCP", port=80, node_port=30080)]
    assert desired.source_ranges == ["1.2.3.4/32", "10.0.0.0/8"]


def test_same_config_ignores_only_the_node_set() -> None:
    base = DesiredLoadBalancer(ports=[LoadBalancerPort(port=80, node_port=30080)])
    with_nodes = base.model_copy(
        update={"nodes": [LoadBalancerNode(name="n", provider_id="aws:///z/i-1")]}
    )
    assert with_nodes.same_config(base)
    assert not base.same_config(None)
    changed = base.model_copy(update={"annotations": {"k": "v"}})
    assert not changed.same_config(base)


@pytest.mark.parametrize(
    ("uid", "name"),
    [
        pytest.param(
            "01234567-89ab-cdef-0123-456789abcdef", "a0123456789abcdef0123456789abcde", id="uid"
        ),
        pytest.param("abc", "aabc", id="short"),
    ],
)
def test_default_load_balancer_name(uid: str, name: str) -> None:
    assert default_load_balancer_name(uid) == name
    assert len(default_load_balancer_name(uid)) <= 32


def test_workflow_id_names_the_service_and_uid() -> None:
    ref = ObjectRef.of(SERVICES, service())
    assert workflow_id(ref) == "lb/shop/web/u-1"


def test_ingress_hostnames() -> None:
    obj = service()
    obj["status"] = {"loadBalancer": {"ingress": [{"hostname": "h"}, {"ip": "1.2.3.4"}]}}
    assert rules.ingress_hostnames(obj) == ["h", "1.2.3.4"]
    assert rules.ingress_hostnames(service()) == []


@pytest.mark.parametrize(
    ("entry", "hostname", "fields"),
    [
        pytest.param("h.example", True, {"hostname": "h.example"}, id="hostname"),
        pytest.param("1.2.3.4", False, {"ip": "1.2.3.4"}, id="ip"),
        pytest.param(
            rules.ingress_entry("1.2.3.4", "Proxy"),
            False,
            {"ip": "1.2.3.4", "ipMode": "Proxy"},
            id="ip-mode-proxy",
        ),
    ],
)
def test_ingress_entries_keep_the_ip_mode(
    entry: str, hostname: bool, fields: LoadBalancerIngress
) -> None:
    assert rules.ingress_fields(entry, hostname=hostname) == fields
    obj = service()
    obj["status"] = {"loadBalancer": {"ingress": [fields]}}
    assert rules.ingress_hostnames(obj) == [entry]  # what the Service shows compares equal


def test_desired_state_carries_the_load_balancer_ip() -> None:
    obj = service()
    obj["spec"]["loadBalancerIP"] = "203.0.113.9"
    assert rules.desired_load_balancer(obj, []).load_balancer_ip == "203.0.113.9"
    assert rules.desired_load_balancer(service(), []).load_balancer_ip == ""
