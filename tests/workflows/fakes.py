"""Fake activities registered under the product's stable activity names, answering from a script.

One class per capability, each method named and typed as the real activity it stands for
(``activities/<feature>.py``); ``test_fakes.py`` checks that names, input and result types stay
the same as the real ones. ``all()`` lists what a test worker registers.

Rules: no fake does I/O or keeps state of its own; everything a call returns (or raises, or
waits for) is in the :class:`~tests.workflows.scripted.Script` the test wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import activity

from cloudloop.layouts import tfstate
from cloudloop.layouts.model import LayoutDef
from cloudloop.messages.kube import KubeActivity, PatchStatusInput, RecordEventInput
from cloudloop.messages.layout import (
    CheckApplyInput,
    CheckDestroyInput,
    DefineInput,
    LayoutActivity,
    MapStateInput,
    PlanModuleInput,
    PlanModuleResult,
    StepInput,
    StepResult,
)
from cloudloop.messages.layout_converge import ConvergeActivity, ReportInput, ReportResult
from cloudloop.messages.loadbalancer import (
    DeleteLoadBalancerInput,
    EnsureLoadBalancerInput,
    EnsureLoadBalancerResult,
    LoadBalancerActivity,
    LoadBalancerFound,
    LoadBalancerLookup,
    ResyncLoadBalancerInput,
    ResyncLoadBalancerResult,
    UpdateBackendsInput,
)
from cloudloop.messages.machine import (
    CreateMachineInput,
    DeleteMachineInput,
    DeleteMachineResult,
    MachineActivity,
    ObserveMachineInput,
    ObserveMachineResult,
    RemoveFinalizerInput,
    ReportMachineInput,
)
from cloudloop.messages.probe import CloudCallInput, ProbeActivity, ZoneList
from cloudloop.messages.termination import (
    CordonNodeInput,
    DrainActivity,
    EvictPodsInput,
    EvictPodsResult,
    LifecycleActionInput,
    ListPodsInput,
    OutcomeInput,
    PodPlan,
    QueueInfo,
    QueueRulesInput,
    QueueSpec,
    TaintNodeInput,
    WaitVolumeAttachmentsInput,
    WebhookInput,
)
from cloudloop.messages.volume import (
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
)
from tests.workflows.scripted import Script


class Fakes:
    def __init__(self, script: Script) -> None:
        self.script = script

    def all(self) -> list[Callable[..., Any]]:
        return [
            getattr(self, name)
            for name, member in type(self).__dict__.items()
            if hasattr(member, "__temporal_activity_definition")
        ]


class FakeKube(Fakes):
    @activity.defn(name=KubeActivity.PATCH_STATUS)
    async def patch_status(self, input: PatchStatusInput) -> bool:
        return await self.script.answer(KubeActivity.PATCH_STATUS, input, bool)

    @activity.defn(name=KubeActivity.RECORD_EVENT)
    async def record_event(self, input: RecordEventInput) -> None:
        await self.script.answer(KubeActivity.RECORD_EVENT, input, type(None))


class FakeProbe(Fakes):
    @activity.defn(name=ProbeActivity.DISCOVER_ZONES)
    async def discover_zones(self, input: CloudCallInput) -> ZoneList:
        return await self.script.answer(ProbeActivity.DISCOVER_ZONES, input, ZoneList)


class FakeLoadBalancer(Fakes):
    @activity.defn(name=LoadBalancerActivity.ENSURE)
    async def ensure_load_balancer(
        self, input: EnsureLoadBalancerInput
    ) -> EnsureLoadBalancerResult:
        return await self.script.answer(
            LoadBalancerActivity.ENSURE, input, EnsureLoadBalancerResult
        )

    @activity.defn(name=LoadBalancerActivity.UPDATE_BACKENDS)
    async def update_backends(self, input: UpdateBackendsInput) -> None:
        await self.script.answer(LoadBalancerActivity.UPDATE_BACKENDS, input, type(None))

    @activity.defn(name=LoadBalancerActivity.RESYNC)
    async def resync_load_balancer(
        self, input: ResyncLoadBalancerInput
    ) -> ResyncLoadBalancerResult:
        return await self.script.answer(
            LoadBalancerActivity.RESYNC, input, ResyncLoadBalancerResult
        )

    @activity.defn(name=LoadBalancerActivity.GET)
    async def get_load_balancer(self, input: LoadBalancerLookup) -> LoadBalancerFound:
        return await self.script.answer(LoadBalancerActivity.GET, input, LoadBalancerFound)

    @activity.defn(name=LoadBalancerActivity.DELETE)
    async def delete_load_balancer(self, input: DeleteLoadBalancerInput) -> bool:
        return await self.script.answer(LoadBalancerActivity.DELETE, input, bool)


class FakeMachine(Fakes):
    @activity.defn(name=MachineActivity.CREATE)
    async def create(self, input: CreateMachineInput) -> ObserveMachineResult:
        return await self.script.answer(MachineActivity.CREATE, input, ObserveMachineResult)

    @activity.defn(name=MachineActivity.OBSERVE)
    async def observe(self, input: ObserveMachineInput) -> ObserveMachineResult:
        return await self.script.answer(MachineActivity.OBSERVE, input, ObserveMachineResult)

    @activity.defn(name=MachineActivity.DELETE)
    async def delete(self, input: DeleteMachineInput) -> DeleteMachineResult:
        return await self.script.answer(MachineActivity.DELETE, input, DeleteMachineResult)

    @activity.defn(name=MachineActivity.REPORT)
    async def report(self, input: ReportMachineInput) -> bool:
        return await self.script.answer(MachineActivity.REPORT, input, bool)

    @activity.defn(name=MachineActivity.REMOVE_FINALIZER)
    async def remove_finalizer(self, input: RemoveFinalizerInput) -> bool:
        return await self.script.answer(MachineActivity.REMOVE_FINALIZER, input, bool)


class FakeDrain(Fakes):
    @activity.defn(name=DrainActivity.TAINT_NODE)
    async def taint_node(self, input: TaintNodeInput) -> bool:
        return await self.script.answer(DrainActivity.TAINT_NODE, input, bool)

    @activity.defn(name=DrainActivity.CORDON_NODE)
    async def cordon_node(self, input: CordonNodeInput) -> bool:
        return await self.script.answer(DrainActivity.CORDON_NODE, input, bool)

    @activity.defn(name=DrainActivity.LIST_PODS)
    async def list_pods(self, input: ListPodsInput) -> PodPlan:
        return await self.script.answer(DrainActivity.LIST_PODS, input, PodPlan)

    @activity.defn(name=DrainActivity.EVICT_PODS)
    async def evict_pods(self, input: EvictPodsInput) -> EvictPodsResult:
        return await self.script.answer(DrainActivity.EVICT_PODS, input, EvictPodsResult)

    @activity.defn(name=DrainActivity.WAIT_VOLUME_ATTACHMENTS)
    async def wait_volume_attachments(self, input: WaitVolumeAttachmentsInput) -> list[str]:
        return await self.script.answer(DrainActivity.WAIT_VOLUME_ATTACHMENTS, input, list)

    @activity.defn(name=DrainActivity.SEND_WEBHOOK)
    async def send_webhook(self, input: WebhookInput) -> bool:
        return await self.script.answer(DrainActivity.SEND_WEBHOOK, input, bool)

    @activity.defn(name=DrainActivity.RECORD_OUTCOME)
    async def record_outcome(self, input: OutcomeInput) -> None:
        await self.script.answer(DrainActivity.RECORD_OUTCOME, input, type(None))

    @activity.defn(name=DrainActivity.COMPLETE_LIFECYCLE_ACTION)
    async def complete_lifecycle_action(self, input: LifecycleActionInput) -> bool:
        return await self.script.answer(DrainActivity.COMPLETE_LIFECYCLE_ACTION, input, bool)

    @activity.defn(name=DrainActivity.RECORD_LIFECYCLE_HEARTBEAT)
    async def record_lifecycle_heartbeat(self, input: LifecycleActionInput) -> bool:
        return await self.script.answer(DrainActivity.RECORD_LIFECYCLE_HEARTBEAT, input, bool)

    @activity.defn(name=DrainActivity.ENSURE_QUEUE)
    async def ensure_queue(self, input: QueueSpec) -> QueueInfo:
        return await self.script.answer(DrainActivity.ENSURE_QUEUE, input, QueueInfo)

    @activity.defn(name=DrainActivity.ENSURE_QUEUE_RULES)
    async def ensure_queue_rules(self, input: QueueRulesInput) -> list[str]:
        return await self.script.answer(DrainActivity.ENSURE_QUEUE_RULES, input, list[str])

    @activity.defn(name=DrainActivity.ENSURE_LIFECYCLE_HOOKS)
    async def ensure_lifecycle_hooks(self, input: QueueSpec) -> list[str]:
        return await self.script.answer(DrainActivity.ENSURE_LIFECYCLE_HOOKS, input, list[str])

    @activity.defn(name=DrainActivity.REMOVE_QUEUE)
    async def remove_queue(self, input: QueueSpec) -> list[str]:
        return await self.script.answer(DrainActivity.REMOVE_QUEUE, input, list[str])


class FakeVolume(Fakes):
    @activity.defn(name=VolumeActivity.CREATE)
    async def create(self, input: CreateVolumeInput) -> CreateVolumeResult:
        return await self.script.answer(VolumeActivity.CREATE, input, CreateVolumeResult)

    @activity.defn(name=VolumeActivity.DELETE)
    async def delete(self, input: DeleteVolumeInput) -> DeleteVolumeResult:
        return await self.script.answer(VolumeActivity.DELETE, input, DeleteVolumeResult)

    @activity.defn(name=VolumeActivity.ATTACH)
    async def attach(self, input: AttachVolumeInput) -> AttachResult:
        return await self.script.answer(VolumeActivity.ATTACH, input, AttachResult)

    @activity.defn(name=VolumeActivity.DETACH)
    async def detach(self, input: DetachVolumeInput) -> DetachResult:
        return await self.script.answer(VolumeActivity.DETACH, input, DetachResult)

    @activity.defn(name=VolumeActivity.EXPAND)
    async def expand(self, input: ExpandVolumeInput) -> ExpandResult:
        return await self.script.answer(VolumeActivity.EXPAND, input, ExpandResult)

    @activity.defn(name=VolumeActivity.MODIFY)
    async def modify(self, input: ModifyVolumeInput) -> ModifyResult:
        return await self.script.answer(VolumeActivity.MODIFY, input, ModifyResult)

    @activity.defn(name=VolumeActivity.READ)
    async def read(self, input: ReadVolumesInput) -> ReadVolumesResult:
        return await self.script.answer(VolumeActivity.READ, input, ReadVolumesResult)

    @activity.defn(name=VolumeActivity.CREATE_SNAPSHOT)
    async def create_snapshot(self, input: CreateSnapshotInput) -> SnapshotResult:
        return await self.script.answer(VolumeActivity.CREATE_SNAPSHOT, input, SnapshotResult)

    @activity.defn(name=VolumeActivity.DELETE_SNAPSHOT)
    async def delete_snapshot(self, input: DeleteSnapshotInput) -> SnapshotResult:
        return await self.script.answer(VolumeActivity.DELETE_SNAPSHOT, input, SnapshotResult)


class FakeLayout(Fakes):
    @activity.defn(name=LayoutActivity.DEFINE)
    async def define(self, input: DefineInput) -> LayoutDef:
        return await self.script.answer(LayoutActivity.DEFINE, input, LayoutDef)

    @activity.defn(name=LayoutActivity.PLAN)
    async def plan_module(self, input: PlanModuleInput) -> PlanModuleResult:
        return await self.script.answer(LayoutActivity.PLAN, input, PlanModuleResult)

    @activity.defn(name=LayoutActivity.ENSURE)
    async def ensure_resource(self, input: StepInput) -> StepResult:
        return await self.script.answer(LayoutActivity.ENSURE, input, StepResult)

    @activity.defn(name=LayoutActivity.DELETE)
    async def delete_resource(self, input: StepInput) -> StepResult:
        return await self.script.answer(LayoutActivity.DELETE, input, StepResult)

    @activity.defn(name=LayoutActivity.CHECK_DESTROY)
    async def check_destroy(self, input: CheckDestroyInput) -> list[str]:
        return await self.script.answer(LayoutActivity.CHECK_DESTROY, input, list)

    @activity.defn(name=LayoutActivity.CHECK_APPLY)
    async def check_apply(self, input: CheckApplyInput) -> list[str]:
        return await self.script.answer(LayoutActivity.CHECK_APPLY, input, list)

    @activity.defn(name=LayoutActivity.MAP_STATE)
    async def map_state(self, input: MapStateInput) -> tfstate.StateMap:
        return await self.script.answer(LayoutActivity.MAP_STATE, input, tfstate.StateMap)

    @activity.defn(name=LayoutActivity.ADOPT)
    async def adopt_resource(self, input: StepInput) -> StepResult:
        return await self.script.answer(LayoutActivity.ADOPT, input, StepResult)


class FakeConverge(Fakes):
    @activity.defn(name=ConvergeActivity.REPORT)
    async def report(self, input: ReportInput) -> ReportResult:
        return await self.script.answer(ConvergeActivity.REPORT, input, ReportResult)


FAKES: tuple[type[Fakes], ...] = (
    FakeKube,
    FakeProbe,
    FakeLoadBalancer,
    FakeMachine,
    FakeDrain,
    FakeVolume,
    FakeLayout,
    FakeConverge,
)


def all_fakes(script: Script) -> list[Callable[..., Any]]:
    """Every fake activity, answering from ``script`` (a worker registers them all)."""
    return [fn for fakes in FAKES for fn in fakes(script).all()]
