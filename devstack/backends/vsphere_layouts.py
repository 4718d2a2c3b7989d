"""vcsim for vSphere layouts: its tags and a config, what a layout left, the tasks vCenter ran.

- :func:`seed_layout_tags`: the region tag on ``DC0``, a zone tag on each cluster (Deckhouse's
  categories), as an operator prepares vCenter; :func:`layout_config`: the ``vsphere-standard``
  example made for it (tests, bench).
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
from pathlib import Path
from typing import Any

import yaml

from cloudloop.cloud.vsphere.vmomi import PC, vim
from devstack.backends.vsphere import NETWORK, TEMPLATE
from devstack.vcsim import VcsimEndpoint
from devstack.vcsim_inventory import (
    Tags,
    ZoneLayout,
    connect,
    disconnect,
    seed_zones,
    tagging_client,
    wait_task,
)

_TASK_NUMBER = re.compile(r"(\d+)$")
EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "layouts" / "examples"
REGION, ZONES = "region-a", ["zone-a", "zone-b"]


def seed_layout_tags(endpoint: VcsimEndpoint) -> None:
    """``region-a`` on ``DC0``; ``zone-a``/``zone-b`` on ``DC0_C0``/``DC0_C1`` and their
    datastores (categories ``k8s-region``/``k8s-zone``)."""
    si = connect(endpoint)
    client = tagging_client(endpoint)
    try:
        seed_zones(si, Tags(client), ZoneLayout(region=REGION))
    finally:
        client.logout()
        disconnect(si)


def layout_config(folder: Path, endpoint: VcsimEndpoint, prefix: str, **master_class: Any) -> Path:
    """The ``vsphere-standard`` example on vcsim: its CA and credentials, the region and zones of
    :func:`seed_layout_tags`, ``vmFolderPath`` = ``prefix``, one master and one static node
    (``worker``); ``master_class`` changes the master's instance class."""
    docs = list(yaml.safe_load_all((EXAMPLE / "vsphere-standard.yaml").read_text()))
    assert endpoint.ca_file is not None
    instance_class = {
        "numCPUs": 2,
        "memory": 2048,
        "template": TEMPLATE,
        "mainNetwork": NETWORK,
        "datastore": "LocalDS_0",
    }
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            doc["cloud"]["prefix"] = prefix
            continue
        doc["provider"] = {
            "server": endpoint.server,
            "username": endpoint.username,
            "password": endpoint.password,
            "caBundle": endpoint.ca_file.read_text(),
        }
        doc.update(region=REGION, zones=ZONES, vmFolderPath=prefix)
        doc["masterNodeGroup"]["instanceClass"] = {**instance_class, **master_class}
        doc["nodeGroups"] = [
            {"name": "worker", "replicas": 1, "instanceClass": {**instance_class, "numCPUs": 1}}
        ]
    path = folder / f"{prefix}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


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
