"""vcsim as a machine tests' cloud: what it holds (VMs cloned by the driver), read with pyvmomi.

:class:`VcsimMachines` samples the VMs made since it started (the seeded inventory is left out)
and answers per-VM questions (providerID, CPUs, power state, the tasks on a VM); it keeps one
session behind a lock, as the node-group sampler reads from its own thread.
"""

from __future__ import annotations

import threading
from typing import Any

from cloudloop.cloud.vsphere.vmomi import PC, vim
from devstack.vcsim import VcsimEndpoint
from devstack.vcsim_inventory import connect, disconnect

_PATHS = [
    "name",
    "config.uuid",
    "config.instanceUuid",
    "config.hardware.numCPU",
    "runtime.powerState",
    "guest.ipAddress",
]


class VcsimMachines:
    def __init__(self, endpoint: VcsimEndpoint) -> None:
        self._lock = threading.Lock()
        self._si = connect(endpoint)
        self._seed = set(self._vms())

    def close(self) -> None:
        with self._lock:
            disconnect(self._si)

    def _vms(self) -> dict[str, dict[str, Any]]:
        si = self._si
        view = si.content.viewManager.CreateContainerView(
            si.content.rootFolder, [vim.VirtualMachine], True
        )
        try:
            spec = PC.FilterSpec(
                objectSet=[
                    PC.ObjectSpec(
                        obj=view,
                        skip=True,
                        selectSet=[
                            PC.TraversalSpec(path="view", skip=False, type=vim.view.ContainerView)
                        ],
                    )
                ],
                propSet=[PC.PropertySpec(type=vim.VirtualMachine, pathSet=_PATHS)],
            )
            found = si.content.propertyCollector.RetrieveContents([spec])
        finally:
            view.Destroy()
        return {str(o.obj._moId): {p.name: p.val for p in o.propSet} for o in found}

    def made(self) -> dict[str, dict[str, Any]]:
        """The VMs made since this sampler started, by moref."""
        with self._lock:
            vms = self._vms()
        return {moref: props for moref, props in vms.items() if moref not in self._seed}

    def snapshot(self) -> dict[str, dict[str, str]]:
        return {"vms": {moref: str(p.get("name", "")) for moref, p in self.made().items()}}

    def by_name(self, name: str) -> dict[str, Any]:
        return next((p for p in self.made().values() if p.get("name") == name), {})

    def provider_id(self, name: str) -> str:
        uuid = str(self.by_name(name).get("config.uuid") or "")
        return f"vsphere://{uuid.lower()}" if uuid else ""

    def cpus(self, name: str) -> int:
        return int(self.by_name(name).get("config.hardware.numCPU") or 0)

    def named(self, name: str) -> dict[str, dict[str, Any]]:
        """Every VM made since the start with this name, by moref."""
        return {m: p for m, p in self.made().items() if p.get("name") == name}

    def tasks(self, moref: str | None) -> list[tuple[str, str]]:
        """``(descriptionId, state)`` of the recent tasks on the VM ``moref`` (``None``: on any
        object), oldest first (vcsim names a task's entity by its moref)."""
        with self._lock:
            si = self._si
            tasks = si.content.taskManager.recentTask or []
            if not tasks:
                return []
            spec = PC.FilterSpec(
                objectSet=[PC.ObjectSpec(obj=t) for t in tasks],
                propSet=[
                    PC.PropertySpec(
                        type=vim.Task,
                        pathSet=["info.descriptionId", "info.state", "info.entityName"],
                    )
                ],
            )
            found = si.content.propertyCollector.RetrieveContents([spec])
        out: list[tuple[int, str, str]] = []
        for obj in found:
            props = {p.name: p.val for p in obj.propSet}
            if moref is None or str(props.get("info.entityName")) == moref:
                number = int(str(obj.obj._moId).rsplit("-", 1)[-1])
                out.append((number, str(props["info.descriptionId"]), str(props["info.state"])))
        return [(description, state) for _, description, state in sorted(out)]

    def running(self, name: str, description: str) -> bool:
        """A task ``description`` (``VirtualMachine.powerOn``...) runs on the VM ``name``."""
        return any(
            (d, s) == (description, "running") for m in self.named(name) for d, s in self.tasks(m)
        )

    def cloning(self) -> bool:
        """A clone task runs (vcsim's ``descriptionId``; vCenter's is ``VirtualMachine.clone``)."""
        return ("VirtualMachine.cloneVm", "running") in self.tasks(None)

    def clones_of(self, name: str) -> int:
        """How many clones were started to make a VM named ``name`` (``VmBeingClonedEvent``)."""
        with self._lock:
            spec = vim.event.EventFilterSpec(eventTypeId=["VmBeingClonedEvent"])
            events = self._si.content.eventManager.QueryEvents(spec) or []
        return sum(1 for e in events if e.destName == name)
