"""Adoption of a zVirt ``Standard`` cluster from its Terraform state.

The cluster is made through ``ovirtsdk4`` the way upstream's Terraform modules make it (a clone
of the template, the boot disk grown, ``nic1``, the master's raw ``-kubernetes-data`` disk
attached, started with cloud-init) with upstream's names and no description — the worker VM
named otherwise (``kube-worker``). The states are written as dhctl keeps them (one per node, the
VM's ``initialization_custom_script`` with a bootstrap secret in it, an empty base state), then
the ``adopt`` workflow: everything found by its ID, the VMs and the disk given the layout's
name and marker (three updates, nothing else); an apply afterwards makes no mutating request,
the history never holds the engine's password nor the state's secret, destroy leaves nothing.
Another cluster's state naming a VM this one has marked is refused, nothing changed.
One stack for the module (the zVirt layout tests' own), the worker in this process.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import ovirtsdk4 as sdk
import ovirtsdk4.types as types
import pytest
from temporalio.client import Client

from cloudloop.cloud.registry import Settings
from cloudloop.cloud.zvirt.layout import NIC_NAME
from cloudloop.cloud.zvirt.layout_state import STATE_TYPES
from cloudloop.cloud.zvirt.mapping import GIB
from cloudloop.messages.layout import LayoutResult
from devstack.backends.zvirt_layouts import cluster_resources, mutating_calls
from devstack.local import LocalStack
from devstack.ovirt_emulator import OvirtEmulatorAdmin
from starters.layout import LayoutFailed, run_layout, state_records
from tests.layouts.support import payloads
from tests.layouts.zvirt_support import (
    SECRET,
    STORAGE_DOMAIN_ID,
    engine,
    layout_input,
    plan_actions,
    zvirt_client,
    zvirt_config,
    zvirt_layout_settings,
    zvirt_stack,
    zvirt_worker,
)
from tests.support.histories import plain_json

__all__ = ["zvirt_client", "zvirt_layout_settings", "zvirt_stack", "zvirt_worker"]

pytestmark = pytest.mark.stack
USER_DATA = "zv-bootstrap-token-s3cr3t"
WAIT_S = 60.0


def _until(check: Any) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def terraform_node(
    api: Any, stack: LocalStack, name: str, cores: int, memory_mib: int, root_gb: int, data: str
) -> dict[str, str]:
    """What upstream's node module makes, in its order; the IDs its state records."""
    ovirt = engine(stack)
    vms = api.vms_service()
    vm = vms.add(
        types.Vm(
            name=name,
            cluster=types.Cluster(id=ovirt.cluster_id),
            template=types.Template(name=ovirt.template),
            cpu=types.Cpu(topology=types.CpuTopology(sockets=1, cores=cores, threads=1)),
            memory=memory_mib * 2**20,
            memory_policy=types.MemoryPolicy(
                guaranteed=memory_mib * 2**20, max=memory_mib * 2**20, ballooning=False
            ),
            type=types.VmType.HIGH_PERFORMANCE,
        ),
        clone=True,
    )
    service = vms.vm_service(vm.id)
    _until(lambda: service.get().status == types.VmStatus.DOWN)
    [boot] = [a for a in service.disk_attachments_service().list() if a.bootable]
    disks = api.disks_service()
    disks.disk_service(boot.disk.id).update(types.Disk(provisioned_size=root_gb * GIB))
    _until(lambda: disks.disk_service(boot.disk.id).get().status == types.DiskStatus.OK)
    nic = service.nics_service().add(
        types.Nic(
            name=NIC_NAME,
            vnic_profile=types.VnicProfile(id=ovirt.vnic_profile_id),
            interface=types.NicInterface.VIRTIO,
        )
    )
    ids = {"vm": vm.id, "nic": nic.id, "boot": boot.disk.id}
    if data:
        disk = disks.add(
            types.Disk(
                alias=data,
                provisioned_size=10 * GIB,
                format=types.DiskFormat.RAW,
                sparse=False,
                storage_domains=[types.StorageDomain(id=STORAGE_DOMAIN_ID)],
            )
        )
        _until(lambda: disks.disk_service(disk.id).get().status == types.DiskStatus.OK)
        service.disk_attachments_service().add(
            types.DiskAttachment(
                disk=types.Disk(id=disk.id),
                interface=types.DiskInterface.VIRTIO,
                bootable=False,
                active=True,
            )
        )
        ids["disk"] = disk.id
    service.start(
        use_cloud_init=True,
        vm=types.Vm(
            initialization=types.Initialization(
                host_name=name, custom_script=f"#cloud-config\n# {USER_DATA}\n"
            )
        ),
    )
    _until(lambda: service.get().status == types.VmStatus.UP)
    return ids


def state(*resources: tuple[str, str, dict[str, Any]]) -> str:
    return json.dumps(
        {
            "version": 4,
            "terraform_version": "1.5.7",
            "serial": 3,
            "lineage": str(uuid.uuid4()),
            "outputs": {},
            "resources": [
                {
                    "mode": "managed",
                    "type": tf_type,
                    "name": tf_name,
                    "provider": 'provider["registry.terraform.io/ovirt/ovirt"]',
                    "instances": [{"schema_version": 0, "attributes": attributes}],
                }
                for tf_type, tf_name, attributes in resources
            ],
        }
    )


