"""Scale walls of node initialization: 1,000 tainted Nodes created at once → all initialized.

- ``init_1000_nodes_burst_wall_s``: 1,000 Nodes with the ``uninitialized`` taint, named after
  1,000 moto instances tagged for the cluster, created at once (16 client threads) → every one
  initialized (taint gone, providerID, addresses, zone labels), seen by a watch; through the
  starter's node sync (:class:`starters.node.NodeSync`, production settings but for the node
  selector, :data:`CONCURRENT_NODE_SYNCS` write slots and the driver's request timeout), which
  initializes Nodes itself (no workflow): one batched lookup per pass, then per Node a status
  PATCH, a PUT and its ``Synced`` Event.
- The instances live in the module's own subnet, so their private DNS names (the Node names)
  are unique: moto gives an instance launched without a subnet a random 10/8 address, and two
  such instances may share a name.
- The driver waits up to :data:`EMULATOR_TIMEOUT_S` for an answer (production: 10 s): moto
  renders a 1,000-instance page of the tag listing in about 3 s on an idle machine, and after
  the modules before this one, with the API server busy with the burst, past 10 s.
- ``init_1000_nodes_create_wall_s``: the creation alone (the API server's share of the wall).
- ``init_cloud_calls_per_node_1000_burst``: the cloud requests of that burst ÷ 1,000.
- ``init_1000_nodes_burst_cloud_s``: seconds in cloud requests during the burst (the rest of the
  wall is the kube writes and waiting for them).
- ``openstack_init_1000_nodes_*``: the same on the OpenStack emulator, 1,000 ACTIVE servers,
  Nodes named after them (looked up by name, 100 names a request).
- ``vsphere_init_1000_nodes_*``: the same on vcsim, 1,000 customized guests (host name = the
  Node's name), cloned by :data:`SEED_THREADS` connections (``vsphere_init_1000_nodes_seed_s``,
  not in the wall).
- ``<prefix>init_1000_nodes_burst_stack_cpu_s``: CPU seconds the whole stack spent during the
  burst; on stderr each process's share, the init lookups, the node writes and the lifecycle
  passes (:class:`_Timeline`). ``CLOUDLOOP_BENCH_SCALE_CLOUDS`` limits the clouds run.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.breakdown import cloud_seconds
from bench.context import BenchContext
from bench.cpu import cpu_spent, stack_cpu_by_command
from bench.node import cloud_requests
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.vsphere.driver import VsphereDriver
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import NODES
from cloudloop.rules import node as rules
from devstack.backends.aws import aws_client, launch_instances
from devstack.backends.openstack import openstack_emulator, openstack_settings
from devstack.backends.vsphere import vsphere_settings
from devstack.local import LocalStack, StackOptions
from devstack.openstack_emulator import OpenStackEmulatorAdmin
from devstack.vcsim import VcsimOptions
from devstack.vcsim_inventory import NodeVm, ZoneLayout, seed
from starters.node import NodeSync

BURST = 1000
#: ``--concurrent-node-syncs`` of the burst (upstream's default, 1, writes one Node at a time).
#: 16: of 8, 12, 16 and 24 (2026-11-27, load 4-14), 16 wrote the Nodes fastest; 24 only made
#: each write slower (the API server is the bound, and the machine's 2 cores).
#: ``CLOUDLOOP_BENCH_NODE_SYNCS`` sets another for a run, to compare.
CONCURRENT_NODE_SYNCS = int(os.environ.get("CLOUDLOOP_BENCH_NODE_SYNCS") or 16)
#: The driver's request timeout here (see the module's rules).
EMULATOR_TIMEOUT_S = 60.0
#: vcsim connections cloning the vSphere burst's guests at once.
SEED_THREADS = 8


def _launch(ec2: Any, count: int, cluster: str) -> list[dict[str, Any]]:
    """Instances tagged for ``cluster``, as a cluster's nodes are, in a subnet of their own."""
    tags = [{"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"}]
    vpc_id = ec2.create_vpc(CidrBlock="10.128.0.0/16")["Vpc"]["VpcId"]
    subnet_id = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.128.0.0/20")["Subnet"]["SubnetId"]
    return launch_instances(
        ec2,
        count,
        InstanceType="m5.large",
        SubnetId=subnet_id,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )


def _tainted_node(name: str, label: str, scope: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {label: scope}},
        "spec": {
            "taints": [{"key": rules.UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]
        },
    }


