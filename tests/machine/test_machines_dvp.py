"""Cluster API machines on DVP against the real stack: a DeckhouseMachine becomes a VM with its
disks and cloud-init Secret in the parent cluster (a second kube-apiserver, the simulator playing
DVP), gets providerID, addresses, ready/provisioned and conditions, and on deletion everything
goes with the finalizer last; pause, invalid specs, retries and the driver's node-sync and
discovery calls."""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Replayer

from cloudloop.cloud import errors
from cloudloop.cloud.dvp import PROVIDER as DVP
from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.capi import INFRA_KINDS as DVP_KINDS
from cloudloop.cloud.dvp.driver import DvpDriver
from cloudloop.cloud.dvp.registration import registration_secrets
from cloudloop.cloud.models import InstanceState, MachineSpec
from cloudloop.cloud.registry import Settings
from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT_KINDS
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.resources import EVENTS, Resource
from cloudloop.messages.machine import MachineProgress, MachineQuery, MachineResult, workflow_id
from cloudloop.metrics import CLOUD_API_REQUESTS
from cloudloop.rules import machine as capi
from devstack import dvp_simulator as sim
from devstack import machine_fixtures
from devstack.dvp_simulator import DvpParent
from devstack.local import LocalStack
from starters.registration import write_secrets
from tests.helpers import eventually, eventually_async
from tests.machine.dvp_machines import CLOUD_INIT, DvpMachines, dvp_machines
from tests.support.histories import plain_json
from workers.main import build_worker
from workflows.machine import MachineWorkflow

pytestmark = pytest.mark.stack

READY_TIMEOUT = 60.0


@pytest.fixture
async def dvp(
    kube: Kube,
    dvp_parent: DvpParent,
    namespace: str,
    capi_crds: None,
    client: Client,
    task_queue: str,
    settings: Settings,
) -> AsyncIterator[DvpMachines]:
    """A worker with the DVP driver and the machine starter for this test's namespace."""
    async with dvp_machines(kube, dvp_parent, namespace) as machines:
        worker = build_worker(
            client, settings, driver=machines.driver, kube=kube, task_queue=task_queue
        )
        async with worker:
            starter = machines.start_starter(client, task_queue, settings.cluster_name)
            try:
                yield machines
            finally:
                starter.stop()


def _names(items: list[dict[str, Any]]) -> list[str]:
    return [i["name"] for i in items]


def decoded_payloads(node: Any) -> list[bytes]:
    """Every payload's data in a workflow history (JSON form), decoded."""
    found: list[bytes] = []
    if isinstance(node, dict):
        if isinstance(node.get("data"), str) and "metadata" in node:
            found.append(base64.b64decode(node["data"]))
        for value in node.values():
            found += decoded_payloads(value)
    elif isinstance(node, list):
        for value in node:
            found += decoded_payloads(value)
    return found


