"""Scale walls of node initialization: 1,000 tainted Nodes created at once → all initialized.

- ``init_1000_nodes_burst_wall_s``: 1,000 Nodes with the ``uninitialized`` taint, named after
  1,000 moto instances tagged for the cluster, created at once (16 client threads) → every one
  initialized (taint gone, providerID, addresses, zone labels), seen by a watch; through the
  starter's node sync (:class:`starters.node.NodeSync`, production settings but for the node
  selector, :data:`CONCURRENT_NODE_SYNCS` and the driver's request timeout), which initializes
  Nodes itself (no workflow): one batched lookup per pass, then per Node a status PATCH, a PUT
  and its ``Synced`` Event.
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
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.breakdown import cloud_seconds
from bench.context import BenchContext
from bench.node import cloud_requests
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.driver import CloudDriver
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import NODES
from cloudloop.rules import node as rules
from devstack.backends.aws import aws_client, launch_instances
from devstack.backends.openstack import openstack_emulator, openstack_settings
from devstack.openstack_emulator import OpenStackEmulatorAdmin
from starters.node import NodeSync

BURST = 1000
#: ``--concurrent-node-syncs`` of the burst (upstream's default, 1, writes one Node at a time).
CONCURRENT_NODE_SYNCS = 8
#: The driver's request timeout here (see the module's rules).
EMULATOR_TIMEOUT_S = 60.0


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
    figures = await _aws(ctx)
    figures.update(await _openstack(ctx))
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
            await asyncio.to_thread(driver.list_instances, [servers[0]["id"]])  # log in first
            return await burst(
                ctx, driver, [s["name"] for s in servers], scope, prefix="openstack_"
            )
        finally:
            driver.close()


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
    sync = NodeSync(kube, driver, informers.get(NODES, label_selector=selector), ccm)
    task = asyncio.create_task(sync.run())
    figures: dict[str, float] = {}
    name = f"{prefix}init_1000_nodes"
    try:
        await sync.informer.wait_synced(60)
        await asyncio.sleep(0.5)  # the loops' startup passes (over no nodes yet) are done
        before, cloud_before = cloud_requests(), cloud_seconds()
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
    finally:
        sync.stop()
        informers.stop()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.to_thread(
            kube.request, "DELETE", NODES.path(), query={"labelSelector": selector}
        )
    return figures