async def scale_figures(ctx: BenchContext) -> dict[str, float]:
    clouds = os.environ.get("CLOUDLOOP_BENCH_SCALE_CLOUDS", "aws openstack vsphere").split()
    figures: dict[str, float] = {}
    for cloud, run in (("aws", _aws), ("openstack", _openstack), ("vsphere", _vsphere)):
        if cloud in clouds:
            figures.update(await run(ctx))
    return figures


async def _aws(ctx: BenchContext) -> dict[str, float]:
    settings = ctx.settings
    scope = uuid.uuid4().hex[:8]
    ec2 = aws_client("ec2", AWS.section(settings).endpoint_url)
    cluster = f"bench-scale-{scope}"  # its own cluster: the tag listing holds the burst only
    instances = await asyncio.to_thread(_launch, ec2, BURST, cluster)
    names = [str(i["PrivateDnsName"]) for i in instances]
    driver = AwsDriver(AWS.section(settings).model_copy(update={"timeout_s": EMULATOR_TIMEOUT_S}))
    driver.cluster = cluster  # as Provider.make_driver sets it
    return await burst(ctx, driver, names, scope, prefix="")


async def _openstack(ctx: BenchContext) -> dict[str, float]:
    """The same burst on the OpenStack emulator: 1,000 ACTIVE servers, Nodes named after them
    (looked up by name, ``NAME_BATCH`` names a request)."""
    scope = uuid.uuid4().hex[:8]
    with openstack_emulator(Path(tempfile.mkdtemp(prefix="bench-scale-os-"))) as endpoint:
        admin = OpenStackEmulatorAdmin(endpoint.admin_url, timeout_s=120)
        servers = await asyncio.to_thread(admin.seed_servers, BURST, prefix=f"burst-{scope}")
        driver = OpenStackDriver(openstack_settings(endpoint))
        try:
            await asyncio.to_thread(
                driver.instances.list_instances, [servers[0]["id"]]
            )  # log in first
            return await burst(
                ctx, driver, [s["name"] for s in servers], scope, prefix="openstack_"
            )
        finally:
            driver.close()


class _Timeline:
    """Where a burst's time goes, printed on stderr: the init lookups (batch sizes, spans), the
    Node writes (their spread and summed time) and the lifecycle passes that overlap them."""

    def __init__(self, sync: NodeSync) -> None:
        self.lookups: list[tuple[float, float, int]] = []
        self.writes: list[tuple[float, float]] = []
        self.passes: list[tuple[float, float]] = []
        self.cpu = stack_cpu_by_command()
        look_up, write, lifecycle = sync._look_up_batch, sync._initialize_node, sync.lifecycle_pass

        async def timed_look_up(names: list[str]) -> Any:
            begun = time.monotonic()
            found = await look_up(names)
            self.lookups.append((begun, time.monotonic(), len(found[0])))
            return found

        def timed_write(*args: Any) -> None:
            begun = time.monotonic()
            try:
                write(*args)
            finally:
                self.writes.append((begun, time.monotonic()))

        async def timed_pass() -> None:
            begun = time.monotonic()
            await lifecycle()
            self.passes.append((begun, time.monotonic()))

        sync._look_up_batch = timed_look_up  # type: ignore[method-assign]
        sync._initialize_node = timed_write  # type: ignore[method-assign,assignment]
        sync.lifecycle_pass = timed_pass  # type: ignore[method-assign]

    def report(self, name: str, t0: float) -> None:
        def span(a: float, b: float) -> str:
            return f"{a - t0:.1f}-{b - t0:.1f}s"

        lines = [
            f"{name}: init lookups "
            + ", ".join(f"{n} nodes {span(a, b)}" for a, b, n in self.lookups if n)
        ]
        if self.writes:
            first = min(a for a, _ in self.writes)
            last = max(b for _, b in self.writes)
            total = sum(b - a for a, b in self.writes)
            lines.append(
                f"{name}: {len(self.writes)} node writes {span(first, last)}, "
                f"{total:.1f}s summed ({total / len(self.writes) * 1000:.0f} ms each)"
            )
        lines.append(
            f"{name}: lifecycle passes " + ", ".join(span(a, b) for a, b in self.passes if b > t0)
        )
        lines.append(f"{name}: CPU s {cpu_spent(self.cpu, stack_cpu_by_command())}")
        print("\n".join(lines), file=sys.stderr, flush=True)

    def stack_cpu_s(self) -> float:
        """CPU seconds the whole stack spent since the burst started."""
        now = stack_cpu_by_command()
        return sum(now[c] - self.cpu.get(c, 0.0) for c in now)


