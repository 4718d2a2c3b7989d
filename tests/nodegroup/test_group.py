"""The NodeGroup's pure rules: replicas inside the bounds, the render input, owners, consumers."""

from __future__ import annotations

from typing import Any, cast

import pytest

from cloudloop.cloud.zvirt.capi import INFRA_KINDS, NODE_TEMPLATES
from cloudloop.kube.bodies import NodeGroupObject
from cloudloop.nodegroup import group as rules
from cloudloop.nodegroup.contract import ContractError
from cloudloop.nodegroup.render import render_node_group


def node_group(
    name: str = "workers", class_name: str = "small", **instances: Any
) -> NodeGroupObject:
    group: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {
            "clusterName": "c1",
            "cloudInstances": {
                "classReference": {"kind": "ZvirtInstanceClass", "name": class_name},
                "minPerZone": 1,
                "maxPerZone": 3,
                **instances,
            },
            "bootstrap": {"dataSecretName": "boot"},
        },
    }
    return cast(NodeGroupObject, group)


@pytest.mark.parametrize(
    ("current", "expected"), [(None, 1), (0, 1), (1, 1), (2, 2), (3, 3), (7, 3)]
)
def test_replicas_stay_inside_the_bounds_and_keep_a_scale_within(
    current: int | None, expected: int
) -> None:
    assert rules.replicas(current, 1, 3) == expected


def test_the_group_renders_one_deployment_per_zone_with_its_rollout() -> None:
    group = node_group(zones=["a", "b"], maxSurgePerZone=0, maxUnavailablePerZone=1)
    instance_class = {"kind": "ZvirtInstanceClass", "metadata": {"name": "small"}, "spec": {
        "numCPUs": 2, "memory": 4096, "template": "ubuntu", "vnicProfileID": "v",
    }}  # fmt: skip
    wanted = rules.to_render(group, instance_class, cluster="prod", provider_values={})
    assert (wanted.zones, wanted.max_surge, wanted.max_unavailable) == (("a", "b"), 0, 1)
    assert wanted.replicas is None and wanted.cluster_uuid == "prod"
    objects = render_node_group(wanted, INFRA_KINDS, NODE_TEMPLATES)
    assert [o["kind"] for o in objects] == [
        "ZvirtMachineTemplate", "MachineDeployment", "ZvirtMachineTemplate", "MachineDeployment",
    ]  # fmt: skip
    assert "replicas" not in objects[1]["spec"]


def test_no_surge_and_no_unavailable_is_refused() -> None:
    group = node_group(maxSurgePerZone=0, maxUnavailablePerZone=0)
    with pytest.raises(ContractError, match="both be 0"):
        rules.to_render(group, {}, cluster="c", provider_values={})


def test_only_the_groups_own_objects_are_its() -> None:
    group = node_group()
    ours = {"metadata": {"ownerReferences": [rules.owner_reference(group)]}}
    other = {"metadata": {"ownerReferences": [{**rules.owner_reference(node_group("x"))}]}}
    assert rules.owned_by(ours, group)
    assert not rules.owned_by(other, group)
    assert not rules.owned_by({"metadata": {}}, group)
    assert rules.owner_reference(group)["apiVersion"] == "cloudloop.io/v1alpha1"


def test_consumers_are_the_sorted_groups_naming_the_class() -> None:
    groups = [node_group("b"), node_group("a"), node_group("c", class_name="big")]
    assert rules.consumers(groups, "ZvirtInstanceClass", "small") == ["a", "b"]
    assert rules.consumers(groups, "DVPInstanceClass", "small") == []


def deployment(bootstrap: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"node-group": "workers"}, "annotations": {},
                     "ownerReferences": [rules.owner_reference(node_group())]},
        "spec": {"template": {"spec": {"bootstrap": bootstrap, "clusterName": "c1"}},
                 "rollout": {"strategy": {"type": "RollingUpdate"}}, **spec},
    }  # fmt: skip


def test_a_deployment_as_wanted_needs_no_patch_and_server_fields_do_not_count() -> None:
    from starters.machine.node_group import _difference

    wanted = deployment({"dataSecretName": "boot"})
    current = deployment({"dataSecretName": "boot"}, replicas=2)
    current["metadata"]["ownerReferences"].append({"kind": "Cluster", "uid": "c"})
    current["spec"]["template"]["spec"]["version"] = "v1.34"  # a field the server added
    assert _difference(current, wanted) == {}


def test_a_switched_bootstrap_source_drops_the_old_one() -> None:
    from starters.machine.node_group import _difference

    wanted = deployment({"configRef": {"kind": "KubeadmConfigTemplate", "name": "t"}})
    patch = _difference(deployment({"dataSecretName": "boot"}), wanted)
    assert patch["spec"]["template"]["spec"]["bootstrap"] == {
        "configRef": {"kind": "KubeadmConfigTemplate", "name": "t"},
        "dataSecretName": None,
    }


def test_our_owner_reference_is_added_beside_the_clusters() -> None:
    from starters.machine.node_group import _difference

    current = deployment({"dataSecretName": "boot"})
    current["metadata"]["ownerReferences"] = [{"kind": "Cluster", "uid": "c"}]
    patch = _difference(current, deployment({"dataSecretName": "boot"}))
    assert [r["uid"] for r in patch["metadata"]["ownerReferences"]] == ["c", "uid-workers"]
