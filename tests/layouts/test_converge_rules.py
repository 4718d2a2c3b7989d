"""Converge statuses from plans (:mod:`cloudloop.rules.converge`), and the starter's gauges
from a status report (:func:`starters.layout_converge.export`)."""

from __future__ import annotations

from prometheus_client import REGISTRY

from cloudloop.layouts.model import ModuleDef, ResourceDef
from cloudloop.messages.layout import FieldChange, PlanModuleResult, ResourcePlan
from cloudloop.rules import converge
from starters.layout_converge import export

VM = ResourceDef(kind="t.vm", name="n-0")
DISK = ResourceDef(kind="t.disk", name="n-0")
IMAGE = ResourceDef(kind="t.image", name="ubuntu", read_only=True)
NODE = ModuleDef(
    id="master-0",
    module="master-node",
    node_name="p-master-0",
    group="master",
    machine=VM.key,
    resources=[IMAGE, VM, DISK],
)


def planned(**actions: tuple[str, list[FieldChange]]) -> PlanModuleResult:
    by_kind = {"vm": VM, "disk": DISK, "image": IMAGE}
    return PlanModuleResult(
        module=NODE.id,
        resources=[
            ResourcePlan(key=by_kind[k].key, kind=by_kind[k].kind, name="n-0", action=a, changes=c)
            for k, (a, c) in actions.items()
        ],
    )


REPAIR = FieldChange(field="tags", how="repair")
REPLACE = FieldChange(field="image", how="replace")
KEPT = FieldChange(field="user_data (kept)", how="kept")


def test_statuses_follow_the_exporter() -> None:
    none: list[FieldChange] = []
    absent = planned(image=("no-op", none), vm=("create", none), disk=("create", none))
    assert converge.module_status(NODE, absent).status == "absent"
    ok = planned(image=("no-op", none), vm=("update", [KEPT]), disk=("no-op", none))
    assert converge.module_status(NODE, ok).status == "ok"
    changed = planned(image=("no-op", none), vm=("no-op", none), disk=("create", none))
    status = converge.module_status(NODE, changed)
    assert (status.status, status.to_create) == ("changed", 1)
    both = planned(image=("no-op", none), vm=("update", [REPAIR, REPLACE]), disk=("no-op", none))
    status = converge.module_status(NODE, both)
    assert (status.status, status.to_change, status.to_replace) == ("destructively_changed", 1, 1)
    [held] = converge.held_steps(NODE, both)
    assert held.key == f"master-0/{VM.key}" and held.changes == [REPLACE]
    assert converge.worst(["ok", "absent", "changed"]) == "absent"
    assert converge.worst([]) == "ok"


def value(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def test_export_sets_one_hot_gauges_and_drops_nodes_no_longer_reported() -> None:
    export(
        {
            "status": "abandoned",
            "modules": [
                {"module": "base", "status": "ok", "to_change": 0},
                {
                    "module": "master-0",
                    "status": "changed",
                    "node_group": "master",
                    "name": "p-master-0",
                    "to_create": 2,
                },
                {"module": "node/p-old", "status": "abandoned", "node_group": "w", "name": "p-old"},
            ],
            "held": [{"key": "x", "outcome": "waiting"}],
            "lastSuccess": "2026-12-03T07:00:00+00:00",
        }
    )
    assert value("candi_converge_cluster_status", status="ok") == 1
    assert value("candi_converge_cluster_status", status="error") == 0
    node = {"node_group": "master", "name": "p-master-0"}
    assert value("candi_converge_node_status", **node, status="changed") == 1
    assert value("candi_converge_node_status", **node, status="ok") == 0
    assert (
        value("candi_converge_node_status", node_group="w", name="p-old", status="abandoned") == 1
    )
    assert value("cloudloop_layout_converge_resources", module="master-0", action="create") == 2
    assert value("cloudloop_layout_converge_held_steps") == 1
    assert value("cloudloop_layout_converge_last_success_timestamp_seconds") == 1796281200.0

    export({"modules": [{"module": "base", "status": "error"}]})
    assert value("candi_converge_node_status", **node, status="changed") is None
    assert value("candi_converge_cluster_status", status="error") == 1

    export(None)  # no report: no series, nothing held, no success known
    assert value("candi_converge_cluster_status", status="error") is None
    assert value("cloudloop_layout_converge_held_steps") == 0
    assert value("cloudloop_layout_converge_last_success_timestamp_seconds") == 0
