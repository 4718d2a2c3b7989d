"""OpenStack ``Standard``, ``StandardWithNoRouter``, ``Simple`` and ``SimpleWithInternalNetwork``
end to end: the layout workflows on the Temporal dev server, their activities in a worker, the
OpenStack emulator driven through openstacksdk (one stack for the module).

Apply makes every resource with the reference's names and metadata and publishes the upstream
``OpenStackCloudDiscoveryData``; a second apply makes no mutating request (counted by the
emulator); drift made out of band (a deleted key pair, changed server metadata, a deleted
security group rule) shows in the plan and the next apply repairs it; destroy leaves nothing of
the cluster (and is refused while a load balancer of the cluster is on its subnet). A cloud error
ends the step with the cloud's message, and a plan afterwards shows what exists; a server that
ends in ERROR is deleted and made again by the next apply from the same root volume.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.cloud.openstack.layout_resources import USER_DATA_KEY
from cloudloop.cloud.registry import Settings
from cloudloop.messages.layout import LayoutResult
from devstack.backends.openstack import connect
from devstack.backends.openstack_layouts import cluster_resources
from devstack.local import LocalStack
from devstack.openstack_emulator import OpenStackEmulatorAdmin
from starters.layout import LayoutFailed
from tests.layouts import support
from tests.layouts.openstack_support import (
    Requests,
    config_file,
    endpoint_of,
    layout_settings,
    openstack_layout_stack,
)
from tests.layouts.support import layout_worker

pytestmark = pytest.mark.stack

EXAMPLES = {
    "openstack-standard": "Standard",
    "openstack-standard-with-no-router": "StandardWithNoRouter",
    "openstack-simple": "Simple",
    "openstack-simple-with-internal-network": "SimpleWithInternalNetwork",
}


@pytest.fixture(scope="module")
def os_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with openstack_layout_stack(tmp_path_factory.mktemp("os-layouts")) as stack:
        yield stack


@pytest.fixture(scope="module")
def os_settings(os_stack: LocalStack) -> Settings:
    return layout_settings(os_stack)


@pytest.fixture(scope="module")
async def os_client(os_settings: Settings) -> Client:
    return await temporal.connect(os_settings.temporal)


@pytest.fixture(scope="module")
async def os_worker(os_client: Client, os_settings: Settings) -> AsyncIterator[None]:
    async with layout_worker(os_client, os_settings):
        yield


@pytest.fixture
def sdk(os_stack: LocalStack) -> Iterator[Any]:
    conn = connect(endpoint_of(os_stack))
    yield conn
    conn.close()


async def run(
    client: Client,
    settings: Settings,
    action: str,
    path: Path,
    prefix: str,
    cloud_config: dict[str, str] | None = None,
) -> LayoutResult:
    """The action as ``cloudloop layout`` runs it, the cluster's UUID derived from ``prefix``."""
    cluster_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, prefix))
    return await support.run(
        client, settings, action, path, prefix, cluster_uuid, cloud_config, provider="openstack"
    )


def plan_actions(result: LayoutResult) -> dict[str, str]:
    return {r.key: r.action for m in result.plan for r in m.resources}


def looked_up(key: str) -> bool:
    """A lookup of what the cloud has (never created, never deleted)."""
    kind, _, name = key.partition("/")
    return kind in ("openstack.image", "openstack.flavor") or name in (
        "public",
        "private",
        "private-subnet",
    )


def one(items: list[Any], what: str) -> Any:
    assert len(items) == 1, f"{what}: {items}"
    return items[0]


