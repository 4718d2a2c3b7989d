"""SIGKILL the worker process (``cloudloop worker``) at each step of a machine's provisioning and
deletion, on every cloud with Cluster API machines: a new worker takes the workflow over and it
converges, with exactly one VM (the same one) or none, and nothing orphaned in the cloud.

One harness for every provider: a module-scoped rig per provider (its backend and one worker
process), a :class:`Scene` per test that knows the provider's machine and cloud objects, and the
provider's list of kill points. The cloud is held at each step long enough for the kill to land
there (simulator holds on DVP, emulator delays on zVirt), and every kill point checks, after the
kill, that the cloud is still at that step. Three flows, the same assertions for every cloud:

- killed while provisioning: the next worker adopts the VM it finds (the same one) and reports
  it; exactly one VM, nothing orphaned; then deleted, nothing left;
- killed while deleting: the next worker finishes; no VM, nothing orphaned;
- deleted while no worker runs: the next worker deletes what the dead one made.

DVP (the parent cluster and its simulator) is killed while creating, VM starting, running but not
reported (before ready is written), VM deleting, disks deleting, and deleted while no worker runs;
what could be orphaned is a VM, a disk or a cloud-init Secret in the parent, under any machine
UID. zVirt (the oVirt Engine emulator) is killed while cloning, down before the start (its boot
disk growing), up but not reported, powering down, removing, and deleted while dead; zVirt keeps
no cloud-init Secret in the cloud (the bootstrap data goes with the start request), so what could
be orphaned is a VM or a disk. OpenStack (the OpenStack emulator) is killed with the port made but
no server yet, the server building, ACTIVE but not reported, the server deleting, the server gone
with its port and root volume still there, and deleted while dead; what could be orphaned is a
server, a port or a volume. AWS (moto behind the dev stack's AWS front) is killed while
``RunInstances`` has been carried out but not answered (the front holds the answer), while the
instance is pending (it comes up while no worker runs), while it is shutting down, and deleted
while dead; what could be orphaned is an instance or its root volume. vSphere (vcsim, its tasks
delayed) is killed while cloning, while the clone is reconfigured (powered off), powering on, on but
not reported, powering off, destroying, and deleted while dead; vcsim's disks belong to their VM,
so what could be orphaned is a VM.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import pytest
from temporalio.client import Client

from cloudloop.cloud.aws.capi import INFRA_KINDS as AWS_KINDS
from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.openstack.capi import INFRA_KINDS as OPENSTACK_KINDS
from cloudloop.cloud.vsphere.capi import INFRA_KINDS as VSPHERE_KINDS
from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT_KINDS
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Event, InfraObject
from devstack import aws_front, machine_fixtures
from devstack import dvp_simulator as sim
from devstack.backends import aws as aws_backend
from devstack.backends import section_env
from devstack.backends import vsphere as vsphere_backend
from devstack.backends.dvp import dvp_settings
from devstack.backends.openstack import QUICK as OS_QUICK
from devstack.backends.openstack import QUICK_TIMINGS as OS_QUICK_TIMINGS
from devstack.backends.openstack import machine_spec as os_machine_spec
from devstack.backends.openstack import openstack_emulator, openstack_settings
from devstack.backends.vsphere import vcsim_server
from devstack.backends.zvirt import QUICK_TIMINGS, machine_spec, ovirt_engine, zvirt_settings
from devstack.devmode import stack_settings
from devstack.dvp_simulator import DvpParent
from devstack.local import LocalStack
from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint
from devstack.ovirt_emulator import Delays, OvirtEmulatorAdmin, OvirtEmulatorEndpoint
from devstack.vcsim import VcsimEndpoint, VcsimOptions
from devstack.vcsim_guest import GuestAgent
from starters.machine import MachineStarter
from tests.helpers import eventually
from tests.machine.dvp_machines import TEST_TIMINGS, DvpMachines, dvp_machines
from tests.machine.vsphere_machines import VcsimMachines
from tests.support.workers import WorkerProcess, worker_env

pytestmark = [pytest.mark.stack, pytest.mark.fault]

CONVERGE_TIMEOUT = 120.0
#: How often a kill point reads the cloud: the kill lands within milliseconds of the step.
KILL_POLL_S = 0.01


# -- the harness ---------------------------------------------------------------------------------
class Scene(ABC):
    """One test's machine (named after its kill point) and the worker process to kill."""

    def __init__(self, name: str, worker: WorkerProcess) -> None:
        self.name = name
        self.worker = worker

    @abstractmethod
    async def create(self) -> None:
        """Create the InfraMachine (and its bootstrap Secret)."""

    @abstractmethod
    def vm_id(self) -> str:
        """The cloud's ID of this machine's VM ("" while there is none)."""

    @abstractmethod
    async def provisioned(self) -> None:
        """Ready, with exactly one VM of this name and its own objects, nothing orphaned."""

    @abstractmethod
    async def delete(self) -> None:
        """Delete the InfraMachine."""

    @abstractmethod
    async def deleted(self) -> None:
        """Gone, and with it every cloud object it had: no VM, nothing orphaned."""

    @abstractmethod
    def note_cloud(self) -> None:
        """Remember what the cloud holds for this machine (read right after a kill)."""

    async def kill_at(self, point: KillPoint[Any]) -> None:
        """SIGKILL the worker as soon as the cloud is at ``point``; it must still be there."""
        await eventually(
            functools.partial(point.at, self),
            interval=KILL_POLL_S,
            timeout=CONVERGE_TIMEOUT,
            what=point.what,
        )
        await asyncio.to_thread(self.worker.kill)
        assert await asyncio.to_thread(point.at, self), f"the kill missed the step: {point.what}"
        await asyncio.to_thread(self.note_cloud)

    async def restart_worker(self) -> None:
        await asyncio.to_thread(self.worker.start)


S = TypeVar("S", bound=Scene)


def nothing(scene: Scene) -> None:
    """No hold, or nothing to release."""


async def no_wait(scene: Scene) -> None:
    """Nothing happens between the kill and the restart."""


@dataclass(frozen=True)
class KillPoint(Generic[S]):
    """A step of one cloud the worker is killed in, and how a flow gets the cloud there."""

    id: str
    flow: Callable[[S, KillPoint[S]], Awaitable[None]]
    #: The step, read from the cloud (and the InfraMachine).
    at: Callable[[S], bool]
    what: str
    #: Keep the cloud at the step until released (before the flow gets there).
    hold: Callable[[S], None] = nothing
    #: What happens while no worker runs (between the kill and the restart).
    while_dead: Callable[[S], Awaitable[None]] = no_wait
    #: Let the cloud go on (after the restart).
    release: Callable[[S], None] = nothing


async def killed_while_provisioning(scene: S, point: KillPoint[S]) -> None:
    point.hold(scene)
    await scene.create()
    await scene.kill_at(point)
    vm = scene.vm_id()
    await point.while_dead(scene)
    await scene.restart_worker()
    point.release(scene)
    await scene.provisioned()
    assert scene.vm_id() == vm  # adopted, not made again
    await scene.delete()
    await scene.deleted()