async def test_machine_lifecycle(dvp: DvpMachines, client: Client, namespace: str) -> None:
    await asyncio.to_thread(dvp.cluster)
    spec = machine_fixtures.dvp_machine_spec(
        additionalDisks=[{"size": "10Gi", "storageClass": "ceph-rbd"}]
    )
    infra = await asyncio.to_thread(dvp.machine, "m1", spec=spec)
    uid = infra["metadata"]["uid"]

    obj = await eventually(lambda: dvp.ready("m1"), timeout=READY_TIMEOUT, what="machine ready")
    vm = dvp.parent_get(r.VIRTUAL_MACHINES, "m1")
    assert vm is not None and vm["status"]["phase"] == "Running"
    ip = vm["status"]["ipAddress"]
    assert obj["spec"]["providerID"] == "dvp://m1"
    assert obj["status"]["addresses"] == [
        {"type": "Hostname", "address": "m1"},
        {"type": "InternalDNS", "address": "m1"},
        {"type": "InternalIP", "address": ip},
        {"type": "ExternalIP", "address": ip},
    ]
    assert obj["metadata"]["finalizers"] == [DVP_KINDS.finalizer]
    vm_ready = dvp.condition("m1", capi.VM_READY)
    assert (vm_ready["status"], vm_ready["reason"]) == ("True", capi.REASON_VM_RUNNING)
    assert dvp.condition("m1", capi.READY)["status"] == "True"
    assert dvp.condition("m1", capi.PAUSED)["status"] == "False"

    # The VM, disks and cloud-init Secret as capdvp makes them.
    labels = vm["metadata"]["labels"]
    assert labels[r.MANAGED_BY_LABEL] == "deckhouse"
    assert labels[r.CLUSTER_UUID_LABEL] == dvp.cluster_uuid
    assert labels[r.HOSTNAME_LABEL] == "m1"
    assert labels[r.MACHINE_UID_LABEL] == uid
    assert vm["spec"]["virtualMachineClassName"] == "generic"
    assert vm["spec"]["cpu"] == {"cores": 2, "coreFraction": "50%"}
    assert vm["spec"]["memory"] == {"size": "4Gi"}
    assert vm["spec"]["bootloader"] == "EFI"  # the DeckhouseMachine CRD's default
    assert vm["spec"]["runPolicy"] == "AlwaysOnUnlessStoppedManually"
    assert vm["spec"]["liveMigrationPolicy"] == "PreferSafe"
    assert vm["spec"]["provisioning"] == {
        "type": "UserDataRef",
        "userDataRef": {"kind": "Secret", "name": "cloud-init-m1"},
    }
    assert _names(vm["spec"]["blockDeviceRefs"]) == ["m1-boot", "m1-additional-disk-0"]
    assert dvp.parent_objects(uid) == {
        "vms": {"m1"},
        "disks": {"m1-boot", "m1-additional-disk-0"},
        "secrets": {"cloud-init-m1"},
    }
    boot = dvp.parent_get(r.VIRTUAL_DISKS, "m1-boot") or {}
    assert boot["spec"]["dataSource"] == {
        "type": "ObjectRef",
        "objectRef": {"kind": "ClusterVirtualImage", "name": "ubuntu-24-04"},
    }
    assert boot["spec"]["persistentVolumeClaim"] == {
        "storageClassName": "linstor-thin-r1",
        "size": "20Gi",
    }
    assert boot["metadata"]["labels"][r.DISK_NAME_LABEL] == "m1-boot"
    assert boot["metadata"]["ownerReferences"][0]["uid"] == vm["metadata"]["uid"]
    secret = dvp.parent_get(r.SECRETS, "cloud-init-m1") or {}
    assert secret["type"] == r.CLOUD_INIT_SECRET_TYPE
    assert base64.b64decode(secret["data"]["userData"]) == CLOUD_INIT
    assert secret["metadata"]["ownerReferences"][0]["name"] == "m1"

    # The InfraCluster has nothing to create: ready and provisioned.
    cluster = dvp.kube.get(DVP_KINDS.cluster, "c1", namespace) or {}
    assert cluster["status"]["ready"] is True
    assert cluster["status"]["initialization"]["provisioned"] is True

    # One workflow per InfraMachine UID, found by the object's search attributes; the bootstrap
    # data never enters its history.
    wf_id = workflow_id(namespace, "m1", uid)
    query = f"CloudloopKind='DeckhouseMachine' AND CloudloopNamespace='{namespace}'"

    async def listed() -> list[str]:
        return [wf.id async for wf in client.list_workflows(query)]

    assert await eventually_async(listed, what="workflow listed") == [wf_id]
    history = await client.get_workflow_handle(wf_id).fetch_history()
    payloads = b"\n".join(decoded_payloads(plain_json(history, client)))
    assert b"m1-bootstrap" in payloads  # the Secret's name is there, its data is not
    assert b"bootstrap-secret-data" not in payloads
    replayer = Replayer(workflows=[MachineWorkflow], data_converter=client.data_converter)
    await replayer.replay_workflow(history)  # deterministic: the run replays as it ran
    events = (await asyncio.to_thread(dvp.kube.list, EVENTS, namespace))["items"]
    provisioned = [e for e in events if e["reason"] == "Provisioned"]
    assert provisioned and wf_id in provisioned[0]["message"]
    assert provisioned[0]["involvedObject"]["uid"] == uid

    # Deletion: the VM goes first, then disks and Secret; the finalizer goes last.
    dvp.parent.simulator.hold(sim.DISK_DELETE, "m1-boot")
    await asyncio.to_thread(dvp.delete, "m1")

    def vm_gone_disk_held() -> bool:
        disk = dvp.parent_get(r.VIRTUAL_DISKS, "m1-boot") or {}
        vm_gone = dvp.parent_get(r.VIRTUAL_MACHINES, "m1") is None
        return vm_gone and bool(disk.get("metadata", {}).get("deletionTimestamp"))

    await eventually(vm_gone_disk_held, timeout=READY_TIMEOUT, what="VM gone, boot disk going")
    held = dvp.infra("m1")
    assert held is not None and held["metadata"]["finalizers"] == [DVP_KINDS.finalizer]
    assert dvp.reason("m1") == capi.REASON_DELETING
    dvp.parent.simulator.release(sim.DISK_DELETE, "m1-boot")
    await eventually(lambda: dvp.infra("m1") is None, timeout=READY_TIMEOUT, what="machine gone")
    assert dvp.parent_objects(uid) == {"vms": set(), "disks": set(), "secrets": set()}
    result = await client.get_workflow_handle(wf_id, result_type=MachineResult).result()
    assert result.provider_id == "dvp://m1"


