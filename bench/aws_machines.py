"""Cluster API machines and node groups on AWS (moto behind the stack's AWS front).

- ``aws_machine_provision_median_s``: median over ``SAMPLES`` AWSMachines (Machine and bootstrap
  Secret already there) of object created → ``status.ready`` seen by a watch, through informer →
  starter → ``Machine`` workflow → activities (find, RunInstances, observe, status report).
- ``aws_machine_direct_median_s``: the same object created, then the product's kube writes and
  the same SDK calls made directly (:func:`bench.machine._direct`, as for DVP and OpenStack:
  finalizer, the bootstrap Secret read, a "creating" condition, the driver's
  ``create_machine``/``get_machine`` on the same poll schedule, providerID, status, Event).
  Until 2026-11-27 this module had a copy that skipped the Secret read, which the workflow path
  cannot skip (the user data comes from it): one kube GET of the gap was not Temporal's.
- ``aws_machine_provision_overhead_ratio``: the first over the second (samples alternate).
  Both ends are seen the same way for every machine benchmark: the workflow path's by a watch
  (:class:`bench.machine.ReadyWatch`, an informer's events; until 2026-11-27 this module polled
  the informer's store every 10 ms, 5 ms on average added to the workflow side only).
- ``aws_nodegroup_scale_0_to_10_wall_s``: a MachineDeployment rendered from an
  ``AWSInstanceClass`` (``render_node_group``) scaled 0 → 10 → all 10 Machines
  ``Running`` with their Nodes ``Ready`` (the dev stack's kubelet stand-in); the real Cluster
  API manager on its own control plane (:func:`bench.nodegroup._scale_group`), the starter and
  worker in this process. Report only.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
import uuid

from bench.breakdown import Sample, breakdown, timeline
from bench.context import BenchContext
from bench.machine import TIMINGS, ReadyWatch, _direct, _namespace, _prepare, workflow_sample
from bench.nodegroup import _capi_plane, _scale_group
from bench.overhead import overhead_ms
from cloudloop.cloud.aws.capi import INFRA_KINDS as AWS_KINDS
from cloudloop.cloud.aws.capi import NODE_TEMPLATES as AWS_TEMPLATES
from cloudloop.cloud.aws.driver import AwsDriver
from devstack import machine_fixtures
from devstack.backends.aws import ZONES, MachineCloud, machine_cloud
from devstack.crds import apply_crds
from starters.machine import MachineStarter
from workers.main import build_worker

SAMPLES = 10
SPEC = {"instanceType": "t3.micro", "rootVolume": {"size": 10, "type": "gp3"}}


async def _provision(ctx: BenchContext, cloud: MachineCloud) -> dict[str, float]:
    kube = ctx.kube
    machine_fixtures.ensure_capi_crds(kube)
    apply_crds(kube)
    driver = AwsDriver(cloud.settings(ctx.stack.aws_endpoint))
    driver.cluster = cloud.cluster
    task_queue = f"bench-aws-{uuid.uuid4().hex[:6]}"
    namespace = _namespace(kube, "bench-aws")
    direct_namespace = _namespace(kube, "bench-aws-direct")
    machine_fixtures.create_cluster(kube, namespace, "c1", AWS_KINDS)
    subnet = cloud.subnets[ZONES[0]]
    starter = MachineStarter(
        kube,
        ctx.client,
        kinds=AWS_KINDS,
        task_queue=task_queue,
        cluster=cloud.cluster,
        namespace=namespace,
        timings=TIMINGS,
    )
    worker = build_worker(ctx.client, ctx.settings, driver=driver, kube=kube, task_queue=task_queue)
    spec = {**SPEC, "subnet": {"id": subnet}}
    through_workflow: list[float] = []
    direct: list[float] = []
    samples: list[Sample] = []
    async with worker, ReadyWatch(kube, namespace, AWS_KINDS) as watch:
        task = asyncio.create_task(starter.run())
        try:
            for i in range(-1, SAMPLES):  # -1: warm-up
                body = await asyncio.to_thread(
                    _prepare, kube, namespace, f"w{i + 1}", AWS_KINDS, spec
                )
                started, ready_at, sample = await workflow_sample(
                    kube, watch, AWS_KINDS, namespace, body
                )
                if i >= 0:
                    through_workflow.append(ready_at - started)
                    samples.append(sample)
                body = await asyncio.to_thread(
                    _prepare, kube, direct_namespace, f"d{i + 1}", AWS_KINDS, spec
                )
                started = time.monotonic()
                await asyncio.to_thread(_direct, kube, driver, direct_namespace, body, AWS_KINDS)
                if i >= 0:
                    direct.append(time.monotonic() - started)
        finally:
            starter.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            for ns in (namespace, direct_namespace):
                for obj in kube.list(AWS_KINDS.machine, ns)["items"]:
                    kube.patch(
                        AWS_KINDS.machine,
                        obj["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                        ns,
                    )
    workflow_median = statistics.median(through_workflow)
    direct_median = statistics.median(direct)
    steps = await breakdown(ctx.client, "aws_machine", samples)
    middle = sorted(samples, key=lambda s: s.seen - s.requested)[len(samples) // 2]
    print(
        f"aws-machines, the median sample:\n{await timeline(ctx.client, middle)}", file=sys.stderr
    )
    return {
        **steps,
        "aws_machine_provision_median_s": workflow_median,
        "aws_machine_direct_median_s": direct_median,
        "aws_machine_provision_overhead_ratio": workflow_median / direct_median,
        **overhead_ms("aws_machine_provision", through_workflow, direct),
    }


async def aws_machine_figures(ctx: BenchContext) -> dict[str, float]:
    endpoint = ctx.stack.aws_endpoint
    figures = await _provision(ctx, machine_cloud(endpoint, f"bench-{uuid.uuid4().hex[:6]}"))
    group_cloud = machine_cloud(endpoint, f"bench-ng-{uuid.uuid4().hex[:6]}")
    driver = AwsDriver(group_cloud.settings(endpoint))
    driver.cluster = group_cloud.cluster
    with _capi_plane() as plane:
        figures["aws_nodegroup_scale_0_to_10_wall_s"] = await _scale_group(
            ctx,
            plane,
            driver,
            AWS_KINDS,
            AWS_TEMPLATES,
            {"instanceType": "t3.micro", "diskSizeGb": 10},
            zones=(ZONES[0],),
        )
    return figures
