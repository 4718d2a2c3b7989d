"""DVP zones: a VM's zone from its placement (nodeSelector or required node affinity on
``topology.kubernetes.io/zone``), only among the configured zones discovery reports; and a
machine's failure domain turned into that placement."""

from __future__ import annotations

from typing import Any

import pytest

from cloudloop.cloud import errors
from cloudloop.cloud.dvp.driver import DvpDriver
from cloudloop.cloud.dvp.instances import vm_instance, vm_zone
from cloudloop.cloud.dvp.settings import DvpSettings
from cloudloop.cloud.models import MachineSpec

ZONE = "topology.kubernetes.io/zone"


def vm(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "vm-1", "labels": {}}, "spec": spec, "status": {}}


def affinity(*values: str) -> dict[str, Any]:
    expression = {"key": ZONE, "operator": "In", "values": list(values)}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }
    }


@pytest.mark.parametrize(
    ("spec", "zones", "zone"),
    [
        ({}, ["default"], "default"),
        ({}, ["a"], "a"),
        ({}, ["a", "b"], ""),
        ({"nodeSelector": {ZONE: "b"}}, ["a", "b"], "b"),
        ({"nodeSelector": {ZONE: "c"}}, ["a", "b"], ""),
        ({"nodeSelector": {ZONE: "c"}}, ["a"], ""),
        ({"affinity": affinity("a")}, ["a", "b"], "a"),
        ({"affinity": affinity("a", "b")}, ["a", "b"], ""),
        ({"nodeSelector": {ZONE: "a"}, "affinity": affinity("b")}, ["a", "b"], ""),
    ],
    ids=[
        "default", "single-zone", "unpinned-among-several", "selector", "unknown-zone",
        "pinned-elsewhere", "affinity", "affinity-two-zones", "conflicting",
    ],
)  # fmt: skip
def test_vm_zone_from_placement(spec: dict[str, Any], zones: list[str], zone: str) -> None:
    assert vm_zone(vm(spec), zones) == zone
    instance = vm_instance(vm(spec), zones)
    assert (instance.zone, instance.region) == (zone, "default")


def machine(failure_domain: str) -> MachineSpec:
    return MachineSpec(
        name="m", namespace="n", cluster="c", machine_uid="u", failure_domain=failure_domain
    )


@pytest.mark.parametrize(
    ("zones", "failure_domain", "selector"),
    [
        ([], "", {}),
        ([], "default", {}),
        (["default"], "default", {}),
        (["a", "b"], "b", {ZONE: "b"}),
        (["a", "b"], "", {}),
    ],
    ids=["none", "default-zone", "default-configured", "configured", "no-failure-domain"],
)
def test_failure_domain_places_the_vm(
    zones: list[str], failure_domain: str, selector: dict[str, str]
) -> None:
    driver = DvpDriver(DvpSettings(namespace="ns", zones=zones))
    assert driver.machines.zone_selector(machine(failure_domain)) == selector


@pytest.mark.parametrize(("zones", "failure_domain"), [([], "z9"), (["a"], "b")], ids=str)
def test_unknown_failure_domain_is_invalid(zones: list[str], failure_domain: str) -> None:
    driver = DvpDriver(DvpSettings(namespace="ns", zones=zones))
    with pytest.raises(errors.InvalidRequest, match="not a configured zone"):
        driver.machines.zone_selector(machine(failure_domain))
