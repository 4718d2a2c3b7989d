"""OpenStack figures against the OpenStack API emulator (cloud calls: ``cloud_api_requests_total``).

- ``openstack_lifecycle_cloud_calls_per_pass_1000_nodes``: 1,000 initialized, all NotReady Nodes
  backed by 1,000 Nova servers (50 SHUTOFF, 50 Nodes whose server is gone); Nova requests of one
  lifecycle pass (budget 3). ``..._upstream_model``: cloud-provider-openstack asks
  ``InstanceExists`` and ``InstanceShutdown`` per NotReady node, one ``GET /servers/{id}`` each.
- ``openstack_lb_ensure_median_s``: median over ``SAMPLES`` Services (2 ports, 3 nodes), one at a
  time, of Service created → ``status.loadBalancer.ingress`` set, through informer → starter →
  ``LoadBalancer`` workflow → ``lb.ensure`` (Octavia fully populated create, the
  ``PENDING_CREATE`` wait, the floating IP) → status patch → seen through the watch.
- ``openstack_lb_direct_median_s``: the same Octavia and Neutron calls made directly through
  openstacksdk (lookups by tag and name, the server list, the create, the same polling schedule,
  the floating-IP lookup and create). Samples alternate between the two paths.
- ``openstack_lb_ensure_overhead_ratio``: the two medians divided (goal ≤ 1.3). The emulator's
  ``PENDING_CREATE`` lasts ``LB_CREATE_S`` (a real amphora takes 30-60 s, which would hide any
  overhead).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openstack

from activities.kube import KubeActivities
from activities.loadbalancer import LoadBalancerActivities
from bench.context import BenchContext
from bench.node import cloud_requests
from bench.overhead import overhead_ms
from cloudloop import temporal
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.openstack.loadbalancers import identity_tag
from cloudloop.cloud.openstack.settings import OpenStackSettings
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import NODES, SERVICES, Resource
from cloudloop.rules import node as rules
from devstack.backends.openstack import openstack_emulator, openstack_settings
from devstack.openstack_emulator import Delays, OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint
from starters.loadbalancer import ServiceStarter
from starters.node import NodeSync
from workflows.loadbalancer import LoadBalancerWorkflow

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
FLEET = 1000
SAMPLES = 10
LB_NODES = 3
LB_CREATE_S = 2.0
POLL_S = 0.2


def _settings(endpoint: OpenStackEmulatorEndpoint) -> OpenStackSettings:
    return openstack_settings(endpoint, poll_interval_s=POLL_S)


async def openstack_figures(ctx: BenchContext) -> dict[str, float]:
    with openstack_emulator(
        Path(tempfile.mkdtemp(prefix="bench-openstack-")),
        password="bench",
        application_credential_secret="",
        delays=Delays(lb_create_s=LB_CREATE_S, lb_update_s=0.5),
    ) as endpoint:
        figures = await _lifecycle(ctx, endpoint)
        figures.update(await _load_balancers(ctx, endpoint))
        return figures


async def _lifecycle(ctx: BenchContext, endpoint: OpenStackEmulatorEndpoint) -> dict[str, float]:
    kube = ctx.kube
    scope = uuid.uuid4().hex[:8]
    selector = f"cloudloop-bench-os={scope}"
    admin = OpenStackEmulatorAdmin(endpoint.admin_url, timeout_s=120)
    servers = await asyncio.to_thread(admin.seed_servers, FLEET - 50, prefix="bench")
    for server in servers[:50]:
        await asyncio.to_thread(admin.set_server_status, server["id"], "SHUTOFF")
    targets = [s["id"] for s in servers] + [str(uuid.uuid4()) for _ in range(50)]
    # The project holds FLEET servers in all: the gone nodes' slots are other, unrelated servers.
    await asyncio.to_thread(admin.seed_servers, 50, prefix="other")

    def create(item: tuple[int, str]) -> None:
        index, server_id = item
        kube.create(
            NODES,
            {
                "metadata": {
                    "name": f"os-{scope}-{index}",
                    "labels": {"cloudloop-bench-os": scope},
                },
                "spec": {"providerID": f"openstack:///{server_id}"},
            },
        )

    informers = Informers(kube)
    driver = OpenStackDriver(_settings(endpoint))
    try:
        with ThreadPoolExecutor(16) as pool:
            await asyncio.to_thread(lambda: list(pool.map(create, enumerate(targets))))
        ccm = ctx.settings.ccm.model_copy(update={"node_selector": selector})
        sync = NodeSync(kube, driver.instances, informers.nodes(label_selector=selector), ccm)
        sync.informer.start()
        await sync.informer.wait_synced(60)
        while len(sync.informer.store) < FLEET:
            await asyncio.sleep(0.1)
        assert all(rules.ready_status(n) != "True" for n in sync.informer.store.values())
        await asyncio.to_thread(
            driver.instances.list_instances, [targets[0]]
        )  # log in (not counted)
        before = cloud_requests()
        await sync.lifecycle_pass()
        calls = cloud_requests() - before
    finally:
        driver.close()
        informers.stop()
        await asyncio.to_thread(
            kube.request, "DELETE", NODES.path(), query={"labelSelector": selector}
        )
    return {
        "openstack_lifecycle_cloud_calls_per_pass_1000_nodes": calls,
        "openstack_lifecycle_cloud_calls_per_pass_1000_nodes_upstream_model": 2.0 * FLEET,
    }


def _direct_ensure(
    sdk: Any, server_ids: list[str], name: str, uid: str, cluster: str, namespace: str
) -> None:
    """The driver's calls for a fresh LB, made directly through openstacksdk."""
    service = f"{namespace}/{name}"
    lb_name = f"kube_service_{cluster}_{namespace}_{name}"
    legacy = "a" + uid.replace("-", "")[:31]
    for query in ({"tags": identity_tag(legacy)}, {"name": lb_name}, {"name": legacy}):
        list(sdk.load_balancer.load_balancers(**query))
    servers = {s.id: s for s in sdk.compute.servers(details=True) if s.id in server_ids}
    members = [(s.name, s.addresses["private"][0]["addr"]) for s in servers.values()]
    subnet = next(iter(sdk.network.ports(fixed_ips=[f"ip_address={members[0][1]}"]))).fixed_ips[0][
        "subnet_id"
    ]
    external = next(iter(sdk.network.networks(is_router_external=True)))
    listeners = []
    for index, (port, node_port) in enumerate(((80, 30080), (443, 30443))):
        listeners.append(
            {
                "name": f"listener_{index}_{lb_name}",
                "protocol": "TCP",
                "protocol_port": port,
                "connection_limit": -1,
                "tags": [lb_name],
                "default_pool": {
                    "name": f"pool_{index}_{lb_name}",
                    "protocol": "TCP",
                    "lb_algorithm": "ROUND_ROBIN",
                    "members": [
                        {"name": n, "address": a, "protocol_port": node_port, "subnet_id": subnet}
                        for n, a in members
                    ],
                },
            }
        )
    lb = sdk.load_balancer.create_load_balancer(
        name=lb_name,
        description=f"Kubernetes external service {service} from cluster {cluster}",
        provider="amphora",
        tags=[lb_name, identity_tag(legacy)],
        vip_subnet_id=subnet,
        listeners=listeners,
    )
    delay = POLL_S
    while (lb := sdk.load_balancer.get_load_balancer(lb.id)).provisioning_status != "ACTIVE":
        time.sleep(delay)
        delay = min(delay * 1.2, 5.0)
    if not list(sdk.network.ips(port_id=lb.vip_port_id)):
        sdk.network.create_ip(
            floating_network_id=external.id,
            port_id=lb.vip_port_id,
            description=(
                f"Floating IP for Kubernetes external service {service} from cluster {cluster}"
            ),
        )