@pytest.mark.parametrize("example", list(EXAMPLES))
async def test_apply_reapply_drift_destroy(
    example: str,
    os_stack: LocalStack,
    os_client: Client,
    os_settings: Settings,
    os_worker: None,
    sdk: Any,
    tmp_path: Path,
) -> None:
    layout = EXAMPLES[example]
    endpoint = endpoint_of(os_stack)
    prefix = f"o{uuid.uuid4().hex[:6]}"
    path = config_file(tmp_path, example, prefix, endpoint)
    requests = Requests(endpoint)

    plan = await run(os_client, os_settings, "plan", path, prefix)
    assert {a for k, a in plan_actions(plan).items()} <= {"create", "no-op"}
    assert plan_actions(plan)[f"openstack.keypair/{prefix}"] == "create"

    applied = await run(os_client, os_settings, "apply", path, prefix)

    # names and metadata as the reference
    master = one(list(sdk.compute.servers(name=f"^{prefix}-master-0$")), "master")
    assert master.key_name == prefix
    assert master.availability_zone == "nova"  # volumeTypeMap: nova
    data = one(list(sdk.block_storage.volumes(name=f"{prefix}-kubernetes-data-0")), "data")
    assert data.size == 10 and data.volume_type == "__DEFAULT__"
    assert data.description == "volume for etcd and kubernetes certs"
    assert data.attachments[0]["server_id"] == master.id
    device = data.attachments[0]["device"]
    assert sdk.compute.get_keypair(prefix).name == prefix
    [master_module] = [m for m in applied.modules if m.module == "master-0"]
    outputs = master_module.outputs
    assert outputs["kubernetes_data_device_path"] == device
    ports = list(sdk.network.ports(device_id=master.id))
    addresses = {p.network_id: p.fixed_ips[0]["ip_address"] for p in ports}
    public = sdk.network.find_network("public")
    discovery = applied.cloud_discovery_data
    head = {
        "apiVersion": "deckhouse.io/v1",
        "kind": "OpenStackCloudDiscoveryData",
        "layout": layout,
        "zones": ["nova", "nova-b"],
    }
    assert {k: discovery[k] for k in head} == head
    assert discovery["instances"]["sshKeyPairName"] == prefix
    assert discovery["instances"]["imageName"] == "ubuntu-22.04"
    fips = list(sdk.network.ips(description=f"{prefix}-master-0"))
    if layout in ("Standard", "StandardWithNoRouter"):
        network = one(list(sdk.network.networks(name=prefix)), "network")
        subnet = one(list(sdk.network.subnets(name=prefix)), "subnet")
        group = one(list(sdk.network.security_groups(name=prefix)), "security group")
        ingress = {
            (r["protocol"], r["port_range_min"], r["port_range_max"], r["remote_ip_prefix"])
            for r in group.security_group_rules
            if r["direction"] == "ingress"
        }
        assert ingress == {
            ("tcp", 22, 22, "0.0.0.0/0"),
            ("icmp", None, None, "0.0.0.0/0"),
            ("tcp", 30000, 32767, "0.0.0.0/0"),
            (None, None, None, None),  # from the group itself
        }
        internal_port = one([p for p in ports if p.network_id == network.id], "internal port")
        assert internal_port.name == f"{prefix}-master-0"
        assert internal_port.security_group_ids == [group.id]
        assert [a["ip_address"] for a in internal_port.allowed_address_pairs] == ["10.111.0.0/16"]
        assert outputs["node_internal_ip_address"] == addresses[network.id]
        assert discovery["internalNetworkNames"] == [prefix]
        assert discovery["externalNetworkNames"] == ["public"]
        assert discovery["podNetworkMode"] == "DirectRoutingWithPortSecurityEnabled"
        assert discovery["instances"]["securityGroups"] == [prefix]
    if layout == "Standard":
        assert subnet.gateway_ip == subnet.cidr.rsplit(".", 1)[0] + ".1"
        assert subnet.dns_nameservers == ["8.8.8.8"]
        router = one(list(sdk.network.routers(name=prefix)), "router")
        assert router.external_gateway_info["network_id"] == public.id
        root = one(list(sdk.block_storage.volumes(name=f"{prefix}-master-root-volume-0")), "root")
        assert root.size == 50 and root.is_bootable
        fip = one(fips, "floating IP")
        assert outputs["master_ip_address_for_ssh"] == fip.floating_ip_address
        assert fip.port_id == internal_port.id
        assert discovery["instances"]["mainNetwork"] == prefix
        assert discovery["loadBalancer"] == {"subnetID": subnet.id, "floatingNetworkID": public.id}
        static = one(list(sdk.compute.servers(name=f"^{prefix}-front-0$")), "static node")
        assert static.flavor["original_name"] == "m1.medium"
    elif layout == "StandardWithNoRouter":
        assert subnet.gateway_ip is None
        assert list(sdk.network.routers(name=prefix)) == []
        assert fips == []
        assert outputs["master_ip_address_for_ssh"] == addresses[public.id]
        assert discovery["instances"]["mainNetwork"] == "public"
        assert discovery["instances"]["additionalNetworks"] == [prefix]
        assert "loadBalancer" not in discovery
        worker = one(list(sdk.compute.servers(name=f"^{prefix}-worker-0$")), "static node")
        assert len(list(sdk.network.ports(device_id=worker.id))) == 2
    elif layout == "Simple":
        assert list(sdk.network.networks(name=prefix)) == []
        assert ports and all(p.network_id == public.id for p in ports)
        assert outputs["master_ip_address_for_ssh"] == addresses[public.id]
        assert discovery["internalNetworkNames"] == ["public"]
        assert discovery["podNetworkMode"] == "VXLAN"
        assert discovery["instances"] == {
            "sshKeyPairName": prefix,
            "imageName": "ubuntu-22.04",
            "mainNetwork": "public",
        }
    else:
        private = sdk.network.find_network("private")
        subnet = sdk.network.find_subnet("private-subnet")
        fip = one(fips, "floating IP")
        assert outputs["master_ip_address_for_ssh"] == fip.floating_ip_address
        assert outputs["node_internal_ip_address"] == addresses[private.id]
        assert discovery["internalNetworkNames"] == ["private"]
        assert discovery["externalNetworkNames"] == [public.id]  # upstream: the ID
        assert discovery["loadBalancer"] == {"subnetID": subnet.id, "floatingNetworkID": public.id}
        worker_root = one(list(sdk.block_storage.volumes(name=f"{prefix}-worker-0")), "root")
        assert worker_root.size == 10
    metadata = {"team": "demo", "role": "master"} if layout == "Standard" else {}
    assert master.metadata == metadata  # tags ⊕ additionalTags
    assert data.metadata == ({"team": "demo"} if layout == "Standard" else {})  # tags

    # a second apply changes nothing
    requests.reset()
    again = await run(os_client, os_settings, "apply", path, prefix)
    changed = [(s.key, s.changes) for m in again.modules for s in m.steps if s.changes]
    assert requests.mutating() == {}, changed
    assert {s.action for m in again.modules for s in m.steps} == {"unchanged"}

    # drift out of band: the key pair goes, the master's metadata changes (and, where the layout
    # has one, a rule of its security group goes)
    sdk.compute.delete_keypair(prefix)
    sdk.compute.set_server_metadata(master, owner="someone")
    drifted = {f"openstack.keypair/{prefix}", f"openstack.server/{prefix}-master-0"}
    if layout in ("Standard", "StandardWithNoRouter"):
        icmp = next(r for r in group.security_group_rules if r["protocol"] == "icmp")
        sdk.network.delete_security_group_rule(icmp["id"])
        drifted.add(f"openstack.security_group_rules/{prefix}")
    plan = await run(os_client, os_settings, "plan", path, prefix)
    assert {k for k, a in plan_actions(plan).items() if a != "no-op"} == drifted
    assert plan_actions(plan)[f"openstack.keypair/{prefix}"] == "create"
    repaired = await run(os_client, os_settings, "apply", path, prefix)
    acted = {s.key: s.action for m in repaired.modules for s in m.steps if s.action != "unchanged"}
    assert set(acted) == drifted
    assert acted[f"openstack.keypair/{prefix}"] == "created"
    assert sdk.compute.get_server_metadata(master.id).metadata == metadata
    plan = await run(os_client, os_settings, "plan", path, prefix)
    assert set(plan_actions(plan).values()) == {"no-op"}

    if layout == "Standard":
        # destroy is refused while the cluster's own load balancer is on its subnet
        lb = sdk.load_balancer.create_load_balancer(name=f"{prefix}-svc", vip_subnet_id=subnet.id)
        sdk.load_balancer.wait_for_load_balancer(lb.id, interval=0.1, wait=30)
        with pytest.raises(LayoutFailed, match=f"load balancer {prefix}-svc") as refused:
            await run(os_client, os_settings, "destroy", path, prefix)
        assert refused.value.kind == "DestroyBlocked"
        assert list(sdk.network.networks(name=prefix)) != []  # nothing was deleted
        sdk.load_balancer.delete_load_balancer(lb.id)
        sdk.load_balancer.wait_for_delete(lb, interval=0.1, wait=30)

    # destroy: nothing of the cluster is left
    assert len(cluster_resources(endpoint.admin_url, prefix)) >= 3
    await run(os_client, os_settings, "destroy", path, prefix)
    assert cluster_resources(endpoint.admin_url, prefix) == []
    plan = await run(os_client, os_settings, "plan", path, prefix)
    left = {k: a for k, a in plan_actions(plan).items() if not looked_up(k)}
    assert set(left.values()) == {"create"}


