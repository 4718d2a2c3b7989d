"""Node groups and the DVP load balancer.

- ``nodegroup_scale_0_to_10_wall_s_<provider>`` (dvp, zvirt): a MachineDeployment rendered from
  an InstanceClass (``render_node_group``, what ``cloudloop nodegroup render`` prints) with 0
  replicas, then scaled to 10 → all 10 Machines ``Running``, their Nodes ``Ready``: each VM joins
  as a kwok Node with its providerID (``devstack.node_joiner``, the dev stack's kubelet) and the
  manager sets the Machine's ``nodeRef`` through the ``c1-kubeconfig`` Secret. The real
  Cluster API manager on its own control plane, our machine starter and worker in this process;
  the DVP parent cluster with its simulator, or the oVirt Engine emulator (delays of the contract
  test). Report only.
- ``dvp_lb_ensure_median_s``: median over ``LB_SAMPLES`` Services ``type: LoadBalancer`` (2 ports,
  3 node VMs) of Service created → ``status.loadBalancer.ingress`` seen by a watch, through the
  starter → ``LoadBalancer`` workflow → ``lb.ensure`` (parent Service, EndpointSlice, wait for the
  parent's address, status patch). The parent's LB controller (``devstack.dvp_loadbalancer``)
  assigns addresses ~50 ms after it sees a Service.
- ``dvp_lb_direct_median_s``: the same Service through the upstream service controller's steps
  made directly (:func:`bench.loadbalancer.direct_service_pass`, as the ``loadbalancers``
  module's direct side: the Service, its finalizer, the Events and the ingress status around
  ``DvpDriver.ensure_load_balancer`` on the same spec), in a namespace the starter does not
  watch; samples alternate with the ones above.
- ``dvp_lb_ensure_overhead_ratio``: the first over the second (goal ≤ 1.3).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.context import BenchContext
from bench.loadbalancer import _service, direct_service_pass, release_direct_services
from bench.overhead import overhead_ms
from cloudloop.cloud.dvp.capi import INFRA_KINDS as DVP_KINDS
from cloudloop.cloud.dvp.capi import NODE_TEMPLATES as DVP_TEMPLATES
from cloudloop.cloud.dvp.driver import DvpDriver
from cloudloop.cloud.models import LoadBalancerPort, LoadBalancerStatus
from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT_KINDS
from cloudloop.cloud.zvirt.capi import NODE_TEMPLATES as ZVIRT_TEMPLATES
from cloudloop.cloud.zvirt.driver import ZvirtDriver
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import NODES, SECRETS, SERVICES, ObjectRef, Resource
from cloudloop.messages.loadbalancer import (
    DesiredLoadBalancer,
    LoadBalancerNode,
    LoadBalancerTarget,
)
from cloudloop.messages.machine import MachineTimings, PollSchedule
from cloudloop.nodegroup.render import DEFAULT_ZONE, Bootstrap, NodeGroup, render_node_group
from cloudloop.rules import machine as capi
from devstack.backends.dvp import create_node_vms, dvp_settings
from devstack.backends.zvirt import machine_spec, ovirt_engine, zvirt_settings
from devstack.crds import apply_crds
from devstack.dvp_simulator import CLUSTER_IMAGE, VM_CLASS, DvpParent
from devstack.kube import CAPI, KWOK, KubeOptions
from devstack.local import LocalStack, StackOptions
from devstack.node_joiner import NodeJoiner, publish_workload_kubeconfig
from starters.loadbalancer import ServiceStarter
from starters.machine import MachineStarter
from workers.main import build_worker

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
MACHINE_DEPLOYMENTS = Resource(
    capi.CAPI_GROUP, "v1beta2", "machinedeployments", "MachineDeployment"
)
GROUP_SIZE = 10
LB_SAMPLES = 10
TIMINGS = MachineTimings(poll=PollSchedule(initial_s=0.05, factor=1.5, max_s=0.5))


def _create(
    kube: Kube, resource: Resource[Any], body: dict[str, Any], namespace: str | None
) -> Any:
    return kube.create(resource, body, namespace)


@contextlib.contextmanager
def _capi_plane() -> Iterator[LocalStack]:
    with tempfile.TemporaryDirectory(prefix="cloudloop-bench-capi-") as state:
        plane = LocalStack(
            StackOptions(
                state_dir=Path(state),
                temporal=False,
                moto=False,
                kube=(KubeOptions(name="capi", components=(CAPI, KWOK)),),
            )
        )
        with plane:
            apply_crds(Kube(api_client(plane.kubeconfig)))
            yield plane


async def _scale_group(
    ctx: BenchContext,
    plane: LocalStack,
    driver: Any,
    kinds: Any,
    templates: Any,
    spec: dict[str, Any],
    *,
    zones: tuple[str, ...] = (),
) -> float:
    kube = Kube(api_client(plane.kubeconfig, qps_pool=32))
    namespace = f"ng-{uuid.uuid4().hex[:6]}"
    kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    kube.create(
        SECRETS,
        {"metadata": {"name": "boot"}, "data": {"value": "I2Nsb3VkLWNvbmZpZwo="}},
        namespace,
    )
    kube.create(kinds.cluster, {"metadata": {"name": "c1"}, "spec": {}}, namespace)
    kube.create(
        capi.CLUSTERS,
        {
            "metadata": {"name": "c1"},
            "spec": {
                "infrastructureRef": {
                    "apiGroup": kinds.cluster.group,
                    "kind": kinds.cluster.kind,
                    "name": "c1",
                }
            },
        },
        namespace,
    )
    publish_workload_kubeconfig(kube, namespace, "c1", plane.kubeconfig)
    joiner = NodeJoiner(kube, namespace=namespace, name=f"bench-{namespace}")
    group = NodeGroup(
        name="bench",
        instance_class={
            "kind": templates.instance_class.kind,
            "metadata": {"name": "b"},
            "spec": spec,
        },
        cluster="c1",
        namespace=namespace,
        bootstrap=Bootstrap(data_secret_name="boot"),
        replicas=0,
        zones=zones or (DEFAULT_ZONE,),
    )
    objects = render_node_group(group, kinds, templates)
    template, deployment = objects[0], objects[1]
    kube.create(kinds.template, template, namespace)
    kube.create(MACHINE_DEPLOYMENTS, deployment, namespace)
    name = deployment["metadata"]["name"]
    task_queue = f"bench-ng-{uuid.uuid4().hex[:6]}"
    settings = ctx.settings.model_copy(
        update={"temporal": ctx.settings.temporal.model_copy(update={"task_queue": task_queue})}
    )
    worker = build_worker(ctx.client, settings, driver=driver, kube=kube, task_queue=task_queue)
    starter = MachineStarter(
        kube,
        ctx.client,
        kinds=kinds,
        task_queue=task_queue,
        cluster="bench",
        namespace=namespace,
        timings=TIMINGS,
    )

    def joined() -> int:
        """Machines ``Running`` (CAPI found their Node by providerID) whose Node is ``Ready``."""
        items = kube.list(
            capi.MACHINES.untyped,  # status.phase: CAPI's, which the product does not read
            namespace,
            labelSelector=f"cluster.x-k8s.io/deployment-name={name}",
        ).get("items", [])
        running = [
            str(((m.get("status") or {}).get("nodeRef") or {}).get("name") or "")
            for m in items
            if (m.get("status") or {}).get("phase") == "Running"
        ]
        return sum(1 for node in running if node and _node_ready(kube, node))

    async with worker:
        task = asyncio.create_task(starter.run())
        kubelets = asyncio.create_task(joiner.run())
        await asyncio.sleep(1.0)  # informers synced
        started = time.monotonic()
        kube.patch(MACHINE_DEPLOYMENTS, name, {"spec": {"replicas": GROUP_SIZE}}, namespace)
        while await asyncio.to_thread(joined) < GROUP_SIZE:
            await asyncio.sleep(0.1)
        wall = time.monotonic() - started
        kube.patch(MACHINE_DEPLOYMENTS, name, {"spec": {"replicas": 0}}, namespace)
        deadline = time.monotonic() + 300
        while kube.list(capi.MACHINES, namespace).get("items") and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        starter.stop()
        joiner.stop()
        for running in (task, kubelets):
            with contextlib.suppress(asyncio.CancelledError):
                await running
    return wall


def _node_ready(kube: Kube, name: str) -> bool:
    node = kube.get(NODES.untyped, name) or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def nodegroup_figures(ctx: BenchContext) -> dict[str, float]:
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="cloudloop-bench-parent-") as state:
        parent = DvpParent.start(Path(state), apart=True)  # the emulated cloud in its own process
        try:
            figures.update(await _dvp_lb(ctx, parent))
            with _capi_plane() as plane:
                namespace = parent.new_namespace("bench-ng")
                driver = DvpDriver(dvp_settings(parent, namespace))
                figures["nodegroup_scale_0_to_10_wall_s_dvp"] = await _scale_group(
                    ctx,
                    plane,
                    driver,
                    DVP_KINDS,
                    DVP_TEMPLATES,
                    {
                        "virtualMachine": {
                            "cpu": {"cores": 2},
                            "memory": {"size": "2Gi"},
                            "virtualMachineClassName": VM_CLASS,
                        },
                        "rootDisk": {
                            "size": "10Gi",
                            "storageClass": "linstor-thin-r1",
                            "image": {"kind": "ClusterVirtualImage", "name": CLUSTER_IMAGE},
                        },
                    },
                )
                with (
                    tempfile.TemporaryDirectory(prefix="cloudloop-bench-ovirt-") as ostate,
                    ovirt_engine(Path(ostate), password="bench") as endpoint,
                ):
                    zdriver = ZvirtDriver(
                        zvirt_settings(endpoint, poll_interval_s=0.05, shutdown_timeout_s=2)
                    )
                    figures["nodegroup_scale_0_to_10_wall_s_zvirt"] = await _scale_group(
                        ctx,
                        plane,
                        zdriver,
                        ZVIRT_KINDS,
                        ZVIRT_TEMPLATES,
                        machine_spec(endpoint, numCPUs=2),
                    )
                    zdriver.close()
        finally:
            parent.stop()
    return figures


# -- the DVP load balancer -------------------------------------------------------------------
async def _dvp_lb(ctx: BenchContext, parent: DvpParent) -> dict[str, float]:
    kube = ctx.kube
    scope = uuid.uuid4().hex[:8]
    parent_namespace = parent.new_namespace("bench-lb")
    driver = DvpDriver(dvp_settings(parent, parent_namespace))
    vms = [f"bench-lb-{scope}-{i}" for i in range(3)]
    create_node_vms(parent, parent_namespace, driver.session.cluster_labels(), vms)
    for name in vms:
        kube.create(
            NODES,
            {
                "metadata": {"name": name, "labels": {"cloudloop-bench-dvp-lb": scope}},
                "spec": {"providerID": f"dvp://{name}"},
            },
        )
    namespace = f"bench-dvp-lb-{scope}"
    direct_namespace = f"bench-dvp-lb-direct-{scope}"
    for name in (namespace, direct_namespace):
        kube.create(NAMESPACES, {"metadata": {"name": name}})
    ccm = ctx.settings.ccm.model_copy(update={"node_selector": f"cloudloop-bench-dvp-lb={scope}"})
    settings = ctx.settings.model_copy(
        update={
            "provider": "dvp",
            "cluster_name": f"bench-dvp-lb-{scope}",
            "ccm": ccm,
            "temporal": ctx.settings.temporal.model_copy(update={"task_queue": f"bdl-{scope}"}),
        }
    )
    informers = Informers(kube)
    starter = ServiceStarter(
        kube,
        ctx.client,
        services=informers.services(namespace=namespace),
        nodes=informers.nodes(label_selector=ccm.node_selector),
        task_queue=settings.temporal.task_queue,
        cluster=settings.cluster_name,
        provider="dvp",
        concurrency=4,
    )
    worker = build_worker(ctx.client, settings, driver=driver, kube=kube)
    from activities.loadbalancer import LoadBalancerActivities

    lb_activities = LoadBalancerActivities(driver.load_balancers, driver.instances, kube)
    nodes = [LoadBalancerNode(name=n, provider_id=f"dvp://{n}") for n in vms]
    store = starter.services.store

    desired = DesiredLoadBalancer(
        ports=[
            LoadBalancerPort(name="http", port=80, node_port=30080),
            LoadBalancerPort(name="https", port=443, node_port=30443),
        ],
        nodes=nodes,
    )

    def ensure(ref: ObjectRef) -> LoadBalancerStatus:
        target = LoadBalancerTarget(service=ref, cluster=settings.cluster_name, provider="dvp")
        return driver.load_balancers.ensure_load_balancer(lb_activities.spec(target, desired))

    def direct(name: str) -> None:
        direct_service_pass(kube, direct_namespace, name, ensure)

    async def ingress(name: str) -> None:
        key = f"{namespace}/{name}"
        while not (((store.get(key) or {}).get("status") or {}).get("loadBalancer") or {}).get(
            "ingress"
        ):
            await asyncio.sleep(0.002)

    workflow_s: list[float] = []
    direct_s: list[float] = []
    async with worker:
        task = asyncio.create_task(starter.run())
        await asyncio.to_thread(direct, "warmup")
        await asyncio.to_thread(_create, kube, SERVICES, _service("warmup"), namespace)
        await ingress("warmup")
        for i in range(LB_SAMPLES):
            started = time.monotonic()
            await asyncio.to_thread(_create, kube, SERVICES, _service(f"s{i}"), namespace)
            await ingress(f"s{i}")
            workflow_s.append(time.monotonic() - started)
            started = time.monotonic()
            await asyncio.to_thread(direct, f"d{i}")
            direct_s.append(time.monotonic() - started)
        for key in list(store):
            kube.delete(SERVICES, key.partition("/")[2], namespace)
        deadline = time.monotonic() + 120
        while store and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        starter.stop()
        informers.stop()
        await task
    release_direct_services(kube, direct_namespace)
    for name in vms:
        kube.delete(NODES, name)
    workflow_median, direct_median = statistics.median(workflow_s), statistics.median(direct_s)
    return {
        "dvp_lb_ensure_median_s": workflow_median,
        "dvp_lb_direct_median_s": direct_median,
        "dvp_lb_ensure_overhead_ratio": workflow_median / direct_median,
        **overhead_ms("dvp_lb_ensure", workflow_s, direct_s),
    }
