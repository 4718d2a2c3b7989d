"""zVirt ``Standard`` end to end: the layout workflows on the Temporal dev server, their activities
in a worker, the oVirt Engine emulator through ``ovirtsdk4`` (one stack for the module).

Apply makes the masters and static nodes with the reference's names and shapes (a clone of the
template, ``nic1``, the ``-kubernetes-data`` disk attached, started with cloud-init); a second
apply makes no mutating engine request; drift made out of band (a NIC removed, a VM powered off,
the data disk detached) shows in the plan and the next apply repairs it; destroy leaves nothing.
Destroy is refused while the cluster has a VM the layout did not make. A template or storage
domain the engine does not have refuses the apply before anything is made.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import ovirtsdk4 as sdk
import ovirtsdk4.types
import pytest
import yaml
from temporalio.client import Client

from cloudloop.cloud.registry import Settings
from cloudloop.cloud.zvirt.mapping import GIB
from devstack.backends.zvirt_layouts import cluster_resources, mutating_calls
from devstack.local import LocalStack
from devstack.ovirt_emulator import OvirtEmulatorAdmin
from starters.layout import LayoutFailed
from tests.helpers import eventually_async
from tests.layouts.zvirt_support import (
    SECRET,
    STORAGE_DOMAIN_ID,
    engine,
    plan_actions,
    run,
    zvirt_client,
    zvirt_config,
    zvirt_layout_settings,
    zvirt_stack,
    zvirt_worker,
)

__all__ = ["zvirt_client", "zvirt_layout_settings", "zvirt_stack", "zvirt_worker"]

pytestmark = pytest.mark.stack


async def test_apply_reapply_drift_destroy(
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

    async def act(action: str):  # type: ignore[no-untyped-def]
        return await run(zvirt_client, zvirt_layout_settings, action, path, prefix, cluster_uuid)

    plan = await act("plan")
    assert set(plan_actions(plan).values()) == {"create"}
    assert list(plan_actions(plan)) == [
        f"zvirt.vm/{master}",
        f"zvirt.nic/{master}/nic1",
        f"zvirt.disk/{master}-kubernetes-data",
        f"zvirt.disk_attachment/{master}-kubernetes-data",
        f"zvirt.vm_start/{master}",
        f"zvirt.vm/{worker}",
        f"zvirt.nic/{worker}/nic1",
        f"zvirt.vm_start/{worker}",
    ]

    applied = await act("apply")
    assert cluster_resources(ovirt.admin_url, prefix) == sorted(
        [
            f"Disk/{master}-kubernetes-data",
            f"Nic/{master}/nic1",
            f"Nic/{worker}/nic1",
            f"VM/{master}",
            f"VM/{worker}",
        ]
    )
    vm = admin.vm(master)
    assert vm is not None
    assert vm["status"] == "up" and vm["cloned"] and vm["type"] == "high_performance"
    assert vm["cpu"] == {"sockets": 1, "cores": 2, "threads": 1}
    assert vm["memory"] == 2048 * 2**20
    assert vm["memory_policy"] == {
        "guaranteed": 2048 * 2**20,
        "max": 2048 * 2**20,
        "ballooning": False,
    }
    assert vm["nics"][0]["vnic_profile_id"] == ovirt.vnic_profile_id
    boot = next(a for a in vm["disk_attachments"] if a["bootable"])
    assert boot["provisioned_size"] == 20 * GIB
    [data] = [d for d in admin.disks() if d["name"] == f"{master}-kubernetes-data"]
    assert data["attached_to"] == vm["id"]
    assert data["provisioned_size"] == 10 * GIB and data["storage_domain_id"] == STORAGE_DOMAIN_ID
    script = vm["last_start"]["custom_script"]
    assert vm["last_start"]["host_name"] == master and f"hostname: {master}" in script
    assert "ssh-ed25519 AAAA" in script and SECRET not in script
    assert applied.cloud_discovery_data == {
        "apiVersion": "deckhouse.io/v1",
        "kind": "ZvirtCloudProviderDiscoveryData",
        "storageDomains": [],
    }
    [master_result] = [m for m in applied.modules if m.module == "master-0"]
    ip = vm["ips"][2]  # lo's two, then eth0's IPv4
    assert master_result.outputs == {
        "master_ip_address_for_ssh": ip,
        "node_internal_ip_address": ip,
        "kubernetes_data_device_path": "/dev/sdb",
    }
    [worker_result] = [m for m in applied.modules if m.module == "static-worker-0"]
    assert worker_result.node_name == worker and worker_result.outputs["node_internal_ip_address"]

    # a second apply changes nothing
    admin.clear_requests()
    again = await act("apply")
    assert mutating_calls(ovirt.admin_url) == {}
    assert {s.action for m in again.modules for s in m.steps} == {"unchanged"}

    # drift out of band: the worker's NIC goes, the master is powered off, its disk detached
    connection = sdk.Connection(
        url=ovirt.api_url, username=ovirt.username, password=SECRET, ca_file=str(ovirt.ca_file)
    )
    try:
        vms = connection.system_service().vms_service()
        worker_vm = admin.vm(worker)
        assert worker_vm is not None
        nics = vms.vm_service(worker_vm["id"]).nics_service()
        nics.nic_service(nics.list()[0].id).remove()
        vms.vm_service(vm["id"]).stop()
        vms.vm_service(vm["id"]).disk_attachments_service().attachment_service(data["id"]).remove(
            detach_only=True
        )
    finally:
        connection.close()
    plan = await act("plan")
    drifted = {k: a for k, a in plan_actions(plan).items() if a != "no-op"}
    assert drifted == {
        f"zvirt.nic/{worker}/nic1": "create",
        f"zvirt.disk_attachment/{master}-kubernetes-data": "create",
        f"zvirt.vm_start/{master}": "create",
    }
    repaired = await act("apply")
    made = {s.key for m in repaired.modules for s in m.steps if s.action != "unchanged"}
    assert made == set(drifted)
    vm = admin.vm(master)
    assert vm is not None and vm["status"] == "up"
    assert len(vm["disk_attachments"]) == 2
    assert set(plan_actions(await act("plan")).values()) == {"no-op"}

    # destroy is refused while the cluster has a VM the layout did not make (an ephemeral node)
    foreign = f"{prefix}-worker-5f7c9-x2v4q"
    connection = sdk.Connection(
        url=ovirt.api_url, username=ovirt.username, password=SECRET, ca_file=str(ovirt.ca_file)
    )
    try:
        vms = connection.system_service().vms_service()
        made = vms.add(
            sdk.types.Vm(
                name=foreign,
                cluster=sdk.types.Cluster(id=ovirt.cluster_id),
                template=sdk.types.Template(name=ovirt.template),
            )
        )
        with pytest.raises(LayoutFailed, match=f"VM {foreign}") as refused:
            await act("destroy")
        assert refused.value.kind == "DestroyBlocked"
        assert f"VM/{master}" in cluster_resources(ovirt.admin_url, prefix)  # nothing deleted

        async def removed() -> bool:
            if admin.vm(foreign) is None:
                return True
            if admin.vm(foreign)["status"] == "down":  # type: ignore[index]
                vms.vm_service(made.id).remove()
            return False

        await eventually_async(removed, timeout=60)
    finally:
        connection.close()

    # destroy: nothing of the cluster is left
    await act("destroy")
    assert cluster_resources(ovirt.admin_url, prefix) == []
    assert set(plan_actions(await act("plan")).values()) == {"create"}


async def test_a_missing_template_or_storage_domain_refuses_the_apply_before_anything(
    zvirt_stack: LocalStack,
    zvirt_client: Client,
    zvirt_layout_settings: Settings,
    zvirt_worker: None,
    tmp_path: Path,
) -> None:
    """Looked up before the first create, named together: not even the master's data disk (or
    the static node, whose template exists) is made."""
    prefix, cluster_uuid = f"z{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    domain = str(uuid.uuid4())
    path = zvirt_config(
        tmp_path, zvirt_stack, prefix, template="no-such-template", storageDomainID=domain
    )
    ovirt = engine(zvirt_stack)
    before = mutating_calls(ovirt.admin_url)
    with pytest.raises(LayoutFailed, match="no template named 'no-such-template'") as failed:
        await run(zvirt_client, zvirt_layout_settings, "apply", path, prefix, cluster_uuid)
    assert failed.value.kind == "NotFound"
    assert f"zvirt.vm/{prefix}-master-0: no template named" in str(failed.value)
    assert f"zvirt.disk/{prefix}-master-0-kubernetes-data: no storage domain {domain}" in str(
        failed.value
    )
    assert mutating_calls(ovirt.admin_url) == before
    assert cluster_resources(ovirt.admin_url, prefix) == []


async def test_bootstrap_data_is_merged_into_the_cloud_init_script(
    zvirt_stack: LocalStack,
    zvirt_client: Client,
    zvirt_layout_settings: Settings,
    zvirt_worker: None,
    tmp_path: Path,
) -> None:
    """``--cloud-config FILE``: each VM starts with upstream's merge of the hostname/SSH-key
    document and the data (its keys win); a re-apply makes no mutating request; a VM stopped out
    of band is started again without cloud-init (its first data kept); data that is no
    cloud-config mapping is refused when the layout is defined, before anything is made."""
    prefix, cluster_uuid = f"c{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = zvirt_config(tmp_path, zvirt_stack, prefix)
    ovirt = engine(zvirt_stack)
    admin = OvirtEmulatorAdmin(ovirt.admin_url)
    token = uuid.uuid4().hex
    (tmp_path / "boot.yaml").write_text(
        f"#cloud-config\nbootstrap_token: {token}\nssh_pwauth: false\nruncmd: [kubeadm]\n"
    )
    args = (zvirt_client, zvirt_layout_settings)
    (tmp_path / "script.sh").write_text("#!/bin/sh\necho not yaml: [\n")
    with pytest.raises(LayoutFailed, match="is not a cloud-config") as refused:
        await run(*args, "apply", path, prefix, cluster_uuid, {"": str(tmp_path / "script.sh")})
    assert refused.value.kind == "LayoutConfigInvalid"
    assert cluster_resources(ovirt.admin_url, prefix) == []

    selection = {"": str(tmp_path / "boot.yaml")}
    await run(*args, "apply", path, prefix, cluster_uuid, selection)
    for name in (f"{prefix}-master-0", f"{prefix}-worker-0"):
        vm = admin.vm(name)
        assert vm is not None
        script = vm["last_start"]["custom_script"]
        assert script.startswith("#cloud-config\n")
        document = yaml.safe_load(script)
        assert document["hostname"] == name and document["create_hostname_file"] is True
        assert document["ssh_authorized_keys"][0].startswith("ssh-ed25519 AAAA")
        assert document["bootstrap_token"] == token and document["runcmd"] == ["kubeadm"]
    admin.clear_requests()
    await run(*args, "apply", path, prefix, cluster_uuid, selection)
    assert mutating_calls(ovirt.admin_url) == {}

    # Stopped out of band, then other data: started again plainly, its first data kept.
    master = f"{prefix}-master-0"
    admin.set_vm_status(master, "down")
    (tmp_path / "boot.yaml").write_text("#cloud-config\nother: data\n")
    await run(*args, "apply", path, prefix, cluster_uuid, selection)
    again = admin.vm(master)
    assert again is not None and again["status"] == "up"
    assert again["last_start"]["use_cloud_init"] is False, again["last_start"]
    await run(*args, "destroy", path, prefix, cluster_uuid)
    assert cluster_resources(ovirt.admin_url, prefix) == []