async def _vsphere(ctx: BenchContext) -> dict[str, float]:
    """The same burst on vcsim: 1,000 customized guests (host name = the Node's name, a fixed
    IP), cloned by :data:`SEED_THREADS` connections at once; looked up by name (one inventory
    read answers a whole batch)."""
    scope = uuid.uuid4().hex[:8]
    local = LocalStack(
        StackOptions(
            state_dir=Path(tempfile.mkdtemp(prefix="bench-scale-vs-")),
            temporal=False,
            moto=False,
            kube=(),
            vcsim=VcsimOptions(clusters=2, hosts_per_cluster=2, standalone_hosts=0),
        )
    )
    await asyncio.to_thread(local.start)
    try:
        assert local.vcsim is not None
        endpoint = local.vcsim
        nodes = [
            NodeVm(
                f"vsb-{scope}-{i:04d}",
                f"10.21.{i // 200}.{10 + i % 200}",
                cluster=("DC0_C0", "DC0_C1")[i % 2],
            )
            for i in range(BURST)
        ]
        started = time.monotonic()
        with ThreadPoolExecutor(SEED_THREADS) as pool:
            chunks = [nodes[i::SEED_THREADS] for i in range(SEED_THREADS)]
            await asyncio.to_thread(
                lambda: list(pool.map(lambda chunk: seed(endpoint, chunk, None), chunks))
            )
        await asyncio.to_thread(seed, endpoint, [], ZoneLayout())
        seeded_s = time.monotonic() - started
        driver = VsphereDriver(vsphere_settings(endpoint))
        try:
            await asyncio.to_thread(
                driver.instances.find_instances_by_name, [nodes[0].name]
            )  # log in
            figures = await burst(ctx, driver, [n.name for n in nodes], scope, prefix="vsphere_")
        finally:
            driver.close()
        figures["vsphere_init_1000_nodes_seed_s"] = seeded_s
        return figures
    finally:
        await asyncio.to_thread(local.stop)


async def burst(
    ctx: BenchContext, driver: CloudDriver, names: list[str], scope: str, *, prefix: str
) -> dict[str, float]:
    """``names`` created at once as tainted Nodes → all initialized by a :class:`NodeSync`."""
    kube, settings = ctx.kube, ctx.settings
    label = "cloudloop-bench-scale"
    selector = f"{label}={scope}"
    ccm = settings.ccm.model_copy(
        update={"node_selector": selector, "concurrent_node_syncs": CONCURRENT_NODE_SYNCS}
    )
    informers = Informers(kube)
    assert driver.instances is not None
    sync = NodeSync(kube, driver.instances, informers.nodes(label_selector=selector), ccm)
    timeline = _Timeline(sync)
    task = asyncio.create_task(sync.run())
    figures: dict[str, float] = {}
    name = f"{prefix}init_1000_nodes"
    try:
        await sync.informer.wait_synced(60)
        await asyncio.sleep(0.5)  # the loops' startup passes (over no nodes yet) are done
        before, cloud_before = cloud_requests(), cloud_seconds()
        timeline.cpu = stack_cpu_by_command()
        started = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            await asyncio.to_thread(
                lambda: list(
                    pool.map(lambda n: kube.create(NODES, _tainted_node(n, label, scope)), names)
                )
            )
        figures[f"{name}_create_wall_s"] = time.monotonic() - started

        def initialized(name: str) -> bool:
            node = sync.informer.store.get(name)
            return node is not None and not rules.needs_init(node)

        pending = set(names)
        deadline = time.monotonic() + 600
        while pending:
            pending = {n for n in pending if not initialized(n)}
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(pending)} of {BURST} Nodes not initialized")
            await asyncio.sleep(0.05)
        figures[f"{name}_burst_wall_s"] = time.monotonic() - started
        figures[f"{prefix}init_cloud_calls_per_node_1000_burst"] = (
            cloud_requests() - before
        ) / BURST
        figures[f"{name}_burst_cloud_s"] = cloud_seconds() - cloud_before
        figures[f"{name}_burst_stack_cpu_s"] = timeline.stack_cpu_s()
        timeline.report(name, started)
    finally:
        sync.stop()
        informers.stop()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.to_thread(
            kube.request, "DELETE", NODES.path(), query={"labelSelector": selector}
        )
    return figures