async def killed_while_deleting(scene: S, point: KillPoint[S]) -> None:
    await scene.create()
    await scene.provisioned()
    point.hold(scene)
    await scene.delete()
    await scene.kill_at(point)
    await scene.restart_worker()
    point.release(scene)
    await scene.deleted()


async def deleted_while_dead(scene: S, point: KillPoint[S]) -> None:
    """Killed mid-provisioning; the machine is deleted before a worker comes back."""
    point.hold(scene)
    await scene.create()
    await scene.kill_at(point)
    await scene.delete()
    await scene.restart_worker()
    await scene.deleted()


class Rig(Protocol):
    """One provider's backend and worker process, shared by every scenario of the module."""

    worker: WorkerProcess

    def scenes(
        self, kube: Kube, namespace: str, client: Client
    ) -> contextlib.AbstractAsyncContextManager[Callable[[str], Scene]]:
        """The machine starter for a test's namespace, feeding the worker process; scenes."""
        ...


# -- DVP: the parent cluster and its simulator -----------------------------------------------
NOTHING: dict[str, set[str]] = {"vms": set(), "disks": set(), "secrets": set()}


class DvpScene(Scene):
    def __init__(self, name: str, worker: WorkerProcess, dvp: DvpMachines) -> None:
        super().__init__(name, worker)
        self.dvp = dvp
        self.uid = ""  # the InfraMachine's

    @property
    def boot_disk(self) -> str:
        return f"{self.name}-boot"

    def provisioned_objects(self) -> dict[str, set[str]]:
        return {
            "vms": {self.name},
            "disks": {self.boot_disk, f"{self.name}-additional-disk-0"},
            "secrets": {f"cloud-init-{self.name}"},
        }

    def objects_of_this_machine(self) -> dict[str, set[str]]:
        """Everything in the parent made for a machine of this name, under any UID."""
        return self.dvp.parent_objects(hostname=self.name)

    def vm_id(self) -> str:
        vm = self.dvp.parent_get(r.VIRTUAL_MACHINES, self.name) or {}
        return str(vm.get("metadata", {}).get("uid", ""))

    def note_cloud(self) -> None:
        """Nothing to remember: the parent's objects carry the machine's UID and hostname."""

    def vm_phase_is(self, phase: str) -> bool:
        return self.dvp.vm_phase(self.name) == phase

    def vm_terminating(self) -> bool:
        vm = self.dvp.parent_get(r.VIRTUAL_MACHINES, self.name) or {}
        return bool(vm.get("metadata", {}).get("deletionTimestamp"))

    def disks_going(self) -> bool:
        """The VM gone, its boot disk terminating."""
        disk = self.dvp.parent_get(r.VIRTUAL_DISKS, self.boot_disk) or {}
        vm_gone = self.dvp.parent_get(r.VIRTUAL_MACHINES, self.name) is None
        return vm_gone and bool(disk.get("metadata", {}).get("deletionTimestamp"))

    def hold(self, step: str, name: str | None = None) -> None:
        self.dvp.parent.simulator.hold(step, name or self.name)

    def release(self, step: str, name: str | None = None) -> None:
        self.dvp.parent.simulator.release(step, name or self.name)

    async def create(self) -> None:
        spec = machine_fixtures.dvp_machine_spec(
            additionalDisks=[{"size": "5Gi", "storageClass": "ceph-rbd"}]
        )
        infra = await asyncio.to_thread(self.dvp.machine, self.name, spec=spec)
        self.uid = str(infra["metadata"]["uid"])

    async def provisioned(self) -> None:
        await eventually(
            functools.partial(self.dvp.ready, self.name),
            timeout=CONVERGE_TIMEOUT,
            what="machine ready",
        )
        assert self.dvp.parent_objects(self.uid) == self.provisioned_objects()
        assert self.objects_of_this_machine() == self.provisioned_objects()  # exactly one VM

    async def delete(self) -> None:
        await asyncio.to_thread(self.dvp.delete, self.name)

    async def deleted(self) -> None:
        await eventually(
            lambda: self.dvp.infra(self.name) is None,
            timeout=CONVERGE_TIMEOUT,
            what="machine deleted",
        )
        assert self.dvp.parent_objects(self.uid) == NOTHING
        assert self.objects_of_this_machine() == NOTHING  # none left under another UID either


async def dvp_running_while_dead(scene: DvpScene) -> None:
    """The VM comes up while no worker runs: ready is not written until the next one."""
    scene.release(sim.VM_RUNNING)
    await eventually(functools.partial(scene.vm_phase_is, "Running"), what="VM running")
    assert scene.dvp.ready(scene.name) is None


def dvp_starting(scene: DvpScene) -> bool:
    return scene.vm_phase_is("Starting")


DVP_KILL_POINTS: list[KillPoint[DvpScene]] = [
    KillPoint(
        "creating",
        killed_while_provisioning,
        at=lambda s: bool(s.vm_id()),
        what="VM created (its Secret and disks may or may not be there yet)",
    ),
    KillPoint(
        "vm-starting",
        killed_while_provisioning,
        at=dvp_starting,
        what="VM starting, the observe activity polling it",
        hold=lambda s: s.hold(sim.VM_RUNNING),
        release=lambda s: s.release(sim.VM_RUNNING),
    ),
    KillPoint(
        "running-not-reported",
        killed_while_provisioning,
        at=dvp_starting,
        what="VM starting; it comes up while no worker runs",
        hold=lambda s: s.hold(sim.VM_RUNNING),
        while_dead=dvp_running_while_dead,
    ),
    KillPoint(
        "deleting-vm",
        killed_while_deleting,
        at=DvpScene.vm_terminating,
        what="VM terminating",
        hold=lambda s: s.hold(sim.VM_DELETE),
        release=lambda s: s.release(sim.VM_DELETE),
    ),
    KillPoint(
        "deleting-disks",
        killed_while_deleting,
        at=DvpScene.disks_going,
        what="VM gone, disks terminating",
        hold=lambda s: s.hold(sim.DISK_DELETE, s.boot_disk),
        release=lambda s: s.release(sim.DISK_DELETE, s.boot_disk),
    ),
    KillPoint(
        "deleted-while-dead",
        deleted_while_dead,
        at=dvp_starting,
        what="VM starting",
        hold=lambda s: s.hold(sim.VM_RUNNING),
    ),
]


@dataclass
class DvpRig:
    worker: WorkerProcess
    parent: DvpParent
    task_queue: str
    parent_namespace: str
    cluster_uuid: str

    @contextlib.asynccontextmanager
    async def scenes(
        self, kube: Kube, namespace: str, client: Client
    ) -> AsyncIterator[Callable[[str], Scene]]:
        async with dvp_machines(
            kube,
            self.parent,
            namespace,
            parent_namespace=self.parent_namespace,
            cluster_uuid=self.cluster_uuid,
        ) as machines:
            machines.start_starter(client, self.task_queue, "faults")
            await asyncio.to_thread(machines.cluster)
            yield lambda name: DvpScene(name, self.worker, machines)


