"""AWS layout figures: apply, re-apply and destroy of the ``WithNAT`` example on moto.

- ``aws_layout_apply_wall_s``: ``Layout`` apply started → result, through the workflow, its
  module children and one activity per resource (worker in this process);
- ``aws_layout_apply_cloud_calls``: AWS requests of that apply (``cloud_api_requests_total``);
- ``layout_reapply_mutating_calls``: requests of a second apply whose operation is not a
  Describe/Get/List (goal 0);
- ``aws_layout_converge_pass_cloud_calls``: AWS requests of one plan-only ``LayoutConverge``
  pass with nothing changed, after the re-apply (what the cluster's converge costs every
  interval);
- ``layout_destroy_leftover_resources``: after destroy, the cluster's resources still in moto
  (EC2 resources named ``<prefix>…``, live instances, the IAM role and profile, the key pair;
  goal 0).
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

from prometheus_client import REGISTRY

from bench.context import BenchContext
from bench.converge import layout_worker, plan_only_pass
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import LayoutInput
from devstack.backends.aws_layouts import cluster_resources, layout_config
from starters.layout import run_layout

EXAMPLE = (
    Path(__file__).resolve().parents[1] / "deploy" / "layouts" / "examples" / "aws-with-nat.yaml"
)
READ_ONLY = ("Describe", "Get", "List")


def _aws_requests() -> dict[str, float]:
    """``cloud_api_requests_total`` of AWS by operation, as this process counted them."""
    counts: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name != "cloud_api_requests":
            continue
        for sample in metric.samples:
            if sample.name == "cloud_api_requests_total" and sample.labels["provider"] == "aws":
                operation = sample.labels["operation"]
                counts[operation] = counts.get(operation, 0.0) + sample.value
    return counts


def _since(before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in _aws_requests().items() if v > before.get(k, 0)}


async def layout_figures(ctx: BenchContext) -> dict[str, float]:
    endpoint = ctx.stack.aws_endpoint
    queue = f"bench-layout-{uuid.uuid4().hex[:6]}"
    prefix = f"bl{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="bench-layout-") as folder:
        path = layout_config(EXAMPLE, Path(folder), prefix)
        cluster = ClusterIdentity(prefix=prefix, uuid=str(uuid.uuid4()))
        source = ConfigSource(file=str(path))

        def input(action: str) -> LayoutInput:
            return LayoutInput(action=action, provider="aws", source=source, cluster=cluster)

        async with layout_worker(ctx.client, queue, ctx.settings, Path(folder)):
            before = _aws_requests()
            started = time.monotonic()
            await run_layout(ctx.client, queue, input("apply"), poll_s=1.0)
            wall = time.monotonic() - started
            apply_calls = sum(_since(before).values())
            before = _aws_requests()
            await run_layout(ctx.client, queue, input("apply"), poll_s=1.0)
            mutating = sum(v for k, v in _since(before).items() if not k.startswith(READ_ONLY))
            before = _aws_requests()
            await plan_only_pass(ctx.client, queue, "aws", source, cluster)
            converge_calls = sum(_since(before).values())
            await run_layout(ctx.client, queue, input("destroy"), poll_s=1.0)
        left = len(cluster_resources(endpoint, prefix))
    return {
        "aws_layout_apply_wall_s": wall,
        "aws_layout_apply_cloud_calls": apply_calls,
        "aws_layout_converge_pass_cloud_calls": converge_calls,
        "layout_reapply_mutating_calls": mutating,
        "layout_destroy_leftover_resources": float(left),
    }
