"""Volume activities: one per CSI operation, each issuing its cloud change and then waiting for
the result in the same activity, heartbeating its progress.

Every activity first reads what the cloud already has, so a retry after a worker crash continues
instead of repeating: create finds its volume by the ID in the heartbeat details (or the
``resume`` a local attempt handed over) or by its tags, attach finds the existing attachment,
detach and expand see what is already done. Cloud errors become ``ApplicationError`` with the
error kind as ``type`` (see :mod:`activities.cloud`).

Run as a local activity (the workflows' first attempt), an activity sends no heartbeat, and a
wait for the cloud that outlasts ``LOCAL_WAIT_S`` stops with ``HAND_OVER`` and its progress: the
workflow goes on with the same activity as a heartbeating one.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, CancelledError

from activities.budget import LocalBudget
from activities.cloud import check_provider, cloud_errors
from cloudloop.cloud import errors
from cloudloop.cloud.driver import Discovery, Instances, Snapshots, Volumes
from cloudloop.cloud.models import Attachment, SnapshotSpec, Volume, VolumeSpec
from cloudloop.messages.volume import (
    HAND_OVER,
    AttachResult,
    AttachVolumeInput,
    CreateSnapshotInput,
    CreateVolumeInput,
    CreateVolumeResult,
    DeleteSnapshotInput,
    DeleteVolumeInput,
    DeleteVolumeResult,
    DetachResult,
    DetachVolumeInput,
    ExpandResult,
    ExpandVolumeInput,
    ModifyResult,
    ModifyVolumeInput,
    ReadVolumesInput,
    ReadVolumesResult,
    SnapshotResult,
    VolumeActivity,
    VolumeInput,
)
from cloudloop.rules.volume import choose_zone, incompatibility

T = TypeVar("T")

#: First pause between two reads of a state being waited for; it grows to ``POLL_MAX_S``.
POLL_FIRST_S = 0.1
POLL_MAX_S = 3.0
#: How often a side thread heartbeats while the activity is busy (the SDK batches the sends).
KEEPALIVE_S = 1.0
#: A local attempt waits this long for the cloud, then hands the wait over.
LOCAL_WAIT_S = 5.0
_LIVE_ATTACHMENT = {"attaching", "attached", "busy"}


def _progress(input: VolumeInput) -> dict[str, Any]:
    """What the previous attempt heartbeated, or what the local attempt handed over (empty on
    the first attempt)."""
    details = activity.info().heartbeat_details
    if details and isinstance(details[0], Mapping):
        return dict(details[0])
    return dict(input.resume)


def _listed(input: ModifyVolumeInput) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(input.parameters.items()))


def _beat(progress: Mapping[str, Any]) -> None:
    """Heartbeat ``progress`` (a local activity has no heartbeat: the SDK keeps its workflow
    task alive)."""
    if not activity.info().is_local:
        activity.heartbeat(dict(progress))


def _client_token() -> str:
    """The cloud idempotency token of this workflow run's create (stable across retries)."""
    info = activity.info()
    return hashlib.sha256(f"{info.workflow_id}/{info.workflow_run_id}".encode()).hexdigest()


def _attachment_to(volume: Volume, instance_id: str) -> Attachment | None:
    return next((a for a in volume.attachments if a.instance_id == instance_id), None)


