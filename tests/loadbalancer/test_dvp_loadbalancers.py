"""Service ``type: LoadBalancer`` on DVP, against the real stack: the starter, the provider-neutral
``LoadBalancer`` workflow and the DVP driver, with the parent cluster (its own kube-apiserver, the
DVP simulator and its load-balancer controller) giving the parent Service its address.

The parent gets a Service of type LoadBalancer named after the child Service, without selector,
and an EndpointSlice of the node VMs' IPs on the child's node ports; the parent's address becomes
the child's ingress; excluded nodes leave the slice; deleting the child removes both.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from temporalio.client import Client

from cloudloop.cloud.dvp import resources as r
from cloudloop.cloud.dvp.driver import DvpDriver
from cloudloop.cloud.dvp.loadbalancers import (
    SERVICE_NAME_LABEL,
    TENANT_SERVICE_NAME_LABEL,
    TENANT_SERVICE_NAMESPACE_LABEL,
)
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import NODES, SERVICES
from cloudloop.messages.loadbalancer import LB_FINALIZER
from cloudloop.rules.loadbalancer import EXCLUDE_FROM_LB_LABEL
from devstack.backends.dvp import create_node_vms, dvp_settings
from devstack.dvp_simulator import DvpParent
from tests.helpers import eventually
from tests.loadbalancer.support import (
    delete_nodes,
    events,
    ingress,
    lb_name,
    lb_settings,
    make_service,
    new_scope,
    service_starter,
)
from workers.main import build_worker

pytestmark = pytest.mark.stack


@dataclass
class DvpWorld:
    parent: DvpParent
    namespace: str
    driver: DvpDriver
    vms: list[str]
    nodes: list[str]

    def parent_get(self, resource: Any, name: str) -> dict[str, Any] | None:
        return self.parent.kube.get(resource, name, self.namespace)

    def vm_ip(self, name: str) -> str:
        vm = self.parent_get(r.VIRTUAL_MACHINES, name) or {}
        return str((vm.get("status") or {}).get("ipAddress") or "")

    def slice_ips(self, name: str) -> set[str]:
        found = self.parent_get(r.ENDPOINT_SLICES, name) or {}
        return {a for e in found.get("endpoints") or [] for a in e.get("addresses") or []}


@pytest.fixture
async def world(
    dvp_parent: DvpParent, kube: Kube, client: Client, settings: Settings, namespace: str
) -> AsyncIterator[tuple[DvpWorld, Settings]]:
    scope = new_scope()
    parent_namespace = await asyncio.to_thread(dvp_parent.new_namespace, "lb")
    driver = DvpDriver(dvp_settings(dvp_parent, parent_namespace, lb_ingress_timeout_s=20))
    names = [f"lb-{scope}-{i}" for i in range(3)]
    await asyncio.to_thread(
        create_node_vms, dvp_parent, parent_namespace, driver.session.cluster_labels(), names
    )
    world = DvpWorld(dvp_parent, parent_namespace, driver, names, names)
    for name in names:
        await eventually(partial(world.vm_ip, name), what=f"VM {name} running with an IP")
    for name in names:
        await asyncio.to_thread(
            kube.create,
            NODES,
            {
                "metadata": {"name": name, "labels": {"cloudloop-test": scope}},
                "spec": {"providerID": f"dvp://{name}"},
            },
        )
    config = lb_settings(settings, scope).model_copy(update={"provider": "dvp"})
    worker = build_worker(client, config, driver=driver, kube=kube)
    try:
        async with worker, service_starter(kube, client, config, namespace):
            yield world, config
    finally:
        await asyncio.to_thread(delete_nodes, kube, scope)


async def test_dvp_service_gets_a_parent_load_balancer_fed_by_endpoint_slices(
    world: tuple[DvpWorld, Settings], kube: Kube, namespace: str
) -> None:
    dvp, _ = world
    service = await asyncio.to_thread(make_service, kube, namespace, "web", ports=(80, 443))
    name = lb_name(service)

    found = await eventually(
        lambda: ingress(kube, namespace, "web") or None, timeout=60, what="child ingress"
    )
    parent = dvp.parent_get(SERVICES, name)
    assert parent is not None
    parent_ip = parent["status"]["loadBalancer"]["ingress"][0]["ip"]
    assert found == [parent_ip]

    # The parent Service: named and labelled for the child, ports onto the child's node ports.
    child = await asyncio.to_thread(kube.get, SERVICES, "web", namespace)
    assert child is not None
    assert LB_FINALIZER in child["metadata"]["finalizers"]
    node_ports = {p["port"]: p["nodePort"] for p in child["spec"]["ports"]}
    labels = parent["metadata"]["labels"]
    assert labels[TENANT_SERVICE_NAME_LABEL] == "web"
    assert labels[TENANT_SERVICE_NAMESPACE_LABEL] == namespace
    assert parent["spec"]["type"] == "LoadBalancer"
    assert "selector" not in parent["spec"]
    assert {p["port"]: p["targetPort"] for p in parent["spec"]["ports"]} == node_ports

    # The EndpointSlice: every node VM's IP on the node ports.
    slice_ = dvp.parent_get(r.ENDPOINT_SLICES, name)
    assert slice_ is not None
    assert slice_["metadata"]["labels"][SERVICE_NAME_LABEL] == name
    assert dvp.slice_ips(name) == {dvp.vm_ip(vm) for vm in dvp.vms}
    assert {p["name"]: p["port"] for p in slice_["ports"]} == {
        p["name"]: p["nodePort"] for p in child["spec"]["ports"]
    }
    assert events(kube, namespace, "web", "EnsuredLoadBalancer")

    # Excluding a node takes its VM out of the slice (UpdatedLoadBalancer), the address stays.
    excluded = dvp.nodes[0]
    await asyncio.to_thread(
        kube.patch, NODES, excluded, {"metadata": {"labels": {EXCLUDE_FROM_LB_LABEL: "true"}}}
    )
    wanted = {dvp.vm_ip(vm) for vm in dvp.vms[1:]}
    await eventually(lambda: dvp.slice_ips(name) == wanted or None, what="slice without node")
    await eventually(
        lambda: events(kube, namespace, "web", "UpdatedLoadBalancer") or None,
        what="UpdatedLoadBalancer",
    )
    assert ingress(kube, namespace, "web") == [parent_ip]

    # Deleting the child removes the parent Service and slice, then the finalizer.
    await asyncio.to_thread(kube.delete, SERVICES, "web", namespace)
    await eventually(
        lambda: kube.get(SERVICES, "web", namespace) is None, timeout=60, what="child deleted"
    )
    assert dvp.parent_get(SERVICES, name) is None
    assert dvp.parent_get(r.ENDPOINT_SLICES, name) is None
    await eventually(
        lambda: events(kube, namespace, "web", "DeletedLoadBalancer") or None,
        what="DeletedLoadBalancer",
    )


async def test_dvp_parent_namesake_is_never_taken_over(
    world: tuple[DvpWorld, Settings], kube: Kube, namespace: str
) -> None:
    """A parent Service of the same name that is not ours: a Warning, and it is left alone."""
    dvp, _ = world
    service = await asyncio.to_thread(make_service, kube, namespace, "taken", type="ClusterIP")
    name = lb_name(service)
    await asyncio.to_thread(
        dvp.parent.kube.create,
        SERVICES,
        {
            "metadata": {"name": name, "namespace": dvp.namespace},
            "spec": {"type": "ClusterIP", "ports": [{"port": 1}]},
        },
        dvp.namespace,
    )
    await asyncio.to_thread(
        kube.patch, SERVICES, "taken", {"spec": {"type": "LoadBalancer"}}, namespace
    )
    await eventually(
        lambda: events(kube, namespace, "taken", "SyncLoadBalancerFailed") or None,
        timeout=60,
        what="SyncLoadBalancerFailed",
    )
    theirs = dvp.parent_get(SERVICES, name)
    assert theirs is not None and theirs["spec"]["type"] == "ClusterIP"
    assert dvp.parent_get(r.ENDPOINT_SLICES, name) is None
