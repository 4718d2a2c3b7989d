"""vSphere volumes on first-class disks (FCD, ``VStorageObjectManager``) with CSI semantics.

A volume is an FCD named after the volume (the PV name) on a datastore chosen by zone, tagged
with the cluster's tag; attach/detach use the VM's ``AttachDisk_Task``/``DetachDisk_Task``.

Rules:
- **Identity**: the volume ID is ``<datastore moref>:<FCD id>`` (an FCD is read per datastore);
  the cluster tag (category ``cluster_tag_category``, tag = cluster name) marks ownership.
- **Idempotent create**: :meth:`find_volume` finds the FCD by name on the cluster's datastores;
  an untagged FCD of that name (a create that crashed before tagging) is adopted and tagged; one
  tagged for another cluster is never taken. Among several, the oldest wins (the activity
  deletes the others).
- **Attach** is idempotent: an FCD whose consumer is already the VM is returned as attached; one
  consumed by another VM is :class:`FailedPrecondition` (single-node access). A worker killed
  mid-attach finds the attachment on retry, so exactly one exists; when the killed worker's
  ``attachDisk``/``detachDisk`` task is still running on the VM (its ``recentTask``), the retry
  waits for it and reads the disk again instead of issuing a second task. Detach likewise.
- **Delete** refuses an attached FCD (:class:`FailedPrecondition`); a missing one is
  :class:`NotFound`. **Extend** waits for its task; the modification is then ``completed``.
- **Topology**: a volume's zone is its datastore's zone tag; a create for a zone uses the first
  datastore (by name) carrying that zone tag.
- pyvmomi work-arounds: the manager is built by hand (``content.vStorageObjectManager`` is None
  against vcsim) and task results are read through the property collector.
- Departs from upstream: vSphere CSI uses CNS (``/vsanHealth``) with container-cluster metadata;
  this driver uses the FCD API directly and a tag for the cluster.
"""

from __future__ import annotations

import logging
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.vsphere.discovery import DatastoreView, VsphereDiscovery
from cloudloop.cloud.vsphere.mapping import PROVIDER
from cloudloop.cloud.vsphere.vmomi import PC, vim

log = logging.getLogger(__name__)

MB_PER_GIB = 1024
#: The VM tasks that change which disks it consumes (``TaskInfo.descriptionId``).
DISK_TASKS = frozenset({"VirtualMachine.attachDisk", "VirtualMachine.detachDisk"})


def volume_id(datastore: str, disk_id: str) -> str:
    return f"{datastore}:{disk_id}"


def parse_volume_id(value: str) -> tuple[str, str]:
    """``(datastore moref, FCD id)``; :class:`NotFound` for a malformed ID (it cannot exist)."""
    datastore, sep, disk = value.partition(":")
    if not sep or not datastore.startswith("datastore-") or not disk:
        raise errors.NotFound(PROVIDER, "ParseVolumeId", f"{value!r} is not a vSphere volume ID")
    return datastore, disk