def node_state(stack: LocalStack, name: str, ids: dict[str, str]) -> str:
    ovirt = engine(stack)
    vm = ids["vm"]
    records = [
        (
            "ovirt_vm",
            "node",
            {
                "id": vm,
                "name": name,
                "cluster_id": ovirt.cluster_id,
                "initialization_custom_script": f"#cloud-config\n# {USER_DATA}\n",
            },
        ),
        ("ovirt_disk_resize", "node", {"id": ids["boot"], "disk_id": ids["boot"]}),
        ("ovirt_nic", "node", {"id": ids["nic"], "vm_id": vm, "name": NIC_NAME}),
    ]
    if "disk" in ids:
        records += [
            (
                "ovirt_disk",
                "kubernetes_data",
                {"id": ids["disk"], "alias": f"{name}-kubernetes-data"},
            ),
            (
                "ovirt_disk_attachment",
                "kubernetes_data",
                {"id": ids["disk"], "vm_id": vm, "disk_id": ids["disk"]},
            ),
        ]
    records.append(("ovirt_vm_start", "node", {"id": vm, "vm_id": vm}))
    return state(*records)


async def test_adopt_a_terraform_state_marks_and_renames_then_apply_makes_nothing(
    zvirt_stack: LocalStack,
    zvirt_client: Client,
    zvirt_layout_settings: Settings,
    zvirt_worker: None,
    tmp_path: Path,
) -> None:
    prefix, cluster_uuid = f"z{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = zvirt_config(tmp_path, zvirt_stack, prefix)
    ovirt = engine(zvirt_stack)
    admin = OvirtEmulatorAdmin(ovirt.admin_url)
    master, worker = f"{prefix}-master-0", f"{prefix}-worker-0"

    async def act(action: str, **more: Any) -> LayoutResult:
        input = layout_input(action, path, prefix, cluster_uuid).model_copy(update=more)
        task_queue = zvirt_layout_settings.temporal.task_queue
        return await run_layout(zvirt_client, task_queue, input, poll_s=0.2)

    connection = sdk.Connection(
        url=ovirt.api_url, username=ovirt.username, password=SECRET, ca_file=str(ovirt.ca_file)
    )
    try:
        api = connection.system_service()
        master_ids = terraform_node(
            api, zvirt_stack, master, 2, 2048, 20, f"{master}-kubernetes-data"
        )
        worker_ids = terraform_node(api, zvirt_stack, "kube-worker", 1, 1024, 50, "")
    finally:
        connection.close()
    files = {
        "base": state(),
        master: node_state(zvirt_stack, master, master_ids),
        worker: node_state(zvirt_stack, "kube-worker", worker_ids),
    }
    sources = []
    for name, text in files.items():
        file = tmp_path / f"{name}-tf-state.json"
        file.write_text(text)
        sources.append(str(file) if name == "base" else f"{name}={file}")

    admin.clear_requests()
    adopted = await act("adopt", state=state_records(sources, STATE_TYPES))
    assert adopted.unmapped == []
    actions = {s.key: s.action for m in adopted.modules for s in m.steps}
    assert set(actions.values()) == {"adopted"}, sorted(actions.items())
    assert len(actions) == 8  # 2 VMs, 2 NICs, the disk, its attachment, 2 starts
    assert [s.changes for m in adopted.modules for s in m.steps if s.changes] == []
    assert mutating_calls(ovirt.admin_url) == {
        "PUT /ovirt-engine/api/vms/{id}": 2,
        "PUT /ovirt-engine/api/disks/{id}": 1,
    }
    history = await zvirt_client.get_workflow_handle(f"layout/{prefix}").fetch_history()
    text = payloads(plain_json(history, zvirt_client))
    assert USER_DATA not in text and SECRET not in text
    made = sorted(
        [
            f"Disk/{master}-kubernetes-data",
            f"Nic/{master}/nic1",
            f"Nic/{worker}/nic1",
            f"VM/{master}",
            f"VM/{worker}",
        ]
    )
    assert cluster_resources(ovirt.admin_url, prefix) == made

    # another cluster's state naming this cluster's (now marked) master VM: refused, untouched
    other, other_uuid = f"z{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    other_path = zvirt_config(tmp_path, zvirt_stack, other)
    other_node = f"{other}-master-0"
    taken = tmp_path / "taken-tf-state.json"
    taken.write_text(state(("ovirt_vm", "node", {"id": master_ids["vm"], "name": other_node})))
    admin.clear_requests()
    refused = layout_input("adopt", other_path, other, other_uuid).model_copy(
        update={"state": state_records([f"{other_node}={taken}"], STATE_TYPES)}
    )
    with pytest.raises(LayoutFailed, match="belongs to another cluster") as failed:
        await run_layout(
            zvirt_client, zvirt_layout_settings.temporal.task_queue, refused, poll_s=0.2
        )
    assert failed.value.kind == "AlreadyExists"
    assert mutating_calls(ovirt.admin_url) == {}
    assert cluster_resources(ovirt.admin_url, prefix) == made

    plan = await act("plan")
    assert set(plan_actions(plan).values()) == {"no-op"}, plan_actions(plan)
    admin.clear_requests()
    applied = await act("apply")
    assert {s.action for m in applied.modules for s in m.steps} == {"unchanged"}
    assert mutating_calls(ovirt.admin_url) == {}

    await act("destroy")
    assert cluster_resources(ovirt.admin_url, prefix) == []
    assert admin.vm("kube-worker") is None
