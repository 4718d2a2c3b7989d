"""OpenStack layout figures: apply, re-apply and destroy of the ``Standard`` example (one master
with its root and data volumes, floating IP, one static node) on the OpenStack emulator.

- ``openstack_layout_apply_wall_s``: ``Layout`` apply started → result, through the workflow,
  its module children and one activity per resource (worker in this process; emulator delays
  ``QUICK``: a server BUILDs 0.2 s, a volume attaches in 0.3 s);
- ``openstack_layout_apply_cloud_calls``: OpenStack requests of that apply
  (``cloud_api_requests_total``, logins included);
- ``layout_reapply_mutating_calls`` (OpenStack's contribution; also
  ``openstack_layout_reapply_mutating_calls``): requests of a second apply that are not a GET,
  as the emulator counted them (goal 0);
- ``openstack_layout_converge_pass_cloud_calls``: OpenStack requests of one ``LayoutConverge``
  pass (plan only) with nothing changed, after the re-apply: the read-only calls a cluster's
  converge costs every interval;
- ``layout_destroy_leftover_resources`` (OpenStack's contribution; also
  ``openstack_layout_destroy_leftover_resources``): after destroy, the cluster's resources still
  in the emulator (``devstack.backends.openstack_layouts.cluster_resources``; goal 0).
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

from bench.context import BenchContext
from bench.converge import layout_worker, plan_only_pass
from cloudloop.cloud.openstack.settings import OpenStackSettings
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import LayoutInput
from devstack.backends.openstack import openstack_emulator
from devstack.backends.openstack_layouts import cluster_resources
from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint
from starters.layout import run_layout

EXAMPLE = (
    Path(__file__).resolve().parents[1]
    / "deploy"
    / "layouts"
    / "examples"
    / "openstack-standard.yaml"
)


def _openstack_requests() -> float:
    """``cloud_api_requests_total`` of OpenStack, as this process counted them."""
    total = 0.0
    for metric in REGISTRY.collect():
        if metric.name != "cloud_api_requests":
            continue
        for sample in metric.samples:
            if (
                sample.name == "cloud_api_requests_total"
                and sample.labels["provider"] == "openstack"
            ):
                total += sample.value
    return total


def _config(folder: Path, prefix: str, endpoint: OpenStackEmulatorEndpoint) -> Path:
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    example_prefix = ""
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            example_prefix = doc["cloud"]["prefix"]
            doc["cloud"]["prefix"] = prefix
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            continue
        doc["provider"] = {
            "authURL": endpoint.auth_url,
            "domainName": endpoint.user_domain,
            "tenantName": endpoint.project,
            "username": endpoint.username,
            "password": endpoint.password,
            "region": endpoint.region,
        }
        for group in doc.get("nodeGroups") or []:
            if group["instanceClass"].get("mainNetwork") == example_prefix:
                group["instanceClass"]["mainNetwork"] = prefix
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


async def openstack_layout_figures(ctx: BenchContext) -> dict[str, float]:
    queue = f"bench-os-layout-{uuid.uuid4().hex[:6]}"
    prefix = f"bo{uuid.uuid4().hex[:6]}"
    with (
        tempfile.TemporaryDirectory(prefix="bench-os-layout-") as folder,
        openstack_emulator(Path(folder) / "emulator") as endpoint,
    ):
        admin = OpenStackEmulatorAdmin(endpoint.admin_url)
        source = ConfigSource(file=str(_config(Path(folder), prefix, endpoint)))
        cluster = ClusterIdentity(prefix=prefix, uuid=str(uuid.uuid4()))

        def input(action: str) -> LayoutInput:
            return LayoutInput(action=action, provider="openstack", source=source, cluster=cluster)

        settings = ctx.settings.model_copy(
            update={"openstack": OpenStackSettings(request_timeout_s=10, poll_interval_s=0.1)}
        )
        async with layout_worker(ctx.client, queue, settings, Path(folder)):
            before = _openstack_requests()
            started = time.monotonic()
            await run_layout(ctx.client, queue, input("apply"), poll_s=0.5)
            wall = time.monotonic() - started
            apply_calls = _openstack_requests() - before
            admin.clear_requests()
            await run_layout(ctx.client, queue, input("apply"), poll_s=0.5)
            mutating = sum(
                count
                for key, count in admin.request_counts().items()
                if not key.startswith(("GET ", "HEAD ")) and key.split(" ")[1] != "identity"
            )
            before = _openstack_requests()
            await plan_only_pass(ctx.client, queue, "openstack", source, cluster)
            converge_calls = _openstack_requests() - before
            await run_layout(ctx.client, queue, input("destroy"), poll_s=0.5)
        left = float(len(cluster_resources(endpoint.admin_url, prefix)))
    return {
        "openstack_layout_apply_wall_s": wall,
        "openstack_layout_apply_cloud_calls": apply_calls,
        "openstack_layout_converge_pass_cloud_calls": converge_calls,
        "layout_reapply_mutating_calls": float(mutating),
        "openstack_layout_reapply_mutating_calls": float(mutating),
        "layout_destroy_leftover_resources": left,
        "openstack_layout_destroy_leftover_resources": left,
    }
