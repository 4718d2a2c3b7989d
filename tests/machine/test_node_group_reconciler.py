"""The NodeGroup reconciler with the real Cluster API manager, on zVirt.

A ``cloudloop.io`` NodeGroup alone (no ``nodegroup render``, no ``kubectl apply``) gets its
template and MachineDeployment, owned by it; its machine becomes a VM; the InstanceClass lists
it as a consumer. A ``kubectl scale`` past ``maxPerZone`` is brought back; a changed
InstanceClass rolls the machine onto a new template; a class that does not exist is
``Ready=False`` with a Warning Event and deletes nothing; a zone removed loses its
MachineDeployment; deleting the group deletes its machines and their VMs before it goes (Cluster
API owns the MachineDeployments too, so the garbage collector alone would keep them).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudloop import temporal
from cloudloop.cloud.zvirt.capi import INFRA_KINDS, NODE_TEMPLATES
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import EVENTS, NODE_GROUPS
from cloudloop.rules.machine import MACHINE_DEPLOYMENTS, MACHINES
from devstack import machine_fixtures
from devstack.backends import section_env
from devstack.backends.zvirt import QUICK_TIMINGS, machine_spec, zvirt_settings
from devstack.devmode import stack_settings
from devstack.kube import CONTROLLER_MANAGER
from devstack.local import LocalStack
from devstack.ovirt_emulator import OvirtEmulatorAdmin, OvirtEmulatorEndpoint
from starters.machine import MachineStarter
from starters.machine.starter import NodeGroupParts
from tests.conftest import NAMESPACES
from tests.helpers import eventually
from tests.machine import capi_objects
from tests.machine.dvp_machines import TEST_TIMINGS
from tests.support.workers import WorkerProcess, worker_env

pytestmark = [pytest.mark.stack]

TIMEOUT = 180.0
CLUSTER = "ngr"
CLONED_FROM = "cluster.x-k8s.io/cloned-from-name"


@pytest.fixture(scope="module")
def gc_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The Cluster API manager and kube-controller-manager (its garbage collector, which would
    delete what only the group owns)."""
    path = tmp_path_factory.mktemp("ng-reconciler")
    with capi_objects.running_capi_stack(path, CONTROLLER_MANAGER) as local:
        yield local


def node_group(name: str, class_name: str, **instances: Any) -> dict[str, Any]:
    # No workload cluster: a machine never becomes Available, so the old one goes first in a
    # rollout.
    fields = {"maxSurgePerZone": 0, "maxUnavailablePerZone": 1, **instances}
    return machine_fixtures.node_group_body(
        name,
        cluster="c1",
        class_kind=NODE_TEMPLATES.instance_class.kind,
        class_name=class_name,
        bootstrap_secret="ng-boot",
        **fields,
    )


def deployments(kube: Kube, namespace: str, group: str) -> list[dict[str, Any]]:
    found = kube.list(MACHINE_DEPLOYMENTS, namespace, labelSelector=f"node-group={group}")
    return sorted(found.get("items", []), key=lambda md: md["metadata"]["name"])


def count_of(kube: Kube, namespace: str, group: str, count: int) -> list[dict[str, Any]] | None:
    found = deployments(kube, namespace, group)
    return found if len(found) == count else None


