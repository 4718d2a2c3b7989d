"""OpenStack load-balancer fault tests: the worker process SIGKILLed during each ``PENDING_*`` wait.

The emulator holds Octavia's transitions right after the step's request succeeded (the LB stays
``PENDING_CREATE``/``PENDING_UPDATE``/``PENDING_DELETE`` while the activity polls, heartbeating);
the worker is killed there, the hold released and a new worker started. It must converge to
exactly one LB, one listener and one pool per port, the node set as members, one monitor per
pool and one floating IP (after a delete: nothing, and the Service gone).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.client import Client

from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import SERVICES
from devstack.backends.openstack import cloud_conf
from devstack.local import LocalStack
from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint
from tests.helpers import eventually
from tests.loadbalancer.support import ingress, make_service, service_starter
from tests.openstack.lb_support import (
    exactly_one_of_everything,
    make_nodes,
    octavia,
    openstack_worker_env,
)
from tests.support.workers import WorkerProcess, Workers

pytestmark = [pytest.mark.stack, pytest.mark.fault]

#: A killed worker's activity is retried after its heartbeat timeout (10 s); room for more.
RECOVERY_S = 120
LB = "load-balancer"
KIND = "loadbalancer"
P = "loadbalancer.openstack.org/"


def start_workers(
    workers: Workers,
    lb_config: Settings,
    stack: LocalStack,
    endpoint: OpenStackEmulatorEndpoint,
    tmp_path: Path,
    *,
    serial: bool,
) -> Callable[[], WorkerProcess]:
    """Start worker processes (not waited for) configured by a ``cloud.conf`` only."""
    conf = tmp_path / "cloud.conf"
    conf.write_text(cloud_conf(endpoint, serial=serial))
    env = openstack_worker_env(lb_config, stack, conf)
    return lambda: workers.start(env, wait=False)


def held(admin: OpenStackEmulatorAdmin) -> bool:
    return KIND in admin.held()


def lb_status(admin: OpenStackEmulatorAdmin) -> str:
    found = octavia(admin)["loadbalancers"]
    return str(found[0]["provisioning_status"]) if found else ""


@pytest.mark.parametrize(
    ("serial", "method", "route", "pending"),
    [
        pytest.param(
            False, "POST", r"/lbaas/loadbalancers$", "PENDING_CREATE", id="create-populated"
        ),
        pytest.param(True, "POST", r"/lbaas/loadbalancers$", "PENDING_CREATE", id="create-bare"),
        pytest.param(True, "POST", r"/lbaas/listeners$", "PENDING_UPDATE", id="listener"),
        pytest.param(True, "POST", r"/lbaas/pools$", "PENDING_UPDATE", id="pool"),
        pytest.param(True, "POST", r"/lbaas/pools/\{id\}/members$", "PENDING_UPDATE", id="member"),
        pytest.param(True, "POST", r"/lbaas/healthmonitors$", "PENDING_UPDATE", id="monitor"),
        pytest.param(False, "POST", r"/floatingips$", "", id="floating-ip-in-flight"),
    ],
)
async def test_worker_killed_in_an_ensure_wait_converges(
    kube: Kube,
    client: Client,
    lb_config: Settings,
    stack: LocalStack,
    endpoint: OpenStackEmulatorEndpoint,
    admin: OpenStackEmulatorAdmin,
    namespace: str,
    nodes: list[str],
    tmp_path: Path,
    workers: Workers,
    serial: bool,
    method: str,
    route: str,
    pending: str,
) -> None:
    start = start_workers(workers, lb_config, stack, endpoint, tmp_path, serial=serial)
    if pending:
        admin.hold_after(LB, KIND, method=method, route=route)
    else:  # the floating IP is no wait: its request is answered only after the worker died
        admin.inject("network", 0, method=method, route=route, latency_s=20)
    faulty = start()
    async with service_starter(kube, client, lb_config, namespace):
        await asyncio.to_thread(
            make_service,
            kube,
            namespace,
            "web",
            annotations={P + "enable-health-monitor": "true"},
            ports=(80, 443),
        )
        if pending:
            await eventually(
                lambda: held(admin), timeout=90, what=f"the hold after {method} {route}"
            )
            assert lb_status(admin) == pending
        else:
            await eventually(
                lambda: not admin.state()["faults"], timeout=90, what="the FIP request sent"
            )
        await asyncio.sleep(1)  # the activity is polling (or blocked) now
        faulty.kill()  # SIGKILL: no graceful shutdown, the activity dies in its wait
        admin.release(KIND)
        start()
        addresses = await eventually(
            lambda: ingress(kube, namespace, "web"), timeout=RECOVERY_S, what="ingress"
        )
        made = exactly_one_of_everything(admin, ports=2, nodes=len(nodes))
        assert addresses == [made["fip"]["floating_ip_address"]]
        # (A delete after a killed worker is its own test below.)


async def test_worker_killed_in_the_member_update_wait_converges(
    kube: Kube,
    client: Client,
    lb_config: Settings,
    stack: LocalStack,
    endpoint: OpenStackEmulatorEndpoint,
    admin: OpenStackEmulatorAdmin,
    namespace: str,
    nodes: list[str],
    scope: str,
    tmp_path: Path,
    workers: Workers,
) -> None:
    start = start_workers(workers, lb_config, stack, endpoint, tmp_path, serial=False)
    faulty = start()
    async with service_starter(kube, client, lb_config, namespace):
        await asyncio.to_thread(make_service, kube, namespace, "web", ports=(80, 443))
        await eventually(lambda: ingress(kube, namespace, "web"), timeout=90, what="ingress")
        admin.hold_after(LB, KIND, method="PUT", route=r"/lbaas/pools/\{id\}/members$")
        [extra] = admin.seed_servers(1, prefix=f"lb-{scope}", start=len(nodes))
        await asyncio.to_thread(make_nodes, kube, [extra], scope)
        await eventually(lambda: held(admin), timeout=90, what="the member update held")
        assert lb_status(admin) == "PENDING_UPDATE"
        await asyncio.sleep(1)
        faulty.kill()  # SIGKILL: no graceful shutdown, the activity dies in its wait
        admin.release(KIND)
        start()
        await eventually(
            lambda: (
                len(octavia(admin)["members"]) == 2 * (len(nodes) + 1)
                and lb_status(admin) == "ACTIVE"
            ),
            timeout=RECOVERY_S,
            what="the node set as members",
        )
        exactly_one_of_everything(admin, ports=2, nodes=len(nodes) + 1, monitors=True)
        await asyncio.to_thread(kube.delete, SERVICES, "web", namespace)
        await eventually(
            lambda: kube.get(SERVICES, "web", namespace) is None,
            timeout=RECOVERY_S,
            what="deleted",
        )


async def test_worker_killed_in_the_delete_wait_converges(
    kube: Kube,
    client: Client,
    lb_config: Settings,
    stack: LocalStack,
    endpoint: OpenStackEmulatorEndpoint,
    admin: OpenStackEmulatorAdmin,
    namespace: str,
    nodes: list[str],
    tmp_path: Path,
    workers: Workers,
) -> None:
    start = start_workers(workers, lb_config, stack, endpoint, tmp_path, serial=False)
    faulty = start()
    async with service_starter(kube, client, lb_config, namespace):
        await asyncio.to_thread(make_service, kube, namespace, "web", ports=(80, 443))
        await eventually(lambda: ingress(kube, namespace, "web"), timeout=90, what="ingress")
        admin.hold_after(LB, KIND, method="DELETE", route=r"/lbaas/loadbalancers/\{id\}$")
        await asyncio.to_thread(kube.delete, SERVICES, "web", namespace)
        await eventually(lambda: held(admin), timeout=90, what="the delete held")
        assert lb_status(admin) == "PENDING_DELETE"
        assert octavia(admin)["floatingips"] == []  # released before the LB delete
        await asyncio.sleep(1)
        faulty.kill()  # SIGKILL: no graceful shutdown, the activity dies in its wait
        assert kube.get(SERVICES, "web", namespace) is not None  # the finalizer holds it
        admin.release(KIND)
        start()
        await eventually(
            lambda: kube.get(SERVICES, "web", namespace) is None,
            timeout=RECOVERY_S,
            what="deleted",
        )
        left = octavia(admin)
        assert not any(left[k] for k in left), left