class VsphereVolumes(VsphereDiscovery):
    # -- helpers -----------------------------------------------------------------------------
    def _manager(self, si: Any) -> Any:
        manager = si.content.vStorageObjectManager
        if manager is None:  # pyvmomi against vcsim: build the vCenter manager by hand
            manager = vim.vslm.vcenter.VStorageObjectManager("VStorageObjectManager", si._stub)
        return manager

    def _retrieve(self, datastore: str, disk: str) -> Any:
        return self.call(
            "RetrieveVStorageObject",
            lambda si: self._manager(si).RetrieveVStorageObject(
                vim.vslm.ID(id=disk), vim.Datastore(datastore, si._stub)
            ),
        )

    def _list(self, datastore: str) -> list[str]:
        found = self.call(
            "ListVStorageObject",
            lambda si: self._manager(si).ListVStorageObject(vim.Datastore(datastore, si._stub)),
        )
        return [str(i.id) for i in found or []]

    def _cluster_tag(self, cluster: str) -> tuple[str, str]:
        """Find or create the cluster's tag (and its category) in the tagging service."""
        category = self.settings.cluster_tag_category
        categories = {
            c.name: c.id for c in self.tag_call("ListCategories", lambda c: c.list_categories())
        }
        category_id = categories.get(category) or self.tag_call(
            "CreateCategory", lambda c: c.create_category(category, cardinality="MULTIPLE")
        )
        tags = {
            t.name: t.id
            for t in self.tag_call("ListTags", lambda c: c.tags_in_category(category_id))
        }
        if cluster not in tags:
            self.tag_call("CreateTag", lambda c: c.create_tag(cluster, category_id))
        return category, cluster

    def _disk_tags(self, disk: str) -> list[tuple[str, str]]:
        found = self.call(
            "ListTagsAttachedToVStorageObject",
            lambda si: self._manager(si).ListTagsAttachedToVStorageObject(vim.vslm.ID(id=disk)),
        )
        return [(str(t.parentCategoryName), str(t.tagName)) for t in found or []]

    def _tag_disk(self, disk: str, cluster: str) -> None:
        category, tag = self._cluster_tag(cluster)
        self.call(
            "AttachTagToVStorageObject",
            lambda si: self._manager(si).AttachTagToVStorageObject(
                vim.vslm.ID(id=disk), category, tag
            ),
        )

    def _volume(self, datastore: str, obj: Any, zones: dict[str, list[str]]) -> models.Volume:
        config = obj.config
        disk = str(config.id.id)
        vid = volume_id(datastore, disk)
        consumers = [str(c.id).lower() for c in config.consumerId or []]
        attachments = [
            models.Attachment(volume_id=vid, instance_id=c, device=disk, state="attached")
            for c in consumers
        ]
        return models.Volume(
            id=vid,
            size_gib=int(config.capacityInMB) // MB_PER_GIB,
            zone=(zones.get(datastore) or [""])[0],
            state="in-use" if consumers else "available",
            attached_to=consumers,
            name=str(config.name),
            attachments=attachments,
        )

    def _vm(self, instance_id: str) -> Any:
        vm = self.call(
            "FindByUuid",
            lambda si: si.content.searchIndex.FindByUuid(None, instance_id, True, None),
        )
        if vm is None:
            raise errors.NotFound(PROVIDER, "FindByUuid", f"no VM with BIOS UUID {instance_id}")
        return vm

    def _candidate_datastores(self) -> list[DatastoreView]:
        stores = self.datastores()
        zoned = self.datastore_zones()
        tagged = [d for d in stores if zoned.get(d.moref)]
        return tagged or stores

    # -- the contract ----------------------------------------------------------------------
    def find_volume(self, name: str, cluster: str) -> models.Volume | None:
        zones = self.datastore_zones()
        matches: list[tuple[Any, str, Any]] = []
        for store in self._candidate_datastores():
            for disk in self._list(store.moref):
                try:
                    obj = self._retrieve(store.moref, disk)
                except errors.NotFound:
                    continue  # deleted meanwhile
                if str(obj.config.name) == name:
                    matches.append((obj.config.createTime, store.moref, obj))
        matches.sort(key=lambda m: m[0])
        for _, datastore, obj in matches:
            disk = str(obj.config.id.id)
            owners = [
                t for c, t in self._disk_tags(disk) if c == self.settings.cluster_tag_category
            ]
            if owners and cluster not in owners:
                continue  # another cluster's disk of the same name
            if not owners and cluster:
                log.info("vsphere: adopting untagged disk %s named %s", disk, name)
                self._tag_disk(disk, cluster)
            return self._volume(datastore, obj, zones)
        return None

    def get_volume(self, volume_id: str) -> models.Volume:
        datastore, disk = parse_volume_id(volume_id)
        obj = self._retrieve(datastore, disk)
        return self._volume(datastore, obj, self.datastore_zones())

    def create_volume(self, spec: models.VolumeSpec) -> models.Volume:
        stores = self._candidate_datastores()
        zones = self.datastore_zones()
        wanted = spec.volume_type or self.settings.default_datastore
        if wanted:
            stores = [d for d in stores if wanted in (d.name, d.url, d.moref)]
        if spec.zone:
            stores = [d for d in stores if spec.zone in zones.get(d.moref, [])]
        if not stores:
            raise errors.ResourceExhausted(
                PROVIDER,
                "CreateDisk",
                f"no datastore for zone {spec.zone or '(any)'} and type {wanted or '(any)'}",
            )
        store = stores[0]

        def create(si: Any) -> str:
            create_spec = vim.vslm.CreateSpec(
                name=spec.name,
                capacityInMB=spec.size_gib * MB_PER_GIB,
                keepAfterDeleteVm=True,
                backingSpec=vim.vslm.CreateSpec.DiskFileBackingSpec(
                    datastore=vim.Datastore(store.moref, si._stub), provisioningType="thin"
                ),
            )
            if self.settings.storage_policy_id:
                create_spec.profile = [
                    vim.vm.DefinedProfileSpec(profileId=self.settings.storage_policy_id)
                ]
            return str(self._manager(si).CreateDisk_Task(create_spec)._moId)

        task = self.call("CreateDisk", create)
        obj = self.wait_task("CreateDisk", task)
        disk = str(obj.config.id.id)
        if spec.cluster:
            self._tag_disk(disk, spec.cluster)
        return self._volume(store.moref, obj, zones)

    def delete_volume(self, volume_id: str) -> None:
        datastore, disk = parse_volume_id(volume_id)
        obj = self._retrieve(datastore, disk)
        if obj.config.consumerId:
            raise errors.FailedPrecondition(
                PROVIDER, "DeleteVStorageObject", f"volume {volume_id} is attached"
            )
        task = self.call(
            "DeleteVStorageObject",
            lambda si: str(
                self._manager(si)
                .DeleteVStorageObject_Task(vim.vslm.ID(id=disk), vim.Datastore(datastore, si._stub))
                ._moId
            ),
        )
        self.wait_task("DeleteVStorageObject", task)

    def _disk_tasks_in_flight(self, vm_moref: str) -> list[str]:
        """The VM's queued or running attach/detach tasks (from ``recentTask``, in one read)."""

        def read(si: Any) -> list[Any]:
            spec = PC.FilterSpec(
                objectSet=[
                    PC.ObjectSpec(
                        obj=vim.VirtualMachine(vm_moref, si._stub),
                        skip=True,
                        selectSet=[
                            PC.TraversalSpec(
                                name="recent",
                                type=vim.VirtualMachine,
                                path="recentTask",
                                skip=False,
                            )
                        ],
                    )
                ],
                propSet=[
                    PC.PropertySpec(type=vim.Task, pathSet=["info.descriptionId", "info.state"])
                ],
            )
            return list(si.content.propertyCollector.RetrieveContents([spec]) or [])

        running = []
        for obj in self.call("RetrieveRecentTasks", read):
            props = {p.name: p.val for p in obj.propSet}
            if props.get("info.descriptionId") in DISK_TASKS and str(props.get("info.state")) in (
                "queued",
                "running",
            ):
                running.append(str(obj.obj._moId))
        return running

    def _settle(self, vm_moref: str) -> bool:
        """Wait for the VM's in-flight attach/detach tasks (a killed worker's); ``True`` when
        there were any (their outcome is then read from the disk, whatever it was)."""
        pending = self._disk_tasks_in_flight(vm_moref)
        for task in pending:
            log.info("vsphere: waiting for disk task %s on VM %s", task, vm_moref)
            try:
                self.wait_task("DiskTaskInFlight", task)
            except errors.NotFound:
                continue  # the task aged out of vCenter's memory
            except errors.CloudError as exc:
                if not exc.retryable:
                    continue  # it failed; the disk says what is left to do
                raise
        return bool(pending)

    def _refuse_other_consumer(self, current: models.Volume) -> None:
        if current.attachments:
            raise errors.FailedPrecondition(
                PROVIDER,
                "AttachDisk",
                f"volume {current.id} is attached to {current.attachments[0].instance_id}",
            )

    def attach_volume(self, volume: models.Volume, instance_id: str) -> models.Attachment:
        datastore, disk = parse_volume_id(volume.id)
        current = self.get_volume(volume.id)
        mine = next((a for a in current.attachments if a.instance_id == instance_id), None)
        if mine is not None:
            return mine
        self._refuse_other_consumer(current)
        vm = self._vm(instance_id)
        if self._settle(vm._moId):
            current = self.get_volume(volume.id)
            mine = next((a for a in current.attachments if a.instance_id == instance_id), None)
            if mine is not None:
                return mine
            self._refuse_other_consumer(current)
        task = self.call(
            "AttachDisk",
            lambda si: str(
                vim.VirtualMachine(vm._moId, si._stub)
                .AttachDisk_Task(
                    diskId=vim.vslm.ID(id=disk), datastore=vim.Datastore(datastore, si._stub)
                )
                ._moId
            ),
        )
        self.wait_task("AttachDisk", task)
        return models.Attachment(
            volume_id=volume.id, instance_id=instance_id, device=disk, state="attached"
        )

    def detach_volume(self, volume_id: str, instance_id: str) -> None:
        _, disk = parse_volume_id(volume_id)
        current = self.get_volume(volume_id)
        if instance_id not in current.attached_to:
            return
        vm = self._vm(instance_id)
        if self._settle(vm._moId) and instance_id not in self.get_volume(volume_id).attached_to:
            return
        task = self.call(
            "DetachDisk",
            lambda si: str(
                vim.VirtualMachine(vm._moId, si._stub)
                .DetachDisk_Task(diskId=vim.vslm.ID(id=disk))
                ._moId
            ),
        )
        self.wait_task("DetachDisk", task)

    def expand_volume(self, volume_id: str, size_gib: int) -> models.VolumeModification:
        datastore, disk = parse_volume_id(volume_id)
        current = self.get_volume(volume_id)
        if size_gib < current.size_gib:
            raise errors.OutOfRange(
                PROVIDER, "ExtendDisk", f"{size_gib} GiB is smaller than {current.size_gib} GiB"
            )
        if size_gib > current.size_gib:
            task = self.call(
                "ExtendDisk",
                lambda si: str(
                    self._manager(si)
                    .ExtendDisk_Task(
                        vim.vslm.ID(id=disk),
                        vim.Datastore(datastore, si._stub),
                        size_gib * MB_PER_GIB,
                    )
                    ._moId
                ),
            )
            self.wait_task("ExtendDisk", task)
        return models.VolumeModification(
            volume_id=volume_id, state="completed", target_size_gib=size_gib
        )

    def get_volume_modification(self, volume_id: str) -> models.VolumeModification | None:
        """FCD extends finish within :meth:`expand_volume`: the size read is the last target."""
        volume = self.get_volume(volume_id)
        return models.VolumeModification(
            volume_id=volume_id, state="completed", target_size_gib=volume.size_gib
        )

    def list_cluster_disks(self, cluster: str) -> list[models.Disk]:
        """Every FCD tagged for ``cluster`` (one tag query, then one read per disk)."""
        category = self.settings.cluster_tag_category
        try:
            ids = self.call(
                "ListVStorageObjectsAttachedToTag",
                lambda si: self._manager(si).ListVStorageObjectsAttachedToTag(category, cluster),
            )
        except errors.NotFound:
            return []  # no such tag: no disk was ever tagged for the cluster
        wanted = {str(i.id) for i in ids or []}
        zones = self.datastore_zones()
        disks: list[models.Disk] = []
        for store in self.datastores():
            for disk in self._list(store.moref):
                if disk not in wanted:
                    continue
                volume = self._volume(store.moref, self._retrieve(store.moref, disk), zones)
                disks.append(
                    models.Disk(
                        id=volume.id,
                        name=volume.name,
                        zone=volume.zone,
                        size_gib=volume.size_gib,
                        state=volume.state,
                        tags={category: cluster},
                    )
                )
        return disks
