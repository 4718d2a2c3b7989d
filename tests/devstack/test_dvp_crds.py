"""The DVP driver's resource names match the virtualization CRDs the parent cluster serves.

The simulator takes its names from the CRD YAML (:func:`devstack.dvp.served_resources`); the
driver has its own constants (``cloudloop/cloud/dvp/resources.py``). A typo on either side shows
here, without a stack.
"""

from __future__ import annotations

import pytest

from cloudloop.cloud.dvp import resources as r
from cloudloop.kube.resources import Resource
from devstack import dvp_simulator
from devstack.dvp import served_resources

DRIVER = [
    r.VIRTUAL_MACHINES,
    r.VIRTUAL_DISKS,
    r.VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS,
    r.VIRTUAL_IMAGES,
    r.CLUSTER_VIRTUAL_IMAGES,
    r.VIRTUAL_DISK_SNAPSHOTS,
    r.VIRTUAL_MACHINE_CLASSES,
]


@pytest.mark.parametrize("resource", [pytest.param(x, id=x.kind) for x in DRIVER])
def test_driver_resource_is_served_by_the_parent(resource: Resource) -> None:
    served = served_resources().get(resource.kind)
    assert served is not None, f"the parent serves no {resource.kind}"
    assert (resource.group, resource.version, resource.plural, resource.namespaced) == (
        served.group,
        served.version,
        served.plural,
        served.namespaced,
    )
    assert f"{served.group}/{served.version}" == r.API_VERSION


def test_image_kinds_are_served_and_known_to_the_driver() -> None:
    assert set(dvp_simulator.IMAGE_KINDS) == set(r.IMAGE_RESOURCES)
    assert set(r.IMAGE_RESOURCES) <= set(served_resources())


def test_the_simulator_uses_the_served_names() -> None:
    assert dvp_simulator.VIRTUAL_MACHINES is served_resources()["VirtualMachine"]
