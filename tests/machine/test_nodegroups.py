"""Node groups from InstanceClasses with the real Cluster API manager, on DVP, zVirt, OpenStack,
AWS and vSphere.

The user's path without Deckhouse: an InstanceClass in the cluster, ``cloudloop nodegroup render``
turns it into a MachineDeployment and its InfraMachineTemplate, ``kubectl apply`` and
``kubectl scale`` do the rest. The group goes 0 → 3 (the worker process is SIGKILLed while the
machines are being made, and a new one takes over) → 1 → a changed InstanceClass rolls it (a new
template, the machine replaced) → 0. A watcher samples the cloud all along: every VM, disk and
cloud-init object is created once and removed once, each Machine gets its VM and our providerID.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from cloudloop.cloud.aws.capi import INFRA_KINDS as AWS_KINDS
from cloudloop.cloud.aws.capi import NODE_TEMPLATES as AWS_TEMPLATES
from cloudloop.cloud.dvp import resources as dvp
from cloudloop.cloud.dvp.capi import INFRA_KINDS as DVP_KINDS
from cloudloop.cloud.dvp.capi import NODE_TEMPLATES as DVP_TEMPLATES
from cloudloop.cloud.openstack.capi import INFRA_KINDS as OPENSTACK_KINDS
from cloudloop.cloud.openstack.capi import NODE_TEMPLATES as OPENSTACK_TEMPLATES
from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT_KINDS
from cloudloop.cloud.zvirt.capi import NODE_TEMPLATES as ZVIRT_TEMPLATES
from cloudloop.kube.api import Kube
from cloudloop.rules import machine as capi
from devstack import gotools
from devstack.backends import section_env
from devstack.backends.zvirt import QUICK_TIMINGS, machine_spec, zvirt_settings
from devstack.devmode import stack_settings
from devstack.dvp_simulator import CLUSTER_IMAGE, VM_CLASS, DvpParent
from devstack.local import LocalStack
from devstack.ovirt_emulator import OvirtEmulatorEndpoint
from devstack.vcsim import VcsimEndpoint
from starters.machine import MachineStarter
from tests.helpers import eventually
from tests.machine import capi_objects
from tests.machine.dvp_machines import TEST_TIMINGS
from tests.support.workers import WorkerProcess, worker_env

pytestmark = [pytest.mark.stack, pytest.mark.fault]

TIMEOUT = 180.0
CLOUD_INIT = "#cloud-config\nruncmd: [echo node-group]\n"
GROUP = "workers"
DEPLOYMENT_LABEL = "cluster.x-k8s.io/deployment-name"
CLONED_FROM = "cluster.x-k8s.io/cloned-from-name"


# -- what the cloud held, sampled ----------------------------------------------------------------
@dataclass
class Tally:
    """Every cloud object (kind → id → name) seen while the group scaled, and those gone."""

    seen: dict[str, dict[str, str]] = field(default_factory=dict)
    gone: dict[str, set[str]] = field(default_factory=dict)
    machines: set[str] = field(default_factory=set)

    def record(self, snapshot: dict[str, dict[str, str]], machines: set[str]) -> None:
        self.machines |= machines
        for kind, objects in snapshot.items():
            seen = self.seen.setdefault(kind, {})
            seen.update(objects)
            self.gone.setdefault(kind, set()).update(set(seen) - set(objects))

    def names(self, kind: str) -> list[str]:
        return sorted(self.seen.get(kind, {}).values())


class Sampler:
    """Samples the cloud and the CAPI Machines every 50 ms in a thread."""

    def __init__(
        self, snapshot: Callable[[], dict[str, dict[str, str]]], machines: Callable[[], set[str]]
    ) -> None:
        self.snapshot, self.machines = snapshot, machines
        self.tally = Tally()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="sampler")

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with contextlib.suppress(Exception):
                self.tally.record(self.snapshot(), self.machines())

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.tally.record(self.snapshot(), self.machines())


# -- the clouds ----------------------------------------------------------------------------------
@dataclass
class Cloud:
    name: str
    kinds: capi.InfraKinds
    instance_class: dict[str, Any]
    #: The InstanceClass changed in a rollout field, and what the new VMs must show for it.
    change: Callable[[dict[str, Any]], None]
    vm_shows_change: Callable[[str], bool]
    env: dict[str, str]
    snapshot: Callable[[], dict[str, dict[str, str]]]
    provider_id: Callable[[str], str]
    #: The cloud's own create/delete request counts, if it keeps them (kind → (created, removed)).
    requests: Callable[[], dict[str, tuple[int, int]]] = lambda: {}
    #: Kinds every machine has exactly one of (name suffixes per machine for DVP).
    per_machine: dict[str, Callable[[str], str]] = field(default_factory=dict)
    #: Extra ``cloudloop nodegroup render`` arguments (zones, provider values).
    render_args: tuple[str, ...] = ()


@contextlib.contextmanager
def dvp_cloud(parent: DvpParent) -> Iterator[Cloud]:
    namespace = parent.new_namespace("ng")
    cluster_uuid = str(uuid.uuid4())

    def snapshot() -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for kind, resource in (
            ("vms", dvp.VIRTUAL_MACHINES),
            ("disks", dvp.VIRTUAL_DISKS),
            ("secrets", dvp.SECRETS),
        ):
            items = parent.kube.list(resource, namespace, labelSelector=dvp.MACHINE_UID_LABEL)
            found[kind] = {
                i["metadata"]["uid"]: i["metadata"]["name"] for i in items.get("items", [])
            }
        return found

    def vm_cores(name: str) -> int:
        vm = parent.kube.get(dvp.VIRTUAL_MACHINES, name, namespace) or {}
        return int(((vm.get("spec") or {}).get("cpu") or {}).get("cores") or 0)

    yield Cloud(
        name="dvp",
        kinds=DVP_KINDS,
        instance_class={
            "apiVersion": "deckhouse.io/v1alpha1",
            "kind": DVP_TEMPLATES.instance_class.kind,
            "metadata": {"name": f"ng-{uuid.uuid4().hex[:6]}"},
            "spec": {
                "virtualMachine": {
                    "cpu": {"cores": 2, "coreFraction": "50%"},
                    "memory": {"size": "2Gi"},
                    "virtualMachineClassName": VM_CLASS,
                },
                "rootDisk": {
                    "size": "10Gi",
                    "storageClass": "linstor-thin-r1",
                    "image": {"kind": "ClusterVirtualImage", "name": CLUSTER_IMAGE},
                },
            },
        },
        change=lambda spec: spec["virtualMachine"]["cpu"].update(cores=3),
        vm_shows_change=lambda name: vm_cores(name) == 3,
        env={
            "CLOUDLOOP_PROVIDER": "dvp",
            "CLOUDLOOP_DVP__KUBECONFIG": str(parent.kubeconfig),
            "CLOUDLOOP_DVP__NAMESPACE": namespace,
            "CLOUDLOOP_DVP__CLUSTER_UUID": cluster_uuid,
        },
        snapshot=snapshot,
        provider_id=lambda name: f"dvp://{name}",
        per_machine={
            "vms": lambda m: m,
            "disks": lambda m: f"{m}-boot",
            "secrets": lambda m: f"cloud-init-{m}",
        },
    )


@contextlib.contextmanager
def zvirt_cloud(endpoint: OvirtEmulatorEndpoint) -> Iterator[Cloud]:
    from devstack.ovirt_emulator import OvirtEmulatorAdmin

    admin = OvirtEmulatorAdmin(endpoint.admin_url)
    seed_disks = {d["id"] for d in admin.disks() if d.get("attached_to") is None}

    def snapshot() -> dict[str, dict[str, str]]:
        state = admin.state()
        return {
            "vms": {vm["id"]: vm["name"] for vm in state["vms"]},
            "disks": {d["id"]: d["name"] for d in state["disks"] if d["id"] not in seed_disks},
        }

    def requests() -> dict[str, tuple[int, int]]:
        counts = admin.request_counts()
        created = sum(n for k, n in counts.items() if k.startswith("POST ") and k.endswith("/vms"))
        removed = sum(
            n
            for k, n in counts.items()
            if k.startswith("DELETE ") and k.rstrip("}").endswith("/vms/{id")
        )
        return {"vms": (created, removed)}

    def provider_id(name: str) -> str:
        vm = admin.vm(name)
        return f"zvirt://{vm['id']}" if vm else ""

    def cores(name: str) -> int:
        return int(((admin.vm(name) or {}).get("cpu") or {}).get("cores") or 0)

    before = admin.request_counts()
    baseline = {k: v for k, v in before.items()}

    def requests_since() -> dict[str, tuple[int, int]]:
        now = requests()
        old_created = sum(
            n for k, n in baseline.items() if k.startswith("POST ") and k.endswith("/vms")
        )
        old_removed = sum(
            n
            for k, n in baseline.items()
            if k.startswith("DELETE ") and k.rstrip("}").endswith("/vms/{id")
        )
        created, removed = now["vms"]
        return {"vms": (created - old_created, removed - old_removed)}

    yield Cloud(
        name="zvirt",
        kinds=ZVIRT_KINDS,
        instance_class={
            "apiVersion": "deckhouse.io/v1",
            "kind": ZVIRT_TEMPLATES.instance_class.kind,
            "metadata": {"name": f"ng-{uuid.uuid4().hex[:6]}"},
            "spec": machine_spec(endpoint, numCPUs=2),
        },
        change=lambda spec: spec.update(numCPUs=3),
        vm_shows_change=lambda name: cores(name) == 3,
        env={
            "CLOUDLOOP_PROVIDER": "zvirt",
            **section_env("zvirt", zvirt_settings(endpoint, **QUICK_TIMINGS)),
        },
        snapshot=snapshot,
        provider_id=provider_id,
        requests=requests_since,
        per_machine={"vms": lambda m: m},
    )


@contextlib.contextmanager
def openstack_cloud(endpoint: Any) -> Iterator[Cloud]:
    """The OpenStack emulator: a server, its port ``<machine>-0`` and root volume ``-root`` per
    machine, each counted by the emulator as made and removed."""
    from devstack.backends.openstack import QUICK_TIMINGS, machine_spec, openstack_settings
    from devstack.openstack_emulator import OpenStackEmulatorAdmin

    admin = OpenStackEmulatorAdmin(endpoint.admin_url)
    admin.reset()
    spec = machine_spec()

    def snapshot() -> dict[str, dict[str, str]]:
        state = admin.state()
        return {
            "vms": {s["id"]: s["name"] for s in state["servers"]},
            "ports": {p["id"]: p["name"] for p in state["ports"] if p["name"]},
            "volumes": {v["id"]: v["name"] for v in state["volumes"]},
        }

    def requests() -> dict[str, tuple[int, int]]:
        counts = admin.counts()
        return {
            kind: (counts[f"{kind}_created"], counts[f"{kind}_removed"])
            for kind in ("servers", "ports", "volumes")
        }

    def server(name: str) -> dict[str, Any]:
        return next((s for s in admin.rows("servers") if s["name"] == name), {})

    def provider_id(name: str) -> str:
        found = server(name)
        return f"openstack:///{found['id']}" if found else ""

    yield Cloud(
        name="openstack",
        kinds=OPENSTACK_KINDS,
        instance_class={
            "apiVersion": "deckhouse.io/v1",
            "kind": OPENSTACK_TEMPLATES.instance_class.kind,
            "metadata": {"name": f"ng-{uuid.uuid4().hex[:6]}"},
            "spec": {
                "flavorName": spec["flavor"],
                "imageName": spec["image"]["filter"]["name"],
                "mainNetwork": "private",
                "additionalSecurityGroups": ["default"],
                "rootDiskSize": 2,
            },
        },
        change=lambda spec: spec.update(flavorName="m1.medium"),
        vm_shows_change=lambda name: server(name).get("_flavor_id") == "3",
        env={
            "CLOUDLOOP_PROVIDER": "openstack",
            **section_env("openstack", openstack_settings(endpoint, router=False, **QUICK_TIMINGS)),
        },
        snapshot=snapshot,
        provider_id=provider_id,
        requests=requests,
        per_machine={
            "vms": lambda m: m,
            "ports": lambda m: f"{m}-0",
            "volumes": lambda m: f"{m}-root",
        },
        render_args=("--zones=nova",),
    )


@contextlib.contextmanager
def aws_cloud(stack: LocalStack) -> Iterator[Cloud]:
    """moto behind the AWS front of the contract stack: instances and their root volumes."""
    from devstack.aws_front import stats
    from devstack.backends.aws import (
        ZONES,
        aws_client,
        machine_cloud,
        machine_instances,
        machine_volumes,
    )

    cluster = "nodegroups"  # the worker's cluster name: the instances' cluster and role tags
    made = machine_cloud(stack.aws_endpoint, cluster)
    ec2 = aws_client("ec2", stack.aws_endpoint)

    def snapshot() -> dict[str, dict[str, str]]:
        def name(obj: dict[str, Any]) -> str:
            return next((t["Value"] for t in obj.get("Tags", []) if t["Key"] == "Name"), "")

        return {
            "vms": {i["InstanceId"]: name(i) for i in machine_instances(ec2, cluster)},
            "volumes": {v["VolumeId"]: name(v) for v in machine_volumes(ec2, cluster)},
        }

    def answered(counts: dict[str, dict[str, int]], action: str) -> int:
        """Requests of ``action`` moto carried out (not refused by the front, not failed)."""
        key = f"ec2:{action}"
        failed = sum(
            n
            for group in ("refused", "errors")
            for k, n in counts[group].items()
            if k.startswith(f"{key}:")
        )
        return counts["requests"].get(key, 0) - failed

    baseline = stats(stack.aws_endpoint)

    def requests() -> dict[str, tuple[int, int]]:
        now = stats(stack.aws_endpoint)
        return {
            "vms": (
                answered(now, "RunInstances") - answered(baseline, "RunInstances"),
                answered(now, "TerminateInstances") - answered(baseline, "TerminateInstances"),
            )
        }

    def live(name: str) -> dict[str, Any]:
        return next(
            (
                i
                for i in machine_instances(ec2, cluster)
                if {"Key": "Name", "Value": name} in i.get("Tags", [])
                and i["State"]["Name"] != "shutting-down"
            ),
            {},
        )

    def provider_id(name: str) -> str:
        instance = live(name)
        if not instance:
            return ""
        return f"aws:///{instance['Placement']['AvailabilityZone']}/{instance['InstanceId']}"

    yield Cloud(
        name="aws",
        kinds=AWS_KINDS,
        instance_class={
            "apiVersion": "deckhouse.io/v1",
            "kind": AWS_TEMPLATES.instance_class.kind,
            "metadata": {"name": f"ng-{uuid.uuid4().hex[:6]}"},
            "spec": {"instanceType": "t3.micro", "diskSizeGb": 10},
        },
        change=lambda spec: spec.update(instanceType="t3.small"),
        vm_shows_change=lambda name: live(name).get("InstanceType") == "t3.small",
        env={
            "CLOUDLOOP_PROVIDER": "aws",
            **section_env("aws", made.settings(stack.aws_endpoint)),
        },
        snapshot=snapshot,
        provider_id=provider_id,
        requests=requests,
        per_machine={"vms": lambda m: m, "volumes": lambda m: m},  # one root volume each
        render_args=(f"--zones={ZONES[0]}",),
    )


@contextlib.contextmanager
def vsphere_cloud(endpoint: VcsimEndpoint) -> Iterator[Cloud]:
    from cloudloop.cloud.vsphere.capi import INFRA_KINDS as VSPHERE_KINDS
    from cloudloop.cloud.vsphere.capi import NODE_TEMPLATES as VSPHERE_TEMPLATES
    from devstack.backends import vsphere
    from devstack.vcsim_guest import GuestAgent
    from devstack.vcsim_inventory import ZoneLayout
    from tests.machine.vsphere_machines import VcsimMachines

    made = VcsimMachines(endpoint)
    with GuestAgent(endpoint):  # the guests' VMware Tools report an IP once powered on
        yield Cloud(
            name="vsphere",
            kinds=VSPHERE_KINDS,
            instance_class={
                "apiVersion": "deckhouse.io/v1",
                "kind": VSPHERE_TEMPLATES.instance_class.kind,
                "metadata": {"name": f"ng-{uuid.uuid4().hex[:6]}"},
                "spec": vsphere.instance_class_spec(),
            },
            change=lambda spec: spec.update(numCPUs=2),
            vm_shows_change=lambda name: made.cpus(name) == 2,
            env={
                "CLOUDLOOP_PROVIDER": "vsphere",
                **section_env(
                    "vsphere", vsphere.vsphere_settings(endpoint, **vsphere.QUICK_TIMINGS)
                ),
            },
            snapshot=made.snapshot,
            provider_id=made.provider_id,
            per_machine={"vms": lambda m: m},
            # a zone the stack's vcsim tags on a compute cluster (machines are placed by it)
            render_args=(f"--zones={sorted(ZoneLayout().zones)[0]}",),
        )
    made.close()


# -- the rig -------------------------------------------------------------------------------------
@dataclass
class Group:
    """One node group in one namespace: rendering, kubectl, the CAPI objects, the worker."""

    kube: Kube
    stack: LocalStack
    namespace: str
    cloud: Cloud
    worker: WorkerProcess
    workdir: Path
    deployment: str = ""

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [str(gotools.binary_path("kubectl")), f"--kubeconfig={self.stack.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def render_and_apply(self, replicas: int | None = None) -> list[dict[str, Any]]:
        """``cloudloop nodegroup render`` on the InstanceClass in the cluster, then apply."""
        ic = self.kubectl(
            "get",
            self.cloud.instance_class["kind"].lower(),
            self.cloud.instance_class["metadata"]["name"],
            "-o",
            "yaml",
        )
        path = self.workdir / "instance-class.yaml"
        path.write_text(ic)
        args = [
            sys.executable, "-m", "cloudloop.cli", "nodegroup", "render",
            f"--instance-class={path}", f"--name={GROUP}", "--cluster=c1",
            f"--namespace={self.namespace}", "--bootstrap-secret=ng-boot",
            # No workload cluster: machines never become Available, so an old one must be able
            # to go before its replacement is up.
            "--max-surge=0", "--max-unavailable=1",
        ]  # fmt: skip
        if replicas is not None:
            args.append(f"--replicas={replicas}")
        args += self.cloud.render_args
        rendered = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
        assert rendered.returncode == 0, rendered.stderr
        objects = [o for o in yaml.safe_load_all(rendered.stdout) if o]
        self.kubectl("apply", "-f", "-", stdin=rendered.stdout)
        self.deployment = next(
            o["metadata"]["name"] for o in objects if o["kind"] == "MachineDeployment"
        )
        return objects

    def scale(self, replicas: int) -> None:
        self.kubectl("scale", "-n", self.namespace, f"machinedeployment/{self.deployment}",
                     f"--replicas={replicas}")  # fmt: skip

    def machines(self) -> list[dict[str, Any]]:
        """The deployment's Machines, untyped: the tests read CAPI's status of them."""
        found = self.kube.list(
            capi.MACHINES.untyped,
            self.namespace,
            labelSelector=f"{DEPLOYMENT_LABEL}={self.deployment}",
        )
        return list(found.get("items", []))

    def machine_names(self) -> set[str]:
        return {m["metadata"]["name"] for m in self.machines()}

    def provisioned(self, count: int) -> list[dict[str, Any]] | None:
        machines = self.machines()
        ready = [
            m
            for m in machines
            if (m.get("status") or {}).get("phase") in capi_objects.PROVISIONED_PHASES
            and (m.get("spec") or {}).get("providerID")
            and not m["metadata"].get("deletionTimestamp")
        ]
        return ready if len(machines) == count and len(ready) == count else None

    def cloned_from(self, machine: dict[str, Any]) -> str:
        infra = self.kube.get(self.cloud.kinds.machine, machine["metadata"]["name"], self.namespace)
        return str(((infra or {}).get("metadata") or {}).get("annotations", {}).get(CLONED_FROM))


#: The clouds a node group runs on: each makes its :class:`Cloud` from the test's fixtures.
CLOUDS: dict[str, Callable[[pytest.FixtureRequest], contextlib.AbstractContextManager[Cloud]]] = {
    "dvp": lambda request: dvp_cloud(request.getfixturevalue("dvp_parent")),
    "zvirt": lambda request: zvirt_cloud(request.getfixturevalue("ovirt")),
    "openstack": lambda request: openstack_cloud(request.getfixturevalue("openstack_endpoint")),
    "aws": lambda request: aws_cloud(request.getfixturevalue("contract_stack")),
    "vsphere": lambda request: vsphere_cloud(request.getfixturevalue("vcsim")),
}


@pytest.fixture(params=list(CLOUDS))
async def group(
    request: pytest.FixtureRequest,
    contract_stack: LocalStack,
    contract_kube: Kube,
    contract_client: Client,
    contract_namespace: str,
    tmp_path: Path,
) -> AsyncIterator[Group]:
    with contextlib.ExitStack() as exit_stack:
        cloud = exit_stack.enter_context(CLOUDS[request.param](request))
        task_queue = f"ng-{uuid.uuid4().hex[:8]}"
        settings = stack_settings(contract_stack, task_queue=task_queue, cluster="nodegroups")
        env = worker_env(settings, contract_stack, cloud.env)
        # A loaded 2-core machine can take over a minute to import and start a worker.
        worker = WorkerProcess(env, tmp_path, ready_timeout_s=180)
        await asyncio.to_thread(worker.start)
        exit_stack.callback(worker.stop)
        starter = MachineStarter(
            contract_kube,
            contract_client,
            kinds=cloud.kinds,
            task_queue=task_queue,
            cluster="nodegroups",
            namespace=contract_namespace,
            timings=TEST_TIMINGS,
        )
        task = asyncio.create_task(starter.run())
        try:
            yield Group(contract_kube, contract_stack, contract_namespace, cloud, worker, tmp_path)
        finally:
            starter.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_node_group_scales_rolls_and_survives_a_killed_worker(group: Group) -> None:
    kube, ns, cloud = group.kube, group.namespace, group.cloud
    with capi_objects.explained(kube, ns, group.stack):
        await asyncio.to_thread(capi_objects.bootstrap_secret, kube, ns, "ng-boot", CLOUD_INIT)
        infra_cluster = capi_objects.infra_kind(cloud.kinds.cluster.kind)
        await asyncio.to_thread(capi_objects.cluster, kube, ns, "c1", infra_cluster, {})
        group.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(cloud.instance_class))
        first = await asyncio.to_thread(group.render_and_apply, 0)
        first_template = next(o for o in first if o["kind"] == cloud.kinds.template.kind)

        with Sampler(cloud.snapshot, group.machine_names) as sampler:
            # 0 → 3, the worker SIGKILLed once the first VM exists.
            await asyncio.to_thread(group.scale, 3)
            await eventually(
                lambda: sampler.tally.seen.get("vms") or None, timeout=TIMEOUT, what="a first VM"
            )
            await asyncio.to_thread(group.worker.kill)
            await asyncio.to_thread(group.worker.start)
            three = await eventually(
                lambda: group.provisioned(3), timeout=TIMEOUT, what="3 machines provisioned"
            )
            for machine in three:
                name = machine["metadata"]["name"]
                expected = await asyncio.to_thread(cloud.provider_id, name)
                assert machine["spec"]["providerID"] == expected, machine["metadata"]["name"]
                assert group.cloned_from(machine) == first_template["metadata"]["name"]

            # 3 → 1 → the InstanceClass changes: a new template, the machine replaced.
            await asyncio.to_thread(group.scale, 1)
            (kept,) = await eventually(
                lambda: group.provisioned(1), timeout=TIMEOUT, what="1 machine left"
            )
            changed = copy.deepcopy(cloud.instance_class)
            cloud.change(changed["spec"])
            group.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(changed))
            second = await asyncio.to_thread(group.render_and_apply)
            second_template = next(o for o in second if o["kind"] == cloud.kinds.template.kind)
            assert second_template["metadata"]["name"] != first_template["metadata"]["name"]

            def rolled() -> dict[str, Any] | None:
                ready = group.provisioned(1)
                if not ready or ready[0]["metadata"]["name"] == kept["metadata"]["name"]:
                    return None
                return ready[0]

            replacement = await eventually(rolled, timeout=TIMEOUT, what="the group rolled")
            assert group.cloned_from(replacement) == second_template["metadata"]["name"]
            assert await asyncio.to_thread(cloud.vm_shows_change, replacement["metadata"]["name"])

            # → 0: everything goes.
            await asyncio.to_thread(group.scale, 0)
            await eventually(
                lambda: not group.machines() or None, timeout=TIMEOUT, what="no machines"
            )
            await eventually(
                lambda: not any(cloud.snapshot().values()) or None,
                timeout=TIMEOUT,
                what="nothing left in the cloud",
            )

        tally = sampler.tally
        machines = tally.machines
        assert len(machines) == 4, machines  # 3 scaled up, 1 replacement
        for kind, name_of in cloud.per_machine.items():
            # Exactly one object of each kind per machine: one ID per name, never a second one.
            assert tally.names(kind) == sorted(name_of(m) for m in machines), (kind, tally)
        for kind, seen in tally.seen.items():
            assert tally.gone[kind] == set(seen), (kind, tally)  # each removed
        if cloud.name == "zvirt":
            assert len(tally.seen["disks"]) == len(machines), tally  # one boot disk each
        for kind, (created, removed) in cloud.requests().items():
            assert (created, removed) == (len(machines), len(machines)), (kind, created, removed)