@contextlib.contextmanager
def _alive(progress: dict[str, Any]) -> Iterator[None]:
    """Heartbeat ``progress`` now and then from a side thread until the block ends.

    A cloud call may block the activity's thread for longer than the heartbeat timeout (SDK
    retries, slow answers); the side thread keeps the heartbeat going, so the timeout notices a
    dead worker only, and a slow call is never run twice at once by a second attempt. (Each
    heartbeat waits for the worker's event loop, so the fast path sends none.)
    """
    if activity.info().is_local:
        yield
        return
    context = contextvars.copy_context()  # the activity's context, for heartbeat()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(KEEPALIVE_S):
            context.run(activity.heartbeat, dict(progress))

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class VolumeActivities:
    """The CSI operations on the cloud's volumes and snapshots; ``instances`` turns a CSI node
    ID into an instance, ``discovery`` says which zones are up."""

    def __init__(
        self,
        volumes: Volumes,
        snapshots: Snapshots,
        instances: Instances,
        discovery: Discovery,
        *,
        provider: str,
        local_budget: LocalBudget | None = None,
    ) -> None:
        self.volumes = volumes
        self.snapshots = snapshots
        self.instances = instances
        self.discovery = discovery
        self.provider = provider
        #: The local attempts' own rate (the queue's rate limit does not count them).
        self.local_budget = local_budget or LocalBudget(None)

    def _check_provider(self, provider: str) -> None:
        check_provider(provider, self.provider)
        if activity.info().is_local and not self.local_budget.take():
            raise ApplicationError(
                "the worker's local budget is spent: handed to a heartbeating activity",
                {},
                type=HAND_OVER,
                non_retryable=True,
            )

    def _wait(self, what: str, check: Callable[[], T | None], progress: Mapping[str, Any]) -> T:
        """Read until ``check`` returns something, heartbeating ``progress`` between reads; a
        local attempt hands over after ``LOCAL_WAIT_S``."""
        delay = POLL_FIRST_S
        local_until = time.monotonic() + LOCAL_WAIT_S if activity.info().is_local else None
        while True:
            found = check()
            if found is not None:
                return found
            if local_until is not None and time.monotonic() >= local_until:
                raise ApplicationError(
                    f"still waiting for {what}: handed to a heartbeating activity",
                    dict(progress),
                    type=HAND_OVER,
                    non_retryable=True,
                )
            _beat(progress)
            activity.wait_for_cancelled_sync(delay)
            if activity.is_cancelled():
                raise CancelledError(f"cancelled while waiting for {what}")
            delay = min(delay * 1.5, POLL_MAX_S)

    # -- create ----------------------------------------------------------------------------
    @activity.defn(name=VolumeActivity.CREATE)
    def create(self, input: CreateVolumeInput) -> CreateVolumeResult:
        progress = _progress(input)
        with cloud_errors(), _alive(progress):
            self._check_provider(input.provider)
            volume: Volume | None = None
            if progress.get("volume_id"):  # a previous attempt created it: resume waiting
                with contextlib.suppress(errors.NotFound):
                    volume = self.volumes.get_volume(str(progress["volume_id"]))
            if volume is None:
                volume = self.volumes.find_volume(input.name, input.cluster)
                reason = incompatibility(volume, input) if volume is not None else None
                if reason:
                    raise errors.AlreadyExists(self.provider, "CreateVolume", reason)
            if volume is None:
                if input.snapshot_id:  # CSI: a missing source is NOT_FOUND, before any create
                    self.snapshots.get_snapshot(input.snapshot_id)
                volume = self._create(input, progress)
            progress["volume_id"] = volume.id
            volume_id = volume.id
            ready = self._wait(
                f"volume {volume_id} available", lambda: self._usable(volume_id), progress
            )
            return CreateVolumeResult(volume=ready)

    def _create(self, input: CreateVolumeInput, progress: dict[str, Any]) -> Volume:
        created = self.volumes.create_volume(self._spec(input))
        progress["volume_id"] = created.id
        _beat(progress)
        activity.logger.info("created volume %s for %s", created.id, input.name)
        # Two attempts that raced (a cloud without idempotency tokens) each made one: all keep
        # the oldest, and the others remove their own.
        oldest = self.volumes.find_volume(input.name, input.cluster)
        if oldest is None or oldest.id == created.id:
            return created
        activity.logger.warning("%s duplicates %s: deleting it", created.id, oldest.id)
        with contextlib.suppress(errors.NotFound):
            self.volumes.delete_volume(created.id)
        return oldest

    def _spec(self, input: CreateVolumeInput) -> VolumeSpec:
        zones = [z.name for z in self.discovery.zones() if z.state == "available"]
        zone = choose_zone(input.topology, zones)
        if zone is None:
            raise errors.ResourceExhausted(
                self.provider,
                "CreateVolume",
                f"no zone fits: requisite {input.topology.requisite}, available {sorted(zones)}",
            )
        return VolumeSpec(
            name=input.name,
            size_gib=input.size_gib,
            zone=zone,
            volume_type=input.volume_type,
            tags=input.tags,
            cluster=input.cluster,
            client_token=_client_token(),
            parameters=input.parameters,
            snapshot_id=input.snapshot_id,
        )

    def _usable(self, volume_id: str) -> Volume | None:
        volume = self.volumes.get_volume(volume_id)
        if volume.state in ("available", "in-use"):
            return volume
        if volume.state == "error":
            # Unusable for good: remove it, so the retry creates a fresh one.
            self.volumes.delete_volume(volume_id)
            raise errors.CloudError(
                self.provider, "CreateVolume", f"volume {volume_id} failed (error state)"
            )
        return None

    # -- delete ----------------------------------------------------------------------------
    @activity.defn(name=VolumeActivity.DELETE)
    def delete(self, input: DeleteVolumeInput) -> DeleteVolumeResult:
        with cloud_errors(), _alive({}):
            self._check_provider(input.provider)
            try:
                volume = self.volumes.get_volume(input.volume_id)
            except errors.NotFound:
                return DeleteVolumeResult(message=f"volume {input.volume_id} does not exist")
            live = [a for a in volume.attachments if a.state in _LIVE_ATTACHMENT | {"detaching"}]
            if live:
                raise errors.FailedPrecondition(
                    self.provider,
                    "DeleteVolume",
                    f"volume {volume.id} is attached to node {live[0].instance_id}",
                )
            if volume.state not in ("deleting", "deleted"):
                with contextlib.suppress(errors.NotFound):
                    self.volumes.delete_volume(volume.id)
            return DeleteVolumeResult(message=f"volume {volume.id} deleted")

    # -- attach ----------------------------------------------------------------------------
    @activity.defn(name=VolumeActivity.ATTACH)
    def attach(self, input: AttachVolumeInput) -> AttachResult:
        progress: dict[str, Any] = {"node_id": input.node_id}
        with cloud_errors(), _alive(progress):
            self._check_provider(input.provider)
            # The CSI node ID is the instance ID (NodeGetInfo); a providerID names it too.
            try:
                instance_id = self.instances.instance_id_from_provider_id(input.node_id)
            except errors.InvalidRequest:
                instance_id = input.node_id  # the driver answers NotFound for an unknown one
            volume = self.volumes.get_volume(input.volume_id)
            mine = _attachment_to(volume, instance_id)
            if mine is not None and mine.state == "detaching":
                self._wait(
                    f"volume {volume.id} detached from {instance_id}",
                    lambda: self._detached(volume.id, {instance_id}),
                    progress,
                )
                mine = None
            if mine is None or mine.state not in _LIVE_ATTACHMENT:
                others = [
                    a.instance_id
                    for a in volume.attachments
                    if a.instance_id != instance_id and a.state in _LIVE_ATTACHMENT | {"detaching"}
                ]
                if others and not input.multi_node:
                    raise errors.FailedPrecondition(
                        self.provider,
                        "AttachVolume",
                        f"volume {volume.id} is attached to node {others[0]}",
                    )
                mine = self.volumes.attach_volume(volume, instance_id)
                activity.logger.info(
                    "attaching %s to %s as %s", volume.id, instance_id, mine.device
                )
            progress["device"] = mine.device
            attached = self._wait(
                f"volume {volume.id} attached to {instance_id}",
                lambda: self._attached(volume.id, instance_id),
                progress,
            )
            context = {"devicePath": attached.device} if attached.device else {}
            if attached.serial:
                context["serial"] = attached.serial
            return AttachResult(device=attached.device, publish_context=context)

    def _attached(self, volume_id: str, instance_id: str) -> Attachment | None:
        mine = _attachment_to(self.volumes.get_volume(volume_id), instance_id)
        return mine if mine is not None and mine.state == "attached" else None

    # -- detach ----------------------------------------------------------------------------
    @activity.defn(name=VolumeActivity.DETACH)
    def detach(self, input: DetachVolumeInput) -> DetachResult:
        progress: dict[str, Any] = {"node_id": input.node_id}
        with cloud_errors(), _alive(progress):
            self._check_provider(input.provider)
            try:
                volume = self.volumes.get_volume(input.volume_id)
            except errors.NotFound:
                return DetachResult(message=f"volume {input.volume_id} does not exist")
            nodes: set[str] = set()
            if input.node_id:
                nodes.add(input.node_id)
                with contextlib.suppress(errors.InvalidRequest):
                    nodes.add(self.instances.instance_id_from_provider_id(input.node_id))
            targets = [
                a
                for a in volume.attachments
                if a.state != "detached" and (not nodes or a.instance_id in nodes)
            ]
            if not targets:
                return DetachResult(message=f"volume {volume.id} is not attached there")
            for attachment in targets:
                if attachment.state != "detaching":
                    try:
                        self.volumes.detach_volume(volume.id, attachment.instance_id)
                    except errors.NotFound:
                        return DetachResult(message=f"volume {volume.id} does not exist")
            instances = {a.instance_id for a in targets}
            progress["detaching_from"] = sorted(instances)
            self._wait(
                f"volume {volume.id} detached from {sorted(instances)}",
                lambda: self._detached(volume.id, instances),
                progress,
            )
            return DetachResult(message=f"volume {volume.id} detached")

    def _detached(self, volume_id: str, instance_ids: set[str]) -> bool | None:
        try:
            volume = self.volumes.get_volume(volume_id)
        except errors.NotFound:
            return True
        still = [
            a for a in volume.attachments if a.instance_id in instance_ids and a.state != "detached"
        ]
        return None if still else True

    # -- expand ----------------------------------------------------------------------------
    @activity.defn(name=VolumeActivity.EXPAND)
    def expand(self, input: ExpandVolumeInput) -> ExpandResult:
        progress: dict[str, Any] = {"target_size_gib": input.size_gib}
        with cloud_errors(), _alive(progress):
            self._check_provider(input.provider)
            volume = self.volumes.get_volume(input.volume_id)
            # The type's limits, known now (the controller checked the largest of any type).
            self.volumes.check_volume_size(input.size_gib, volume.volume_type)
            if volume.size_gib >= input.size_gib:
                return ExpandResult(
                    size_gib=volume.size_gib,
                    message=f"volume {volume.id} already has {volume.size_gib} GiB",
                )
            running = self.volumes.get_volume_modification(volume.id)
            joining = (
                running is not None
                and running.state in ("modifying", "optimizing")
                and running.target_size_gib >= input.size_gib
            )
            if not joining:
                self.volumes.expand_volume(volume.id, input.size_gib)
                activity.logger.info("expanding %s to %d GiB", volume.id, input.size_gib)
            size = self._wait(
                f"volume {volume.id} grown to {input.size_gib} GiB",
                lambda: self._grown(volume.id, input.size_gib),
                progress,
            )
            return ExpandResult(size_gib=size, message=f"volume {volume.id} has {size} GiB")

    def _grown(self, volume_id: str, size_gib: int) -> int | None:
        modification = self.volumes.get_volume_modification(volume_id)
        if modification is None or modification.target_size_gib < size_gib:
            size = self.volumes.get_volume(volume_id).size_gib
            return size if size >= size_gib else None
        if modification.state == "failed":
            raise errors.FailedPrecondition(
                self.provider,
                "ModifyVolume",
                f"resizing {volume_id} failed: {modification.message or 'no reason given'}",
            )
        if modification.state in ("optimizing", "completed"):
            return modification.target_size_gib
        return None

    # -- modify (ControllerModifyVolume) ---------------------------------------------------
    @activity.defn(name=VolumeActivity.MODIFY)
    def modify(self, input: ModifyVolumeInput) -> ModifyResult:
        """Change the volume to the mutable parameters and wait until it has them; a volume
        that already has them is left alone (no cloud change, so no cooldown spent). The
        cloud's cooldown is a result (``cooldown_s``): the workflow waits on a timer."""
        progress: dict[str, Any] = {"parameters": dict(input.parameters)}
        with cloud_errors(), _alive(progress):
            self._check_provider(input.provider)
            volume = self.volumes.get_volume(input.volume_id)
            changes = self.volumes.volume_changes(volume, input.parameters)
            if not changes:
                return ModifyResult(message=f"volume {volume.id} already has {_listed(input)}")
            self._wait(
                f"no modification of {volume.id} in progress",
                lambda: self._settled(volume.id),
                progress,
            )
            try:
                self.volumes.modify_volume(volume, input.parameters)
            except errors.ModificationCooldown as err:
                activity.logger.info("%s: cooldown, %.0f s left", volume.id, err.retry_after_s)
                return ModifyResult(cooldown_s=max(err.retry_after_s, 1.0), message=err.message)
            activity.logger.info("modifying %s: %s", volume.id, sorted(changes))
            self._wait(
                f"volume {volume.id} modified to {_listed(input)}",
                lambda: self._modified(volume.id, input.parameters),
                progress,
            )
            return ModifyResult(message=f"volume {volume.id} has {_listed(input)}")

    def _settled(self, volume_id: str) -> bool | None:
        """True when no earlier modification is still ``modifying`` (the cloud refuses a second
        one meanwhile); a modification that only optimizes takes a new one."""
        running = self.volumes.get_volume_modification(volume_id)
        return None if running is not None and running.state == "modifying" else True

    def _modified(self, volume_id: str, parameters: Mapping[str, str]) -> bool | None:
        modification = self.volumes.get_volume_modification(volume_id)
        if modification is not None and modification.state == "failed":
            raise errors.FailedPrecondition(
                self.provider,
                "ModifyVolume",
                f"modifying {volume_id} failed: {modification.message or 'no reason given'}",
            )
        volume = self.volumes.get_volume(volume_id)
        return None if self.volumes.volume_changes(volume, parameters) else True

    # -- reads ---------------------------------------------------------------------------
    @activity.defn(name=VolumeActivity.READ)
    def read(self, input: ReadVolumesInput) -> ReadVolumesResult:
        """One read, no change: the volume, the cluster's volumes, capacity, the cluster's
        snapshots or one snapshot."""
        with cloud_errors():
            self._check_provider(input.provider)
            if input.kind == "volume":
                return ReadVolumesResult(volumes=[self.volumes.get_volume(input.volume_id)])
            if input.kind == "volumes":
                return ReadVolumesResult(volumes=self.volumes.list_volumes(input.cluster))
            if input.kind == "capacity":
                return ReadVolumesResult(
                    capacity_bytes=self.volumes.volume_capacity(input.parameters)
                )
            if input.kind == "snapshot":
                return ReadVolumesResult(snapshots=[self.snapshots.get_snapshot(input.snapshot_id)])
            return ReadVolumesResult(snapshots=self.snapshots.list_snapshots(input.cluster))

    # -- snapshots -------------------------------------------------------------------------
    @activity.defn(name=VolumeActivity.CREATE_SNAPSHOT)
    def create_snapshot(self, input: CreateSnapshotInput) -> SnapshotResult:
        """Find the snapshot taken for the name or start one; never waits for it to complete
        (CSI: ``ready_to_use`` false, the caller asks again)."""
        with cloud_errors(), _alive({}):
            self._check_provider(input.provider)
            found = self.snapshots.find_snapshot(input.name, input.cluster)
            if found is not None:
                if found.source_volume_id != input.source_volume_id:
                    raise errors.AlreadyExists(
                        self.provider,
                        "CreateSnapshot",
                        f"snapshot {input.name!r} exists as {found.id} of volume "
                        f"{found.source_volume_id}, not {input.source_volume_id}",
                    )
                return SnapshotResult(snapshot=found)
            self.volumes.get_volume(input.source_volume_id)  # NOT_FOUND for a missing source
            made = self.snapshots.create_snapshot(
                SnapshotSpec(
                    name=input.name,
                    source_volume_id=input.source_volume_id,
                    cluster=input.cluster,
                    tags=input.tags,
                    client_token=_client_token(),
                )
            )
            activity.logger.info(
                "snapshot %s of %s for %s", made.id, made.source_volume_id, input.name
            )
            oldest = self.snapshots.find_snapshot(input.name, input.cluster)
            if oldest is not None and oldest.id != made.id:  # a racing attempt made one too
                with contextlib.suppress(errors.NotFound):
                    self.snapshots.delete_snapshot(made.id)
                return SnapshotResult(snapshot=oldest)
            return SnapshotResult(snapshot=made)

    @activity.defn(name=VolumeActivity.DELETE_SNAPSHOT)
    def delete_snapshot(self, input: DeleteSnapshotInput) -> SnapshotResult:
        with cloud_errors(), _alive({}):
            self._check_provider(input.provider)
            try:
                self.snapshots.delete_snapshot(input.snapshot_id)
            except errors.NotFound:
                return SnapshotResult(message=f"snapshot {input.snapshot_id} does not exist")
            return SnapshotResult(message=f"snapshot {input.snapshot_id} deleted")

    def all(self) -> list[object]:
        activities: list[object] = [
            self.create,
            self.delete,
            self.attach,
            self.detach,
            self.expand,
            self.modify,
            self.read,
        ]
        return [*activities, self.create_snapshot, self.delete_snapshot]
