"""The NodeGroup reconciler: how fast groups converge, and what an idle pass costs.

On a control plane with the real Cluster API manager (its CRDs), our machine starter in this
process; ``NODE_GROUPS`` zVirt NodeGroups of ``ZONES`` zones each, one InstanceClass, 0 machines
(the reconciler's own work, not the machines'):
- ``nodegroup_reconcile_converge_s``: the groups created → every one ``Ready=True``.
- ``nodegroup_reconcile_class_change_s``: the InstanceClass's CPUs changed → every
  MachineDeployment points at a new template.
- ``nodegroup_reconcile_idle_requests_per_group``, ``nodegroup_reconcile_idle_writes``: API
  requests (and of them writes) of one pass over every group when nothing changed.
- ``nodegroup_reconcile_writes_per_group``: writes from a group created to it Ready (finalizer,
  templates, MachineDeployments, status, the class's consumers).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.context import BenchContext
from bench.nodegroup import _capi_plane
from cloudloop.cloud.zvirt.capi import INFRA_KINDS, NODE_TEMPLATES
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import NAMESPACES, NODE_GROUPS
from cloudloop.rules.machine import MACHINE_DEPLOYMENTS
from devstack import machine_fixtures
from starters.machine import MachineStarter
from starters.machine.starter import NodeGroupParts

GROUPS, ZONES = 20, ("a", "b")
VNIC = "0f3a2c1e-5b6d-4e7f-8a9b-0c1d2e3f4a5b"
WRITES = {"POST", "PUT", "PATCH", "DELETE"}


class Counted:
    """Counts ``kube``'s requests by method (watches included: they are requests too)."""

    def __init__(self, kube: Kube) -> None:
        self.methods: list[str] = []
        request: Callable[..., Any] = kube.request

        def counted(method: str, path: str, **kwargs: Any) -> Any:
            self.methods.append(method)
            return request(method, path, **kwargs)

        kube.request = counted  # type: ignore[method-assign]

    def since(self, mark: int) -> tuple[int, int]:
        """(requests, writes) after ``mark`` (a length of :attr:`methods`)."""
        made = self.methods[mark:]
        return len(made), sum(1 for m in made if m in WRITES)


async def _until(
    check: Callable[[], bool], explain: Callable[[], object], timeout_s: float = 120
) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise TimeoutError(f"node groups did not converge: {explain()}")
        await asyncio.sleep(0.05)


async def nodegroup_reconcile_figures(ctx: BenchContext) -> dict[str, float]:
    with _capi_plane() as plane:
        kube = Kube(api_client(plane.kubeconfig, qps_pool=64))
        namespace = f"bench-ngr-{uuid.uuid4().hex[:6]}"
        kube.create(NAMESPACES, {"metadata": {"name": namespace}})
        machine_fixtures.create_cluster(kube, namespace, "c1", INFRA_KINDS)
        machine_fixtures.create_bootstrap_secret(kube, namespace, "boot", b"#cloud-config\n")
        class_name = "bench-workers"
        kube.create(
            NODE_TEMPLATES.instance_class,
            {
                "metadata": {"name": class_name},
                "spec": {"numCPUs": 2, "memory": 2048, "template": "t", "vnicProfileID": VNIC},
            },
        )
        counted = Counted(kube)
        starter = MachineStarter(
            kube,
            ctx.client,
            kinds=INFRA_KINDS,
            task_queue=f"bench-ngr-{uuid.uuid4().hex[:6]}",
            cluster="bench",
            namespace=namespace,
            node_groups=NodeGroupParts(templates=NODE_TEMPLATES, provider_values={}),
        )
        task = asyncio.create_task(starter.run())
        try:
            names = [f"g{i:02d}" for i in range(GROUPS)]

            def ready() -> bool:
                items = kube.list(NODE_GROUPS, namespace).get("items", [])
                return len(items) == GROUPS and all(
                    any(
                        c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (g.get("status") or {}).get("conditions") or []
                    )
                    for g in items
                )

            await asyncio.sleep(1)  # the informers listed
            mark = len(counted.methods)
            started = time.monotonic()
            for name in names:
                kube.create(NODE_GROUPS, _group(name, class_name), namespace)
            await _until(ready, lambda: _conditions(kube, namespace))
            converge = time.monotonic() - started
            await asyncio.sleep(1)  # the last writes' watch events handled
            _, made_writes = counted.since(mark)

            reconciler = starter.node_group_reconciler
            assert reconciler is not None
            mark = len(counted.methods)
            for name in names:
                await reconciler.reconcile(f"{namespace}/{name}")
            idle_requests, idle_writes = counted.since(mark)

            def templates() -> set[str]:
                items = kube.list(MACHINE_DEPLOYMENTS, namespace).get("items", [])
                return {md["spec"]["template"]["spec"]["infrastructureRef"]["name"] for md in items}

            before = templates()
            started = time.monotonic()
            kube.patch(NODE_TEMPLATES.instance_class, class_name, {"spec": {"numCPUs": 3}})
            await _until(
                lambda: not (templates() & before) and len(templates()) == GROUPS * len(ZONES),
                lambda: (before, templates()),
            )
            changed = time.monotonic() - started
        finally:
            starter.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return {
        "nodegroup_reconcile_converge_s": round(converge, 3),
        "nodegroup_reconcile_class_change_s": round(changed, 3),
        "nodegroup_reconcile_writes_per_group": round(made_writes / GROUPS, 2),
        "nodegroup_reconcile_idle_requests_per_group": round(idle_requests / GROUPS, 2),
        "nodegroup_reconcile_idle_writes": float(idle_writes),
    }


def _conditions(kube: Kube, namespace: str) -> list[object]:
    items = kube.list(NODE_GROUPS, namespace).get("items", [])
    return [(g.get("status") or {}).get("conditions") for g in items[:3]]


def _group(name: str, class_name: str) -> dict[str, Any]:
    return machine_fixtures.node_group_body(
        name,
        cluster="c1",
        class_kind=NODE_TEMPLATES.instance_class.kind,
        class_name=class_name,
        bootstrap_secret="boot",
        zones=list(ZONES),
        minPerZone=0,
        maxPerZone=3,
    )
