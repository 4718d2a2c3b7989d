"""vSphere volumes on first-class disks (FCD, ``VStorageObjectManager``) with CSI semantics.

A volume is an FCD named after the volume (the PV name) on a datastore chosen by zone, tagged
with the cluster's tag; attach/detach use the VM's ``AttachDisk_Task``/``DetachDisk_Task``.
Why FCDs, not CNS volumes: docs/decisions/0042-vsphere-volumes-on-first-class-disks.md.

Rules:
- Identity: the volume ID is ``<datastore moref>:<FCD id>``; the cluster tag marks ownership.
- Create finds by name on the cluster's datastores first (an untagged FCD, from a crashed create,
  is adopted and tagged; another cluster's is never taken; of several the oldest wins), after
  waiting for the ``createDisk`` tasks vCenter still runs: a retry never makes a second disk.
- Attach and detach read the FCD's consumer first and wait for a task a killed worker left on
  the VM (``recentTask``), never issuing a second; a disk another VM consumes is
  ``FailedPrecondition``. Delete refuses an attached FCD; a missing one is ``NotFound``.
- Topology: a volume's zone is its datastore's zone tag; a create for a zone takes the first
  datastore (by name) carrying it; the key is ``topology.csi.vmware.com/<zone tag category>``.
- CSI as vsphere-csi: parameters ``DatastoreURL``, ``StoragePolicyName`` (case-insensitive, others
  refused); one StorageClass per zoned datastore of the discovery data; 59 volumes per node; the
  guest's disk ``/dev/disk/by-id/wwn-0x<SCSI UUID>``; GetCapacity the free space. No snapshots.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

from cloudloop.cloud import errors, models
from cloudloop.cloud.driver import VolumeDefaults
from cloudloop.cloud.vsphere.base import VsphereBase
from cloudloop.cloud.vsphere.datastores import DatastoreView, VsphereDatastores
from cloudloop.cloud.vsphere.mapping import PROVIDER
from cloudloop.cloud.vsphere.settings import DEFAULT_ZONE_CATEGORY
from cloudloop.cloud.vsphere.vmomi import PC, vim

log = logging.getLogger(__name__)

MB_PER_GIB = 1024
#: The VM tasks that change which disks it consumes (``TaskInfo.descriptionId``).
DISK_TASKS = frozenset({"VirtualMachine.attachDisk", "VirtualMachine.detachDisk"})
#: A first-class-disk create (``TaskInfo.descriptionId`` ends so; vcsim:
#: ``VcenterVStorageObjectManager.createDisk``).
CREATE_TASK_SUFFIX = ".createDisk"
#: vsphere-csi's StorageClass parameters (matched lower-cased, as it does).
DATASTORE_URL_PARAMETER = "datastoreurl"
STORAGE_POLICY_PARAMETER = "storagepolicyname"
#: vsphere-csi's topology keys: this prefix and the tag category.
TOPOLOGY_PREFIX = "topology.csi.vmware.com/"
#: vsphere-csi's default ``MAX_VOLUMES_PER_NODE`` (4 paravirtual SCSI controllers).
MAX_VOLUMES = 59
_NOT_DNS = re.compile(r"[^a-z0-9]+")


def volume_id(datastore: str, disk_id: str) -> str:
    return f"{datastore}:{disk_id}"


def storage_class_name(datastore: str) -> str:
    """A StorageClass name for a datastore, shaped as Deckhouse slugs it: lower case, runs of
    other characters as ``-``, and a hash of the name appended when it had to change (so two
    names that slug alike stay apart; Deckhouse's hash is murmur3, this one SHA-256)."""
    slug = _NOT_DNS.sub("-", datastore.lower()).strip("-")[:54]
    if slug == datastore:
        return slug
    digest = hashlib.sha256(datastore.encode()).hexdigest()[:8]
    return f"{slug}-{digest}" if slug else digest


def parse_volume_id(value: str) -> tuple[str, str]:
    """``(datastore moref, FCD id)``; :class:`NotFound` for a malformed ID (it cannot exist)."""
    datastore, sep, disk = value.partition(":")
    if not sep or not datastore.startswith("datastore-") or not disk:
        raise errors.NotFound(PROVIDER, "ParseVolumeId", f"{value!r} is not a vSphere volume ID")
    return datastore, disk


def fcd_manager(si: Any) -> Any:
    """vCenter's ``VStorageObjectManager`` (built by hand when pyvmomi, against vcsim, has
    none in the service content)."""
    manager = si.content.vStorageObjectManager
    if manager is None:
        manager = vim.vslm.vcenter.VStorageObjectManager("VStorageObjectManager", si._stub)
    return manager


class VsphereVolumes(VolumeDefaults):
    provider = PROVIDER
    zonal_volumes = True
    max_volumes_per_node = MAX_VOLUMES

    def __init__(self, session: VsphereBase, stores: VsphereDatastores) -> None:
        self.session = session
        #: The datastores, their zones and the storage policies volumes are placed by.
        self.stores = stores

    @property
    def volume_topology_key(self) -> str:
        try:
            category = self.session.connection().zone_category
        except errors.CloudError:  # a configuration error shows at the first cloud call
            category = self.session.settings.zone_tag_category or DEFAULT_ZONE_CATEGORY
        return f"{TOPOLOGY_PREFIX}{category}"

    # -- helpers -----------------------------------------------------------------------------
    def _manager(self, si: Any) -> Any:
        return fcd_manager(si)

    def _retrieve(self, datastore: str, disk: str) -> Any:
        return self.session.call(
            "RetrieveVStorageObject",
            lambda si: self._manager(si).RetrieveVStorageObject(
                vim.vslm.ID(id=disk), vim.Datastore(datastore, si._stub)
            ),
        )

    def _list(self, datastore: str) -> list[str]:
        found = self.session.call(
            "ListVStorageObject",
            lambda si: self._manager(si).ListVStorageObject(vim.Datastore(datastore, si._stub)),
        )
        return [str(i.id) for i in found or []]

    def _cluster_tag(self, cluster: str) -> tuple[str, str]:
        """Find or create the cluster's tag (and its category) in the tagging service."""
        category = self.session.settings.cluster_tag_category
        categories = {
            c.name: c.id
            for c in self.session.tag_call("ListCategories", lambda c: c.list_categories())
        }
        category_id = categories.get(category) or self.session.tag_call(
            "CreateCategory", lambda c: c.create_category(category, cardinality="MULTIPLE")
        )
        tags = {
            t.name: t.id
            for t in self.session.tag_call("ListTags", lambda c: c.tags_in_category(category_id))
        }
        if cluster not in tags:
            self.session.tag_call("CreateTag", lambda c: c.create_tag(cluster, category_id))
        return category, cluster

    def _disk_tags(self, disk: str) -> list[tuple[str, str]]:
        found = self.session.call(
            "ListTagsAttachedToVStorageObject",
            lambda si: self._manager(si).ListTagsAttachedToVStorageObject(vim.vslm.ID(id=disk)),
        )
        return [(str(t.parentCategoryName), str(t.tagName)) for t in found or []]

    def _tag_disk(self, disk: str, cluster: str) -> None:
        category, tag = self._cluster_tag(cluster)
        self.session.call(
            "AttachTagToVStorageObject",
            lambda si: self._manager(si).AttachTagToVStorageObject(
                vim.vslm.ID(id=disk), category, tag
            ),
        )

    def _volume(
        self,
        datastore: str,
        obj: Any,
        zones: dict[str, list[str]],
        serials: dict[str, str] | None = None,
    ) -> models.Volume:
        config = obj.config
        disk = str(config.id.id)
        vid = volume_id(datastore, disk)
        consumers = [str(c.id).lower() for c in config.consumerId or []]
        attachments = [
            models.Attachment(
                volume_id=vid,
                instance_id=c,
                state="attached",
                serial=(serials or {}).get(c, ""),
            )
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

    def _read(self, volume_id: str, *, serials: bool = False) -> models.Volume:
        """The volume; with ``serials``, each attachment's disk serial read from its VM."""
        datastore, disk = parse_volume_id(volume_id)
        obj = self._retrieve(datastore, disk)
        found: dict[str, str] = {}
        if serials:
            for consumer in obj.config.consumerId or []:
                instance = str(consumer.id).lower()
                found[instance] = self._disk_serial(instance, disk)
        return self._volume(datastore, obj, self.stores.datastore_zones(), found)

    def _disk_serial(self, instance_id: str, disk: str) -> str:
        """The SCSI UUID (``wwn-0x`` form) of the VM's virtual disk backed by the FCD ``disk``;
        "" when the VM or the device is not there (vcsim adds no device on attach)."""
        try:
            vm = self._vm(instance_id)
        except errors.NotFound:
            return ""

        def read(si: Any) -> list[Any]:
            spec = PC.FilterSpec(
                objectSet=[PC.ObjectSpec(obj=vim.VirtualMachine(vm._moId, si._stub))],
                propSet=[
                    PC.PropertySpec(type=vim.VirtualMachine, pathSet=["config.hardware.device"])
                ],
            )
            found = si.content.propertyCollector.RetrieveContents([spec]) or []
            props = {p.name: p.val for o in found for p in o.propSet}
            return list(props.get("config.hardware.device") or [])

        try:
            devices = self.session.call("ReadVmDevices", read)
        except errors.NotFound:
            return ""
        for device in devices:
            if not isinstance(device, vim.vm.device.VirtualDisk):
                continue
            vdisk = getattr(device, "vDiskId", None)
            uuid = getattr(device.backing, "uuid", None)
            if vdisk is not None and str(vdisk.id) == disk and uuid:
                return str(uuid).replace("-", "").replace(" ", "").lower()
        return ""

    def _vm(self, instance_id: str) -> Any:
        vm = self.session.call(
            "FindByUuid",
            lambda si: si.content.searchIndex.FindByUuid(None, instance_id, True, None),
        )
        if vm is None:
            raise errors.NotFound(PROVIDER, "FindByUuid", f"no VM with BIOS UUID {instance_id}")
        return vm

    def _candidate_datastores(self) -> list[DatastoreView]:
        stores = self.stores.datastores()
        zoned = self.stores.datastore_zones()
        tagged = [d for d in stores if zoned.get(d.moref)]
        return tagged or stores

    def _parameters(self, parameters: dict[str, str], operation: str) -> dict[str, str]:
        """The StorageClass parameters by lower-cased key (vsphere-csi's rule); others refused."""
        lowered = {k.lower(): v for k, v in parameters.items()}
        unknown = sorted(set(lowered) - {DATASTORE_URL_PARAMETER, STORAGE_POLICY_PARAMETER})
        if unknown:
            raise errors.InvalidRequest(PROVIDER, operation, f"unknown parameters {unknown}")
        return lowered

    def _datastores_for(
        self, parameters: dict[str, str], wanted: str, operation: str
    ) -> list[DatastoreView]:
        """The datastores a volume of these parameters may go to: the ``DatastoreURL`` one,
        else the one ``wanted`` names (a type or ``default_datastore``), else every candidate."""
        stores = self._candidate_datastores()
        url = parameters.get(DATASTORE_URL_PARAMETER, "")
        if url:
            by_url = [d for d in self.stores.datastores() if d.url.rstrip("/") == url.rstrip("/")]
            if not by_url:
                raise errors.InvalidRequest(PROVIDER, operation, f"no datastore at {url}")
            return by_url
        if wanted:
            return [d for d in stores if wanted in (d.name, d.url, d.moref)]
        return stores

    def _policy_id(self, parameters: dict[str, str]) -> str:
        """The storage policy of ``StoragePolicyName`` (by name, through PBM), else the setting."""
        name = parameters.get(STORAGE_POLICY_PARAMETER, "")
        if not name:
            return self.session.settings.storage_policy_id
        for policy in self.stores.storage_policies():
            if policy["name"] == name:
                return policy["id"]
        raise errors.InvalidRequest(PROVIDER, "CreateDisk", f"no storage policy named {name!r}")

    # -- the contract ----------------------------------------------------------------------
    def find_volume(self, name: str, cluster: str) -> models.Volume | None:
        zones = self.stores.datastore_zones()
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
                t
                for c, t in self._disk_tags(disk)
                if c == self.session.settings.cluster_tag_category
            ]
            if owners and cluster not in owners:
                continue  # another cluster's disk of the same name
            if not owners and cluster:
                log.info("vsphere: adopting untagged disk %s named %s", disk, name)
                self._tag_disk(disk, cluster)
            return self._volume(datastore, obj, zones)
        return None

    def get_volume(self, volume_id: str) -> models.Volume:
        return self._read(volume_id, serials=True)

    def list_volumes(self, cluster: str) -> list[models.Volume]:
        """Every FCD tagged for ``cluster`` (one tag query, then one read per disk)."""
        category = self.session.settings.cluster_tag_category
        try:
            ids = self.session.call(
                "ListVStorageObjectsAttachedToTag",
                lambda si: self._manager(si).ListVStorageObjectsAttachedToTag(category, cluster),
            )
        except errors.NotFound:
            return []  # no such tag: no disk was ever tagged for the cluster
        wanted = {str(i.id) for i in ids or []}
        if not wanted:
            return []
        zones = self.stores.datastore_zones()
        volumes: list[models.Volume] = []
        for store in self.stores.datastores():
            for disk in self._list(store.moref):
                if disk not in wanted:
                    continue
                try:
                    obj = self._retrieve(store.moref, disk)
                except errors.NotFound:
                    continue  # deleted meanwhile
                volumes.append(self._volume(store.moref, obj, zones))
        return sorted(volumes, key=lambda v: v.id)

    def storage_classes(self, discovery: dict[str, Any]) -> list[models.StorageClassSpec]:
        """One per zoned datastore of the discovery data (``datastores``), limited to its zones
        that the cluster uses, with ``DatastoreURL`` (and ``StoragePolicyName`` for the
        configured ``storage_policy_id``), as Deckhouse's ``cloud-provider-vsphere``; the
        ``default_datastore`` class is the default, else the first by name."""
        cluster_zones = {str(z) for z in discovery.get("zones") or []}
        policy = next(
            (
                str(p.get("name"))
                for p in discovery.get("storagePolicies") or []
                if self.session.settings.storage_policy_id
                and p.get("id") == self.session.settings.storage_policy_id
            ),
            "",
        )
        specs: dict[str, models.StorageClassSpec] = {}
        for entry in sorted(discovery.get("datastores") or [], key=lambda d: str(d.get("name"))):
            name, url = str(entry.get("name") or ""), str(entry.get("datastoreURL") or "")
            zones = sorted(str(z) for z in entry.get("zones") or [])
            if cluster_zones:
                zones = [z for z in zones if z in cluster_zones]
            if not name or not url or not zones:
                continue
            parameters = {"DatastoreURL": url}
            if policy:
                parameters["StoragePolicyName"] = policy
            default = bool(self.session.settings.default_datastore) and (
                self.session.settings.default_datastore in (name, url)
            )
            specs.setdefault(
                storage_class_name(name),
                models.StorageClassSpec(
                    name=storage_class_name(name),
                    parameters=parameters,
                    default=default,
                    zones=zones,
                ),
            )
        classes = sorted(specs.values(), key=lambda c: c.name)
        if classes and not any(c.default for c in classes):
            classes[0] = classes[0].model_copy(update={"default": True})
        return classes

    def volume_capacity(self, parameters: dict[str, str]) -> int:
        """Free bytes of the datastore a volume of these parameters would go to."""
        params = self._parameters(parameters, "GetCapacity")
        stores = self._datastores_for(
            params, self.session.settings.default_datastore, "GetCapacity"
        )
        return stores[0].free_bytes if stores else 0

    def create_volume(self, spec: models.VolumeSpec) -> models.Volume:
        params = self._parameters(spec.parameters, "CreateDisk")
        wanted = spec.volume_type or self.session.settings.default_datastore
        stores = self._datastores_for(params, wanted, "CreateDisk")
        zones = self.stores.datastore_zones()
        if spec.zone:
            stores = [d for d in stores if spec.zone in zones.get(d.moref, [])]
        if not stores:
            raise errors.ResourceExhausted(
                PROVIDER,
                "CreateDisk",
                f"no datastore for zone {spec.zone or '(any)'} and type {wanted or '(any)'}",
            )
        store = stores[0]
        policy = self._policy_id(params)
        if self._settle_creates():  # a killed worker's create may have made the disk meanwhile
            found = self.find_volume(spec.name, spec.cluster)
            if found is not None:
                return found

        def create(si: Any) -> str:
            create_spec = vim.vslm.CreateSpec(
                name=spec.name,
                capacityInMB=spec.size_gib * MB_PER_GIB,
                keepAfterDeleteVm=True,
                backingSpec=vim.vslm.CreateSpec.DiskFileBackingSpec(
                    datastore=vim.Datastore(store.moref, si._stub), provisioningType="thin"
                ),
            )
            if policy:
                create_spec.profile = [vim.vm.DefinedProfileSpec(profileId=policy)]
            return str(self._manager(si).CreateDisk_Task(create_spec)._moId)

        task = self.session.call("CreateDisk", create)
        obj = self.session.wait_task("CreateDisk", task)
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
        task = self.session.call(
            "DeleteVStorageObject",
            lambda si: str(
                self._manager(si)
                .DeleteVStorageObject_Task(vim.vslm.ID(id=disk), vim.Datastore(datastore, si._stub))
                ._moId
            ),
        )
        self.session.wait_task("DeleteVStorageObject", task)

    def _tasks_in_flight(self, holder: Any, holder_type: Any, wanted: Any) -> list[str]:
        """The queued or running tasks in ``holder``'s ``recentTask`` whose ``descriptionId``
        ``wanted`` accepts (one read)."""

        def read(si: Any) -> list[Any]:
            spec = PC.FilterSpec(
                objectSet=[
                    PC.ObjectSpec(
                        obj=holder(si),
                        skip=True,
                        selectSet=[
                            PC.TraversalSpec(
                                name="recent", type=holder_type, path="recentTask", skip=False
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
        for obj in self.session.call("RetrieveRecentTasks", read):
            props = {p.name: p.val for p in obj.propSet}
            if wanted(str(props.get("info.descriptionId") or "")) and str(
                props.get("info.state")
            ) in ("queued", "running"):
                running.append(str(obj.obj._moId))
        return running

    def _disk_tasks_in_flight(self, vm_moref: str) -> list[str]:
        """The VM's queued or running attach/detach tasks (from ``recentTask``, in one read)."""
        return self._tasks_in_flight(
            lambda si: vim.VirtualMachine(vm_moref, si._stub),
            vim.VirtualMachine,
            lambda description: description in DISK_TASKS,
        )

    def _wait_for(self, pending: list[str], what: str, where: str = "") -> bool:
        """Wait for ``pending`` tasks (a killed worker's); ``True`` when there were any (their
        outcome is then read from the cloud, whatever it was)."""
        for task in pending:
            log.info("vsphere: waiting for %s task %s%s", what, task, where)
            try:
                self.session.wait_task("TaskInFlight", task)
            except errors.NotFound:
                continue  # the task aged out of vCenter's memory
            except errors.CloudError as exc:
                if not exc.retryable:
                    continue  # it failed; the cloud says what is left to do
                raise
        return bool(pending)

    def _settle(self, vm_moref: str) -> bool:
        """Wait for the VM's in-flight attach/detach tasks."""
        return self._wait_for(self._disk_tasks_in_flight(vm_moref), "disk", f" on VM {vm_moref}")

    def _settle_creates(self) -> bool:
        """Wait for vCenter's in-flight ``createDisk`` tasks (``TaskManager.recentTask``)."""
        pending = self._tasks_in_flight(
            lambda si: si.content.taskManager,
            vim.TaskManager,
            lambda description: description.endswith(CREATE_TASK_SUFFIX),
        )
        return self._wait_for(pending, "createDisk")

    def _refuse_other_consumer(self, current: models.Volume) -> None:
        if current.attachments:
            raise errors.FailedPrecondition(
                PROVIDER,
                "AttachDisk",
                f"volume {current.id} is attached to {current.attachments[0].instance_id}",
            )

    def _mine(self, volume_id: str, instance_id: str) -> models.Attachment | None:
        current = self.get_volume(volume_id)
        return next((a for a in current.attachments if a.instance_id == instance_id), None)

    def attach_volume(self, volume: models.Volume, instance_id: str) -> models.Attachment:
        datastore, disk = parse_volume_id(volume.id)
        current = self._read(volume.id)
        if any(a.instance_id == instance_id for a in current.attachments):
            return self._mine(volume.id, instance_id) or current.attachments[0]
        self._refuse_other_consumer(current)
        vm = self._vm(instance_id)
        if self._settle(vm._moId):
            current = self._read(volume.id)
            if any(a.instance_id == instance_id for a in current.attachments):
                return self._mine(volume.id, instance_id) or current.attachments[0]
            self._refuse_other_consumer(current)
        task = self.session.call(
            "AttachDisk",
            lambda si: str(
                vim.VirtualMachine(vm._moId, si._stub)
                .AttachDisk_Task(
                    diskId=vim.vslm.ID(id=disk), datastore=vim.Datastore(datastore, si._stub)
                )
                ._moId
            ),
        )
        self.session.wait_task("AttachDisk", task)
        return self._mine(volume.id, instance_id) or models.Attachment(
            volume_id=volume.id, instance_id=instance_id, state="attached"
        )

    def detach_volume(self, volume_id: str, instance_id: str) -> None:
        _, disk = parse_volume_id(volume_id)
        current = self._read(volume_id)
        if instance_id not in current.attached_to:
            return
        vm = self._vm(instance_id)
        if self._settle(vm._moId) and instance_id not in self._read(volume_id).attached_to:
            return
        task = self.session.call(
            "DetachDisk",
            lambda si: str(
                vim.VirtualMachine(vm._moId, si._stub)
                .DetachDisk_Task(diskId=vim.vslm.ID(id=disk))
                ._moId
            ),
        )
        self.session.wait_task("DetachDisk", task)

    def expand_volume(self, volume_id: str, size_gib: int) -> models.VolumeModification:
        datastore, disk = parse_volume_id(volume_id)
        current = self._read(volume_id)
        if size_gib < current.size_gib:
            raise errors.OutOfRange(
                PROVIDER, "ExtendDisk", f"{size_gib} GiB is smaller than {current.size_gib} GiB"
            )
        if size_gib > current.size_gib:
            task = self.session.call(
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
            self.session.wait_task("ExtendDisk", task)
        return models.VolumeModification(
            volume_id=volume_id, state="completed", target_size_gib=size_gib
        )

    def get_volume_modification(self, volume_id: str) -> models.VolumeModification | None:
        """FCD extends finish within :meth:`expand_volume`: the size read is the last target."""
        volume = self._read(volume_id)
        return models.VolumeModification(
            volume_id=volume_id, state="completed", target_size_gib=volume.size_gib
        )

    def list_cluster_disks(self, cluster: str) -> list[models.Disk]:
        """Every FCD tagged for ``cluster`` (:meth:`list_volumes`), for the orphan gauges."""
        category = self.session.settings.cluster_tag_category
        return [
            models.Disk(
                id=volume.id,
                name=volume.name,
                zone=volume.zone,
                size_gib=volume.size_gib,
                state=volume.state,
                tags={category: cluster},
            )
            for volume in self.list_volumes(cluster)
        ]
