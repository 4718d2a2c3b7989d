"""The parent DVP cluster's virtualization CRDs are closed, as the real API is: every body the
driver writes is accepted as it is, and a field the documented API does not have is refused
(the driver's session writes with strict field validation) or, from a client that asks for no
validation, pruned, never kept.

Against the parent's real kube-apiserver (``dvp_parent``): without closed schemas a misspelt
field passed every test.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.driver import DvpDriver
from cloudloop.cloud.dvp.settings import DvpSettings
from cloudloop.cloud.dvp.spec import parse_spec
from cloudloop.cloud.models import MachineSpec
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.client import api_client
from devstack.dvp_simulator import DvpParent
from devstack.machine_fixtures import dvp_machine_spec

pytestmark = pytest.mark.stack


@pytest.fixture
def namespace(dvp_parent: DvpParent) -> Iterator[str]:
    yield dvp_parent.new_namespace("schemas")


def _machine(control_plane: bool) -> MachineSpec:
    spec = MachineSpec(
        name="schema-m1",
        namespace="d8-cloud-instance-manager",
        cluster="c1",
        machine_uid="uid-1",
        provider_spec=dvp_machine_spec(
            additionalDisks=[{"size": "1Gi", "storageClass": "fast"}],
            nodeSelector={"node-role": "virt"},
            tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            priorityClassName="high",
        ),
    )
    spec.control_plane = control_plane
    return spec


def _vm_body(namespace: str) -> dict[str, Any]:
    driver = DvpDriver(DvpSettings(namespace=namespace, cluster_uuid="uuid-1"))
    spec = _machine(control_plane=True)
    return driver.machines._vm_body(spec, parse_spec(spec.provider_spec))


def test_the_driver_writes_with_strict_field_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cloudloop.cloud.dvp.base.parent_api_client", lambda settings: None)
    driver = DvpDriver(DvpSettings(namespace="ns"))
    assert driver.machines.session.kube.field_validation == "Strict"


def test_every_field_the_driver_writes_is_declared(dvp_parent: DvpParent, namespace: str) -> None:
    body = _vm_body(namespace)
    created = dvp_parent.kube.create(r.VIRTUAL_MACHINES, body, namespace)
    assert created["spec"] == {**created["spec"], **body["spec"]}  # nothing pruned


@pytest.mark.parametrize(
    ("path", "field"),
    [
        pytest.param(("spec",), "virtualMachineClass", id="spec"),
        pytest.param(("spec", "cpu"), "coresFraction", id="nested"),
        pytest.param(("spec", "blockDeviceRefs", 0), "size", id="list-item"),
        pytest.param(("spec", "provisioning", "userDataRef"), "namespace", id="secret-ref"),
    ],
)
def test_a_field_the_api_does_not_have_is_refused(
    dvp_parent: DvpParent, namespace: str, path: tuple[str | int, ...], field: str
) -> None:
    body = copy.deepcopy(_vm_body(namespace))
    body["metadata"]["name"] = f"typo-{field.lower()}"
    node: Any = body
    for step in path:
        node = node[step]
    node[field] = "x"
    with pytest.raises(KubeError) as refused:
        dvp_parent.kube.create(r.VIRTUAL_MACHINES, body, namespace)
    assert refused.value.status == 400
    assert f'unknown field "{".".join(str(p) for p in path[:1])}' in str(refused.value.body)
    assert field in str(refused.value.body)


def test_unknown_fields_are_pruned_without_strict_validation(
    dvp_parent: DvpParent, namespace: str
) -> None:
    lenient = Kube(api_client(dvp_parent.kubeconfig))
    body = _vm_body(namespace)
    body["metadata"]["name"] = "pruned"
    body["spec"]["virtualMachineClass"] = "typo"
    created = lenient.create(r.VIRTUAL_MACHINES, body, namespace)
    assert "virtualMachineClass" not in created["spec"]


@pytest.mark.parametrize(
    ("resource", "spec"),
    [
        pytest.param(
            r.VIRTUAL_DISKS,
            {"persistentVolumeClaim": {"size": "1Gi", "storageClass": "fast"}},
            id="disk-claim",
        ),
        pytest.param(
            r.VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS,
            {
                "virtualMachineName": "vm",
                "blockDeviceRef": {"kind": "VirtualDisk", "name": "d"},
                "hotplug": True,
            },
            id="attachment",
        ),
        pytest.param(r.VIRTUAL_DISK_SNAPSHOTS, {"virtualDisk": "d"}, id="snapshot"),
        pytest.param(r.VIRTUAL_IMAGES, {"storage": "ContainerRegistry"}, id="image-needs-source"),
    ],
)
def test_other_kinds_refuse_what_the_api_refuses(
    dvp_parent: DvpParent, namespace: str, resource: Any, spec: dict[str, Any]
) -> None:
    with pytest.raises(KubeError) as refused:
        dvp_parent.kube.create(resource, {"metadata": {"name": "bad"}, "spec": spec}, namespace)
    assert refused.value.status in (400, 422), refused.value


def test_status_is_closed_too(dvp_parent: DvpParent, namespace: str) -> None:
    """The simulator plays DVP's controllers: a misspelt status field of its own is refused."""
    body = _vm_body(namespace)
    body["metadata"]["name"] = "status-typo"
    dvp_parent.kube.create(r.VIRTUAL_MACHINES, body, namespace)
    with pytest.raises(KubeError) as refused:
        dvp_parent.kube.patch(
            r.VIRTUAL_MACHINES,
            "status-typo",
            {"status": {"ipAddresses": ["10.0.0.1"]}},
            namespace,
            subresource="status",
        )
    assert refused.value.status == 422  # a patch: the patched object fails strict decoding
    assert 'unknown field "status.ipAddresses"' in str(refused.value)
