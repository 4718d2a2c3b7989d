"""What the OpenStack load-balancer stack tests share: Nodes for seeded servers, a worker's
environment with a ``cloud.conf`` (as Deckhouse mounts it), and the Octavia state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import NODES
from devstack.local import LocalStack
from devstack.openstack_emulator import OpenStackEmulatorAdmin
from tests.support.workers import worker_env


def make_nodes(kube: Kube, servers: list[dict[str, str]], scope: str) -> list[str]:
    for server in servers:
        kube.create(
            NODES,
            {
                "metadata": {"name": server["name"], "labels": {"cloudloop-test": scope}},
                "spec": {"providerID": f"openstack:///{server['id']}"},
            },
        )
    return [s["name"] for s in servers]


def delete_nodes(kube: Kube, scope: str) -> None:
    for node in kube.list(NODES, labelSelector=f"cloudloop-test={scope}")["items"]:
        kube.delete(NODES, node["metadata"]["name"])


def openstack_worker_env(settings: Settings, stack: LocalStack, conf: Path) -> dict[str, str]:
    """A worker's environment for the OpenStack provider, configured by ``conf`` only."""
    return worker_env(
        settings,
        stack,
        {
            "CLOUDLOOP_PROVIDER": "openstack",
            "CLOUDLOOP_OPENSTACK__CLOUD_CONFIG_FILE": str(conf),
            "CLOUDLOOP_OPENSTACK__POLL_INTERVAL_S": "0.1",
        },
        graceful_shutdown_s=5,
    )


def octavia(admin: OpenStackEmulatorAdmin) -> dict[str, list[dict[str, Any]]]:
    state = admin.state()
    keys = ("loadbalancers", "listeners", "pools", "members", "healthmonitors", "floatingips")
    return {k: state[k] for k in keys}


def exactly_one_of_everything(
    admin: OpenStackEmulatorAdmin, *, ports: int, nodes: int, monitors: bool = True
) -> dict[str, Any]:
    """One LB (ACTIVE), one listener and one pool per port, the node set per pool, one monitor
    per pool, one floating IP on the VIP port: what every fault test ends with."""
    o = octavia(admin)
    assert len(o["loadbalancers"]) == 1, o["loadbalancers"]
    [lb] = o["loadbalancers"]
    assert lb["provisioning_status"] == "ACTIVE"
    assert len(o["listeners"]) == ports, o["listeners"]
    assert len({(x["protocol"], x["protocol_port"]) for x in o["listeners"]}) == ports
    assert len(o["pools"]) == ports, o["pools"]
    assert len(o["members"]) == ports * nodes, o["members"]
    for pool in o["pools"]:
        members = [m for m in o["members"] if m["_pool_id"] == pool["id"]]
        assert len({(m["address"], m["protocol_port"]) for m in members}) == nodes
    if monitors:
        assert len(o["healthmonitors"]) == ports
    assert len(o["floatingips"]) == 1, o["floatingips"]
    [fip] = o["floatingips"]
    assert fip["port_id"] == lb["vip_port_id"]
    return {"lb": lb, "fip": fip}
