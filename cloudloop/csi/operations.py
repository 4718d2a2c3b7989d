"""The volume contract a CSI controller calls: one method per controller RPC, each returning a
result with a CSI code (never raising for a cloud's answer).

A call checks the request (``INVALID_ARGUMENT``, ``OUT_OF_RANGE`` before any workflow starts:
the CSI rules, then the cloud's own limits through ``limits``, the configured cloud's driver,
whose ``check_volume_request``/``check_volume_size`` call no cloud), then starts the operation's
workflow under its deterministic ID with conflict policy ``USE_EXISTING`` and the request's
fingerprint in the memo:

- nothing runs under the ID: the workflow starts;
- the same request runs (a retried RPC): the call joins it and returns its result;
- another request on the same volume runs: the call returns ``ABORTED`` ("operation pending")
  naming it, and the caller retries later, as CSI sidecars do.

A finished workflow does not block its ID (reuse policy ``ALLOW_DUPLICATE``): repeating a
finished request starts a new run, which reads the cloud first and so returns the same answer
(same volume, same device) while nothing changed, and the right one when something did (attach,
detach, attach again).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError, TerminatedError

from cloudloop import searchattrs
from cloudloop.cloud import errors
from cloudloop.cloud.registry import Settings
from cloudloop.messages.scope import scoped_id
from cloudloop.messages.volume import (
    AttachResult,
    AttachVolumeInput,
    AttachVolumeRequest,
    Code,
    CreateSnapshotInput,
    CreateSnapshotRequest,
    CreateVolumeInput,
    CreateVolumeRequest,
    CreateVolumeResult,
    DeleteSnapshotInput,
    DeleteSnapshotRequest,
    DeleteVolumeInput,
    DeleteVolumeRequest,
    DeleteVolumeResult,
    DetachResult,
    DetachVolumeInput,
    DetachVolumeRequest,
    ExpandResult,
    ExpandVolumeInput,
    ExpandVolumeRequest,
    ModifyResult,
    ModifyVolumeInput,
    ModifyVolumeRequest,
    ReadKind,
    ReadVolumesInput,
    ReadVolumesResult,
    SnapshotResult,
    VolumeInput,
    VolumeResult,
    VolumeWorkflow,
    code_for,
    create_workflow_id,
    modify_workflow_id,
    operation_name,
    read_workflow_id,
    snapshot_create_workflow_id,
    snapshot_workflow_id,
    volume_workflow_id,
)
from cloudloop.rules.requests import fingerprint
from cloudloop.rules.volume import RequestRejected, check_request, size_gib
from cloudloop.settings import Domain
from cloudloop.temporal import started_run

log = logging.getLogger(__name__)

R = TypeVar("R", bound=VolumeResult)


class VolumeLimits(Protocol):
    """The cloud's own refusals, made without calling it (the driver's volumes part is one)."""

    def check_volume_request(
        self, size_gib: int, parameters: Mapping[str, str], volume_type: str = ""
    ) -> None: ...

    def check_volume_size(self, size_gib: int, volume_type: str = "") -> None: ...

    def check_volume_modification(self, parameters: Mapping[str, str]) -> None: ...


#: Search-attribute kind of every volume workflow (``CloudloopKind='Volume'``).
VOLUME_KIND = "Volume"


class VolumeOperations:
    """Starts or joins the volume workflows on ``task_queue`` for ``cluster``'s volumes."""

    @classmethod
    def from_settings(
        cls, client: Client, settings: Settings, *, limits: VolumeLimits | None = None
    ) -> VolumeOperations:
        return cls(
            client,
            task_queue=settings.temporal.queue_for(Domain.VOLUME),
            cluster=settings.cluster_name,
            provider=settings.provider,
            limits=limits,
            id_scope=settings.temporal.id_scope,
        )

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str,
        cluster: str,
        provider: str,
        limits: VolumeLimits | None = None,
        id_scope: str = "",
    ) -> None:
        self.client = client
        #: The cluster's workflow-ID scope: another cluster's volume of the same ID (or CSI
        #: name) never joins this one's workflow (``TemporalSettings.id_scope``).
        self.id_scope = id_scope
        self.task_queue = task_queue
        self.cluster = cluster
        self.provider = provider
        #: The cloud's limits, checked before any workflow starts (None: the cloud answers).
        self.limits = limits

    def _check_limits(
        self, size: int, parameters: Mapping[str, str] | None = None, volume_type: str = ""
    ) -> None:
        """The cloud's refusal of a size or a new volume (an expand: ``parameters`` None)."""
        if parameters is None:
            self._refused_by_cloud(lambda limits: limits.check_volume_size(size, volume_type))
        else:
            self._refused_by_cloud(
                lambda limits: limits.check_volume_request(size, parameters, volume_type)
            )

    def _refused_by_cloud(self, check: Callable[[VolumeLimits], None]) -> None:
        """``check`` of the cloud's limits; its refusal as :class:`RequestRejected`."""
        if self.limits is None:
            return
        try:
            check(self.limits)
        except errors.CloudError as err:
            log.warning("refused before any workflow (%s): %s", err.kind, err.message)
            raise RequestRejected(code_for(err.kind), err.message) from None

    async def create(
        self, request: CreateVolumeRequest, *, timeout: float | None = None
    ) -> CreateVolumeResult:
        try:
            check_request(request)
            size = size_gib(request.capacity)
            self._check_limits(size, request.parameters, volume_type=request.volume_type)
        except RequestRejected as err:
            return CreateVolumeResult(code=err.code, message=err.message)
        input = CreateVolumeInput(
            cluster=self.cluster,
            provider=self.provider,
            name=request.name,
            size_gib=size,
            volume_type=request.volume_type,
            topology=request.topology,
            tags=request.tags,
            parameters=request.parameters,
            snapshot_id=request.snapshot_id,
        )
        return await self._run(
            VolumeWorkflow.CREATE,
            input,
            workflow_id=create_workflow_id(request.name),
            operation=create_workflow_id(request.name),
            subject=request.name,
            result_type=CreateVolumeResult,
            timeout=timeout,
        )

    async def delete(
        self, request: DeleteVolumeRequest, *, timeout: float | None = None
    ) -> DeleteVolumeResult:
        try:
            check_request(request)
        except RequestRejected as err:
            return DeleteVolumeResult(code=err.code, message=err.message)
        input = DeleteVolumeInput(
            cluster=self.cluster, provider=self.provider, volume_id=request.volume_id
        )
        return await self._run(
            VolumeWorkflow.DELETE,
            input,
            workflow_id=volume_workflow_id(request.volume_id),
            operation=operation_name("volume-delete", request.volume_id),
            subject=request.volume_id,
            result_type=DeleteVolumeResult,
            timeout=timeout,
        )

    async def attach(
        self, request: AttachVolumeRequest, *, timeout: float | None = None
    ) -> AttachResult:
        try:
            check_request(request)
        except RequestRejected as err:
            return AttachResult(code=err.code, message=err.message)
        input = AttachVolumeInput(
            cluster=self.cluster,
            provider=self.provider,
            volume_id=request.volume_id,
            node_id=request.node_id,
            multi_node=request.multi_node,
        )
        return await self._run(
            VolumeWorkflow.ATTACH,
            input,
            workflow_id=volume_workflow_id(request.volume_id),
            operation=operation_name("attach", request.volume_id, request.node_id),
            subject=request.volume_id,
            result_type=AttachResult,
            timeout=timeout,
        )

    async def detach(
        self, request: DetachVolumeRequest, *, timeout: float | None = None
    ) -> DetachResult:
        try:
            check_request(request)
        except RequestRejected as err:
            return DetachResult(code=err.code, message=err.message)
        input = DetachVolumeInput(
            cluster=self.cluster,
            provider=self.provider,
            volume_id=request.volume_id,
            node_id=request.node_id,
        )
        return await self._run(
            VolumeWorkflow.DETACH,
            input,
            workflow_id=volume_workflow_id(request.volume_id),
            operation=operation_name("detach", request.volume_id, request.node_id or None),
            subject=request.volume_id,
            result_type=DetachResult,
            timeout=timeout,
        )

    async def expand(
        self, request: ExpandVolumeRequest, *, timeout: float | None = None
    ) -> ExpandResult:
        try:
            check_request(request)
            size = size_gib(request.capacity)
            self._check_limits(size)
        except RequestRejected as err:
            return ExpandResult(code=err.code, message=err.message)
        input = ExpandVolumeInput(
            cluster=self.cluster,
            provider=self.provider,
            volume_id=request.volume_id,
            size_gib=size,
        )
        return await self._run(
            VolumeWorkflow.EXPAND,
            input,
            workflow_id=volume_workflow_id(request.volume_id),
            operation=operation_name("expand", request.volume_id),
            subject=request.volume_id,
            result_type=ExpandResult,
            timeout=timeout,
        )

    async def modify(
        self, request: ModifyVolumeRequest, *, timeout: float | None = None
    ) -> ModifyResult:
        """CSI ControllerModifyVolume: a workflow of its own per volume (``volume-modify/``), so
        a change waiting out the cloud's cooldown blocks no attach or detach."""
        try:
            check_request(request)
            self._refused_by_cloud(
                lambda limits: limits.check_volume_modification(request.parameters)
            )
        except RequestRejected as err:
            return ModifyResult(code=err.code, message=err.message)
        input = ModifyVolumeInput(
            cluster=self.cluster,
            provider=self.provider,
            volume_id=request.volume_id,
            parameters=request.parameters,
        )
        return await self._run(
            VolumeWorkflow.MODIFY,
            input,
            workflow_id=modify_workflow_id(request.volume_id),
            operation=operation_name("modify", request.volume_id),
            subject=request.volume_id,
            result_type=ModifyResult,
            timeout=timeout,
        )

    async def create_snapshot(
        self, request: CreateSnapshotRequest, *, timeout: float | None = None
    ) -> SnapshotResult:
        try:
            check_request(request)
        except RequestRejected as err:
            return SnapshotResult(code=err.code, message=err.message)
        input = CreateSnapshotInput(
            cluster=self.cluster,
            provider=self.provider,
            name=request.name,
            source_volume_id=request.source_volume_id,
            tags=request.tags,
        )
        workflow_id = snapshot_create_workflow_id(request.name)
        return await self._run(
            VolumeWorkflow.CREATE_SNAPSHOT,
            input,
            workflow_id=workflow_id,
            operation=workflow_id,
            subject=request.name,
            result_type=SnapshotResult,
            timeout=timeout,
        )

    async def delete_snapshot(
        self, request: DeleteSnapshotRequest, *, timeout: float | None = None
    ) -> SnapshotResult:
        try:
            check_request(request)
        except RequestRejected as err:
            return SnapshotResult(code=err.code, message=err.message)
        input = DeleteSnapshotInput(
            cluster=self.cluster, provider=self.provider, snapshot_id=request.snapshot_id
        )
        return await self._run(
            VolumeWorkflow.DELETE_SNAPSHOT,
            input,
            workflow_id=snapshot_workflow_id(request.snapshot_id),
            operation=operation_name("snapshot-delete", request.snapshot_id),
            subject=request.snapshot_id,
            result_type=SnapshotResult,
            timeout=timeout,
        )

    async def read(
        self,
        kind: ReadKind,
        *,
        volume_id: str = "",
        snapshot_id: str = "",
        parameters: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> ReadVolumesResult:
        """A read (one volume, the cluster's volumes, capacity, snapshots) through a short
        workflow: the worker holds the cloud credentials, this process never does. Reads take
        no per-volume lock, so they run beside a pending operation."""
        input = ReadVolumesInput(
            cluster=self.cluster,
            provider=self.provider,
            kind=kind,
            volume_id=volume_id,
            snapshot_id=snapshot_id,
            parameters=parameters or {},
        )
        workflow_id = read_workflow_id(kind, uuid.uuid4().hex)
        handle = await self.client.start_workflow(
            VolumeWorkflow.READ,
            input,
            id=workflow_id,
            task_queue=self.task_queue,
            result_type=ReadVolumesResult,
            search_attributes=searchattrs.for_object(
                cluster=self.cluster,
                provider=self.provider,
                kind=VOLUME_KIND,
                namespace="",
                name=volume_id or snapshot_id or kind,
            ),
            static_summary=f"read {kind} {volume_id or snapshot_id}".strip(),
            request_eager_start=True,
        )
        try:
            return await asyncio.wait_for(handle.result(), timeout)
        except TimeoutError:
            return ReadVolumesResult(
                code=Code.DEADLINE_EXCEEDED,
                message=f"read {kind} still running (workflow {workflow_id})",
                workflow_id=workflow_id,
            )
        except WorkflowFailureError as err:
            return ReadVolumesResult(
                code=Code.INTERNAL,
                message=f"read {kind} failed (workflow {workflow_id}): {err.cause or err}",
                workflow_id=workflow_id,
            )

    async def _run(
        self,
        workflow_type: str,
        input: VolumeInput,
        *,
        workflow_id: str,
        operation: str,
        subject: str,
        result_type: type[R],
        timeout: float | None,
    ) -> R:
        """Start or join the workflow; refuse (ABORTED) when it runs another request."""
        workflow_id = scoped_id(self.id_scope, workflow_id)
        request = fingerprint(input)
        started = await self.client.start_workflow(
            workflow_type,
            input,
            id=workflow_id,
            task_queue=self.task_queue,
            result_type=result_type,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            memo={"operation": operation, "request": request},
            search_attributes=searchattrs.for_object(
                cluster=self.cluster,
                provider=self.provider,
                kind=VOLUME_KIND,
                namespace="",
                name=subject,
            ),
            static_summary=f"{operation} {subject}",
            request_eager_start=True,
        )
        run = self.client.get_workflow_handle(
            workflow_id, run_id=started.result_run_id, result_type=result_type
        )
        # Await the result while checking whose run it is, so the check costs no extra time;
        # a run this call started is this request's, and needs no check.
        result: asyncio.Future[R] = asyncio.ensure_future(asyncio.wait_for(run.result(), timeout))
        memo: Mapping[str, Any] = {"request": request}
        if not started_run(started):
            try:
                memo = await (await run.describe()).memo()
            except BaseException:
                result.cancel()
                raise
        if memo.get("request") != request:
            result.cancel()
            return result_type(
                code=Code.ABORTED,
                message=(
                    f"operation pending: {memo.get('operation', workflow_type)} is running "
                    f"(workflow {workflow_id}); retry {operation} when it has finished"
                ),
                workflow_id=workflow_id,
            )
        try:
            return await result
        except TimeoutError:
            return result_type(
                code=Code.DEADLINE_EXCEEDED,
                message=f"{operation} still running (workflow {workflow_id}); repeat to join it",
                workflow_id=workflow_id,
            )
        except WorkflowFailureError as err:
            stopped = isinstance(err.cause, TerminatedError | CancelledError)
            return result_type(
                code=Code.ABORTED if stopped else Code.INTERNAL,
                message=f"{operation} failed (workflow {workflow_id}): {err.cause or err}",
                workflow_id=workflow_id,
            )