async def _load_balancers(
    ctx: BenchContext, endpoint: OpenStackEmulatorEndpoint
) -> dict[str, float]:
    kube = ctx.kube
    scope = uuid.uuid4().hex[:8]
    admin = OpenStackEmulatorAdmin(endpoint.admin_url, timeout_s=120)
    await asyncio.to_thread(admin.reset)  # a project of a few servers, not the 1,000 above
    servers = await asyncio.to_thread(admin.seed_servers, LB_NODES, prefix=f"lb-{scope}")
    settings = ctx.settings.model_copy(
        update={
            "provider": "openstack",
            "openstack": _settings(endpoint),
            "cluster_name": f"bench-os-{scope}",
            "ccm": ctx.settings.ccm.model_copy(
                update={"node_selector": f"cloudloop-bench-oslb={scope}"}
            ),
            "temporal": ctx.settings.temporal.model_copy(
                update={"task_queue": f"bench-os-{scope}"}
            ),
        }
    )
    for server in servers:
        kube.create(
            NODES,
            {
                "metadata": {"name": server["name"], "labels": {"cloudloop-bench-oslb": scope}},
                "spec": {"providerID": f"openstack:///{server['id']}"},
            },
        )
    namespace = f"bench-oslb-{scope}"
    kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    driver = OpenStackDriver(_settings(endpoint))
    informers = Informers(kube)
    starter = ServiceStarter(
        kube,
        ctx.client,
        services=informers.services(namespace=namespace),
        nodes=informers.nodes(label_selector=settings.ccm.node_selector),
        task_queue=settings.temporal.task_queue,
        cluster=settings.cluster_name,
        provider=settings.provider,
    )
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
    )
    connect: Any = openstack.connect
    sdk: Any = connect(**endpoint.connect_kwargs())
    server_ids = [s["id"] for s in servers]
    store = starter.services.store

    def create(name: str) -> None:
        kube.create(
            SERVICES,
            {
                "metadata": {"name": name},
                "spec": {
                    "type": "LoadBalancer",
                    "selector": {"app": name},
                    "ports": [
                        {"name": "http", "port": 80, "protocol": "TCP"},
                        {"name": "https", "port": 443, "protocol": "TCP"},
                    ],
                },
            },
            namespace,
        )

    async def ingress(name: str) -> None:
        key = f"{namespace}/{name}"
        while not (((store.get(key) or {}).get("status") or {}).get("loadBalancer") or {}).get(
            "ingress"
        ):
            await asyncio.sleep(0.002)

    through_workflow: list[float] = []
    direct: list[float] = []
    async with worker:
        task = asyncio.create_task(starter.run())
        try:
            await asyncio.to_thread(create, "warmup")
            await ingress("warmup")
            await asyncio.to_thread(
                _direct_ensure,
                sdk,
                server_ids,
                "dwarm",
                str(uuid.uuid4()),
                settings.cluster_name,
                namespace,
            )
            for i in range(SAMPLES):
                started = time.monotonic()
                await asyncio.to_thread(create, f"s{i}")
                await ingress(f"s{i}")
                through_workflow.append(time.monotonic() - started)
                started = time.monotonic()
                await asyncio.to_thread(
                    _direct_ensure,
                    sdk,
                    server_ids,
                    f"d{i}",
                    str(uuid.uuid4()),
                    settings.cluster_name,
                    namespace,
                )
                direct.append(time.monotonic() - started)
            for key in list(store):
                kube.delete(SERVICES, key.partition("/")[2], namespace)
            deadline = time.monotonic() + 120
            while store and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
        finally:
            starter.stop()
            informers.stop()
            await asyncio.gather(task, return_exceptions=True)
    sdk.close()
    driver.close()
    for server in servers:
        kube.delete(NODES, server["name"])
    kube.delete(NAMESPACES, namespace)
    workflow_median = statistics.median(through_workflow)
    direct_median = statistics.median(direct)
    return {
        "openstack_lb_ensure_median_s": workflow_median,
        "openstack_lb_direct_median_s": direct_median,
        "openstack_lb_ensure_overhead_ratio": workflow_median / direct_median,
        **overhead_ms("openstack_lb_ensure", through_workflow, direct),
    }