@contextlib.contextmanager
def dvp_rig(request: pytest.FixtureRequest, stack: LocalStack, log_dir: Path) -> Iterator[DvpRig]:
    parent: DvpParent = request.getfixturevalue("dvp_parent")
    parent_namespace = parent.new_namespace()
    cluster_uuid = str(uuid.uuid4())
    task_queue = f"faults-{uuid.uuid4().hex[:8]}"
    section = dvp_settings(parent, parent_namespace, cluster_uuid=cluster_uuid)
    env = worker_env(
        stack_settings(stack, task_queue=task_queue, cluster="faults"),
        stack,
        {"CLOUDLOOP_PROVIDER": "dvp"},
        section_env("dvp", section),
    )
    yield DvpRig(WorkerProcess(env, log_dir), parent, task_queue, parent_namespace, cluster_uuid)


# -- zVirt: the oVirt Engine emulator --------------------------------------------------------
CLOUD_INIT = b"#cloud-config\nruncmd: [echo zvirt-faults]\n"
#: Each step a kill aims at lasts this long in the emulator (a kill lands within milliseconds).
STEP_S = 1.2
DELAYS = Delays(
    clone_s=STEP_S,
    boot_s=STEP_S,
    guest_ip_s=0.2,
    shutdown_s=STEP_S,
    disk_resize_s=STEP_S,
    remove_s=STEP_S,
)


@pytest.fixture(scope="module")
def slow_ovirt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OvirtEmulatorEndpoint]:
    """The oVirt Engine emulator alone, with delays long enough to kill the worker mid-step."""
    state = tmp_path_factory.mktemp("zvirt-faults-ovirt")
    with ovirt_engine(state, password="faults-engine", delays=DELAYS) as endpoint:
        yield endpoint


class ZvirtScene(Scene):
    def __init__(
        self,
        name: str,
        worker: WorkerProcess,
        kube: Kube,
        namespace: str,
        endpoint: OvirtEmulatorEndpoint,
    ) -> None:
        super().__init__(name, worker)
        self.kube, self.namespace, self.endpoint = kube, namespace, endpoint
        self.admin = OvirtEmulatorAdmin(endpoint.admin_url)
        self.seen_disks: set[str] = set()  # this machine's disks, whenever the VM was seen

    # -- the cloud -------------------------------------------------------------------------
    def vms(self) -> list[dict[str, Any]]:
        """Every VM of this name in the emulator."""
        return [vm for vm in self.admin.vms() if vm["name"] == self.name]

    def vm(self) -> dict[str, Any] | None:
        return self.admin.vm(self.name)

    def vm_status_is(self, status: str) -> bool:
        return str((self.vm() or {}).get("status", "")) == status

    def vm_id(self) -> str:
        return str((self.vm() or {}).get("id", ""))

    def disk_ids(self) -> set[str]:
        return {a["disk_id"] for a in (self.vm() or {}).get("disk_attachments", [])}

    def note_cloud(self) -> None:
        self.seen_disks |= self.disk_ids()

    def disks(self) -> dict[str, dict[str, Any]]:
        return {disk["id"]: disk for disk in self.admin.disks()}

    def orphaned_disks(self) -> list[dict[str, Any]]:
        """Disks attached to no VM (this spec has no data disk: none may be left over)."""
        return [disk for disk in self.admin.disks() if disk["attached_to"] is None]

    def boot_disk_resizing(self) -> bool:
        """Cloned and down, the boot disk being grown to rootDiskSizeGb: not started yet."""
        vm = self.vm() or {}
        disks = self.disks()
        return vm.get("status") == "down" and any(
            disks.get(a["disk_id"], {}).get("status") == "locked"
            for a in vm.get("disk_attachments", [])
        )

    def removing(self) -> bool:
        """Down and being removed (``image_locked``), its boot disk locked, not yet gone."""
        vm = self.vm() or {}
        return vm.get("status") == "image_locked" and bool(self.seen_disks & self.disks().keys())

    # -- the ZvirtMachine ------------------------------------------------------------------
    def infra(self) -> InfraObject | None:
        return self.kube.get(ZVIRT_KINDS.machine, self.name, self.namespace)

    def ready(self) -> InfraObject | None:
        obj = self.infra() or {}
        status = obj.get("status") or {}
        provisioned = (status.get("initialization") or {}).get("provisioned")
        return obj if status.get("ready") and provisioned else None

    async def create(self) -> None:
        # The template's disk is 10 GiB: it is grown to rootDiskSizeGb before the start.
        spec = machine_spec(
            self.endpoint, cpu={"sockets": 1, "cores": 2, "threads": 1}, nicName="nic1"
        )

        def make() -> None:
            secret = f"{self.name}-bootstrap"
            machine_fixtures.create_bootstrap_secret(self.kube, self.namespace, secret, CLOUD_INIT)
            machine_fixtures.create_machine(
                self.kube,
                self.namespace,
                self.name,
                cluster="c1",
                kinds=ZVIRT_KINDS,
                spec=spec,
                bootstrap_secret=secret,
            )

        await asyncio.to_thread(make)

    async def provisioned(self) -> None:
        """Ready, with exactly one VM of this name, running, its boot disk its only disk."""
        infra = await eventually(self.ready, timeout=CONVERGE_TIMEOUT, what=f"{self.name} ready")
        vms = await asyncio.to_thread(self.vms)
        assert len(vms) == 1, vms
        [vm] = vms
        assert vm["status"] == "up"
        assert infra["spec"]["providerID"] == f"zvirt://{vm['id']}"
        assert infra["status"]["initialization"]["provisioned"] is True
        assert [a["bootable"] for a in vm["disk_attachments"]] == [True]
        assert vm["starts"] == 1  # started once, never again by the next worker
        assert await asyncio.to_thread(self.orphaned_disks) == []
        await asyncio.to_thread(self.note_cloud)

    async def delete(self) -> None:
        await asyncio.to_thread(self.kube.delete, ZVIRT_KINDS.machine, self.name, self.namespace)

    async def deleted(self) -> None:
        """The finalizer goes last: when the ZvirtMachine is gone, so are the VM and its disks."""

        def gone() -> bool:
            infra = self.infra()
            if infra is not None:
                assert ZVIRT_KINDS.finalizer in infra["metadata"].get("finalizers", [])
            return infra is None

        await eventually(gone, timeout=CONVERGE_TIMEOUT, what=f"{self.name} deleted")
        assert await asyncio.to_thread(self.vms) == []
        remaining = await asyncio.to_thread(self.disks)
        disk_ids = self.seen_disks
        assert disk_ids and not disk_ids & remaining.keys(), (disk_ids, remaining)
        assert await asyncio.to_thread(self.orphaned_disks) == []


