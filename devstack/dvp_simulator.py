"""A parent DVP cluster for the local stack: a real kube-apiserver serving the virtualization CRDs,
and a small simulator standing in for DVP's controllers and hypervisor.

The simulator watches VirtualDisks, VirtualMachines and VirtualMachineBlockDeviceAttachments and
moves them the way DVP does, a little later each: a disk is provisioned from its image (Failed
when the image does not exist) and becomes Ready; a VM waits for its disks and its cloud-init
Secret, starts, runs and gets an IP address (Stopped under ``runPolicy: AlwaysOff``, also once
running: Stopping, then Stopped); an
attachment becomes Attached once its VM exists; a grown disk gets its new capacity. Protection
finalizers hold a deleted VM until it has stopped and a deleted disk until no VM uses it. Any
step can be held (:meth:`DvpSimulator.hold`) so fault tests can stop the world at a chosen
point. Test stack only: the product never imports this.

Resource names (group, version, plural, scope) come from the CRDs the parent serves
(:func:`devstack.dvp.served_resources`), never from the driver's constants, so a typo in either is
caught (``tests/devstack/test_dvp_crds.py`` compares them).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import ipaddress
import json
import logging
import signal
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudloop.cloud.dvp import resources as r
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.client import api_client
from cloudloop.kube.conditions import now_rfc3339
from cloudloop.kube.informer import Informer
from cloudloop.kube.resources import Resource
from devstack.crds import apply_crds
from devstack.dvp import VIRTUALIZATION_CRDS, served_resources
from devstack.dvp_loadbalancer import ParentLoadBalancers
from devstack.kube import KubeOptions
from devstack.local import LocalStack, StackOptions
from devstack.process import ManagedProcess

log = logging.getLogger(__name__)

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
VM_FINALIZER = "virtualization.deckhouse.io/vm-protection"
DISK_FINALIZER = "virtualization.deckhouse.io/vd-protection"
ATTACHMENT_FINALIZER = "virtualization.deckhouse.io/vmbda-protection"

#: What the parent serves, by kind, read from its CRDs (not from the driver's constants).
SERVED = served_resources()
VIRTUAL_MACHINES = SERVED["VirtualMachine"]
VIRTUAL_DISKS = SERVED["VirtualDisk"]
VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS = SERVED["VirtualMachineBlockDeviceAttachment"]
VIRTUAL_MACHINE_CLASSES = SERVED["VirtualMachineClass"]
CLUSTER_VIRTUAL_IMAGES = SERVED["ClusterVirtualImage"]
#: Kinds a disk's ``dataSource.objectRef`` may name (DVP's image sources).
IMAGE_KINDS = ("VirtualImage", "ClusterVirtualImage", "VirtualDiskSnapshot")

#: Steps :meth:`DvpSimulator.hold` can stop.
DISK_READY = "disk-ready"
VM_START = "vm-start"
VM_RUNNING = "vm-running"
VM_DELETE = "vm-delete"
DISK_DELETE = "disk-delete"
#: A VirtualMachineBlockDeviceAttachment becoming Attached (hotplug).
ATTACH = "attach"
STEPS = (DISK_READY, VM_START, VM_RUNNING, VM_DELETE, DISK_DELETE, ATTACH)

#: What the parent offers: StorageClasses, a VM class and a cluster-wide image.
STORAGE_CLASSES = ("linstor-thin-r1", "linstor-thick-r2", "ceph-rbd")
VM_CLASS = "generic"
CLUSTER_IMAGE = "ubuntu-24-04"
VM_NETWORK = ipaddress.ip_network("10.66.0.0/16")


@dataclass
class SimulatorTimings:
    disk_ready_s: float = 0.15
    vm_start_s: float = 0.1
    vm_running_s: float = 0.2
    vm_stop_s: float = 0.1
    tick_s: float = 0.02


@dataclass
class DvpSimulator:
    """DVP's controllers in miniature, over the parent cluster's API (runs in its own thread)."""

    kube: Kube
    timings: SimulatorTimings = field(default_factory=SimulatorTimings)
    _holds: set[tuple[str, str]] = field(default_factory=set)
    _acted: dict[tuple[str, str, str], str] = field(default_factory=dict)
    _since: dict[tuple[str, str, str], float] = field(default_factory=dict)
    _ips: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        # Writes go out side by side (as DVP's controllers work in parallel), one at a time
        # per object: the next step waits until the watch shows the previous one.
        self._writes = ThreadPoolExecutor(max_workers=8, thread_name_prefix="dvp-simulator")
        self.vms = Informer(self.kube, VIRTUAL_MACHINES)
        self.disks = Informer(self.kube, VIRTUAL_DISKS)
        self.attachments = Informer(self.kube, VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS)
        self.secrets = Informer(
            self.kube, r.SECRETS, field_selector=f"type={r.CLOUD_INIT_SECRET_TYPE}"
        )
        self._informers = (self.vms, self.disks, self.attachments, self.secrets)

    # -- control ---------------------------------------------------------------------------
    def start(self) -> DvpSimulator:
        for informer in self._informers:
            informer.start()
        for informer in self._informers:
            if not informer.synced.wait(30):
                raise RuntimeError(f"simulator: {informer.resource.plural} did not sync")
        self._thread = threading.Thread(target=self._run, name="dvp-simulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for informer in self._informers:
            informer.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._writes.shutdown(wait=True, cancel_futures=True)

    def hold(self, step: str, name: str = "*") -> None:
        """Stop ``step`` for the object ``name`` (VM or disk name; ``*``: every object)."""
        assert step in STEPS, step
        with self._lock:
            self._holds.add((step, name))

    def release(self, step: str | None = None, name: str = "*") -> None:
        """Let ``step`` (every step when None) go on again."""
        with self._lock:
            if step is None:
                self._holds.clear()
            else:
                self._holds.discard((step, name))

    def _held(self, step: str, name: str) -> bool:
        with self._lock:
            return (step, "*") in self._holds or (step, name) in self._holds

    # -- the loop --------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.timings.tick_s):
            try:
                self.tick()
            except Exception:  # the simulator must outlive a bad object or a race
                log.exception("dvp simulator: tick failed")

    def tick(self) -> None:
        disks = {_key(d): d for d in list(self.disks.store.values())}
        secrets = {_key(s) for s in list(self.secrets.store.values())}
        vms = list(self.vms.store.values())
        for disk in disks.values():
            self._disk(disk, vms)
        for vm in vms:
            self._vm(vm, disks, secrets)
        for attachment in list(self.attachments.store.values()):
            self._attachment(attachment)

    def _once(self, obj: dict[str, Any], action: str) -> bool:
        """True the first time ``action`` is due for this version of ``obj``."""
        key = (obj.get("kind", ""), _key(obj), action)
        version = obj["metadata"].get("resourceVersion", "")
        if self._acted.get(key) == version:
            return False
        self._acted[key] = version
        return True

    def _forget(self, key: str) -> None:
        """A write for ``key`` failed: let every step for it be tried again."""
        for acted in list(self._acted):
            if acted[1] == key:
                self._acted.pop(acted, None)

    def _elapsed(self, obj: dict[str, Any], phase: str) -> float:
        """Seconds since ``obj`` was first seen in ``phase``."""
        key = (obj.get("kind", ""), _key(obj) + "/" + obj["metadata"].get("uid", ""), phase)
        return time.monotonic() - self._since.setdefault(key, time.monotonic())

    def _patch_status(
        self, resource: Resource, obj: dict[str, Any], status: dict[str, Any]
    ) -> None:
        meta = obj["metadata"]
        self._write(
            resource,
            meta["name"],
            {"metadata": {"uid": meta["uid"]}, "status": status},
            meta.get("namespace"),
            "status",
        )

    def _write(
        self,
        resource: Resource,
        name: str,
        patch: dict[str, Any],
        namespace: str | None,
        subresource: str | None = None,
    ) -> None:
        def send() -> None:
            try:
                self.kube.patch(resource, name, patch, namespace, subresource=subresource)
            except KubeError:  # gone or changed meanwhile: the next tick looks again
                self._forget(f"{namespace or ''}/{name}")

        with contextlib.suppress(RuntimeError):  # stopping
            self._writes.submit(send)

    def _set_finalizers(
        self, resource: Resource, obj: dict[str, Any], finalizers: list[str]
    ) -> None:
        meta = obj["metadata"]
        self._write(
            resource,
            meta["name"],
            {
                "metadata": {
                    "finalizers": finalizers or None,
                    "resourceVersion": meta["resourceVersion"],
                    "uid": meta["uid"],
                }
            },
            meta.get("namespace"),
        )

    def _protect(self, resource: Resource, obj: dict[str, Any], finalizer: str) -> bool:
        """Add the protection finalizer; True when it was missing (the object changes)."""
        finalizers = list(obj["metadata"].get("finalizers") or [])
        if finalizer in finalizers:
            return False
        if self._once(obj, "protect"):
            self._set_finalizers(resource, obj, [*finalizers, finalizer])
        return True

    def _release(self, resource: Resource, obj: dict[str, Any], finalizer: str) -> None:
        finalizers = list(obj["metadata"].get("finalizers") or [])
        if finalizer in finalizers and self._once(obj, "release"):
            self._set_finalizers(resource, obj, [f for f in finalizers if f != finalizer])

    # -- disks -----------------------------------------------------------------------------
    def _disk(self, disk: dict[str, Any], vms: list[dict[str, Any]]) -> None:
        meta, status = disk["metadata"], disk.get("status") or {}
        name = meta["name"]
        if meta.get("deletionTimestamp"):
            used = any(_uses_disk(vm, meta.get("namespace"), name) for vm in vms)
            if not used and not self._held(DISK_DELETE, name):
                self._release(VIRTUAL_DISKS, disk, DISK_FINALIZER)
            return
        if self._protect(VIRTUAL_DISKS, disk, DISK_FINALIZER):
            return
        phase = status.get("phase")
        if phase == "Ready":
            self._resize(disk)
            return
        if not phase:
            if self._once(disk, "provisioning"):
                self._patch_status(VIRTUAL_DISKS, disk, {"phase": "Provisioning", "progress": "0%"})
            return
        if (
            phase != "Provisioning"
            or self._elapsed(disk, "Provisioning") < self.timings.disk_ready_s
        ):
            return
        if self._held(DISK_READY, name) or not self._once(disk, "ready"):
            return
        with contextlib.suppress(RuntimeError):  # stopping
            self._writes.submit(self._finish_disk, disk)

    def _resize(self, disk: dict[str, Any]) -> None:
        """A grown ``spec.persistentVolumeClaim.size`` reaches ``status.capacity`` a little
        later (DVP resizes the disk's PVC, then the guest sees it)."""
        claim = (disk.get("spec") or {}).get("persistentVolumeClaim") or {}
        asked = str(claim.get("size", ""))
        status = disk.get("status") or {}
        if not asked or asked == str(status.get("capacity", "")):
            return
        if self._elapsed(disk, f"Resizing/{asked}") < self.timings.disk_ready_s:
            return
        if self._once(disk, f"resize/{asked}"):
            self._patch_status(VIRTUAL_DISKS, disk, {"capacity": asked})

    def _finish_disk(self, disk: dict[str, Any]) -> None:
        """Ready with the image copied in, or Failed when the image does not exist."""
        meta = disk["metadata"]
        missing = self._missing_image(disk)
        if missing:
            status: dict[str, Any] = {
                "phase": "Failed",
                "conditions": [_condition("Ready", "False", "ProvisioningFailed", missing)],
            }
        else:
            claim = (disk.get("spec") or {}).get("persistentVolumeClaim") or {}
            status = {
                "phase": "Ready",
                "progress": "100%",
                "capacity": str(claim.get("size", "")),
                "storageClassName": claim.get("storageClassName", ""),
                "target": {"persistentVolumeClaimName": f"vd-{meta['name']}-{meta['uid'][:8]}"},
                "conditions": [_condition("Ready", "True", "Ready", "")],
            }
        try:
            self.kube.patch(
                VIRTUAL_DISKS,
                meta["name"],
                {"metadata": {"uid": meta["uid"]}, "status": status},
                meta.get("namespace"),
                subresource="status",
            )
        except KubeError:
            self._forget(_key(disk))

    def _missing_image(self, disk: dict[str, Any]) -> str:
        source = (disk.get("spec") or {}).get("dataSource") or {}
        ref = source.get("objectRef") or {}
        if source.get("type") != "ObjectRef" or not ref:
            return ""
        kind = str(ref.get("kind"))
        resource = SERVED.get(kind) if kind in IMAGE_KINDS else None
        if resource is None:
            return f"unknown image kind {ref.get('kind')!r}"
        namespace = disk["metadata"].get("namespace") if resource.namespaced else None
        try:
            found = self.kube.get(resource, str(ref.get("name")), namespace)
        except KubeError:
            return ""
        return "" if found else f"{ref.get('kind')} {ref.get('name')!r} not found"

    # -- VMs -------------------------------------------------------------------------------
    def _vm(self, vm: dict[str, Any], disks: dict[str, dict[str, Any]], secrets: set[str]) -> None:
        meta, status, spec = vm["metadata"], vm.get("status") or {}, vm.get("spec") or {}
        name = meta["name"]
        phase = status.get("phase")
        if meta.get("deletionTimestamp"):
            if self._held(VM_DELETE, name):
                return
            if phase != "Terminating":
                if self._once(vm, "terminating"):
                    self._patch_status(VIRTUAL_MACHINES, vm, {"phase": "Terminating"})
            elif self._elapsed(vm, "Terminating") >= self.timings.vm_stop_s:
                self._release(VIRTUAL_MACHINES, vm, VM_FINALIZER)
            return
        if self._protect(VIRTUAL_MACHINES, vm, VM_FINALIZER):
            return
        if not phase:
            if self._once(vm, "pending"):
                self._patch_status(VIRTUAL_MACHINES, vm, {"phase": "Pending"})
            return
        if phase == "Pending":
            waiting = self._vm_waits_for(vm, disks, secrets)
            if waiting:
                current: dict[str, Any] = next(
                    (
                        c
                        for c in status.get("conditions") or []
                        if c.get("type") == "BlockDevicesReady"
                    ),
                    {},
                )
                if current.get("message") != waiting and self._once(vm, "waiting"):
                    self._patch_status(
                        VIRTUAL_MACHINES,
                        vm,
                        {
                            "conditions": [
                                _condition("BlockDevicesReady", "False", "NotReady", waiting)
                            ]
                        },
                    )
                return
            if self._elapsed(vm, "Pending") < self.timings.vm_start_s or self._held(VM_START, name):
                return
            if self._once(vm, "starting"):
                self._patch_status(
                    VIRTUAL_MACHINES,
                    vm,
                    {
                        "phase": "Starting",
                        "conditions": [_condition("BlockDevicesReady", "True", "Ready", "")],
                    },
                )
            return
        if phase == "Starting":
            if self._elapsed(vm, "Starting") < self.timings.vm_running_s:
                return
            if self._held(VM_RUNNING, name) or not self._once(vm, "running"):
                return
            if spec.get("runPolicy") == "AlwaysOff":
                self._patch_status(VIRTUAL_MACHINES, vm, {"phase": "Stopped"})
                return
            refs = spec.get("blockDeviceRefs") or []
            self._patch_status(
                VIRTUAL_MACHINES,
                vm,
                {
                    "phase": "Running",
                    "nodeName": "virtlet-1",
                    "ipAddress": self._ip(meta["uid"]),
                    "blockDeviceRefs": [
                        {"kind": ref.get("kind"), "name": ref.get("name"), "attached": True}
                        for ref in refs
                    ],
                    "conditions": [
                        _condition("BlockDevicesReady", "True", "Ready", ""),
                        _condition("Running", "True", "Running", ""),
                    ],
                },
            )
            return
        # A running VM whose runPolicy turns AlwaysOff is stopped (DVP: Stopping, then Stopped
        # once the guest is off), keeping its disks and address.
        if phase == "Running" and spec.get("runPolicy") == "AlwaysOff":
            if self._once(vm, "stopping"):
                self._patch_status(VIRTUAL_MACHINES, vm, {"phase": "Stopping"})
        elif (
            phase == "Stopping"
            and spec.get("runPolicy") == "AlwaysOff"
            and self._elapsed(vm, "Stopping") >= self.timings.vm_stop_s
            and self._once(vm, "stopped")
        ):
            self._patch_status(
                VIRTUAL_MACHINES,
                vm,
                {
                    "phase": "Stopped",
                    "conditions": [_condition("Running", "False", "Stopped", "")],
                },
            )

    def _vm_waits_for(
        self, vm: dict[str, Any], disks: dict[str, dict[str, Any]], secrets: set[str]
    ) -> str:
        """What the VM still waits for ("" once its disks are Ready and its Secret exists)."""
        namespace = vm["metadata"].get("namespace", "")
        spec = vm.get("spec") or {}
        for ref in spec.get("blockDeviceRefs") or []:
            if ref.get("kind") != "VirtualDisk":
                continue
            disk = disks.get(f"{namespace}/{ref.get('name')}")
            if disk is None:
                return f"VirtualDisk {ref.get('name')} not found"
            disk_status = disk.get("status") or {}
            if disk_status.get("phase") == "Failed":
                reasons = [c.get("message", "") for c in disk_status.get("conditions") or []]
                return f"VirtualDisk {ref.get('name')} Failed: {'; '.join(reasons)}"
            if disk_status.get("phase") != "Ready":
                return f"VirtualDisk {ref.get('name')} is {disk_status.get('phase') or 'Pending'}"
        user_data = ((spec.get("provisioning") or {}).get("userDataRef") or {}).get("name")
        if user_data and f"{namespace}/{user_data}" not in secrets:
            return f"cloud-init Secret {user_data} not found"
        return ""

    def _ip(self, uid: str) -> str:
        if uid not in self._ips:
            self._ips[uid] = str(VM_NETWORK[len(self._ips) + 10])
        return self._ips[uid]

    # -- attachments -----------------------------------------------------------------------
    def _attachment(self, attachment: dict[str, Any]) -> None:
        """Attached once its VM exists; a VM that does not stays ``Pending`` (as DVP waits)."""
        meta = attachment["metadata"]
        if meta.get("deletionTimestamp"):
            self._release(
                VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS, attachment, ATTACHMENT_FINALIZER
            )
            return
        if self._protect(
            VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS, attachment, ATTACHMENT_FINALIZER
        ):
            return
        phase = (attachment.get("status") or {}).get("phase")
        if phase == "Attached":
            return
        vm_name = (attachment.get("spec") or {}).get("virtualMachineName")
        vm_exists = any(
            vm["metadata"]["name"] == vm_name
            and vm["metadata"].get("namespace") == meta.get("namespace")
            and not vm["metadata"].get("deletionTimestamp")
            for vm in list(self.vms.store.values())
        )
        if not vm_exists:
            if phase != "Pending" and self._once(attachment, "pending"):
                self._patch_status(
                    VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS, attachment, {"phase": "Pending"}
                )
            return
        if self._held(ATTACH, meta["name"]):
            return
        if self._once(attachment, "attach"):
            self._patch_status(
                VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS, attachment, {"phase": "Attached"}
            )


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def _uses_disk(vm: dict[str, Any], namespace: str | None, disk: str) -> bool:
    if vm["metadata"].get("namespace") != namespace:
        return False
    refs = (vm.get("spec") or {}).get("blockDeviceRefs") or []
    return any(ref.get("kind") == "VirtualDisk" and ref.get("name") == disk for ref in refs)


def _condition(type: str, status: str, reason: str, message: str) -> dict[str, str]:
    return {
        "type": type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now_rfc3339(),
    }


# -- the parent cluster ------------------------------------------------------------------------
def install_parent(kube: Kube) -> None:
    """The CRDs and what a DVP admin provides: StorageClasses, a VM class, a cluster image."""
    apply_crds(kube, [VIRTUALIZATION_CRDS])
    seeds: list[tuple[Resource, dict[str, Any]]] = [
        (
            r.STORAGE_CLASSES,
            {"metadata": {"name": name}, "provisioner": "replicated.csi.storage.deckhouse.io"},
        )
        for name in STORAGE_CLASSES
    ]
    seeds.append(
        (
            VIRTUAL_MACHINE_CLASSES,
            {"metadata": {"name": VM_CLASS}, "spec": {"cpu": {"type": "Host"}}},
        )
    )
    seeds.append(
        (
            CLUSTER_VIRTUAL_IMAGES,
            {
                "metadata": {"name": CLUSTER_IMAGE},
                "spec": {"dataSource": {"type": "HTTP", "http": {"url": "https://example/u.img"}}},
            },
        )
    )
    for resource, body in seeds:
        try:
            kube.create(resource, body)
        except KubeError as exc:
            if not exc.conflict:
                raise
    kube.patch(
        CLUSTER_VIRTUAL_IMAGES,
        CLUSTER_IMAGE,
        {"status": {"phase": "Ready"}},
        subresource="status",
    )


@dataclass
class DvpParent:
    """A parent DVP cluster on its own control plane, with the simulator running against it:
    in a thread of the calling process (tests hold and release its steps), or ``apart`` in a
    process of its own (benchmarks: the emulated cloud does not share the measured process's
    interpreter, as a real cloud would not)."""

    kubeconfig: Path
    kube: Kube
    _simulator: DvpSimulator | None = None
    stack: LocalStack | None = None
    #: The parent's load-balancer controller (assigns Services their ingress address).
    load_balancers: ParentLoadBalancers | None = None
    #: The simulator's own process (``apart``).
    process: ManagedProcess | None = None

    @property
    def simulator(self) -> DvpSimulator:
        """The in-process simulator (its steps can be held)."""
        if self._simulator is None:
            raise RuntimeError("the simulator runs in a process of its own: no steps to hold")
        return self._simulator

    @classmethod
    def start(
        cls, state_dir: Path, *, timings: SimulatorTimings | None = None, apart: bool = False
    ) -> DvpParent:
        """Start a ``parent`` control plane (from the calling thread: children die with it)."""
        stack = LocalStack(
            StackOptions(
                state_dir=state_dir, temporal=False, moto=False, kube=(KubeOptions(name="parent"),)
            )
        )
        stack.start()
        try:
            if apart:
                return cls._apart(stack, state_dir, timings or SimulatorTimings())
            return cls.attach(stack.kubeconfig, timings=timings, stack=stack)
        except BaseException:
            stack.stop()
            raise

    @classmethod
    def _apart(cls, stack: LocalStack, state_dir: Path, timings: SimulatorTimings) -> DvpParent:
        kube = Kube(api_client(stack.kubeconfig, qps_pool=64), field_validation="Strict")
        install_parent(kube)
        ready = state_dir / "dvp-simulator.ready"
        process = ManagedProcess(
            "dvp-simulator",
            [
                sys.executable,
                "-m",
                "devstack.dvp_simulator",
                "--kubeconfig",
                str(stack.kubeconfig),
                "--ready-file",
                str(ready),
                "--timings",
                json.dumps(dataclasses.asdict(timings)),
            ],
            log_dir=state_dir,
            ready=ready.exists,
        )
        process.start()
        try:
            process.wait_ready(60)
        except BaseException:
            process.stop()
            raise
        return cls(kubeconfig=stack.kubeconfig, kube=kube, stack=stack, process=process)

    @classmethod
    def attach(
        cls,
        kubeconfig: Path,
        *,
        timings: SimulatorTimings | None = None,
        stack: LocalStack | None = None,
    ) -> DvpParent:
        """Install the CRDs on a running control plane and start the simulator."""
        kube = Kube(api_client(kubeconfig, qps_pool=64), field_validation="Strict")
        install_parent(kube)
        simulator = DvpSimulator(kube, timings or SimulatorTimings()).start()
        load_balancers = ParentLoadBalancers(kube).start()
        return cls(
            kubeconfig=kubeconfig,
            kube=kube,
            _simulator=simulator,
            stack=stack,
            load_balancers=load_balancers,
        )

    def new_namespace(self, prefix: str = "dvp") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.kube.create(NAMESPACES, {"metadata": {"name": name}})
        return name

    def stop(self) -> None:
        if self._simulator is not None:
            self._simulator.stop()
        if self.load_balancers is not None:
            self.load_balancers.stop()
        if self.process is not None:
            self.process.stop()
        if self.stack is not None:
            self.stack.stop()


def main(argv: list[str] | None = None) -> None:
    """``python -m devstack.dvp_simulator``: the simulator and the parent's load-balancer
    controller against ``--kubeconfig`` (CRDs installed), until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m devstack.dvp_simulator")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--ready-file", type=Path, help="created once the simulator runs")
    parser.add_argument("--timings", default="{}", help="SimulatorTimings fields as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    kube = Kube(api_client(args.kubeconfig, qps_pool=64), field_validation="Strict")
    simulator = DvpSimulator(kube, SimulatorTimings(**json.loads(args.timings))).start()
    load_balancers = ParentLoadBalancers(kube).start()
    if args.ready_file is not None:
        args.ready_file.touch()
    try:
        stop.wait()
    finally:
        simulator.stop()
        load_balancers.stop()


if __name__ == "__main__":
    main()
