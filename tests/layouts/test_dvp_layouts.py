"""DVP ``Standard`` end to end: the layout workflows on the Temporal dev server, their activities
in a worker, a parent DVP cluster (kube-apiserver with the virtualization CRDs and the simulator)
(one stack for the module).

Apply makes the NetworkPolicy, each node's root (and, for masters, kubernetes-data) VirtualDisk,
cloud-init Secret and VirtualMachine with the reference's names and labels; a second apply makes
no mutating request; drift made out of band (the NetworkPolicy deleted, a VM label changed) shows
in the plan and the next apply repairs it; destroy is refused while a VM labelled for the
cluster is not the layout's, then leaves nothing. An image the parent does not
have fails the apply with the parent's word for it.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from pathlib import Path

import pytest
import yaml
from temporalio.client import Client

from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.layout_resources import USER_DATA_ANNOTATION
from cloudloop.cloud.registry import Settings
from devstack.backends.dvp_layouts import (
    NETWORK_POLICIES,
    cluster_resources,
    dvp_requests,
    mutating_since,
)
from devstack.dvp_simulator import DvpParent
from devstack.local import LocalStack
from starters.layout import LayoutFailed
from tests.helpers import eventually, eventually_async
from tests.layouts.dvp_support import (
    dvp_client,
    dvp_config,
    dvp_layout_settings,
    dvp_stack,
    dvp_worker,
    run,
)

__all__ = ["dvp_client", "dvp_layout_settings", "dvp_stack", "dvp_worker"]

pytestmark = pytest.mark.stack


def plan_actions(result: object) -> dict[str, str]:
    return {r.key: r.action for m in result.plan for r in m.resources}  # type: ignore[attr-defined]


async def test_apply_reapply_drift_destroy(
    dvp_stack: tuple[LocalStack, DvpParent],
    dvp_client: Client,
    dvp_layout_settings: Settings,
    dvp_worker: None,
    tmp_path: Path,
) -> None:
    _, parent = dvp_stack
    namespace = parent.new_namespace("layout")
    prefix, cluster_uuid = f"d{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = dvp_config(tmp_path, parent, namespace, prefix)
    kube = parent.kube

    async def act(action: str):  # type: ignore[no-untyped-def]
        return await run(dvp_client, dvp_layout_settings, action, path, prefix, cluster_uuid)

    plan = await act("plan")
    actions = plan_actions(plan)
    assert actions[f"dvp.network_policy/isolated-{prefix}"] == "create"
    assert actions["dvp.virtual_machine_class/generic"] == "no-op"  # looked up, exists

    applied = await act("apply")
    found = cluster_resources(kube, namespace, prefix)
    kinds = [f.split("/")[0] for f in found]
    assert kinds.count("VirtualMachine") == 2 and kinds.count("VirtualDisk") == 3
    assert kinds.count("Secret") == 2 and f"NetworkPolicy/isolated-{prefix}" in found
    [vm] = [
        o
        for o in kube.list(r.VIRTUAL_MACHINES, namespace)["items"]
        if o["metadata"]["name"].startswith(f"{prefix}-master-0-")
    ]
    labels = vm["metadata"]["labels"]
    assert labels[r.CLUSTER_UUID_LABEL] == cluster_uuid
    assert labels["dvp.deckhouse.io/cluster-prefix"] == prefix
    assert labels["dvp.deckhouse.io/node-group"] == "master"
    assert labels[r.HOSTNAME_LABEL] == f"{prefix}-master-0"
    assert vm["status"]["phase"] == "Running"
    refs = [b["name"] for b in vm["spec"]["blockDeviceRefs"]]
    assert refs[0].startswith(f"{prefix}-master-0-")
    assert refs[1].startswith(f"{prefix}-master-kubernetes-data-0-")
    secret_name = vm["spec"]["provisioning"]["userDataRef"]["name"]
    assert secret_name.startswith(f"{prefix}-master-0-cloudinit-")
    secret = kube.get(r.SECRETS, secret_name, namespace)
    assert secret is not None and secret["type"] == r.CLOUD_INIT_SECRET_TYPE
    [master] = [m for m in applied.modules if m.module == "master-0"]
    assert master.outputs["master_ip_address_for_ssh"] == vm["status"]["ipAddress"]
    assert master.outputs["node_internal_ip_address"] == vm["status"]["ipAddress"]
    assert master.outputs["kubernetes_data_device_path"].startswith(
        "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_"
    )
    assert applied.cloud_discovery_data["kind"] == "DVPCloudDiscoveryData"

    # a second apply changes nothing
    before = dvp_requests()
    again = await act("apply")
    assert mutating_since(before) == {}
    assert {s.action for m in again.modules for s in m.steps} == {"unchanged"}

    # drift out of band: the NetworkPolicy goes, a VM label is changed
    kube.delete(NETWORK_POLICIES, f"isolated-{prefix}", namespace)
    kube.patch(
        r.VIRTUAL_MACHINES,
        vm["metadata"]["name"],
        {"metadata": {"labels": {"dvp.deckhouse.io/node-group": "other"}}},
        namespace,
    )
    plan = await act("plan")
    drifted = {k: a for k, a in plan_actions(plan).items() if a != "no-op"}
    assert drifted == {
        f"dvp.network_policy/isolated-{prefix}": "create",
        f"dvp.virtual_machine/{vm['metadata']['name']}": "update",
    }
    repaired = await act("apply")
    made = {s.key for m in repaired.modules for s in m.steps if s.action != "unchanged"}
    assert made == set(drifted)
    fixed = kube.get(r.VIRTUAL_MACHINES, vm["metadata"]["name"], namespace)
    assert (
        fixed is not None and fixed["metadata"]["labels"]["dvp.deckhouse.io/node-group"] == "master"
    )
    assert set(plan_actions(await act("plan")).values()) == {"no-op"}

    # destroy is refused while a VM labelled for the cluster is not the layout's (a machine)
    foreign = f"{prefix}-worker-5f7c9-x2v4q"
    kube.create(
        r.VIRTUAL_MACHINES,
        {
            "metadata": {"name": foreign, "labels": {r.CLUSTER_UUID_LABEL: cluster_uuid}},
            "spec": {**vm["spec"], "blockDeviceRefs": [{"kind": "VirtualDisk", "name": foreign}]},
        },
        namespace,
    )
    with pytest.raises(LayoutFailed, match=f"VirtualMachine {foreign}") as refused:
        await act("destroy")
    assert refused.value.kind == "DestroyBlocked"
    assert f"NetworkPolicy/isolated-{prefix}" in cluster_resources(kube, namespace, prefix)
    kube.delete(r.VIRTUAL_MACHINES, foreign, namespace)

    await act("destroy")

    async def nothing_left() -> bool:
        return cluster_resources(kube, namespace, prefix) == []

    await eventually_async(nothing_left, timeout=60)  # the foreign VM's finalizer goes too


async def test_missing_image_fails_with_the_parents_word(
    dvp_stack: tuple[LocalStack, DvpParent],
    dvp_client: Client,
    dvp_layout_settings: Settings,
    dvp_worker: None,
    tmp_path: Path,
) -> None:
    _, parent = dvp_stack
    namespace = parent.new_namespace("layout")
    prefix, cluster_uuid = f"d{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = dvp_config(tmp_path, parent, namespace, prefix, name="no-such-image")
    with pytest.raises(LayoutFailed, match="no-such-image") as failed:
        await run(dvp_client, dvp_layout_settings, "apply", path, prefix, cluster_uuid)
    assert failed.value.kind == "NotFound"
    assert cluster_resources(parent.kube, namespace, prefix) == []  # failed fast: nothing made


async def test_bootstrap_data_is_merged_into_the_cloud_init_secret(
    dvp_stack: tuple[LocalStack, DvpParent],
    dvp_client: Client,
    dvp_layout_settings: Settings,
    dvp_worker: None,
    tmp_path: Path,
) -> None:
    """``--cloud-config master=FILE``: the master's cloud-init Secret holds upstream's merge of
    its hostname/SSH-key document and the data, and its digest annotation; the static node's
    holds its own document only; other data later is a kept change and apply leaves it."""
    _, parent = dvp_stack
    namespace = parent.new_namespace("boot")
    prefix, cluster_uuid = f"b{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = dvp_config(tmp_path, parent, namespace, prefix)
    kube = parent.kube
    token = uuid.uuid4().hex
    (tmp_path / "boot.yaml").write_text(f"#cloud-config\nbootstrap_token: {token}\n")
    selection = {"master": str(tmp_path / "boot.yaml")}
    args = (dvp_client, dvp_layout_settings)

    def user_data(hostname: str) -> tuple[dict[str, object], dict[str, str]]:
        [secret] = [
            s
            for s in kube.list(r.SECRETS, namespace)["items"]
            if s["metadata"]["name"].startswith(f"{hostname}-cloudinit-")
        ]
        text = base64.b64decode(secret["data"][r.CLOUD_INIT_KEY]).decode()
        assert text.startswith("#cloud-config\n")
        return yaml.safe_load(text), secret["metadata"].get("annotations") or {}

    await run(*args, "apply", path, prefix, cluster_uuid, selection)
    document, annotations = user_data(f"{prefix}-master-0")
    assert document["hostname"] == f"{prefix}-master-0" and document["bootstrap_token"] == token
    digest = hashlib.sha256((tmp_path / "boot.yaml").read_bytes()).hexdigest()
    assert annotations[USER_DATA_ANNOTATION] == digest
    static, _ = user_data(f"{prefix}-worker-0")
    assert "bootstrap_token" not in static

    (tmp_path / "boot.yaml").write_text("#cloud-config\nother: data\n")
    plan = await run(*args, "plan", path, prefix, cluster_uuid, selection)
    changes = [c for m in plan.plan for res in m.resources for c in res.changes]
    assert [c.field for c in changes] == [
        "user_data (kept: a running machine is not replaced for it)"
    ]
    before = dvp_requests()
    await run(*args, "apply", path, prefix, cluster_uuid, selection)
    assert mutating_since(before) == {}
    assert user_data(f"{prefix}-master-0")[0]["bootstrap_token"] == token

    # The master's VM gone: the VM made anew boots from the current data, not the old Secret's.
    [vm] = [
        v["metadata"]["name"]
        for v in kube.list(r.VIRTUAL_MACHINES, namespace)["items"]
        if v["metadata"]["name"].startswith(f"{prefix}-master-0-")
    ]
    kube.delete(r.VIRTUAL_MACHINES, vm, namespace)
    await eventually(
        lambda: kube.get(r.VIRTUAL_MACHINES, vm, namespace) is None,
        timeout=60,
        what="the master's VM gone",
    )
    plan = await run(*args, "plan", path, prefix, cluster_uuid, selection)
    fields = [c.field for m in plan.plan for res in m.resources for c in res.changes]
    assert "user_data (rewritten: its VM is made anew)" in fields, fields
    await run(*args, "apply", path, prefix, cluster_uuid, selection)
    document, annotations = user_data(f"{prefix}-master-0")
    assert document["other"] == "data" and "bootstrap_token" not in document
    assert document["hostname"] == f"{prefix}-master-0"
    new_digest = hashlib.sha256((tmp_path / "boot.yaml").read_bytes()).hexdigest()
    assert annotations[USER_DATA_ANNOTATION] == new_digest

    await run(*args, "destroy", path, prefix, cluster_uuid)

    async def nothing_left() -> bool:
        return cluster_resources(kube, namespace, prefix) == []

    await eventually_async(nothing_left, timeout=60)