async def zvirt_not_started(scene: ZvirtScene) -> None:
    assert (scene.vm() or {}).get("starts") == 0


async def zvirt_up_while_dead(scene: ZvirtScene) -> None:
    """The VM comes up, with its IP, while no worker runs: the next one reports it and never
    starts it again."""
    await eventually(lambda: (scene.vm() or {}).get("ips"), what="VM up with an IP")
    assert scene.ready() is None


def zvirt_powering_up(scene: ZvirtScene) -> bool:
    return scene.vm_status_is("powering_up")


ZVIRT_KILL_POINTS: list[KillPoint[ZvirtScene]] = [
    KillPoint(
        "cloning",
        killed_while_provisioning,
        at=lambda s: s.vm_status_is("image_locked"),
        what="VM cloning (image_locked)",
    ),
    KillPoint(
        "down-before-start",
        killed_while_provisioning,
        at=ZvirtScene.boot_disk_resizing,
        what="VM down, boot disk resizing",
        while_dead=zvirt_not_started,
    ),
    KillPoint(
        "up-not-reported",
        killed_while_provisioning,
        at=zvirt_powering_up,
        what="VM powering up (started, the create activity polling it)",
        while_dead=zvirt_up_while_dead,
    ),
    KillPoint(
        "deleting-powering-down",
        killed_while_deleting,
        at=lambda s: s.vm_status_is("powering_down"),
        what="VM powering down",
    ),
    KillPoint(
        "deleting-removing",
        killed_while_deleting,
        at=ZvirtScene.removing,
        what="VM being removed, boot disk still there",
    ),
    KillPoint(
        "deleted-while-dead",
        deleted_while_dead,
        at=zvirt_powering_up,
        what="VM powering up",
    ),
]


@dataclass
class ZvirtRig:
    worker: WorkerProcess
    task_queue: str
    endpoint: OvirtEmulatorEndpoint

    @contextlib.asynccontextmanager
    async def scenes(
        self, kube: Kube, namespace: str, client: Client
    ) -> AsyncIterator[Callable[[str], Scene]]:
        await asyncio.to_thread(machine_fixtures.create_cluster, kube, namespace, "c1", ZVIRT_KINDS)
        starter = MachineStarter(
            kube,
            client,
            kinds=ZVIRT_KINDS,
            task_queue=self.task_queue,
            cluster="zfaults",
            namespace=namespace,
            timings=TEST_TIMINGS,
        )
        task = asyncio.create_task(starter.run())
        try:
            yield lambda name: ZvirtScene(name, self.worker, kube, namespace, self.endpoint)
        finally:
            starter.stop()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            # Leave nothing that blocks the namespace's deletion.
            items = await asyncio.to_thread(kube.list, ZVIRT_KINDS.machine, namespace)
            for obj in items.get("items", []):
                if obj["metadata"].get("finalizers"):
                    await asyncio.to_thread(
                        kube.patch,
                        ZVIRT_KINDS.machine,
                        obj["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                        namespace,
                    )


@contextlib.contextmanager
def zvirt_rig(
    request: pytest.FixtureRequest, stack: LocalStack, log_dir: Path
) -> Iterator[ZvirtRig]:
    endpoint: OvirtEmulatorEndpoint = request.getfixturevalue("slow_ovirt")
    task_queue = f"zfaults-{uuid.uuid4().hex[:8]}"
    # A graceful shutdown is given all of its (simulated) time: the kill lands during it.
    section = zvirt_settings(endpoint, **{**QUICK_TIMINGS, "shutdown_timeout_s": 30})
    env = worker_env(
        stack_settings(stack, task_queue=task_queue, cluster="zfaults"),
        stack,
        {"CLOUDLOOP_PROVIDER": "zvirt"},
        section_env("zvirt", section),
    )
    yield ZvirtRig(WorkerProcess(env, log_dir), task_queue, endpoint)


# -- OpenStack: the OpenStack emulator --------------------------------------------------------
OS_STEP_S = 1.2
OS_DELAYS = dataclasses.replace(OS_QUICK, server_build_s=OS_STEP_S, server_delete_s=OS_STEP_S)


@pytest.fixture(scope="module")
def slow_openstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenStackEmulatorEndpoint]:
    """The OpenStack emulator alone, servers building and deleting long enough to kill mid-step."""
    state = tmp_path_factory.mktemp("openstack-faults")
    with openstack_emulator(state, delays=OS_DELAYS) as endpoint:
        yield endpoint


class OpenStackScene(Scene):
    """A server booting from its root volume ``<name>-root`` with one port ``<name>-0``."""

    def __init__(
        self,
        name: str,
        worker: WorkerProcess,
        kube: Kube,
        namespace: str,
        endpoint: OpenStackEmulatorEndpoint,
    ) -> None:
        super().__init__(name, worker)
        self.kube, self.namespace = kube, namespace
        self.admin = OpenStackEmulatorAdmin(endpoint.admin_url)
        self.seen: dict[str, set[str]] = {"ports": set(), "volumes": set()}

    # -- the cloud -------------------------------------------------------------------------
    def cloud(self) -> dict[str, list[dict[str, Any]]]:
        """This machine's servers, ports and volumes (by name, under any owner)."""
        state = self.admin.state()
        return {
            "servers": [s for s in state["servers"] if s["name"] == self.name],
            "ports": [p for p in state["ports"] if p["name"].startswith(f"{self.name}-")],
            "volumes": [v for v in state["volumes"] if v["name"] == f"{self.name}-root"],
        }

    def server(self) -> dict[str, Any]:
        return next(iter(self.cloud()["servers"]), {})

    def vm_id(self) -> str:
        return str(self.server().get("id", ""))

    def port_ids(self) -> set[str]:
        return {p["id"] for p in self.cloud()["ports"]}

    def note_cloud(self) -> None:
        found = self.cloud()
        self.seen["ports"] |= {p["id"] for p in found["ports"]}
        self.seen["volumes"] |= {v["id"] for v in found["volumes"]}

    def server_status_is(self, status: str) -> bool:
        return self.server().get("status") == status

    def server_deleting(self) -> bool:
        return self.server().get("_task_state") == "deleting"

    def ports_without_server(self) -> bool:
        found = self.cloud()
        return bool(found["ports"]) and not found["servers"]

    # -- the OpenStackMachine --------------------------------------------------------------
    def infra(self) -> InfraObject | None:
        return self.kube.get(OPENSTACK_KINDS.machine, self.name, self.namespace)

    def ready(self) -> InfraObject | None:
        obj = self.infra() or {}
        status = obj.get("status") or {}
        provisioned = (status.get("initialization") or {}).get("provisioned")
        return obj if status.get("ready") and provisioned else None

    async def create(self) -> None:
        spec = os_machine_spec(rootVolume={"sizeGiB": 1})

        def make() -> None:
            secret = f"{self.name}-bootstrap"
            machine_fixtures.create_bootstrap_secret(self.kube, self.namespace, secret, CLOUD_INIT)
            machine_fixtures.create_machine(
                self.kube,
                self.namespace,
                self.name,
                cluster="c1",
                kinds=OPENSTACK_KINDS,
                spec=spec,
                bootstrap_secret=secret,
            )

        await asyncio.to_thread(make)

    async def provisioned(self) -> None:
        """Ready, with exactly one server, one port on it and one root volume attached to it."""
        infra = await eventually(self.ready, timeout=CONVERGE_TIMEOUT, what=f"{self.name} ready")
        found = await asyncio.to_thread(self.cloud)
        assert len(found["servers"]) == 1, found["servers"]
        [server] = found["servers"]
        assert server["status"] == "ACTIVE"
        assert infra["spec"]["providerID"] == f"openstack:///{server['id']}"
        assert infra["spec"]["instanceID"] == server["id"]
        assert [(p["name"], p["device_id"]) for p in found["ports"]] == [
            (f"{self.name}-0", server["id"])
        ]
        assert [[a["server_id"] for a in v["attachments"]] for v in found["volumes"]] == [
            [server["id"]]
        ]
        await asyncio.to_thread(self.note_cloud)

    async def delete(self) -> None:
        await asyncio.to_thread(
            self.kube.delete, OPENSTACK_KINDS.machine, self.name, self.namespace
        )

    async def deleted(self) -> None:
        """The finalizer goes last: when the OpenStackMachine is gone, so is everything."""

        def gone() -> bool:
            infra = self.infra()
            if infra is not None:
                assert OPENSTACK_KINDS.finalizer in infra["metadata"].get("finalizers", [])
            return infra is None

        await eventually(gone, timeout=CONVERGE_TIMEOUT, what=f"{self.name} deleted")
        found = await asyncio.to_thread(self.cloud)
        assert found == {"servers": [], "ports": [], "volumes": []}, found
        assert self.seen["ports"] and self.seen["volumes"], self.seen


