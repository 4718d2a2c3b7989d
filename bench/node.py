"""Node sync cloud-call figures, counted from ``cloud_api_requests_total`` (never estimated).

- ``lifecycle_cloud_calls_per_pass_1000_nodes``: 1,000 initialized, all NotReady Nodes backed
  by 1,000 moto instances (50 terminated, 50 stopped); cloud requests of one lifecycle pass.
  Beside it the upstream model, 2 calls per NotReady node.
- ``address_refresh_cloud_calls_1000_nodes``: one address-refresh round over the same Nodes.
- ``init_cloud_calls_per_node_100_burst``: 100 tainted Nodes created at once; cloud requests
  until all are initialized, divided by 100 (upstream model: 1 per node).
"""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client import REGISTRY

from bench.context import BenchContext
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import NODES
from cloudloop.rules import node as rules
from devstack.backends.aws import aws_client, launch_instances
from starters.node import NodeSync

FLEET = 1000
BURST = 100


def cloud_requests() -> float:
    total = 0.0
    for metric in REGISTRY.collect():
        if metric.name == "cloud_api_requests":
            total += sum(s.value for s in metric.samples if s.name == "cloud_api_requests_total")
    return total


def launch(ec2: Any, count: int, cluster: str) -> list[dict[str, Any]]:
    """Instances tagged for ``cluster``, as a cluster's nodes are."""
    tags = [{"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"}]
    return launch_instances(
        ec2,
        count,
        InstanceType="m5.large",
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )


async def node_figures(ctx: BenchContext) -> dict[str, float]:
    kube, settings = ctx.kube, ctx.settings
    scope = uuid.uuid4().hex[:8]
    selector = f"cloudloop-bench={scope}"
    ec2 = aws_client("ec2", AWS.section(settings).endpoint_url)
    fleet = await asyncio.to_thread(launch, ec2, FLEET, settings.cluster_name)
    ids = [i["InstanceId"] for i in fleet]
    ec2.terminate_instances(InstanceIds=ids[:50])
    ec2.stop_instances(InstanceIds=ids[50:100])

    def create(name: str, provider_id: str = "", tainted: bool = False) -> None:
        spec: dict[str, Any] = {"providerID": provider_id} if provider_id else {}
        if tainted:
            spec["taints"] = [
                {"key": rules.UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}
            ]
        kube.create(
            NODES, {"metadata": {"name": name, "labels": {"cloudloop-bench": scope}}, "spec": spec}
        )

    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda i: create(
                    f"fleet-{scope}-{i['InstanceId']}",
                    f"aws:///{i['Placement']['AvailabilityZone']}/{i['InstanceId']}",
                ),
                fleet,
            )
        )

    ccm = settings.ccm.model_copy(update={"node_selector": selector, "concurrent_node_syncs": 8})
    informers = Informers(kube)
    driver = AwsDriver(AWS.section(settings))
    driver.cluster = settings.cluster_name  # as Provider.make_driver sets it
    fleet_sync = NodeSync(kube, driver.instances, informers.nodes(label_selector=selector), ccm)
    figures: dict[str, float] = {}
    burst_selector = f"cloudloop-bench-burst={scope}"
    burst_ccm = ccm.model_copy(update={"node_selector": burst_selector})
    burst_sync = NodeSync(
        kube, driver.instances, informers.nodes(label_selector=burst_selector), burst_ccm
    )
    burst_task: asyncio.Task[None] | None = None
    try:
        # The passes are called directly: no background loop adds requests to the counts.
        fleet_sync.informer.start()
        await fleet_sync.informer.wait_synced(60)
        while len(fleet_sync.informer.store) < FLEET:
            await asyncio.sleep(0.1)

        before = cloud_requests()
        await fleet_sync.lifecycle_pass()
        figures["lifecycle_cloud_calls_per_pass_1000_nodes"] = cloud_requests() - before
        figures["lifecycle_cloud_calls_per_pass_1000_nodes_upstream_model"] = 2.0 * FLEET

        before = cloud_requests()
        await fleet_sync.refresh_addresses()
        figures["address_refresh_cloud_calls_1000_nodes"] = cloud_requests() - before
        figures["address_refresh_cloud_calls_1000_nodes_upstream_model"] = float(FLEET)

        burst = await asyncio.to_thread(launch, ec2, BURST, settings.cluster_name)
        burst_task = asyncio.create_task(burst_sync.run())
        await burst_sync.informer.wait_synced(60)
        await asyncio.sleep(0.5)  # the loops' startup passes (over no nodes yet) are done
        before = cloud_requests()

        def create_burst_node(instance: dict[str, Any]) -> None:
            kube.create(
                NODES,
                {
                    "metadata": {
                        "name": instance["PrivateDnsName"],
                        "labels": {"cloudloop-bench-burst": scope},
                    },
                    "spec": {
                        "taints": [
                            {
                                "key": rules.UNINITIALIZED_TAINT,
                                "value": "true",
                                "effect": "NoSchedule",
                            }
                        ]
                    },
                },
            )

        with ThreadPoolExecutor(16) as pool:
            await asyncio.to_thread(lambda: list(pool.map(create_burst_node, burst)))
        names = {i["PrivateDnsName"] for i in burst}

        def initialized(name: str) -> bool:
            node = burst_sync.informer.store.get(name)
            return node is not None and not rules.needs_init(node)

        while not all(initialized(n) for n in names):
            await asyncio.sleep(0.05)
        figures["init_cloud_calls_per_node_100_burst"] = (cloud_requests() - before) / BURST
        figures["init_cloud_calls_per_node_100_burst_upstream_model"] = 1.0
    finally:
        burst_sync.stop()
        informers.stop()
        if burst_task is not None:
            await asyncio.gather(burst_task, return_exceptions=True)
        for label in (selector, burst_selector):
            await asyncio.to_thread(
                kube.request, "DELETE", NODES.path(), query={"labelSelector": label}
            )
    return figures