async def test_waits_for_cluster_infrastructure_and_bootstrap_data(
    dvp: DvpMachines, kube: Kube, namespace: str
) -> None:
    await asyncio.to_thread(dvp.cluster, infrastructure_ready=False)
    infra = await asyncio.to_thread(dvp.machine, "m1", bootstrap=False)
    await eventually(
        lambda: dvp.reason("m1") == capi.REASON_WAITING_FOR_INFRASTRUCTURE,
        what="WaitingForClusterInfrastructure",
    )
    assert dvp.parent_objects(infra["metadata"]["uid"])["vms"] == set()

    await asyncio.to_thread(machine_fixtures.set_infrastructure_ready, kube, namespace, "c1")
    await eventually(
        lambda: dvp.reason("m1") == capi.REASON_WAITING_FOR_BOOTSTRAP,
        what="WaitingForBootstrapScript",
    )
    assert dvp.parent_objects(infra["metadata"]["uid"])["vms"] == set()
    assert (dvp.infra("m1") or {})["status"]["initialization"]["provisioned"] is False

    await asyncio.to_thread(
        machine_fixtures.create_bootstrap_secret, kube, namespace, "m1-data", CLOUD_INIT
    )
    await asyncio.to_thread(machine_fixtures.set_bootstrap_secret, kube, namespace, "m1", "m1-data")
    await eventually(lambda: dvp.ready("m1"), timeout=READY_TIMEOUT, what="machine ready")


