"""What a vSphere layout left in vcsim, and the tasks vCenter ran (tests, bench).

- :func:`cluster_resources`: read-only; every VM named ``<prefix>-…`` (anywhere), every resource
  pool and VM folder named ``<prefix>`` (the tests' ``vmFolderPath``), every data disk
  ``deckhouse/<cluster uuid>-kubernetes-data-*.vmdk`` on any datastore: so a duplicate shows as
  two entries and a clean destroy as none.
- :class:`TaskLog`: the tasks vcsim created after a mark (``TaskManager.recentTask``, which keeps
  the last 200: a window with more shows at least the overflow), read through the property
  collector. Every mutating vSphere call the layout makes is a task except ``CreateFolder``,
  ``CreateResourcePool`` and ``MakeDirectory``, which only run when something is missing (a
  repeat of them would fail ``DuplicateName`` in vCenter, so it cannot hide).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from cloudloop.cloud.vsphere.vmomi import PC, vim
from devstack.vcsim import VcsimEndpoint
from devstack.vcsim_inventory import connect, disconnect, wait_task

_TASK_NUMBER = re.compile(r"(\d+)$")


def _all(si: Any, kind: Any, paths: list[str]) -> list[tuple[Any, dict[str, Any]]]:
    view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [kind], True)
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
            propSet=[PC.PropertySpec(type=kind, pathSet=paths)],
        )
        found = si.content.propertyCollector.RetrieveContents([spec])
        return [(o.obj, {p.name: p.val for p in o.propSet}) for o in found]
    finally:
        view.Destroy()


def _disks(si: Any, cluster_uuid: str) -> list[str]:
    found: list[str] = []
    for _store, props in _all(si, vim.Datastore, ["name", "browser"]):
        name = str(props["name"])
        spec = vim.host.DatastoreBrowser.SearchSpec(
            matchPattern=[f"{cluster_uuid}-kubernetes-data-*.vmdk"]
        )
        try:
            result = wait_task(
                si, props["browser"].SearchDatastore_Task(f"[{name}] deckhouse", spec)
            )
        except Exception as exc:  # no deckhouse/ directory on this datastore
            if "FileNotFound" in type(exc).__name__ or "not found" in str(exc).lower():
                continue
            raise
        found += [
            f"Disk/[{name}] deckhouse/{f.path}"
            for f in (result.file or [])
            if not str(f.path).endswith("-flat.vmdk")  # the descriptor's extent, one disk
        ]
    return found


def cluster_resources(endpoint: VcsimEndpoint, prefix: str, cluster_uuid: str = "") -> list[str]:
    """``<type>/<name>`` of everything of the cluster ``prefix`` (repeats included)."""
    si = connect(endpoint)
    try:
        found = [
            f"VirtualMachine/{props['name']}"
            for _, props in _all(si, vim.VirtualMachine, ["name"])
            if str(props["name"]).startswith(f"{prefix}-")
        ]
        found += [
            f"ResourcePool/{props['name']}"
            for _, props in _all(si, vim.ResourcePool, ["name"])
            if props["name"] == prefix
        ]
        found += [
            f"Folder/{props['name']}"
            for _, props in _all(si, vim.Folder, ["name"])
            if props["name"] == prefix
        ]
        if cluster_uuid:
            found += _disks(si, cluster_uuid)
        return sorted(found)
    finally:
        disconnect(si)


@dataclass(frozen=True)
class TaskRecord:
    moref: str
    description: str
    entity: str

    def __str__(self) -> str:
        return f"{self.description}({self.entity})"


class TaskLog:
    """The tasks vcsim ran since :meth:`mark` (see the module)."""

    def __init__(self, endpoint: VcsimEndpoint) -> None:
        self.endpoint = endpoint
        self._mark = 0

    @staticmethod
    def _number(moref: str) -> int:
        found = _TASK_NUMBER.search(moref)
        return int(found.group(1)) if found else 0

    def _recent(self) -> list[TaskRecord]:
        si = connect(self.endpoint)
        try:
            tasks = list(si.content.taskManager.recentTask or [])
            if not tasks:
                return []
            spec = PC.FilterSpec(
                objectSet=[PC.ObjectSpec(obj=t) for t in tasks],
                propSet=[
                    PC.PropertySpec(
                        type=vim.Task, pathSet=["info.descriptionId", "info.entityName"]
                    )
                ],
            )
            records = []
            for obj in si.content.propertyCollector.RetrieveContents([spec]):
                props = {p.name: p.val for p in obj.propSet}
                records.append(
                    TaskRecord(
                        moref=str(obj.obj._moId),
                        description=str(props.get("info.descriptionId", "")),
                        entity=str(props.get("info.entityName", "")),
                    )
                )
            return records
        finally:
            disconnect(si)

    def mark(self) -> None:
        self._mark = max((self._number(t.moref) for t in self._recent()), default=0)

    def since(self) -> list[TaskRecord]:
        """The tasks created after the mark, oldest first."""
        later = [t for t in self._recent() if self._number(t.moref) > self._mark]
        return sorted(later, key=lambda t: self._number(t.moref))
