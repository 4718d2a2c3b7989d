"""Service ``type: LoadBalancer`` → Octavia, on the real stack: starter, per-Service workflow,
worker and the OpenStack driver against the emulator. The ingress is the floating IP; a node
joining updates the members in one batch; deleting the Service leaves nothing behind; an invalid
annotation gives a Warning and writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from cloudloop.cloud.openstack import PROVIDER as OPENSTACK
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import LoadBalancerIngress
from cloudloop.kube.resources import SERVICES
from devstack.openstack_emulator import OpenStackEmulatorAdmin
from tests.helpers import eventually
from tests.loadbalancer.support import events, ingress, make_service, service_starter
from tests.openstack.lb_support import exactly_one_of_everything, make_nodes, octavia
from workers.main import build_worker

pytestmark = pytest.mark.stack

P = "loadbalancer.openstack.org/"


@pytest.fixture
async def worker(client: Client, lb_config: Settings, kube: Kube) -> AsyncIterator[Worker]:
    driver = OpenStackDriver(OPENSTACK.section(lb_config))
    async with build_worker(client, lb_config, driver=driver, kube=kube) as running:
        yield running
    driver.close()


async def test_ensure_update_and_delete(
    kube: Kube,
    client: Client,
    lb_config: Settings,
    namespace: str,
    admin: OpenStackEmulatorAdmin,
    nodes: list[str],
    worker: Worker,
    scope: str,
) -> None:
    annotations = {P + "enable-health-monitor": "true"}
    async with service_starter(kube, client, lb_config, namespace):
        await asyncio.to_thread(
            make_service, kube, namespace, "web", annotations=annotations, ports=(80, 443)
        )
        found = await eventually(
            lambda: ingress(kube, namespace, "web"), timeout=60, what="ingress"
        )
        made = exactly_one_of_everything(admin, ports=2, nodes=2)
        assert found == [made["fip"]["floating_ip_address"]]
        assert made["lb"]["name"] == f"kube_service_lb-{scope}_{namespace}_web"
        # The Event follows the ingress write (and the annotation before it): wait for it.
        await eventually(
            lambda: events(kube, namespace, "web", "EnsuredLoadBalancer"),
            timeout=30,
            what="the EnsuredLoadBalancer Event",
        )
        # OCCM's load-balancer-id is written back onto the Service (and changes nothing more).
        web = kube.get(SERVICES, "web", namespace) or {}
        assert web["metadata"]["annotations"][P + "load-balancer-id"] == made["lb"]["id"]

        [extra] = admin.seed_servers(1, prefix=f"wf-{scope}", start=2)
        await asyncio.to_thread(make_nodes, kube, [extra], scope)

        def updated() -> bool:
            now = octavia(admin)
            return len(now["members"]) == 6 and all(
                lb["provisioning_status"] == "ACTIVE" for lb in now["loadbalancers"]
            )

        await eventually(updated, timeout=60, what="the new node a member, the LB ACTIVE")
        exactly_one_of_everything(admin, ports=2, nodes=3)

        await asyncio.to_thread(kube.delete, SERVICES, "web", namespace)
        await eventually(
            lambda: kube.get(SERVICES, "web", namespace) is None, timeout=60, what="deleted"
        )
        left = octavia(admin)
        assert not any(left[k] for k in left), left


async def test_proxy_protocol_ingress_says_ip_mode_proxy(
    kube: Kube,
    client: Client,
    lb_config: Settings,
    namespace: str,
    admin: OpenStackEmulatorAdmin,
    nodes: list[str],
    worker: Worker,
) -> None:
    """Under the PROXY protocol the ingress is ``ipMode: Proxy`` (as OCCM sets it), so
    kube-proxy sends in-cluster traffic for the LB's IP through the LB."""
    async with service_starter(kube, client, lb_config, namespace):
        await asyncio.to_thread(
            make_service, kube, namespace, "px", annotations={P + "proxy-protocol": "true"}
        )

        def entries() -> list[LoadBalancerIngress] | None:
            service = kube.get(SERVICES, "px", namespace) or {}
            found = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress")
            return list(found) if found else None

        [entry] = await eventually(entries, timeout=60, what="ingress")
        made = exactly_one_of_everything(admin, ports=1, nodes=2, monitors=False)
        assert entry == {"ip": made["fip"]["floating_ip_address"], "ipMode": "Proxy"}
        await asyncio.to_thread(kube.delete, SERVICES, "px", namespace)
        await eventually(
            lambda: kube.get(SERVICES, "px", namespace) is None, timeout=60, what="deleted"
        )


async def test_invalid_annotation_warns_and_writes_nothing(
    kube: Kube,
    client: Client,
    lb_config: Settings,
    namespace: str,
    admin: OpenStackEmulatorAdmin,
    nodes: list[str],
    worker: Worker,
) -> None:
    async with service_starter(kube, client, lb_config, namespace):
        await asyncio.to_thread(
            make_service, kube, namespace, "bad", annotations={P + "keep-floatingip": "maybe"}
        )
        [warning] = await eventually(
            lambda: events(kube, namespace, "bad", "SyncLoadBalancerFailed"),
            timeout=60,
            what="warning",
        )
        assert "keep-floatingip" in warning["message"]
        assert octavia(admin)["loadbalancers"] == []
        await asyncio.to_thread(kube.delete, SERVICES, "bad", namespace)