@pytest.mark.parametrize(
    "pause_by",
    [pytest.param("annotation", id="annotation"), pytest.param("cluster", id="cluster-spec")],
)
async def test_paused_machines_are_left_alone(
    dvp: DvpMachines, kube: Kube, namespace: str, pause_by: str
) -> None:
    paused_cluster = "c1" if pause_by == "annotation" else "c-paused"
    await asyncio.to_thread(dvp.cluster, "c1")
    if pause_by == "cluster":
        await asyncio.to_thread(dvp.cluster, "c-paused", paused=True)
    annotations = {capi.PAUSED_ANNOTATION: ""} if pause_by == "annotation" else None
    paused = await asyncio.to_thread(
        dvp.machine, "paused", cluster=paused_cluster, annotations=annotations
    )
    await asyncio.to_thread(dvp.machine, "control")

    # The unpaused machine in the same pass shows the starter has seen both.
    await eventually(lambda: dvp.ready("control"), timeout=READY_TIMEOUT, what="control ready")
    await eventually(
        lambda: dvp.condition("paused", capi.PAUSED).get("status") == "True", what="Paused"
    )
    obj = dvp.infra("paused") or {}
    assert not obj["metadata"].get("finalizers")
    assert dvp.parent_objects(paused["metadata"]["uid"])["vms"] == set()

    def unpause() -> None:
        if pause_by == "annotation":
            dvp.annotate("paused", {capi.PAUSED_ANNOTATION: None})
        else:
            kube.patch(capi.CLUSTERS, "c-paused", {"spec": {"paused": False}}, namespace)

    def pause() -> None:
        if pause_by == "annotation":
            dvp.annotate("paused", {capi.PAUSED_ANNOTATION: ""})
        else:
            kube.patch(capi.CLUSTERS, "c-paused", {"spec": {"paused": True}}, namespace)

    await asyncio.to_thread(unpause)
    await eventually(lambda: dvp.ready("paused"), timeout=READY_TIMEOUT, what="unpaused ready")
    assert dvp.condition("paused", capi.PAUSED)["status"] == "False"

    # A paused machine is not deleted either, until it is unpaused.
    await asyncio.to_thread(pause)
    await eventually(
        lambda: dvp.condition("paused", capi.PAUSED).get("status") == "True", what="Paused"
    )
    await asyncio.to_thread(dvp.delete, "paused")
    await asyncio.to_thread(dvp.delete, "control")
    await eventually(lambda: dvp.infra("control") is None, timeout=READY_TIMEOUT, what="deleted")
    assert dvp.infra("paused") is not None
    assert dvp.vm_phase("paused") == "Running"
    await asyncio.to_thread(unpause)
    await eventually(lambda: dvp.infra("paused") is None, timeout=READY_TIMEOUT, what="deleted")
    assert dvp.parent_objects(paused["metadata"]["uid"])["vms"] == set()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        pytest.param({"cpu": {"cores": 2, "cpuFraction": "150%"}}, "cpuFraction", id="fraction"),
        pytest.param({"memory": "lots"}, "memory", id="memory"),
        pytest.param({"bootloader": "UEFI"}, "bootloader", id="bootloader"),
        pytest.param({"cpu": {"cores": 0, "cpuFraction": "10%"}}, "cores", id="cores"),
        pytest.param({"vmClassName": ""}, "vmClassName", id="empty-class"),
    ],
)
async def test_schema_rejects_invalid_specs(
    kube: Kube, namespace: str, override: dict[str, Any], message: str
) -> None:
    with pytest.raises(KubeError) as err:
        await asyncio.to_thread(
            kube.create,
            DVP_KINDS.machine,
            {
                "metadata": {"name": "bad", "namespace": namespace},
                "spec": machine_fixtures.dvp_machine_spec(**override),
            },
            namespace,
        )
    assert err.value.status == 422
    assert message in str(err.value)