async def os_ports_before_server(scene: OpenStackScene, point: KillPoint[OpenStackScene]) -> None:
    """Killed with the port made and no server yet: the next worker adopts the port (the same
    one) and makes the server."""
    point.hold(scene)
    await scene.create()
    await scene.kill_at(point)
    ports = await asyncio.to_thread(scene.port_ids)
    await scene.restart_worker()
    await scene.provisioned()
    assert await asyncio.to_thread(scene.port_ids) == ports  # adopted, not made again
    await scene.delete()
    await scene.deleted()


async def os_active_while_dead(scene: OpenStackScene) -> None:
    """The server comes up while no worker runs: the next one reports it."""
    await eventually(functools.partial(scene.server_status_is, "ACTIVE"), what="server ACTIVE")
    assert scene.ready() is None


def os_slow(service: str, method: str, route: str) -> Callable[[OpenStackScene], None]:
    """Hold a step: the next matching request answers only after a step's time."""

    def hold(scene: OpenStackScene) -> None:
        scene.admin.inject(service, 0, method=method, route=route, latency_s=OS_STEP_S * 2)

    return hold


def os_building(scene: OpenStackScene) -> bool:
    return scene.server_status_is("BUILD")


OPENSTACK_KILL_POINTS: list[KillPoint[OpenStackScene]] = [
    KillPoint(
        "ports-no-server",
        os_ports_before_server,
        at=OpenStackScene.ports_without_server,
        what="port made, no server yet (tagging the port)",
        hold=os_slow("network", "PUT", r"/ports/.*/tags$"),
    ),
    KillPoint(
        "server-build",
        killed_while_provisioning,
        at=os_building,
        what="server BUILD (the create activity polling it)",
    ),
    KillPoint(
        "active-not-reported",
        killed_while_provisioning,
        at=os_building,
        what="server BUILD; it becomes ACTIVE while no worker runs",
        while_dead=os_active_while_dead,
    ),
    KillPoint(
        "deleting-server",
        killed_while_deleting,
        at=OpenStackScene.server_deleting,
        what="server deleting",
    ),
    KillPoint(
        "deleting-ports",
        killed_while_deleting,
        at=OpenStackScene.ports_without_server,
        what="server gone, its port and root volume still there",
        hold=os_slow("network", "DELETE", r"/ports/"),
    ),
    KillPoint(
        "deleted-while-dead",
        deleted_while_dead,
        at=os_building,
        what="server BUILD",
    ),
]


