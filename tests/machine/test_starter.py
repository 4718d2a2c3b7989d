"""The machine starter's contract steps on in-memory objects: owner Machine, Cluster, pause,
finalizer, then signal-with-start of the workflow with the desired state (once per change)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from temporalio.client import Client
from temporalio.exceptions import WorkflowAlreadyStartedError

from cloudloop.cloud.dvp.capi import INFRA_KINDS as DVP_KINDS
from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT_KINDS
from cloudloop.kube.bodies import InfraObject
from cloudloop.kube.conditions import get_condition
from cloudloop.messages.machine import MachineDesired, MachineSignal
from cloudloop.rules import machine as capi
from devstack.machine_fixtures import dvp_machine_spec
from starters.machine import MachineStarter
from tests.fakes import MemoryKube

NS = "capi"


@dataclass
class FakeClient:
    starts: list[dict[str, Any]] = field(default_factory=list)
    already_completed: bool = False

    async def start_workflow(self, *args: Any, **kwargs: Any) -> object:
        if self.already_completed:
            raise WorkflowAlreadyStartedError(kwargs["id"], "Machine")
        self.starts.append({**kwargs, "input": args[1]})
        return object()

    @property
    def desired(self) -> MachineDesired:
        """What the last start said: its signal's, or (an eager start) its input's."""
        last = self.starts[-1]
        if "start_signal_args" in last:
            (desired,) = last["start_signal_args"]
            return cast(MachineDesired, desired)
        return cast(MachineDesired, last["input"].desired)


def infra_machine(**meta: Any) -> dict[str, Any]:
    spec = dvp_machine_spec()
    spec["providerID"] = "dvp://m1"
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "DeckhouseMachine",
        "metadata": {
            "name": "m1",
            "namespace": NS,
            "uid": "uid-m1",
            "resourceVersion": "1",
            "generation": 1,
            "labels": {capi.CLUSTER_NAME_LABEL: "c1"},
            "ownerReferences": [
                {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "m1"}
            ],
            **meta,
        },
        "spec": spec,
    }


def capi_machine(bootstrap: str | None = "m1-data", control_plane: bool = False) -> dict[str, Any]:
    labels = {capi.CLUSTER_NAME_LABEL: "c1"}
    if control_plane:
        labels[capi.CONTROL_PLANE_LABEL] = ""
    return {
        "metadata": {"name": "m1", "namespace": NS, "labels": labels},
        "spec": {
            "clusterName": "c1",
            "bootstrap": {"dataSecretName": bootstrap} if bootstrap else {},
            "failureDomain": "zone-a",
        },
    }


def capi_cluster(*, ready: bool = True, paused: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": "c1", "namespace": NS},
        "spec": {"paused": paused},
        "status": {"initialization": {"infrastructureProvisioned": ready}},
    }


class Rig:
    def __init__(self) -> None:
        self.kube = MemoryKube()
        self.client = FakeClient()
        self.starter = MachineStarter(
            self.kube,
            cast(Client, self.client),
            kinds=DVP_KINDS,
            task_queue="q",
            cluster="cl",
            namespace=NS,
        )

    def put(self, obj: dict[str, Any] | None = None, **stores: dict[str, Any] | None) -> None:
        if obj is not None:
            self.starter.infra_machines.store[f"{NS}/m1"] = cast(InfraObject, obj)
            self.kube.put(DVP_KINDS.machine, copy.deepcopy(obj), NS)
        for store, value in stores.items():
            if value is not None:
                getattr(self.starter, store).store[f"{NS}/{value['metadata']['name']}"] = value

    def stored(self) -> InfraObject:
        found = self.kube.get(DVP_KINDS.machine, "m1", NS)
        assert found is not None
        return found

    def refresh(self) -> None:
        """The informer sees what was written."""
        self.starter.infra_machines.store[f"{NS}/m1"] = self.stored()


@pytest.fixture
def rig() -> Rig:
    return Rig()


@pytest.mark.parametrize(
    ("machine", "cluster"),
    [
        pytest.param(None, capi_cluster(), id="no-owner-machine"),
        pytest.param(capi_machine(), None, id="no-cluster"),
    ],
)
async def test_waits_for_machine_and_cluster(
    rig: Rig, machine: dict[str, Any] | None, cluster: dict[str, Any] | None
) -> None:
    rig.put(infra_machine(), machines=machine, clusters=cluster)
    assert await rig.starter.reconcile_machine(f"{NS}/m1") is None
    assert rig.client.starts == []
    assert rig.kube.writes == []


async def test_finalizer_then_signal_with_start(rig: Rig) -> None:
    rig.put(
        infra_machine(),
        machines=capi_machine(control_plane=True),
        clusters=capi_cluster(ready=False),
    )
    wf_id = await rig.starter.reconcile_machine(f"{NS}/m1")
    assert wf_id == f"machine/{NS}/m1/uid-m1"
    stored = rig.stored()
    assert stored["metadata"]["finalizers"] == [DVP_KINDS.finalizer]
    assert get_condition(stored, capi.PAUSED) is None  # written with the workflow's first status
    (start,) = rig.client.starts
    assert start["id"] == wf_id
    # the finalizer was added just now: no run can exist, an eager start with the desired input
    assert start["request_eager_start"] is True and "start_signal" not in start
    assert start["task_queue"] == "q"
    desired = rig.client.desired
    assert desired.spec.name == "m1" and desired.spec.machine_uid == "uid-m1"
    assert "providerID" not in desired.spec.provider_spec  # written by the provider, not wanted
    assert desired.spec.cluster == "c1"
    assert desired.spec.control_plane is True
    assert desired.spec.failure_domain == "zone-a"
    assert desired.infrastructure_ready is False
    assert desired.bootstrap_secret == "m1-data"
    assert (desired.paused, desired.deleting) == (False, False)

    # Nothing new: nothing sent. A changed Cluster: the workflow hears of it.
    rig.refresh()
    await rig.starter.reconcile_machine(f"{NS}/m1")
    assert len(rig.client.starts) == 1
    rig.put(clusters=capi_cluster(ready=True))
    await rig.starter.reconcile_machine(f"{NS}/m1")
    assert len(rig.client.starts) == 2
    assert rig.client.starts[-1]["start_signal"] == MachineSignal.DESIRED
    assert "request_eager_start" not in rig.client.starts[-1]
    assert rig.client.desired.infrastructure_ready is True


@pytest.mark.parametrize(
    ("obj", "cluster"),
    [
        pytest.param(
            infra_machine(annotations={capi.PAUSED_ANNOTATION: ""}), capi_cluster(), id="annotation"
        ),
        pytest.param(infra_machine(), capi_cluster(paused=True), id="cluster-spec"),
    ],
)
async def test_paused_is_reported_and_not_started(
    rig: Rig, obj: dict[str, Any], cluster: dict[str, Any]
) -> None:
    rig.put(obj, machines=capi_machine(), clusters=cluster)
    assert await rig.starter.reconcile_machine(f"{NS}/m1") is None
    stored = rig.stored()
    paused = get_condition(stored, capi.PAUSED) or {}
    assert (paused.get("status"), paused.get("reason")) == ("True", capi.REASON_PAUSED)
    assert not stored["metadata"].get("finalizers")
    assert rig.client.starts == []


async def test_deletion_is_signalled_even_without_machine_and_cluster(rig: Rig) -> None:
    rig.put(
        infra_machine(finalizers=[DVP_KINDS.finalizer], deletionTimestamp="2025-01-01T00:00:00Z")
    )
    await rig.starter.reconcile_machine(f"{NS}/m1")
    assert rig.client.desired.deleting is True


async def test_paused_deletion_waits(rig: Rig) -> None:
    rig.put(
        infra_machine(
            finalizers=[DVP_KINDS.finalizer],
            deletionTimestamp="2025-01-01T00:00:00Z",
            annotations={capi.PAUSED_ANNOTATION: "true"},
        ),
        machines=capi_machine(),
        clusters=capi_cluster(),
    )
    await rig.starter.reconcile_machine(f"{NS}/m1")
    assert (rig.client.desired.paused, rig.client.desired.deleting) == (True, False)


async def test_unpausing_clears_the_paused_condition(rig: Rig) -> None:
    obj = infra_machine(finalizers=[DVP_KINDS.finalizer])
    obj["status"] = {
        "conditions": [
            {
                "type": capi.PAUSED,
                "status": "True",
                "reason": capi.REASON_PAUSED,
                "message": "",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }
        ]
    }
    rig.put(obj, machines=capi_machine(), clusters=capi_cluster())
    await rig.starter.reconcile_machine(f"{NS}/m1")
    assert (get_condition(rig.stored(), capi.PAUSED) or {}).get("status") == "False"
    assert rig.client.desired.paused is False


def test_zvirt_machines_leave_provider_written_fields_out() -> None:
    spec = ZVIRT_KINDS.desired_spec(
        {"spec": {"template": "t", "id": "uuid", "providerID": "zvirt://uuid", "memory": 8192}}
    )
    assert spec == {"template": "t", "memory": 8192}
    assert ZVIRT_KINDS.id_field == "id"


async def test_deleted_without_our_finalizer_is_ignored(rig: Rig) -> None:
    rig.put(infra_machine(deletionTimestamp="2025-01-01T00:00:00Z"))
    assert await rig.starter.reconcile_machine(f"{NS}/m1") is None
    assert rig.client.starts == []


async def test_retry_annotation_is_passed_on(rig: Rig) -> None:
    rig.put(
        infra_machine(annotations={capi.RETRY_ANNOTATION: "try-2"}),
        machines=capi_machine(),
        clusters=capi_cluster(),
    )
    await rig.starter.reconcile_machine(f"{NS}/m1")
    assert rig.client.desired.retry_token == "try-2"


async def test_completed_workflow_of_a_deleting_machine_drops_the_finalizer(rig: Rig) -> None:
    rig.client.already_completed = True
    rig.put(
        infra_machine(finalizers=[DVP_KINDS.finalizer], deletionTimestamp="2025-01-01T00:00:00Z")
    )
    await rig.starter.reconcile_machine(f"{NS}/m1")
    assert not rig.stored()["metadata"].get("finalizers")


def infra_cluster(**meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "c1",
            "namespace": NS,
            "uid": "uid-c1",
            "generation": 1,
            "ownerReferences": [
                {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1"}
            ],
            **meta,
        },
        "spec": {},
    }


@pytest.mark.parametrize(
    ("obj", "cluster", "provisioned"),
    [
        pytest.param(infra_cluster(), capi_cluster(), True, id="owned"),
        pytest.param(infra_cluster(ownerReferences=[]), capi_cluster(), False, id="no-owner"),
        pytest.param(infra_cluster(), capi_cluster(paused=True), False, id="paused"),
        pytest.param(
            infra_cluster(annotations={capi.MANAGED_BY_ANNOTATION: "other"}),
            capi_cluster(),
            False,
            id="managed-elsewhere",
        ),
    ],
)
async def test_infra_cluster_is_provisioned_at_once(
    rig: Rig, obj: dict[str, Any], cluster: dict[str, Any], provisioned: bool
) -> None:
    rig.starter.infra_clusters.store[f"{NS}/c1"] = cast(InfraObject, obj)
    rig.kube.put(DVP_KINDS.cluster, obj, NS)
    rig.put(clusters=cluster)
    assert await rig.starter.reconcile_cluster(f"{NS}/c1") is provisioned
    status = (rig.kube.get(DVP_KINDS.cluster, "c1", NS) or {}).get("status") or {}
    assert (status.get("ready") is True) is provisioned
    assert ((status.get("initialization") or {}).get("provisioned") is True) is provisioned


def test_machines_are_off_without_cluster_api() -> None:
    """A cluster without the Cluster API CRDs (an AWS cluster running only the CCM) turns the
    machine starter off instead of failing informers that make the starter not ready."""
    from types import SimpleNamespace
    from typing import cast

    from cloudloop.cloud.aws.driver import AwsDriver
    from cloudloop.cloud.aws.settings import AwsSettings
    from cloudloop.cloud.registry import Settings
    from cloudloop.kube.api import KubeError
    from starters.context import StarterContext
    from starters.machine import MachineStarter

    class NoCapi:
        def list(self, resource: object, namespace: object = None, **query: object) -> None:
            raise KubeError(404, "NotFound", {"message": "the server could not find it"})

    context = SimpleNamespace(
        settings=Settings().model_copy(update={"provider": "aws"}),
        driver=AwsDriver(AwsSettings()),
        kube=NoCapi(),
    )
    assert MachineStarter.from_context(cast(StarterContext, context)) is None
