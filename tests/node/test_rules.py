"""The cloud node controllers' decisions, as upstream makes them."""

from __future__ import annotations

import pytest

from cloudloop.cloud.models import Instance, InstanceState, NodeAddress
from cloudloop.kube.bodies import Node, NodeAddressBody, NodeCondition
from cloudloop.rules import node as rules

INSTANCE = Instance(
    id="i-1",
    provider_id="aws:///eu-1a/i-1",
    zone="eu-1a",
    region="eu-1",
    instance_type="m5.large",
    state=InstanceState.RUNNING,
    addresses=[
        NodeAddress(type="InternalIP", address="10.0.0.5"),
        NodeAddress(type="InternalIP", address="10.0.0.6"),
        NodeAddress(type="ExternalIP", address="203.0.113.7"),
        NodeAddress(type="InternalDNS", address="ip-10-0-0-5.internal"),
    ],
)


def node(
    *,
    ready: str | None = None,
    taints: tuple[str, ...] = (),
    annotations: dict[str, str] | None = None,
    addresses: list[NodeAddressBody] | None = None,
) -> Node:
    conditions: list[NodeCondition] = [{"type": "Ready", "status": ready}] if ready else []
    return {
        "metadata": {"name": "n", "annotations": annotations or {}},
        "spec": {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]},
        "status": {"conditions": conditions, "addresses": addresses or []},
    }


@pytest.mark.parametrize(
    ("existing", "expected_new"),
    [
        pytest.param(
            {},
            {
                "topology.kubernetes.io/zone",
                "failure-domain.beta.kubernetes.io/zone",
                "topology.kubernetes.io/region",
                "failure-domain.beta.kubernetes.io/region",
                "node.kubernetes.io/instance-type",
                "beta.kubernetes.io/instance-type",
            },
            id="fresh-node-gets-ga-and-beta",
        ),
        pytest.param(
            {"topology.kubernetes.io/zone": "custom"},
            {
                "failure-domain.beta.kubernetes.io/zone",
                "topology.kubernetes.io/region",
                "failure-domain.beta.kubernetes.io/region",
                "node.kubernetes.io/instance-type",
                "beta.kubernetes.io/instance-type",
            },
            id="existing-label-never-overwritten",
        ),
    ],
)
def test_node_labels(existing: dict[str, str], expected_new: set[str]) -> None:
    assert set(rules.node_labels(INSTANCE, existing)) == expected_new


def test_additional_labels_drop_reserved_keys() -> None:
    labels = rules.node_labels(
        INSTANCE, {}, {"team": "a", "node.kubernetes.io/x": "1", "foo.k8s.io/y": "2"}
    )
    assert labels["team"] == "a"
    assert "node.kubernetes.io/x" not in labels and "foo.k8s.io/y" not in labels


@pytest.mark.parametrize(
    ("provided", "first", "internal_ips"),
    [
        pytest.param("", "10.0.0.5", 2, id="no-annotation-keeps-cloud-order"),
        pytest.param("10.0.0.6", "10.0.0.6", 1, id="match-first-and-only-of-its-type"),
    ],
)
def test_node_addresses_with_provided_ip(provided: str, first: str, internal_ips: int) -> None:
    annotations = {rules.PROVIDED_NODE_IP: provided} if provided else {}
    addresses = rules.node_addresses(node(annotations=annotations), INSTANCE.addresses)
    assert addresses[0]["address"] == first
    assert sum(a["type"] == "InternalIP" for a in addresses) == internal_ips


def test_provided_ip_not_in_cloud_is_an_error() -> None:
    with pytest.raises(rules.InitError):
        rules.node_addresses(
            node(annotations={rules.PROVIDED_NODE_IP: "192.0.2.1"}), INSTANCE.addresses
        )


def test_kubelet_hostname_kept_when_cloud_has_none() -> None:
    addresses = rules.node_addresses(
        node(addresses=[{"type": "Hostname", "address": "kubelet"}]), INSTANCE.addresses
    )
    assert {"type": "Hostname", "address": "kubelet"} in addresses


def test_initialized_spec_keeps_existing_provider_id_and_other_taints() -> None:
    n = node(taints=(rules.UNINITIALIZED_TAINT, "other"))
    n["spec"]["providerID"] = "aws:///given/i-1"
    spec = rules.initialized_spec(n, INSTANCE)
    assert spec["providerID"] == "aws:///given/i-1"
    assert [t["key"] for t in spec["taints"]] == ["other"]


def instance(state: InstanceState) -> Instance:
    return INSTANCE.model_copy(update={"state": state})


@pytest.mark.parametrize(
    ("n", "found", "looked_up", "verdict"),
    [
        pytest.param(node(ready="True"), None, False, rules.Verdict.KEEP, id="ready-no-call"),
        pytest.param(
            node(ready="True", taints=(rules.SHUTDOWN_TAINT,)),
            None,
            False,
            rules.Verdict.UNTAINT_SHUTDOWN,
            id="ready-untaints",
        ),
        pytest.param(node(ready="False"), None, False, rules.Verdict.KEEP, id="cloud-error-keeps"),
        pytest.param(node(ready="False"), None, True, rules.Verdict.DELETE, id="missing-deletes"),
        pytest.param(
            node(ready="Unknown"),
            instance(InstanceState.TERMINATED),
            True,
            rules.Verdict.DELETE,
            id="terminated-deletes",
        ),
        pytest.param(
            node(ready="False"),
            instance(InstanceState.STOPPED),
            True,
            rules.Verdict.TAINT_SHUTDOWN,
            id="stopped-taints",
        ),
        pytest.param(
            node(ready="False", taints=(rules.SHUTDOWN_TAINT,)),
            instance(InstanceState.STOPPED),
            True,
            rules.Verdict.KEEP,
            id="already-tainted",
        ),
        pytest.param(
            node(ready="False"),
            instance(InstanceState.STOPPING),
            True,
            rules.Verdict.KEEP,
            id="stopping-is-not-shutdown",
        ),
        pytest.param(
            node(),
            instance(InstanceState.RUNNING),
            True,
            rules.Verdict.KEEP,
            id="no-ready-condition-running",
        ),
    ],
)
def test_lifecycle_verdict(
    n: Node, found: Instance | None, looked_up: bool, verdict: rules.Verdict
) -> None:
    assert rules.lifecycle_verdict(n, found, looked_up=looked_up) is verdict