async def test_crds_default_like_deckhouse_and_serve_templates(kube: Kube, namespace: str) -> None:
    def create(resource: Resource[Any], name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
        return kube.create(resource.untyped, body, namespace)

    dvp = await asyncio.to_thread(
        create,
        DVP_KINDS.machine,
        "defaults",
        {
            "vmClassName": "generic",
            "cpu": {},
            "rootDiskSize": 21474836480,
            "rootDiskStorageClass": "sc",
            "bootDiskImageRef": {"name": "img"},
        },
    )
    assert dvp["spec"]["cpu"] == {"cores": 4, "cpuFraction": "100%"}
    assert dvp["spec"]["memory"] == "8Gi"
    assert dvp["spec"]["bootloader"] == "EFI"
    assert dvp["spec"]["bootDiskImageRef"]["kind"] == "VirtualImage"
    zvirt = await asyncio.to_thread(
        create, ZVIRT_KINDS.machine, "defaults", {"template": "t", "vnicProfileID": "v", "cpu": {}}
    )
    assert zvirt["spec"]["cpu"] == {"sockets": 4, "cores": 1, "threads": 1}
    assert (zvirt["spec"]["memory"], zvirt["spec"]["rootDiskSizeGb"]) == (8192, 20)
    assert zvirt["spec"]["nicName"] == "nic1"
    with pytest.raises(KubeError) as err:
        await asyncio.to_thread(
            create, ZVIRT_KINDS.machine, "bad", {"vnicProfileID": "v", "cpu": {}}
        )
    assert err.value.status == 422 and "template" in str(err.value)
    template = await asyncio.to_thread(
        create,
        DVP_KINDS.template,
        "workers",
        {"template": {"spec": machine_fixtures.dvp_machine_spec()}},
    )
    assert template["spec"]["template"]["spec"]["bootloader"] == "EFI"
    with pytest.raises(KubeError) as err:
        await asyncio.to_thread(
            create, DVP_KINDS.template, "bad", {"template": {"spec": {"vmClassName": "x"}}}
        )
    assert err.value.status == 422
    for resource in (DVP_KINDS.cluster, ZVIRT_KINDS.cluster, ZVIRT_KINDS.template):
        spec = {"template": {"spec": {"template": "t", "vnicProfileID": "v", "cpu": {}}}}
        await asyncio.to_thread(
            create, resource, "ok", spec if resource is ZVIRT_KINDS.template else {}
        )


async def test_invalid_spec_is_a_condition_until_fixed(dvp: DvpMachines, kube: Kube) -> None:
    await asyncio.to_thread(dvp.cluster)
    spec = machine_fixtures.dvp_machine_spec(vmClassName="no-such-class")
    infra = await asyncio.to_thread(dvp.machine, "m1", spec=spec)
    await eventually(lambda: dvp.reason("m1") == capi.REASON_VM_ERROR, what="VMError")
    condition = dvp.condition("m1", capi.VM_READY)
    assert "VirtualMachineClass 'no-such-class' does not exist" in condition["message"]
    assert "cloudloop retry machine" in condition["message"]
    assert dvp.condition("m1", capi.READY)["status"] == "False"
    assert dvp.parent_objects(infra["metadata"]["uid"])["vms"] == set()

    # A fixed spec is tried again at once.
    await asyncio.to_thread(
        kube.patch, DVP_KINDS.machine, "m1", {"spec": {"vmClassName": "generic"}}, dvp.namespace
    )
    await eventually(lambda: dvp.ready("m1"), timeout=READY_TIMEOUT, what="machine ready")


def run_cli(stack: LocalStack, settings: Settings, dvp: DvpMachines, *args: str) -> str:
    env = {
        **os.environ,
        **dvp.env(),
        "CLOUDLOOP_KUBECONFIG": str(stack.kubeconfig),
        "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": settings.temporal.task_queue,
        **stack.codec_env(),
    }
    done = subprocess.run(
        [sys.executable, "-m", "cloudloop.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_failed_provisioning_is_retried_by_cli_and_annotation(
    dvp: DvpMachines, client: Client, stack: LocalStack, settings: Settings, namespace: str
) -> None:
    image = f"late-{uuid.uuid4().hex[:6]}"
    spec = machine_fixtures.dvp_machine_spec(
        bootDiskImageRef={"kind": "ClusterVirtualImage", "name": image}
    )
    await asyncio.to_thread(dvp.cluster)
    names = ("by-cli", "by-annotation", "by-new-run")
    uids = {}
    for name in names:
        uids[name] = (await asyncio.to_thread(dvp.machine, name, spec=spec))["metadata"]["uid"]
    for name in names:
        await eventually(functools.partial(dvp.has_reason, name, capi.REASON_VM_ERROR))
        assert image in dvp.condition(name, capi.VM_READY)["message"]

    # The failed workflows wait, visible, for a retry.
    handles = {n: client.get_workflow_handle(workflow_id(namespace, n, uids[n])) for n in names}
    for handle in handles.values():
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        progress = await handle.query(MachineQuery.PROGRESS, result_type=MachineProgress)
        assert progress.phase == "Failed"
        assert progress.attempts == 1

    await asyncio.to_thread(
        dvp.parent.kube.create,
        r.CLUSTER_VIRTUAL_IMAGES,
        {
            "metadata": {"name": image},
            "spec": {"dataSource": {"type": "HTTP", "http": {"url": "https://example/late.img"}}},
        },
    )
    try:
        out = await asyncio.to_thread(
            run_cli, stack, settings, dvp, "retry", "machine", f"{namespace}/by-cli"
        )
        assert "asked workflow" in out
        await asyncio.to_thread(dvp.annotate, "by-annotation", {capi.RETRY_ANNOTATION: "1"})
        # A workflow that is not running any more: the command asks the starter for a new run.
        await handles["by-new-run"].terminate("test: the run is gone")
        out = await asyncio.to_thread(
            run_cli, stack, settings, dvp, "retry", "machine", f"{namespace}/by-new-run"
        )
        assert "is not running" in out
        for name in names:
            await eventually(functools.partial(dvp.ready, name), timeout=READY_TIMEOUT, what=name)
        for name in ("by-cli", "by-annotation"):
            progress = await handles[name].query(MachineQuery.PROGRESS, result_type=MachineProgress)
            assert (progress.phase, progress.attempts) == ("Provisioned", 2)
    finally:
        await asyncio.to_thread(dvp.parent.kube.delete, r.CLUSTER_VIRTUAL_IMAGES, image)


async def test_deletion_during_provisioning_cancels_and_cleans_up(dvp: DvpMachines) -> None:
    await asyncio.to_thread(dvp.cluster)
    dvp.parent.simulator.hold(sim.VM_RUNNING, "m1")
    infra = await asyncio.to_thread(dvp.machine, "m1")
    await eventually(lambda: dvp.vm_phase("m1") == "Starting", what="VM starting")
    await asyncio.to_thread(dvp.delete, "m1")
    await eventually(lambda: dvp.infra("m1") is None, timeout=READY_TIMEOUT, what="machine gone")
    assert dvp.parent_objects(infra["metadata"]["uid"]) == {
        "vms": set(),
        "disks": set(),
        "secrets": set(),
    }


def _machine_spec(name: str) -> MachineSpec:
    return MachineSpec(
        name=name,
        namespace="default",
        cluster="c1",
        machine_uid=str(uuid.uuid4()),
        provider_spec=machine_fixtures.dvp_machine_spec(),
    )


def _requests(operation: str) -> float:
    return float(CLOUD_API_REQUESTS.labels("dvp", operation, "success")._value.get())


def provisioned(driver: DvpDriver, spec: MachineSpec) -> bool:
    machine = driver.machines.get_machine(spec)
    return machine is not None and machine.provisioned


async def test_driver_machines_instances_and_discovery(dvp: DvpMachines) -> None:
    driver = dvp.driver
    specs = {name: _machine_spec(name) for name in ("i1", "i2")}
    created = {
        n: await asyncio.to_thread(driver.machines.create_machine, s, b"#x")
        for n, s in specs.items()
    }
    again = await asyncio.to_thread(driver.machines.create_machine, specs["i1"], b"#x")  # adopts
    assert again.id == created["i1"].id == "i1"
    with pytest.raises(errors.AlreadyExists):
        await asyncio.to_thread(driver.machines.create_machine, _machine_spec("i1"), b"#x")
    for spec in specs.values():
        await eventually(functools.partial(provisioned, driver, spec), what="VM running")

    # Node sync: one LIST for the whole batch; missing VMs are absent; Stopped is shut down.
    before = _requests("ListVirtualMachines")
    listing = await asyncio.to_thread(driver.instances.list_instances, ["i1", "i2", "never-made"])
    assert sorted(listing.found) == ["i1", "i2"]
    assert listing.requests == 1
    assert _requests("ListVirtualMachines") == before + 1
    i1 = listing.found["i1"]
    assert i1.provider_id == "dvp://i1"
    assert [a.type for a in i1.addresses] == ["ExternalIP", "InternalIP", "Hostname"]
    await asyncio.to_thread(
        dvp.parent.kube.patch,
        r.VIRTUAL_MACHINES,
        "i2",
        {"status": {"phase": "Stopped"}},
        dvp.parent_namespace,
        subresource="status",
    )
    stopped = (await asyncio.to_thread(driver.instances.list_instances, ["i2"])).found["i2"]
    assert stopped.state is InstanceState.STOPPED and stopped.shut_down
    by_name = await asyncio.to_thread(driver.instances.find_instances_by_name, ["i1", "nobody"])
    assert sorted(by_name.found) == ["i1"]
    assert driver.instances.instance_id_from_provider_id("dvp://i1") == "i1"
    with pytest.raises(errors.InvalidRequest):
        driver.instances.instance_id_from_provider_id("aws:///eu-1a/i-123")

    # Discovery: the parent's StorageClasses, sorted, the first one the default.
    data = await asyncio.to_thread(driver.discovery.discovery_data)
    assert data.kind == "DVPCloudDiscoveryData"
    assert [z.name for z in data.zones] == ["default"]
    classes: list[dict[str, Any]] = data.extra["storageClasses"]  # type: ignore[assignment]
    assert [(c["name"], c.get("isDefault", False)) for c in classes] == [
        ("ceph-rbd", True),
        ("linstor-thick-r2", False),
        ("linstor-thin-r1", False),
    ]

    # A hot-plugged volume (CSI's disk, attached by a VMBDA) is detached, never deleted.
    parent, ns = dvp.parent.kube, dvp.parent_namespace
    volume = {"persistentVolumeClaim": {"size": "1Gi", "storageClassName": "ceph-rbd"}}
    await asyncio.to_thread(
        parent.create, r.VIRTUAL_DISKS, {"metadata": {"name": "pv-1"}, "spec": volume}, ns
    )
    attachment = {
        "metadata": {
            "name": "vmbda-pv-1-i1",
            "labels": {r.ATTACHMENT_DISK_LABEL: "pv-1", r.ATTACHMENT_MACHINE_LABEL: "i1"},
        },
        "spec": {
            "virtualMachineName": "i1",
            "blockDeviceRef": {"kind": "VirtualDisk", "name": "pv-1"},
        },
    }
    await asyncio.to_thread(
        parent.create, r.VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS, attachment, ns
    )
    for spec in specs.values():
        await eventually(
            functools.partial(driver.machines.delete_machine, spec), what="all deleted"
        )
        assert await asyncio.to_thread(driver.machines.get_machine, spec) is None
    assert dvp.parent_objects() == {"vms": set(), "disks": set(), "secrets": set()}
    attachments = parent.list(r.VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS, ns)["items"]
    assert attachments == []
    assert parent.get(r.VIRTUAL_DISKS, "pv-1", ns) is not None


async def test_registration_secrets_are_written_once(kube: Kube) -> None:
    settings = Settings(provider="dvp")
    DVP.section(settings).ssh_public_key = "ssh-ed25519 AAAA test"
    bodies = registration_secrets(DVP.section(settings))
    await asyncio.to_thread(write_secrets, kube, bodies)
    secret = await asyncio.to_thread(
        kube.get, r.SECRETS, "d8-node-manager-cloud-provider", "kube-system"
    )
    assert secret is not None
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data["type"] == "dvp"
    assert data["capiMachineTemplateKind"] == "DeckhouseMachineTemplate"
    assert data["sshPublicKey"] == "ssh-ed25519 AAAA test"
    assert secret["metadata"]["labels"]["cloud-provider.deckhouse.io/name"] == "dvp"
    copy = await asyncio.to_thread(
        kube.get, r.SECRETS, "d8-node-manager-cloud-provider-dvp", "kube-system"
    )
    assert copy is not None and copy["data"] == secret["data"]
    assert await asyncio.to_thread(write_secrets, kube, bodies) == 0
