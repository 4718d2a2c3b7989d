"""Adoption of a vSphere ``Standard`` cluster from its Terraform state: the folder, the per-zone
resource pools (upstream's ``for_each`` over the zones, every pool named ``<prefix>``), the
master's data disk and the VMs, with the worker VM and one pool named otherwise than the layout
names them; the state written as dhctl keeps it (a folder's and pool's moref, a disk's path, a
VM's BIOS UUID, the VM's ``guestinfo.userdata`` secret in it), then the ``adopt`` workflow:
everything found by its ID, the two renamed back (nothing created, nothing else changed); an
apply afterwards makes no mutating call, and the history never holds the config's password nor
the state's secret.

The cluster is made by the layout's own apply (a clone as upstream's needs the same spec) and
then renamed through pyVmomi, so the finder would no longer see those two. One stack for the
module (Temporal and vcsim with Deckhouse's tags), the worker in this process.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.cloud.registry import Settings
from cloudloop.cloud.vsphere.layout_state import STATE_TYPES
from cloudloop.cloud.vsphere.settings import VsphereSettings
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import LayoutInput, LayoutResult, LayoutTimings
from cloudloop.settings import TemporalSettings
from devstack.backends.vsphere_layouts import ZONES, cluster_resources
from devstack.local import LocalStack
from devstack.vcsim_inventory import connect, disconnect, find, wait_task
from starters.layout import run_layout, state_records
from tests.layouts.support import counts, layout_worker, payloads
from tests.layouts.vsphere_support import (
    calls_since,
    config_file,
    mutating,
    vsphere_calls,
    vsphere_stack,
)
from tests.support.histories import plain_json

pytestmark = pytest.mark.stack
USER_DATA = "vs-bootstrap-token-s3cr3t"
CLUSTERS = dict(zip(ZONES, ["DC0_C0", "DC0_C1"], strict=True))


@pytest.fixture(scope="module")
def vs_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with vsphere_stack(tmp_path_factory.mktemp("vsphere-adopt")) as local:
        yield local


@pytest.fixture(scope="module")
async def vs_worker(vs_stack: LocalStack) -> AsyncIterator[tuple[Client, Settings]]:
    settings = Settings(
        provider="vsphere",
        temporal=TemporalSettings(
            address=vs_stack.temporal_address,
            task_queue=f"vs-adopt-{uuid.uuid4().hex[:8]}",
            codec=vs_stack.codec,
        ),
        vsphere=VsphereSettings(poll_interval_s=0.05, wait_timeout_s=30.0, timeout_s=10.0),
    )
    client = await temporal.connect(settings.temporal)
    async with layout_worker(client, settings):
        yield client, settings


def resource(tf_type: str, name: str, instances: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "mode": "managed",
        "type": tf_type,
        "name": name,
        "provider": 'provider["registry.terraform.io/hashicorp/vsphere"]',
        "instances": instances,
    }


def state(*resources: dict[str, Any]) -> str:
    return json.dumps(
        {
            "version": 4,
            "terraform_version": "0.14.8",
            "serial": 5,
            "lineage": str(uuid.uuid4()),
            "outputs": {},
            "resources": list(resources),
        }
    )


def vm_record(vm: Any) -> dict[str, Any]:
    return resource(
        "vsphere_virtual_machine",
        "node",
        [
            {
                "schema_version": 3,
                "attributes": {
                    "id": vm.config.uuid,
                    "moid": vm._moId,
                    "name": vm.name,
                    "extra_config": {"guestinfo.userdata": USER_DATA},
                },
            }
        ],
    )


async def test_adopt_a_terraform_state_renames_back_then_apply_makes_nothing(
    vs_stack: LocalStack, vs_worker: tuple[Client, Settings], tmp_path: Path
) -> None:
    assert vs_stack.vcsim is not None
    endpoint = vs_stack.vcsim
    client, settings = vs_worker
    prefix, cluster_uuid = f"v{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = config_file(tmp_path, endpoint, prefix)
    master, worker = f"{prefix}-master-0", f"{prefix}-worker-0"
    disk = f"[LocalDS_0] deckhouse/{cluster_uuid}-kubernetes-data-0.vmdk"

    async def run(action: str, **more: Any) -> LayoutResult:
        input = LayoutInput(
            action=action,
            provider="vsphere",
            source=ConfigSource(file=str(path)),
            cluster=ClusterIdentity(prefix=prefix, uuid=cluster_uuid),
            timings=LayoutTimings(max_attempts=3),
            **more,
        )
        return await run_layout(client, settings.temporal.task_queue, input, poll_s=0.2)

    await run("apply")
    made = cluster_resources(endpoint, prefix, cluster_uuid)
    si = connect(endpoint)
    try:
        folder = find(si, f"DC0/vm/{prefix}")
        pools = {z: find(si, f"DC0/host/{c}/Resources/{prefix}") for z, c in CLUSTERS.items()}
        vms = {n: find(si, f"DC0/vm/{prefix}/{n}") for n in (master, worker)}
        # upstream named these its own way
        wait_task(si, vms[worker].Rename_Task(newName="kube-worker"))
        pools["zone-b"].UpdateConfig(name="kube-pool", config=None)
        base = state(
            resource(
                "vsphere_folder",
                "main",
                [{"schema_version": 1, "attributes": {"id": folder._moId, "path": prefix}}],
            ),
            resource(
                "vsphere_resource_pool",
                "resource_pool",
                [
                    {
                        "index_key": zone,
                        "schema_version": 0,
                        "attributes": {"id": pool._moId, "name": pool.name},
                    }
                    for zone, pool in pools.items()
                ],
            ),
        )
        master_state = state(
            resource(
                "vsphere_virtual_disk",
                "kubernetes_data",
                [
                    {
                        "schema_version": 1,
                        "attributes": {
                            "id": disk,
                            "vmdk_path": disk.split("] ", 1)[1],
                            "datastore": "LocalDS_0",
                        },
                    }
                ],
            ),
            vm_record(vms[master]),
        )
        worker_state = state(vm_record(vms[worker]))
    finally:
        disconnect(si)
    files = {"base": base, master: master_state, worker: worker_state}
    sources = []
    for name, text in files.items():
        file = tmp_path / f"{name}-tf-state.json"
        file.write_text(text)
        sources.append(str(file) if name == "base" else f"{name}={file}")

    plan = await run("plan")
    assert counts(plan).get("create", 0) == 2  # the renamed pool and VM: made again

    before = vsphere_calls()
    adopted = await run("adopt", state=state_records(sources, STATE_TYPES))
    assert adopted.unmapped == []
    actions = {s.key: s.action for m in adopted.modules for s in m.steps}
    managed = {k for k, a in actions.items() if a != "unchanged"}  # lookups: unchanged
    assert {actions[k] for k in managed} == {"adopted"}, sorted(actions.items())
    assert len(managed) == 6  # folder, 2 pools, disk, 2 VMs
    assert [s.changes for m in adopted.modules for s in m.steps if s.changes] == []
    assert mutating(calls_since(before)) == {"RenameEntity": 2}
    history = await client.get_workflow_handle(f"layout/{prefix}").fetch_history()
    text = payloads(plain_json(history, client))
    assert USER_DATA not in text and endpoint.password not in text
    assert cluster_resources(endpoint, prefix, cluster_uuid) == made  # named back, no more

    plan = await run("plan")
    assert counts(plan).get("create", 0) == 0, counts(plan)
    before = vsphere_calls()
    applied = await run("apply")
    assert {s.action for m in applied.modules for s in m.steps} == {"unchanged"}
    assert mutating(calls_since(before)) == {}

    await run("destroy")
    assert cluster_resources(endpoint, prefix, cluster_uuid) == []