async def test_cloud_errors_end_the_step_with_the_clouds_message(
    os_stack: LocalStack, os_client: Client, os_settings: Settings, os_worker: None, tmp_path: Path
) -> None:
    endpoint = endpoint_of(os_stack)
    admin = OpenStackEmulatorAdmin(endpoint.admin_url)

    # an external network the cloud does not have: refused before anything is made
    prefix = f"e{uuid.uuid4().hex[:6]}"
    path = config_file(
        tmp_path, "openstack-standard", prefix, endpoint, externalNetworkName="no-such-net"
    )
    with pytest.raises(LayoutFailed, match=r"openstack\.network/no-such-net: not found") as missing:
        await run(os_client, os_settings, "apply", path, prefix)
    assert missing.value.kind == "NotFound"
    assert cluster_resources(endpoint.admin_url, prefix) == []

    # Nova's quota: the master's step fails with Nova's message; a plan shows what exists
    path = config_file(tmp_path, "openstack-simple", prefix, endpoint)
    admin.set_quotas(compute_instances=0)
    try:
        with pytest.raises(LayoutFailed, match="Quota exceeded for instances") as quota:
            await run(os_client, os_settings, "apply", path, prefix)
    finally:
        admin.set_quotas(compute_instances=None)
    assert quota.value.kind == "QuotaExceeded"
    assert f"openstack.server/{prefix}-master-0" in str(quota.value)
    plan = plan_actions(await run(os_client, os_settings, "plan", path, prefix))
    assert plan[f"openstack.keypair/{prefix}"] == "no-op"
    assert plan[f"openstack.volume/{prefix}-kubernetes-data-0"] == "no-op"  # made in its wave
    assert plan[f"openstack.server/{prefix}-master-0"] == "create"
    await run(os_client, os_settings, "destroy", path, prefix)
    assert cluster_resources(endpoint.admin_url, prefix) == []

    # no valid host: the server in ERROR is deleted and the step fails with Nova's fault; the
    # next apply boots a new server from the same root volume
    path = config_file(tmp_path, "openstack-standard", prefix, endpoint)
    admin.no_valid_host("m1.large")
    try:
        with pytest.raises(LayoutFailed, match="No valid host was found") as no_host:
            await run(os_client, os_settings, "apply", path, prefix)
    finally:
        admin.no_valid_host("m1.large", enabled=False)
    assert no_host.value.kind == "InsufficientCapacity"
    left = cluster_resources(endpoint.admin_url, prefix)
    assert f"Server/{prefix}-master-0" not in left
    assert left.count(f"Volume/{prefix}-master-root-volume-0") == 1
    await run(os_client, os_settings, "apply", path, prefix)
    counted = cluster_resources(endpoint.admin_url, prefix)
    assert counted.count(f"Server/{prefix}-master-0") == 1
    assert counted.count(f"Volume/{prefix}-master-root-volume-0") == 1
    await run(os_client, os_settings, "destroy", path, prefix)
    assert cluster_resources(endpoint.admin_url, prefix) == []