def machines(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return list(kube.list(MACHINES.untyped, namespace).get("items", []))


def provisioned(kube: Kube, namespace: str, count: int) -> list[dict[str, Any]] | None:
    found = machines(kube, namespace)
    ready = [
        m
        for m in found
        if (m.get("status") or {}).get("phase") in capi_objects.PROVISIONED_PHASES
        and (m.get("spec") or {}).get("providerID")
        and not m["metadata"].get("deletionTimestamp")
    ]
    return ready if len(found) == count and len(ready) == count else None


def ready_condition(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    group = kube.get(NODE_GROUPS, name, namespace) or {}
    conditions = (group.get("status") or {}).get("conditions") or []
    return next((dict(c) for c in conditions if c.get("type") == "Ready"), {})


def cloned_from(kube: Kube, namespace: str, machine: dict[str, Any]) -> str:
    infra = kube.get(INFRA_KINDS.machine, machine["metadata"]["name"], namespace) or {}
    return str((infra.get("metadata") or {}).get("annotations", {}).get(CLONED_FROM))


async def test_a_node_group_is_rendered_bounded_rolled_and_collected(
    gc_stack: LocalStack, ovirt: OvirtEmulatorEndpoint, tmp_path: Path
) -> None:
    kube = Kube(api_client(gc_stack.kubeconfig))
    client = await temporal.connect(stack_settings(gc_stack).temporal)
    admin = OvirtEmulatorAdmin(ovirt.admin_url)
    ns = f"t-{uuid.uuid4().hex[:10]}"
    kube.create(NAMESPACES, {"metadata": {"name": ns}})
    task_queue = f"ngr-{uuid.uuid4().hex[:8]}"
    settings = stack_settings(gc_stack, task_queue=task_queue, cluster=CLUSTER)
    env = worker_env(
        settings,
        gc_stack,
        {
            "CLOUDLOOP_PROVIDER": "zvirt",
            **section_env("zvirt", zvirt_settings(ovirt, **QUICK_TIMINGS)),
        },
    )
    class_name = f"ng-{uuid.uuid4().hex[:6]}"
    instance_class = {
        "metadata": {"name": class_name},
        "spec": machine_spec(ovirt, numCPUs=2),
    }
    with contextlib.ExitStack() as stack, capi_objects.explained(kube, ns, gc_stack):
        worker = WorkerProcess(env, tmp_path, ready_timeout_s=180)
        await asyncio.to_thread(worker.start)
        stack.callback(worker.stop)
        starter = MachineStarter(
            kube,
            client,
            kinds=INFRA_KINDS,
            task_queue=task_queue,
            cluster=CLUSTER,
            namespace=ns,
            timings=TEST_TIMINGS,
            node_groups=NodeGroupParts(templates=NODE_TEMPLATES, provider_values={}),
        )
        task = asyncio.create_task(starter.run())
        try:
            await asyncio.to_thread(
                capi_objects.bootstrap_secret, kube, ns, "ng-boot", "#cloud-config\n"
            )
            infra_cluster = capi_objects.infra_kind(INFRA_KINDS.cluster.kind)
            await asyncio.to_thread(capi_objects.cluster, kube, ns, "c1", infra_cluster, {})
            kube.create(NODE_TEMPLATES.instance_class, instance_class)
            group = kube.create(
                NODE_GROUPS, node_group("workers", class_name, minPerZone=1, maxPerZone=2), ns
            )

            # Rendered, owned by the group, at minPerZone; the machine gets its VM.
            (md,) = await eventually(
                lambda: deployments(kube, ns, "workers") or None,
                timeout=60,
                what="MachineDeployment",
            )
            owner = md["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["uid"], owner["controller"]) == (
                "NodeGroup",
                group["metadata"]["uid"],
                True,
            )
            assert md["spec"]["replicas"] == 1
            assert (
                md["metadata"]["annotations"][
                    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
                ]
                == "2"
            )
            first_template = md["spec"]["template"]["spec"]["infrastructureRef"]["name"]
            (first,) = await eventually(
                lambda: provisioned(kube, ns, 1), timeout=TIMEOUT, what="1 machine provisioned"
            )
            assert cloned_from(kube, ns, first) == first_template
            condition = await eventually(
                lambda: (c := ready_condition(kube, ns, "workers")).get("status") == "True" and c,
                timeout=30,
                what="Ready",
            )
            assert condition["reason"] == "Rendered"
            await eventually(
                lambda: (
                    (kube.get(NODE_TEMPLATES.instance_class, class_name) or {})
                    .get("status", {})
                    .get("nodeGroupConsumers")
                    == ["workers"]
                ),
                timeout=30,
                what="nodeGroupConsumers",
            )

            # A scale past maxPerZone is brought back to it.
            name = md["metadata"]["name"]
            kube.patch(MACHINE_DEPLOYMENTS, name, {"spec": {"replicas": 5}}, ns)
            await eventually(
                lambda: (
                    (kube.get(MACHINE_DEPLOYMENTS, name, ns) or {}).get("spec", {}).get("replicas")
                    == 2
                ),
                timeout=30,
                what="replicas back to maxPerZone",
            )
            kube.patch(MACHINE_DEPLOYMENTS, name, {"spec": {"replicas": 1}}, ns)
            await eventually(lambda: provisioned(kube, ns, 1), timeout=TIMEOUT, what="1 machine")

            # The class changes in a rollout field: a new template, the machine replaced.
            kube.patch(NODE_TEMPLATES.instance_class, class_name, {"spec": {"numCPUs": 3}})

            def rolled() -> dict[str, Any] | None:
                ready = provisioned(kube, ns, 1)
                if not ready or cloned_from(kube, ns, ready[0]) == first_template:
                    return None
                return ready[0]

            replacement = await eventually(rolled, timeout=TIMEOUT, what="the group rolled")
            (md,) = deployments(kube, ns, "workers")
            second_template = md["spec"]["template"]["spec"]["infrastructureRef"]["name"]
            assert cloned_from(kube, ns, replacement) == second_template != first_template
            vm = admin.vm(replacement["metadata"]["name"]) or {}
            assert int((vm.get("cpu") or {}).get("cores") or 0) == 3

            # A class that does not exist: Ready=False, a Warning, nothing deleted.
            kube.patch(
                NODE_GROUPS,
                "workers",
                {"spec": {"cloudInstances": {"classReference": {"name": "no-such-class"}}}},
                ns,
            )
            condition = await eventually(
                lambda: (c := ready_condition(kube, ns, "workers")).get("status") == "False" and c,
                timeout=30,
                what="Ready=False",
            )
            assert condition["reason"] == "InstanceClassNotFound"
            events = kube.list(EVENTS, ns).get("items", [])
            assert any(e.get("reason") == "InstanceClassNotFound" for e in events), events
            assert [d["metadata"]["name"] for d in deployments(kube, ns, "workers")] == [name]
            await eventually(
                lambda: (
                    (kube.get(NODE_TEMPLATES.instance_class, class_name) or {})
                    .get("status", {})
                    .get("nodeGroupConsumers")
                    == []
                ),
                timeout=30,
                what="the class no longer consumed",
            )

            # Two zones, then one: the zone removed loses its MachineDeployment.
            kube.create(
                NODE_GROUPS,
                node_group("zoned", class_name, minPerZone=0, maxPerZone=1, zones=["a", "b"]),
                ns,
            )
            two = await eventually(lambda: count_of(kube, ns, "zoned", 2), timeout=30, what="2 MDs")
            kube.patch(NODE_GROUPS, "zoned", {"spec": {"cloudInstances": {"zones": ["a"]}}}, ns)
            (kept,) = await eventually(
                lambda: count_of(kube, ns, "zoned", 1), timeout=30, what="1 MD"
            )
            assert kept["metadata"]["name"] in {d["metadata"]["name"] for d in two}

            # Deleting the group deletes its machines and their VMs (its finalizer), then it goes.
            kube.delete(NODE_GROUPS, "workers", ns)
            await eventually(
                lambda: (not machines(kube, ns) and not deployments(kube, ns, "workers")) or None,
                timeout=TIMEOUT,
                what="the group's objects deleted",
            )
            await eventually(
                lambda: kube.get(NODE_GROUPS, "workers", ns) is None or None,
                timeout=30,
                what="the group gone (its finalizer removed)",
            )
            await eventually(
                lambda: admin.vm(replacement["metadata"]["name"]) is None or None,
                timeout=TIMEOUT,
                what="its VM deleted",
            )
        finally:
            starter.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            kube.delete(NAMESPACES, ns)
