"""Service ``type: LoadBalancer`` → ingress set, through the workflow, against the same cloud work
made directly with the same driver (boto3 → moto) in the same run.

- ``lb_ensure_median_s``: median over ``SAMPLES`` Services, one at a time, of Service created →
  ``status.loadBalancer.ingress`` set (informer → starter: finalizer + signal-with-start →
  workflow → ``lb.ensure`` activity: boto3 calls + status patch → seen through the watch).
- ``lb_direct_median_s``: median of the same Service created, then the product's kube writes and
  cloud calls made directly (:func:`_direct`), as the upstream service controller makes them:
  finalizer, ``EnsuringLoadBalancer`` Event, ``AwsDriver.ensure_load_balancer`` (a fresh
  Classic ELB, two ports, three instances), the ingress status, ``EnsuredLoadBalancer`` Event;
  so the ratio is what Temporal costs. The Services are in a namespace the starter does not
  watch. The samples alternate with the ones above, because moto answers more slowly as it
  fills up.
- ``lb_ensure_overhead_ratio``: the first divided by the second (goal ≤ 1.3).
- ``lb_step_<step>_median_s``: where the workflow path's time goes (:mod:`bench.breakdown`).
- ``lb_ensure_200_services_wall_s``: 200 Services created at once → all have ingress.
- ``lb_direct_200_services_wall_s``: the same 200 Services made directly (:func:`_direct`), with
  the same parallelism (``PARALLELISM`` starter syncs and activity slots; ``PARALLELISM``
  threads).
- ``lb_ensure_200_services_wall_ratio``: the first over the second (goal ≤ 1.5).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from activities.kube import KubeActivities
from activities.loadbalancer import LoadBalancerActivities
from bench.breakdown import Sample, breakdown, cloud_seconds
from bench.codecsize import payload_bytes
from bench.context import BenchContext
from bench.overhead import overhead_ms
from cloudloop import temporal
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.errors import CloudError
from cloudloop.cloud.models import LoadBalancerPort, LoadBalancerSpec, LoadBalancerStatus
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Service
from cloudloop.kube.events import record_event
from cloudloop.kube.finalizers import add_finalizer, remove_finalizer
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import NODES, SERVICES, ObjectRef, Resource
from cloudloop.messages.kube import EventSource
from cloudloop.messages.loadbalancer import (
    LB_FINALIZER,
    DesiredLoadBalancer,
    LoadBalancerNode,
    LoadBalancerTarget,
    workflow_id,
)
from devstack.backends.aws import create_cluster_network, launch_instances
from starters.loadbalancer import ServiceStarter
from workflows.loadbalancer import LoadBalancerWorkflow

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SAMPLES = 20
FLEET = 200
PARALLELISM = 20
INSTANCES = 3


def _service(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [
                {"name": "http", "port": 80, "protocol": "TCP"},
                {"name": "https", "port": 443, "protocol": "TCP"},
            ],
        },
    }


def direct_service_pass(
    kube: Kube, namespace: str, name: str, ensure: Callable[[ObjectRef], LoadBalancerStatus]
) -> None:
    """One Service through the upstream service controller's steps, made directly, the kube
    writes the product's path makes for it too: the Service created, its finalizer, the
    ``EnsuringLoadBalancer`` Event, the cloud LB (``ensure``), the ingress status,
    ``EnsuredLoadBalancer``. The other side of every ``*_lb_ensure_overhead_ratio``, whose
    workflow side is timed from the same create to the ingress seen."""
    obj = kube.create(SERVICES, _service(name), namespace)
    ref = ObjectRef.of(SERVICES, obj)
    add_finalizer(kube, ref, LB_FINALIZER, obj)
    _event(kube, ref, "EnsuringLoadBalancer", "Ensuring load balancer")
    status = ensure(ref)
    entry = {"hostname": status.hostname} if status.hostname else {"ip": status.ip}
    patch = {"metadata": {"uid": ref.uid}, "status": {"loadBalancer": {"ingress": [entry]}}}
    kube.patch(SERVICES, name, patch, namespace, subresource="status")
    _event(kube, ref, "EnsuredLoadBalancer", "Ensured load balancer")


def release_direct_services(kube: Kube, namespace: str) -> None:
    """The finalizers of :func:`direct_service_pass`'s Services off (no workflow will take
    them off), then their namespace deleted."""

    def release(obj: dict[str, Any]) -> None:
        remove_finalizer(kube, ObjectRef.of(SERVICES, obj), LB_FINALIZER)

    with ThreadPoolExecutor(PARALLELISM) as pool:
        list(pool.map(release, kube.list(SERVICES, namespace).get("items", [])))
    kube.delete(NAMESPACES, namespace)


def _event(kube: Kube, ref: ObjectRef, reason: str, message: str) -> None:
    record_event(
        kube, ref, type="Normal", reason=reason, message=message, component=EventSource.SERVICE
    )


def _has_ingress(obj: Service | None) -> bool:
    return bool(((obj or {}).get("status") or {}).get("loadBalancer", {}).get("ingress"))


async def lb_benchmarks(ctx: BenchContext) -> dict[str, float]:
    kube = ctx.kube
    scope = uuid.uuid4().hex[:8]
    ccm = ctx.settings.ccm.model_copy(
        update={
            "node_selector": f"cloudloop-bench-lb={scope}",
            "concurrent_service_syncs": PARALLELISM,
        }
    )
    settings = ctx.settings.model_copy(
        update={
            "cluster_name": f"bench-lb-{scope}",
            "ccm": ccm,
            "temporal": ctx.settings.temporal.model_copy(
                update={"task_queue": f"bench-lb-{scope}"}
            ),
        }
    )
    driver = AwsDriver(AWS.section(settings))
    world = _make_world(driver, settings.cluster_name)
    node_names = _make_nodes(ctx, scope, world)
    node_labels = {"cloudloop-bench-lb": scope}
    namespace = f"bench-lb-{scope}"
    direct_namespace = f"bench-lb-direct-{scope}"
    for name in (namespace, direct_namespace):
        kube.create(NAMESPACES, {"metadata": {"name": name}})

    informers = Informers(kube)
    starter = ServiceStarter(
        kube,
        ctx.client,
        services=informers.services(namespace=namespace),
        nodes=informers.nodes(label_selector=ccm.node_selector),
        task_queue=settings.temporal.task_queue,
        cluster=settings.cluster_name,
        provider=settings.provider,
        concurrency=PARALLELISM,
    )
    # The LB workflow and its activities only, with PARALLELISM activity slots.
    activities = [
        *LoadBalancerActivities(driver.load_balancers, driver.instances, kube).all(),
        *KubeActivities(kube).all(),
    ]
    worker = temporal.make_worker(
        ctx.client,
        settings.temporal.task_queue,
        workflows=[LoadBalancerWorkflow],
        activities=activities,  # type: ignore[arg-type]
        graceful_shutdown_s=5,
        max_concurrent_activities=PARALLELISM,
    )

    nodes = [
        LoadBalancerNode(
            name=name, provider_id=f"aws:///us-east-1a/{instance_id}", labels=node_labels
        )
        for name, instance_id in zip(node_names, world["instances"], strict=True)
    ]
    lb_activities = LoadBalancerActivities(driver.load_balancers, driver.instances, kube)

    def direct_spec(service: ObjectRef) -> LoadBalancerSpec:
        """What ``lb.ensure`` hands the driver for a Service like the ones created here."""
        desired = DesiredLoadBalancer(
            ports=[
                LoadBalancerPort(name="http", port=80, node_port=30080),
                LoadBalancerPort(name="https", port=443, node_port=30443),
            ],
            nodes=nodes,
        )
        target = LoadBalancerTarget(service=service, cluster=settings.cluster_name, provider="aws")
        return lb_activities.spec(target, desired)

    def ensure(spec: LoadBalancerSpec) -> LoadBalancerStatus:
        """As ``lb.ensure`` is retried (3 attempts), so that both sides do the same work."""
        for attempt in range(2):
            try:
                return driver.load_balancers.ensure_load_balancer(spec)
            except CloudError:
                time.sleep(1.0 * (attempt + 1))
        return driver.load_balancers.ensure_load_balancer(spec)

    def direct(name: str) -> None:
        direct_service_pass(kube, direct_namespace, name, lambda ref: ensure(direct_spec(ref)))

    def create(name: str) -> None:
        kube.create(SERVICES, _service(name), namespace)

    store = starter.services.store  # fed by the starter's watch: no polling load on the API

    async def wait_ingress(names: list[str]) -> None:
        keys = [f"{namespace}/{name}" for name in names]
        while not all(_has_ingress(store.get(key)) for key in keys):
            await asyncio.sleep(0.002)

    through_workflow: list[float] = []
    direct_samples: list[float] = []
    samples: list[Sample] = []
    async with worker:
        task = asyncio.create_task(starter.run())
        await asyncio.to_thread(direct, "warmup")
        for name in ("warmup-1", "warmup-2"):
            await asyncio.to_thread(create, name)
            await wait_ingress([name])
        # Samples alternate, so both sides meet moto in the same state (it slows as it fills).
        for i in range(SAMPLES):
            requested, cloud_before = time.time(), cloud_seconds()
            started = time.monotonic()
            await asyncio.to_thread(create, f"s{i}")
            await wait_ingress([f"s{i}"])
            through_workflow.append(time.monotonic() - started)
            service = ObjectRef.of(SERVICES, store[f"{namespace}/s{i}"])
            samples.append(
                Sample(
                    workflow_id=workflow_id(service),
                    requested=requested,
                    seen=requested + through_workflow[-1],
                    cloud_s=cloud_seconds() - cloud_before,
                )
            )
            started = time.monotonic()
            await asyncio.to_thread(direct, f"d{i}")
            direct_samples.append(time.monotonic() - started)

        names = [f"f{i}" for i in range(FLEET)]
        started = time.monotonic()
        with ThreadPoolExecutor(PARALLELISM) as pool:
            await asyncio.to_thread(lambda: list(pool.map(create, names)))
        await wait_ingress(names)
        fleet_wall = time.monotonic() - started
        steps = await breakdown(ctx.client, "lb", samples)

        # Tear the Services down while the worker runs (not measured).
        for key in list(store):
            kube.delete(SERVICES, key.partition("/")[2], namespace)
        deadline = time.monotonic() + 300
        while store and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        starter.stop()
        informers.stop()
        await task
    # The samples' complete histories: what the payload codec costs them in bytes.
    codec_bytes = await payload_bytes(ctx.client, [s.workflow_id for s in samples])

    # -- the same 200 ensures, directly, with the same parallelism --------------------------
    started = time.monotonic()
    with ThreadPoolExecutor(PARALLELISM) as pool:
        list(pool.map(direct, [f"df{i}" for i in range(FLEET)]))
    direct_fleet_wall = time.monotonic() - started

    release_direct_services(kube, direct_namespace)

    for name in node_names:
        kube.delete(NODES, name)

    workflow_median = statistics.median(through_workflow)
    direct_median = statistics.median(direct_samples)
    return {
        "lb_ensure_median_s": workflow_median,
        "lb_direct_median_s": direct_median,
        "lb_ensure_overhead_ratio": workflow_median / direct_median,
        **overhead_ms("lb_ensure", through_workflow, direct_samples),
        "lb_ensure_200_services_wall_s": fleet_wall,
        "lb_direct_200_services_wall_s": direct_fleet_wall,
        "lb_ensure_200_services_wall_ratio": fleet_wall / direct_fleet_wall,
        **steps,
        **codec_bytes,
    }


def _make_world(driver: AwsDriver, cluster: str) -> dict[str, Any]:
    """A VPC with two cluster subnets, a node security group and ``INSTANCES`` instances."""
    ec2 = driver.session.client("ec2")
    network = create_cluster_network(ec2, cluster)
    instances = launch_instances(
        ec2, INSTANCES, SubnetId=network.subnet_ids[0], SecurityGroupIds=[network.node_group_id]
    )
    return {"instances": [i["InstanceId"] for i in instances]}


def _make_nodes(ctx: BenchContext, scope: str, world: dict[str, Any]) -> list[str]:
    names = []
    for index, instance_id in enumerate(world["instances"]):
        name = f"bench-lb-{scope}-{index}"
        ctx.kube.create(
            NODES,
            {
                "metadata": {"name": name, "labels": {"cloudloop-bench-lb": scope}},
                "spec": {"providerID": f"aws:///us-east-1a/{instance_id}"},
            },
        )
        names.append(name)
    return names