async def test_standard_with_bastion_and_server_group(
    os_stack: LocalStack,
    os_client: Client,
    os_settings: Settings,
    os_worker: None,
    sdk: Any,
    tmp_path: Path,
) -> None:
    """The bastion (port, root volume, server booted from it, floating IP) is in the base and
    takes the master's floating IP; AntiAffinity masters are in server group ``<prefix>``; a
    bigger ``etcdDiskSizeGb`` grows the attached data volume."""
    endpoint = endpoint_of(os_stack)
    prefix = f"b{uuid.uuid4().hex[:6]}"
    bastion = {"instanceClass": {"flavorName": "m1.small", "imageName": "ubuntu-22.04"}}
    path = config_file(tmp_path, "openstack-standard", prefix, endpoint, bastion=bastion)
    docs = list(yaml.safe_load_all(path.read_text()))
    for doc in docs:
        if doc["kind"] == "OpenStackClusterConfiguration":
            doc["masterNodeGroup"]["serverGroup"] = {"policy": "AntiAffinity"}
            doc.pop("nodeGroups")
    path.write_text(yaml.safe_dump_all(docs))

    applied = await run(os_client, os_settings, "apply", path, prefix)
    server = one(list(sdk.compute.servers(name=f"^{prefix}-bastion$")), "bastion")
    root = one(list(sdk.block_storage.volumes(name=f"{prefix}-bastion-root-volume")), "root")
    assert root.size == 50 and root.attachments[0]["server_id"] == server.id
    fip = one(list(sdk.network.ips(description=f"{prefix}-bastion")), "bastion floating IP")
    assert applied.outputs["bastion_ip_address_for_ssh"] == fip.floating_ip_address
    assert list(sdk.network.ips(description=f"{prefix}-master-0")) == []
    [master_module] = [m for m in applied.modules if m.module == "master-0"]
    outputs = master_module.outputs
    assert outputs["master_ip_address_for_ssh"] == outputs["node_internal_ip_address"]
    master = one(list(sdk.compute.servers(name=f"^{prefix}-master-0$")), "master")
    group = one([g for g in sdk.compute.server_groups() if g.name == prefix], "server group")
    assert group.member_ids == [master.id]

    # a bigger etcd disk: the attached data volume grows in place (never shrinks)
    for doc in docs:
        if doc["kind"] == "OpenStackClusterConfiguration":
            doc["masterNodeGroup"]["instanceClass"]["etcdDiskSizeGb"] = 11
    path.write_text(yaml.safe_dump_all(docs))
    data_key = f"openstack.volume/{prefix}-kubernetes-data-0"
    plan = await run(os_client, os_settings, "plan", path, prefix)
    assert {k for k, a in plan_actions(plan).items() if a != "no-op"} == {data_key}
    grown = await run(os_client, os_settings, "apply", path, prefix)
    assert [s.action for m in grown.modules for s in m.steps if s.key == data_key] == ["updated"]
    data = one(list(sdk.block_storage.volumes(name=f"{prefix}-kubernetes-data-0")), "data")
    assert data.size == 11 and data.status == "in-use"

    await run(os_client, os_settings, "destroy", path, prefix)
    assert cluster_resources(endpoint.admin_url, prefix) == []


