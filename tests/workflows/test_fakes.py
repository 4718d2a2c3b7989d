"""The fake activities stand for the real ones: same names, same input and result types."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio import activity

from activities.cloud import CloudActivities
from activities.kube import KubeActivities
from activities.layout import LayoutActivities
from activities.layout_converge import ConvergeActivities
from activities.loadbalancer import LoadBalancerActivities
from activities.machine import MachineActivities
from activities.termination import DrainActivities
from activities.volume import VolumeActivities
from tests.workflows.fakes import FAKES, Fakes


def definitions(cls: type) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for member in vars(cls).values():
        defn = activity._Definition.from_callable(member) if callable(member) else None
        if defn is not None and defn.name:
            found[defn.name] = defn
    return found


REAL = [
    CloudActivities,
    KubeActivities,
    LoadBalancerActivities,
    MachineActivities,
    DrainActivities,
    VolumeActivities,
    LayoutActivities,
    ConvergeActivities,
]


def signature(defn: Any) -> tuple[Any, ...]:
    return (tuple(defn.arg_types or ()), defn.ret_type)


def test_every_real_activity_has_a_fake_with_its_types() -> None:
    real = {name: d for cls in REAL for name, d in definitions(cls).items()}
    fake = {name: d for cls in FAKES for name, d in definitions(cls).items()}
    assert sorted(fake) == sorted(real)
    assert {n: signature(d) for n, d in fake.items()} == {n: signature(d) for n, d in real.items()}


@pytest.mark.parametrize("fakes", [pytest.param(f, id=f.__name__) for f in FAKES])
def test_all_lists_every_fake(fakes: type[Fakes]) -> None:
    assert len(fakes(script=None).all()) == len(definitions(fakes))  # type: ignore[arg-type]