@dataclass
class OpenStackRig:
    worker: WorkerProcess
    task_queue: str
    endpoint: OpenStackEmulatorEndpoint

    @contextlib.asynccontextmanager
    async def scenes(
        self, kube: Kube, namespace: str, client: Client
    ) -> AsyncIterator[Callable[[str], Scene]]:
        await asyncio.to_thread(
            machine_fixtures.create_cluster, kube, namespace, "c1", OPENSTACK_KINDS
        )
        starter = MachineStarter(
            kube,
            client,
            kinds=OPENSTACK_KINDS,
            task_queue=self.task_queue,
            cluster="osfaults",
            namespace=namespace,
            timings=TEST_TIMINGS,
        )
        task = asyncio.create_task(starter.run())
        try:
            yield lambda name: OpenStackScene(name, self.worker, kube, namespace, self.endpoint)
        finally:
            starter.stop()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            items = await asyncio.to_thread(kube.list, OPENSTACK_KINDS.machine, namespace)
            for obj in items.get("items", []):
                if obj["metadata"].get("finalizers"):
                    await asyncio.to_thread(
                        kube.patch,
                        OPENSTACK_KINDS.machine,
                        obj["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                        namespace,
                    )
            OpenStackEmulatorAdmin(self.endpoint.admin_url).clear_faults()


@contextlib.contextmanager
def openstack_rig(
    request: pytest.FixtureRequest, stack: LocalStack, log_dir: Path
) -> Iterator[OpenStackRig]:
    endpoint: OpenStackEmulatorEndpoint = request.getfixturevalue("slow_openstack")
    task_queue = f"osfaults-{uuid.uuid4().hex[:8]}"
    section = openstack_settings(endpoint, router=False, **OS_QUICK_TIMINGS)
    env = worker_env(
        stack_settings(stack, task_queue=task_queue, cluster="osfaults"),
        stack,
        {"CLOUDLOOP_PROVIDER": "openstack"},
        section_env("openstack", section),
    )
    yield OpenStackRig(WorkerProcess(env, log_dir), task_queue, endpoint)


# -- AWS: moto behind the dev stack's AWS front ------------------------------------------------
#: How long the front holds a RunInstances answer, and moto keeps an instance pending or
#: shutting-down, at the step a kill aims at.
AWS_STEP_S = 2.0


class AwsScene(Scene):
    def __init__(
        self, name: str, worker: WorkerProcess, kube: Kube, namespace: str, rig: AwsRig
    ) -> None:
        super().__init__(name, worker)
        self.kube, self.namespace, self.rig = kube, namespace, rig
        self.uid = ""

    # -- the cloud -------------------------------------------------------------------------
    def _named(self, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [o for o in objects if {"Key": "Name", "Value": self.name} in o.get("Tags", [])]

    def instances(self) -> list[dict[str, Any]]:
        """Every instance of this name, any machine UID, not yet terminated."""
        return self._named(aws_backend.machine_instances(self.rig.ec2, self.rig.cluster))

    def volumes(self) -> list[dict[str, Any]]:
        """Every volume of this name, any machine UID, not yet deleted."""
        return self._named(aws_backend.machine_volumes(self.rig.ec2, self.rig.cluster))

    def state_is(self, state: str) -> bool:
        return any(i["State"]["Name"] == state for i in self.instances())

    def vm_id(self) -> str:
        return next((str(i["InstanceId"]) for i in self.instances()), "")

    def note_cloud(self) -> None:
        """Nothing to remember: instances and volumes carry the machine's name and UID."""

    # -- the AWSMachine --------------------------------------------------------------------
    def infra(self) -> InfraObject | None:
        return self.kube.get(AWS_KINDS.machine, self.name, self.namespace)

    def ready(self) -> InfraObject | None:
        obj = self.infra() or {}
        status = obj.get("status") or {}
        provisioned = (status.get("initialization") or {}).get("provisioned")
        return obj if status.get("ready") and provisioned else None

    def launched_not_reported(self) -> bool:
        """An instance exists, the AWSMachine has no providerID yet."""
        return bool(self.vm_id()) and not ((self.infra() or {}).get("spec") or {}).get("providerID")

    async def create(self) -> None:
        spec = {"instanceType": "t3.micro", "subnet": {"id": self.rig.subnet}}

        def make() -> None:
            secret = f"{self.name}-bootstrap"
            machine_fixtures.create_bootstrap_secret(self.kube, self.namespace, secret, CLOUD_INIT)
            infra = machine_fixtures.create_machine(
                self.kube,
                self.namespace,
                self.name,
                cluster="c1",
                kinds=AWS_KINDS,
                spec=spec,
                bootstrap_secret=secret,
            )
            self.uid = str(infra["metadata"]["uid"])

        await asyncio.to_thread(make)

    async def provisioned(self) -> None:
        """Ready, exactly one instance of this name (this machine's), running, one volume."""
        infra = await eventually(self.ready, timeout=CONVERGE_TIMEOUT, what=f"{self.name} ready")
        instances = await asyncio.to_thread(self.instances)
        assert len(instances) == 1, instances
        [instance] = instances
        assert instance["State"]["Name"] == "running"
        zone = instance["Placement"]["AvailabilityZone"]
        assert infra["spec"]["providerID"] == f"aws:///{zone}/{instance['InstanceId']}"
        assert infra["spec"]["instanceID"] == instance["InstanceId"]
        assert {"Key": "cloudloop.io/machine-uid", "Value": self.uid} in instance["Tags"]
        volumes = await asyncio.to_thread(self.volumes)
        assert [v["State"] for v in volumes] == ["in-use"], volumes  # its root volume only

    async def delete(self) -> None:
        await asyncio.to_thread(self.kube.delete, AWS_KINDS.machine, self.name, self.namespace)

    async def deleted(self) -> None:
        """The finalizer goes last: when the AWSMachine is gone, so are the instance and its
        root volume."""

        def gone() -> bool:
            infra = self.infra()
            if infra is not None:
                assert AWS_KINDS.finalizer in infra["metadata"].get("finalizers", [])
            return infra is None

        await eventually(gone, timeout=CONVERGE_TIMEOUT, what=f"{self.name} deleted")
        assert await asyncio.to_thread(self.instances) == []
        assert await asyncio.to_thread(self.volumes) == []


def aws_hold_run_answer(scene: AwsScene) -> None:
    aws_front.hold_answers(scene.rig.endpoint, RunInstances=AWS_STEP_S)


def aws_hold_pending(scene: AwsScene) -> None:
    aws_front.ec2_lifecycle(scene.rig.endpoint, pending_s=AWS_STEP_S)


def aws_hold_shutting_down(scene: AwsScene) -> None:
    aws_front.ec2_lifecycle(scene.rig.endpoint, shutting_down_s=AWS_STEP_S)


def aws_release(scene: AwsScene) -> None:
    aws_front.hold_answers(scene.rig.endpoint)
    aws_front.ec2_lifecycle(scene.rig.endpoint)


async def aws_running_while_dead(scene: AwsScene) -> None:
    """The instance comes up while no worker runs: ready is not written until the next one."""
    await eventually(lambda: scene.state_is("running"), what="instance running")
    assert scene.ready() is None


def aws_pending(scene: AwsScene) -> bool:
    return scene.state_is("pending")


AWS_KILL_POINTS: list[KillPoint[AwsScene]] = [
    KillPoint(
        "run-not-answered",
        killed_while_provisioning,
        at=AwsScene.launched_not_reported,
        what="RunInstances carried out, its answer held by the front",
        hold=aws_hold_run_answer,
        release=aws_release,
    ),
    KillPoint(
        "running-not-reported",
        killed_while_provisioning,
        at=aws_pending,
        what="instance pending; it comes up while no worker runs",
        hold=aws_hold_pending,
        while_dead=aws_running_while_dead,
        release=aws_release,
    ),
    KillPoint(
        "shutting-down",
        killed_while_deleting,
        at=lambda s: s.state_is("shutting-down"),
        what="instance shutting down, its root volume still there",
        hold=aws_hold_shutting_down,
        release=aws_release,
    ),
    KillPoint(
        "deleted-while-dead",
        deleted_while_dead,
        at=aws_pending,
        what="instance pending",
        hold=aws_hold_pending,
    ),
]


@dataclass
class AwsRig:
    worker: WorkerProcess
    task_queue: str
    endpoint: str
    subnet: str
    #: The worker's cluster name: its instances' cluster and role tags (one per rig).
    cluster: str

    @functools.cached_property
    def ec2(self) -> Any:
        return aws_backend.aws_client("ec2", self.endpoint)

    @contextlib.asynccontextmanager
    async def scenes(
        self, kube: Kube, namespace: str, client: Client
    ) -> AsyncIterator[Callable[[str], Scene]]:
        await asyncio.to_thread(machine_fixtures.create_cluster, kube, namespace, "c1", AWS_KINDS)
        starter = MachineStarter(
            kube,
            client,
            kinds=AWS_KINDS,
            task_queue=self.task_queue,
            cluster=self.cluster,
            namespace=namespace,
            timings=TEST_TIMINGS,
        )
        task = asyncio.create_task(starter.run())
        try:
            yield lambda name: AwsScene(name, self.worker, kube, namespace, self)
        finally:
            starter.stop()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            # The stack's front and moto serve other tests too: no hold outlives the test.
            aws_front.hold_answers(self.endpoint)
            aws_front.ec2_lifecycle(self.endpoint)
            items = await asyncio.to_thread(kube.list, AWS_KINDS.machine, namespace)
            for obj in items.get("items", []):
                if obj["metadata"].get("finalizers"):
                    await asyncio.to_thread(
                        kube.patch,
                        AWS_KINDS.machine,
                        obj["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                        namespace,
                    )


@contextlib.contextmanager
def aws_rig(request: pytest.FixtureRequest, stack: LocalStack, log_dir: Path) -> Iterator[AwsRig]:
    cluster = f"afaults-{uuid.uuid4().hex[:6]}"
    made = aws_backend.machine_cloud(stack.aws_endpoint, cluster)
    task_queue = f"afaults-{uuid.uuid4().hex[:8]}"
    env = worker_env(
        stack_settings(stack, task_queue=task_queue, cluster=cluster),
        stack,
        {"CLOUDLOOP_PROVIDER": "aws"},
        section_env("aws", made.settings(stack.aws_endpoint)),
    )
    subnet = made.subnets[aws_backend.ZONES[0]]
    yield AwsRig(WorkerProcess(env, log_dir), task_queue, stack.aws_endpoint, subnet, cluster)


# -- vSphere: vcsim (govmomi v0.46.3) ------------------------------------------------------------
VSPHERE_CLOUD_INIT = b"#cloud-config\nruncmd: [echo vsphere-faults]\n"
#: vcsim's ``descriptionId`` of a reconfigure task (vCenter's is ``VirtualMachine.reconfigure``).
RECONFIGURE = "VirtualMachine.reconfigVm"
#: vcsim runs these tasks (by task name) for STEP_S; reads are not held (``LockHandoff: 0``).
VSPHERE_DELAYS = (
    *(
        (task, int(STEP_S * 1000))
        for task in ("CloneVm", "ReconfigVm", "PowerOn", "PowerOff", "Destroy")
    ),
    ("LockHandoff", 0),
)


@pytest.fixture(scope="module")
def slow_vcsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VcsimEndpoint]:
    """vcsim whose clone, reconfigure, power and destroy tasks last long enough to kill mid-step."""
    state = tmp_path_factory.mktemp("vsphere-faults-vcsim")
    with vcsim_server(state, VcsimOptions(method_delays=VSPHERE_DELAYS)) as endpoint:
        yield endpoint


class VsphereScene(Scene):
    def __init__(
        self, name: str, worker: WorkerProcess, kube: Kube, namespace: str, made: VcsimMachines
    ) -> None:
        super().__init__(name, worker)
        self.kube, self.namespace, self.made = kube, namespace, made

    def vm(self) -> tuple[str, dict[str, Any]]:
        return next(iter(self.made.named(self.name).items()), ("", {}))

    def vm_id(self) -> str:
        return str(self.vm()[1].get("config.uuid") or "")

    def power_state_is(self, state: str) -> bool:
        return self.vm()[1].get("runtime.powerState") == state

    def running(self, task: str) -> bool:
        return self.made.running(self.name, task)

    def note_cloud(self) -> None:
        """Nothing to remember: vcsim's disks are the VM's own, they go with it."""

    def infra(self) -> InfraObject | None:
        return self.kube.get(VSPHERE_KINDS.machine, self.name, self.namespace)

    def ready(self) -> InfraObject | None:
        obj = self.infra() or {}
        status = obj.get("status") or {}
        provisioned = (status.get("initialization") or {}).get("provisioned")
        return obj if status.get("ready") and provisioned else None

    async def create(self) -> None:
        def make() -> None:
            secret = f"{self.name}-bootstrap"
            machine_fixtures.create_bootstrap_secret(
                self.kube, self.namespace, secret, VSPHERE_CLOUD_INIT
            )
            machine_fixtures.create_machine(
                self.kube,
                self.namespace,
                self.name,
                cluster="c1",
                kinds=VSPHERE_KINDS,
                spec=vsphere_backend.machine_spec(diskGiB=30),
                bootstrap_secret=secret,
            )

        await asyncio.to_thread(make)

    async def provisioned(self) -> None:
        """Ready, with exactly one VM (every VM made is this one), on, powered on once."""
        infra = await eventually(self.ready, timeout=CONVERGE_TIMEOUT, what=f"{self.name} ready")
        made = await asyncio.to_thread(self.made.made)
        assert [p["name"] for p in made.values()] == [self.name], made  # nothing orphaned
        [(moref, vm)] = made.items()
        assert vm["runtime.powerState"] == "poweredOn"
        assert vm["config.instanceUuid"] == infra["metadata"]["uid"]
        assert infra["spec"]["providerID"] == f"vsphere://{vm['config.uuid'].lower()}"
        tasks = await asyncio.to_thread(self.made.tasks, moref)
        # Powered on once (a later worker's power-on of a VM already on fails, harmlessly).
        assert tasks.count(("VirtualMachine.powerOn", "success")) == 1, tasks

    async def delete(self) -> None:
        await asyncio.to_thread(self.kube.delete, VSPHERE_KINDS.machine, self.name, self.namespace)

    async def deleted(self) -> None:
        def gone() -> bool:
            infra = self.infra()
            if infra is not None:
                assert VSPHERE_KINDS.finalizer in infra["metadata"].get("finalizers", [])
            return infra is None

        await eventually(gone, timeout=CONVERGE_TIMEOUT, what=f"{self.name} deleted")
        assert await asyncio.to_thread(self.made.made) == {}  # no VM left, none orphaned


async def vsphere_not_powered_on(scene: VsphereScene) -> None:
    """The reconfigure finishes while no worker runs; nothing powers the VM on meanwhile."""
    await eventually(lambda: not scene.running(RECONFIGURE), what="reconfigured")
    assert scene.power_state_is("poweredOff")


async def vsphere_reported_while_dead(scene: VsphereScene) -> None:
    """The guest reports its IP while no worker runs: the next one reports it, never powers the
    VM on again."""
    await eventually(lambda: scene.vm()[1].get("guest.ipAddress"), what="the guest's IP")
    assert scene.ready() is None


def vsphere_on_not_reported(scene: VsphereScene) -> bool:
    return scene.power_state_is("poweredOn") and not scene.vm()[1].get("guest.ipAddress")


async def vsphere_killed_while_cloning(scene: VsphereScene, point: KillPoint[VsphereScene]) -> None:
    """As :func:`killed_while_provisioning`, but the VM does not exist while its clone runs: the
    next worker waits for that clone and adopts its VM; one clone was ever started."""
    await scene.create()
    await scene.kill_at(point)
    await scene.restart_worker()
    await scene.provisioned()
    assert await asyncio.to_thread(scene.made.clones_of, scene.name) == 1
    await scene.delete()
    await scene.deleted()


VSPHERE_KILL_POINTS: list[KillPoint[VsphereScene]] = [
    KillPoint(
        "cloning",
        vsphere_killed_while_cloning,
        at=lambda s: not s.vm_id() and s.made.cloning(),
        what="the clone task running, no VM yet",
    ),
    KillPoint(
        "cloned-not-powered-on",
        killed_while_provisioning,
        at=lambda s: s.power_state_is("poweredOff") and s.running(RECONFIGURE),
        what="VM cloned, powered off, being reconfigured",
        while_dead=vsphere_not_powered_on,
    ),
    KillPoint(
        "powering-on",
        killed_while_provisioning,
        at=lambda s: s.running("VirtualMachine.powerOn"),
        what="VM powering on",
    ),
    KillPoint(
        "on-not-reported",
        killed_while_provisioning,
        at=vsphere_on_not_reported,
        what="VM powered on, its guest not reporting an IP yet",
        while_dead=vsphere_reported_while_dead,
    ),
    KillPoint(
        "deleting-powering-off",
        killed_while_deleting,
        at=lambda s: s.running("VirtualMachine.powerOff"),
        what="VM powering off",
    ),
    KillPoint(
        "deleting-destroying",
        killed_while_deleting,
        at=lambda s: s.running("VirtualMachine.destroy"),
        what="VM being destroyed",
    ),
    KillPoint(
        "deleted-while-dead",
        deleted_while_dead,
        at=vsphere_on_not_reported,
        what="VM powered on, not reported",
    ),
]


@dataclass
class VsphereRig:
    worker: WorkerProcess
    task_queue: str
    made: VcsimMachines

    @contextlib.asynccontextmanager
    async def scenes(
        self, kube: Kube, namespace: str, client: Client
    ) -> AsyncIterator[Callable[[str], Scene]]:
        await asyncio.to_thread(
            machine_fixtures.create_cluster, kube, namespace, "c1", VSPHERE_KINDS
        )
        starter = MachineStarter(
            kube,
            client,
            kinds=VSPHERE_KINDS,
            task_queue=self.task_queue,
            cluster="vfaults",
            namespace=namespace,
            timings=TEST_TIMINGS,
        )
        task = asyncio.create_task(starter.run())
        try:
            yield lambda name: VsphereScene(name, self.worker, kube, namespace, self.made)
        finally:
            starter.stop()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            items = await asyncio.to_thread(kube.list, VSPHERE_KINDS.machine, namespace)
            for obj in items.get("items", []):
                if obj["metadata"].get("finalizers"):
                    await asyncio.to_thread(
                        kube.patch,
                        VSPHERE_KINDS.machine,
                        obj["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                        namespace,
                    )


@contextlib.contextmanager
def vsphere_rig(
    request: pytest.FixtureRequest, stack: LocalStack, log_dir: Path
) -> Iterator[VsphereRig]:
    endpoint: VcsimEndpoint = request.getfixturevalue("slow_vcsim")
    task_queue = f"vfaults-{uuid.uuid4().hex[:8]}"
    section = vsphere_backend.vsphere_settings(endpoint, **vsphere_backend.QUICK_TIMINGS)
    env = worker_env(
        stack_settings(stack, task_queue=task_queue, cluster="vfaults"),
        stack,
        {"CLOUDLOOP_PROVIDER": "vsphere"},
        section_env("vsphere", section),
    )
    made = VcsimMachines(endpoint)
    try:
        # The guest boots for STEP_S before its Tools report an IP (the on-not-reported step).
        with GuestAgent(endpoint, boot_s=STEP_S):
            yield VsphereRig(WorkerProcess(env, log_dir), task_queue, made)
    finally:
        made.close()


# -- the test --------------------------------------------------------------------------------
RIGS: dict[str, Callable[[pytest.FixtureRequest, LocalStack, Path], Any]] = {
    "dvp": dvp_rig,
    "zvirt": zvirt_rig,
    "openstack": openstack_rig,
    "aws": aws_rig,
    "vsphere": vsphere_rig,
}
KILL_POINTS: dict[str, list[Any]] = {
    "dvp": DVP_KILL_POINTS,
    "zvirt": ZVIRT_KILL_POINTS,
    "openstack": OPENSTACK_KILL_POINTS,
    "aws": AWS_KILL_POINTS,
    "vsphere": VSPHERE_KILL_POINTS,
}


@pytest.fixture(scope="module")
def rig(
    request: pytest.FixtureRequest, stack: LocalStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Rig]:
    """The provider's backend and one worker process for every scenario on it."""
    provider: str = request.param
    with RIGS[provider](
        request, stack, tmp_path_factory.mktemp(f"{provider}-fault-workers")
    ) as made:
        made.worker.start()
        try:
            yield made
        finally:
            made.worker.stop()


@pytest.fixture
async def scenes(
    rig: Rig, kube: Kube, namespace: str, capi_crds: None, client: Client
) -> AsyncIterator[Callable[[str], Scene]]:
    """The machine starter for this test's namespace, feeding the rig's worker process."""
    if not rig.worker.running:  # an earlier scenario failed while it was down
        await asyncio.to_thread(rig.worker.start)
    async with rig.scenes(kube, namespace, client) as make:
        yield make


@pytest.mark.parametrize(
    ("rig", "point"),
    [
        pytest.param(provider, point, id=f"{provider}-{point.id}")
        for provider, points in KILL_POINTS.items()
        for point in points
    ],
    indirect=["rig"],
)
async def test_worker_sigkill_converges(
    scenes: Callable[[str], Scene], point: KillPoint[Any]
) -> None:
    scene = scenes(point.id)
    await point.flow(scene, point)


@pytest.mark.parametrize("rig", ["aws"], indirect=True)
async def test_aws_quota_is_reported_then_retried(scenes: Callable[[str], Scene]) -> None:
    """EC2 refuses the launch for quota (the front's fault switch; moto never does): every
    attempt of the create activity fails, the AWSMachine shows the cloud's message in a Warning
    Event and its condition, then the workflow retries on its own and gets one instance."""
    from cloudloop.kube.resources import EVENTS
    from workflows.machine import CREATE_RETRY

    scene = scenes("aws-quota")
    assert isinstance(scene, AwsScene)
    message = "You have requested more vCPU capacity than your current vCPU limit allows"
    attempts = CREATE_RETRY.maximum_attempts
    aws_front.inject_fault(scene.rig.endpoint, "RunInstances", "VcpuLimitExceeded", message,
                           count=attempts)  # fmt: skip
    await scene.create()

    def warned() -> Event | None:
        events = scene.kube.list(
            EVENTS, scene.namespace, fieldSelector=f"involvedObject.name={scene.name}"
        )
        return next(
            (
                e
                for e in events.get("items", [])
                if e.get("reason") == "ProvisioningFailed" and message in e.get("message", "")
            ),
            None,
        )

    event = await eventually(warned, timeout=CONVERGE_TIMEOUT, what="a ProvisioningFailed Event")
    assert event["type"] == "Warning" and "QuotaExceeded" in event["message"]
    assert scene.vm_id() == ""  # nothing launched meanwhile
    await scene.provisioned()  # retried automatically once the quota allows
    await scene.delete()
    await scene.deleted()