async def test_servers_boot_with_the_bootstrap_data_given(
    os_stack: LocalStack,
    os_client: Client,
    os_settings: Settings,
    os_worker: None,
    sdk: Any,
    tmp_path: Path,
) -> None:
    """``--cloud-config master=F --cloud-config G`` on ``Standard``: Nova gets F's bytes as the
    master's ``user_data`` and G's as the static node's, each server's metadata the digest (kept
    by a metadata repair); a re-apply makes no mutating request; other data later is a kept
    change in the plan and apply leaves the running master as it is."""
    endpoint = endpoint_of(os_stack)
    admin = OpenStackEmulatorAdmin(endpoint.admin_url)
    prefix = f"b{uuid.uuid4().hex[:6]}"
    path = config_file(tmp_path, "openstack-standard", prefix, endpoint)
    master_data = f"#cloud-config\nbootstrap_token: {uuid.uuid4().hex}\n".encode()
    node_data = b"#cloud-config\nruncmd: [static]\n"
    (tmp_path / "master.cfg").write_bytes(master_data)
    (tmp_path / "node.cfg").write_bytes(node_data)
    selection = {"master": str(tmp_path / "master.cfg"), "": str(tmp_path / "node.cfg")}
    requests = Requests(endpoint)
    args = (os_client, os_settings)

    def booted_with(name: str) -> bytes:
        [server] = [s for s in admin.rows("servers") if s["name"] == name]
        return base64.b64decode(server["_user_data"])

    await run(*args, "apply", path, prefix, selection)
    assert booted_with(f"{prefix}-master-0") == master_data
    assert booted_with(f"{prefix}-front-0") == node_data
    master = one(list(sdk.compute.servers(name=f"^{prefix}-master-0$")), "master")
    digest = hashlib.sha256(master_data).hexdigest()
    assert master.metadata == {"team": "demo", "role": "master", USER_DATA_KEY: digest}

    requests.reset()
    await run(*args, "apply", path, prefix, selection)
    assert requests.mutating() == {}

    sdk.compute.set_server_metadata(master, owner="someone")
    (tmp_path / "master.cfg").write_bytes(b"#cloud-config\nother: data\n")
    plan = await run(*args, "plan", path, prefix, selection)
    changes = {c.field: c for m in plan.plan for r in m.resources for c in r.changes}
    kept = changes["user_data (kept: a running machine is not replaced for it)"]
    assert kept.have == f"sha256:{digest[:12]}" and kept.want != kept.have
    await run(*args, "apply", path, prefix, selection)
    metadata = sdk.compute.get_server_metadata(master.id).metadata
    assert metadata == {"team": "demo", "role": "master", USER_DATA_KEY: digest}
    assert booted_with(f"{prefix}-master-0") == master_data  # not replaced
    assert one(list(sdk.compute.servers(name=f"^{prefix}-master-0$")), "master").id == master.id

    await run(*args, "destroy", path, prefix)
    assert cluster_resources(endpoint.admin_url, prefix) == []
