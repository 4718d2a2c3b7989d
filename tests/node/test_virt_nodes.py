"""Node sync on DVP (the parent cluster and its simulator) and zVirt (the oVirt Engine emulator),
on the real stack, as upstream users exercise a CCM: a Node named like its VM is initialized with
the providerID and the ``node.kubernetes.io/instance-type`` label (DVP: the VM's class; zVirt: its
CPU/memory shape); a stopped VM taints its NotReady Node ``node.cloudprovider.kubernetes.io/
shutdown``; while the cloud's API is down nothing is deleted, even for a VM that is gone; once the
API answers again, the Node of a VM that is gone is deleted."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from cloudloop.cloud import models
from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.dvp import resources as dvp
from cloudloop.cloud.dvp.driver import DvpDriver
from cloudloop.cloud.registry import Settings
from cloudloop.cloud.zvirt.driver import ZvirtDriver
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import NODES
from cloudloop.rules import node as rules
from devstack.backends.dvp import create_node_vms, dvp_settings
from devstack.backends.zvirt import QUICK_TIMINGS, machine_spec, ovirt_engine, zvirt_settings
from devstack.dvp_simulator import VM_CLASS, DvpParent
from devstack.ovirt_emulator import OvirtEmulatorAdmin, OvirtEmulatorEndpoint
from tests.helpers import eventually
from tests.node.support import cleanup, make_node, node_sync, node_when, set_ready

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
DEAD = "127.0.0.1:9"  # the discard port: refused at once


@dataclass
class Cloud:
    """One cloud's VMs, as the test drives them, and the drivers node sync runs with."""

    driver: CloudDriver
    #: A driver of the same cloud whose API does not answer.
    down: Callable[[], CloudDriver]
    make_vm: Callable[[str], str]  # → the providerID node sync must write
    stop_vm: Callable[[str], None]
    remove_vm: Callable[[str], None]
    instance_type: str


@contextlib.contextmanager
def dvp_cloud(parent: DvpParent) -> Iterator[Cloud]:
    namespace = parent.new_namespace("nodes")
    settings = dvp_settings(parent, namespace, timeout_s=10)
    driver = DvpDriver(settings)

    def dead() -> CloudDriver:
        document: dict[str, Any] = yaml.safe_load(Path(parent.kubeconfig).read_text())
        for cluster in document.get("clusters", []):
            cluster["cluster"]["server"] = f"https://{DEAD}"
        encoded = base64.b64encode(yaml.safe_dump(document).encode()).decode()
        return DvpDriver(
            settings.model_copy(
                update={"kubeconfig": None, "kubeconfig_base64": SecretStr(encoded)}
            )
        )

    def make_vm(name: str) -> str:
        create_node_vms(parent, namespace, driver.session.cluster_labels(), [name])
        return f"dvp://{name}"

    def stop_vm(name: str) -> None:
        # As a user stops a VM that runs (the simulator stops one still starting, too).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            vm = parent.kube.get(dvp.VIRTUAL_MACHINES, name, namespace) or {}
            if (vm.get("status") or {}).get("phase") == "Running":
                break
            time.sleep(0.1)
        parent.kube.patch(
            dvp.VIRTUAL_MACHINES, name, {"spec": {"runPolicy": "AlwaysOff"}}, namespace
        )

    def remove_vm(name: str) -> None:
        parent.kube.delete(dvp.VIRTUAL_MACHINES, name, namespace)

    yield Cloud(driver, dead, make_vm, stop_vm, remove_vm, VM_CLASS)


@contextlib.contextmanager
def zvirt_cloud(endpoint: OvirtEmulatorEndpoint) -> Iterator[Cloud]:
    settings = zvirt_settings(endpoint, **QUICK_TIMINGS)
    driver = ZvirtDriver(settings)
    admin = OvirtEmulatorAdmin(endpoint.admin_url)
    specs: dict[str, models.MachineSpec] = {}

    def make_vm(name: str) -> str:
        spec = models.MachineSpec(
            name=name,
            namespace="default",
            cluster="nodes",
            machine_uid=str(uuid.uuid4()),
            provider_spec=machine_spec(endpoint, cpu={"sockets": 1, "cores": 2, "threads": 1}),
        )
        specs[name] = spec
        machine = driver.machines.create_machine(spec, b"#cloud-config\n")
        return machine.provider_id

    def remove_vm(name: str) -> None:
        deadline = 60.0
        while not driver.machines.delete_machine(specs[name]) and deadline > 0:
            deadline -= 1

    yield Cloud(
        driver,
        lambda: ZvirtDriver(
            settings.model_copy(
                update={"api_url": f"https://{DEAD}/ovirt-engine/api", "timeout_s": 2}
            )
        ),
        make_vm,
        lambda name: admin.set_vm_status(name, "down"),
        remove_vm,
        "zvirt-vm.cpu-2.mem-2gb",
    )


@pytest.fixture(scope="module")
def ovirt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OvirtEmulatorEndpoint]:
    with ovirt_engine(tmp_path_factory.mktemp("ovirt-nodes"), password="nodes-pw") as endpoint:
        yield endpoint


@pytest.fixture(params=["dvp", "zvirt"])
def cloud(request: pytest.FixtureRequest) -> Iterator[Cloud]:
    if request.param == "dvp":
        made = dvp_cloud(request.getfixturevalue("dvp_parent"))
    else:
        made = zvirt_cloud(request.getfixturevalue("ovirt"))
    with made as ready:
        yield ready


async def test_init_shutdown_outage_and_gone(
    kube: Kube, ccm_settings: Settings, cloud: Cloud, scope: str
) -> None:
    name = f"vm-{scope}"
    try:
        provider_id = await asyncio.to_thread(cloud.make_vm, name)
        await asyncio.to_thread(make_node, kube, name, scope)
        async with node_sync(kube, ccm_settings, cloud.driver):
            node = await eventually(
                node_when(kube, name, lambda n: not rules.needs_init(n)),
                timeout=120,
                what=f"{name} initialized",
            )
            assert node["spec"]["providerID"] == provider_id
            labels = node["metadata"]["labels"]
            assert labels[INSTANCE_TYPE] == cloud.instance_type
            assert labels["beta.kubernetes.io/instance-type"] == cloud.instance_type

            # Stopped VM, NotReady Node: the shutdown taint, and the Node kept.
            await asyncio.to_thread(set_ready, kube, name, "False")
            await asyncio.to_thread(cloud.stop_vm, name)
            await eventually(
                node_when(kube, name, lambda n: rules.has_taint(n, rules.SHUTDOWN_TAINT)),
                timeout=120,
                what="the shutdown taint",
            )

        # The VM goes while the cloud's API does not answer: nothing is deleted.
        await asyncio.to_thread(cloud.remove_vm, name)
        async with node_sync(kube, ccm_settings, cloud.down()) as sync:
            await eventually(lambda: sync.passes >= 4, timeout=120, what="lifecycle passes")
            assert kube.get(NODES, name) is not None

        # The API answers again: the VM is positively gone, so is its Node.
        async with node_sync(kube, ccm_settings, cloud.driver):
            await eventually(
                lambda: kube.get(NODES, name) is None, timeout=120, what="the Node deleted"
            )
    finally:
        cleanup(kube, scope)
