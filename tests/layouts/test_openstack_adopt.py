"""Adoption of an OpenStack Standard cluster made by the upstream tooling: every resource made
with raw openstacksdk calls as the Terraform modules make them (the reference's names; the
master's port unnamed and its floating IP without a description, as upstream leaves them; the
router named its own way), its Terraform v4 state written as dhctl keeps it (base state + one
per node, with the server's ``user_data`` secret in it), then the ``adopt`` workflow: every
listed resource found by its ID and made findable (renamed, the floating IP described), the
one deleted since reported missing, nothing created; the plan then creates only that one, the
apply makes only its call, a re-apply none (a second adoption none too), and the histories
never hold the config's password nor the state's secret.

One stack for the module (Temporal and the OpenStack emulator), the worker in this process.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from activities.layout import LayoutActivities
from cloudloop import temporal
from cloudloop.cloud.openstack import layout as defs
from cloudloop.cloud.openstack.layout_state import STATE_TYPES
from cloudloop.cloud.registry import Settings
from cloudloop.layouts.config import ClusterIdentity, load_documents
from cloudloop.layouts.model import ConfigSource, LayoutDef, ResourceDef
from cloudloop.messages.layout import LayoutInput, LayoutResult, LayoutTimings
from devstack.backends.openstack import connect
from devstack.backends.openstack_layouts import cluster_resources
from devstack.local import LocalStack
from starters.layout import run_layout, state_records
from tests.layouts.openstack_support import (
    SECRET,
    Requests,
    config_file,
    endpoint_of,
    layout_settings,
    openstack_layout_stack,
)
from tests.layouts.test_aws_adopt import counts, payloads
from workflows.layout import LAYOUT_WORKFLOWS

pytestmark = pytest.mark.stack
#: The node's cloud-config a real state holds: it must never leave the file.
USER_DATA = "os-bootstrap-token-s3cr3t"


@pytest.fixture(scope="module")
def os_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with openstack_layout_stack(tmp_path_factory.mktemp("os-adopt")) as stack:
        yield stack


@pytest.fixture(scope="module")
async def os_worker(os_stack: LocalStack) -> AsyncIterator[tuple[Client, Settings]]:
    settings = layout_settings(os_stack)
    client = await temporal.connect(settings.temporal)
    worker = temporal.make_worker(
        client,
        settings.temporal.task_queue,
        workflows=LAYOUT_WORKFLOWS,
        activities=LayoutActivities(settings).all(),  # type: ignore[arg-type]
        graceful_shutdown_s=1,
    )
    async with worker:
        yield client, settings


class Terraform:
    """Makes the layout's resources with raw openstacksdk calls, as the upstream modules do, and
    records each in a v4 state (one per module)."""

    def __init__(self, sdk: Any, layout: LayoutDef) -> None:
        self.sdk = sdk
        self.layout = layout
        self.ids: dict[str, str] = {}
        self.states: dict[str, list[dict[str, Any]]] = {}

    def record(self, module: str, tf_type: str, tf_name: str, **attributes: Any) -> None:
        self.states.setdefault(module, []).append(
            {
                "mode": "managed",
                "type": tf_type,
                "name": tf_name,
                "provider": 'provider["registry.terraform.io/terraform-provider-openstack'
                '/openstack"]',
                "instances": [{"schema_version": 0, "attributes": attributes}],
            }
        )

    def state(self, module: str) -> str:
        return json.dumps(
            {
                "version": 4,
                "terraform_version": "0.14.8",
                "serial": 3,
                "lineage": str(uuid.uuid4()),
                "outputs": {},
                "resources": self.states[module],
            }
        )

    def resources(self) -> list[tuple[str, ResourceDef]]:
        return [(m.id, r) for m in self.layout.modules for r in m.resources]

    def props(self, resource: ResourceDef) -> dict[str, Any]:
        def value(v: Any) -> Any:
            if isinstance(v, dict) and "$ref" in v:
                return self.ids[v["$ref"]]
            if isinstance(v, dict):
                return {k: value(x) for k, x in v.items()}
            if isinstance(v, list):
                return [value(x) for x in v]
            return v

        return {k: value(v) for k, v in resource.properties.items()}

    def make(self, names: dict[str, str]) -> None:
        """Every resource of the layout; ``names`` (key → name) as upstream names some."""
        for module, r in self.resources():
            p = self.props(r)
            own = {defs.PORT: p.get("port_name"), defs.FLOATING_IP: p.get("description")}.get(
                r.kind, r.name
            )
            name = names.get(r.key, own)
            getattr(self, "_" + r.kind.split(".")[1])(module, r, p, name)

    # lookups: what the cloud has
    def _network(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        if r.read_only:
            self.ids[r.key] = self.sdk.network.find_network(p["name"], ignore_missing=False).id
            return
        net = self.sdk.network.create_network(name=name, admin_state_up=True)
        self.ids[r.key] = net.id
        self.record(module, "openstack_networking_network_v2", "internal", id=net.id, name=name)

    def _image(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        self.ids[r.key] = self.sdk.image.find_image(p["name"], ignore_missing=False).id

    def _flavor(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        self.ids[r.key] = self.sdk.compute.find_flavor(p["name"], ignore_missing=False).id

    def _security_group(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        group = self.sdk.network.create_security_group(name=name, description="")
        self.ids[r.key] = group.id
        self.record(module, "openstack_networking_secgroup_v2", "kube", id=group.id, name=name)

    def _security_group_rules(
        self, module: str, r: ResourceDef, p: dict[str, Any], name: str
    ) -> None:
        self.ids[r.key] = p["group_id"]
        for index, rule in enumerate(p["ingress"]):
            made = self.sdk.network.create_security_group_rule(
                security_group_id=p["group_id"], **{k: v for k, v in rule.items() if v is not None}
            )
            self.record(
                module,
                "openstack_networking_secgroup_rule_v2",
                f"rule_{index}",
                id=made.id,
                security_group_id=p["group_id"],
            )

    def _keypair(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        self.sdk.compute.create_keypair(name=name, public_key=p["public_key"])
        self.ids[r.key] = name
        self.record(module, "openstack_compute_keypair_v2", "ssh", id=name, name=name)

    def _subnet(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        subnet = self.sdk.network.create_subnet(name=name, **p)
        self.ids[r.key] = subnet.id
        self.record(
            module,
            "openstack_networking_subnet_v2",
            "internal",
            id=subnet.id,
            name=name,
            network_id=p["network_id"],
            cidr=p["cidr"],
        )

    def _router(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        router = self.sdk.network.create_router(
            name=name, external_gateway_info={"network_id": p["external_network_id"]}
        )
        self.ids[r.key] = router.id
        self.record(
            module,
            "openstack_networking_router_v2",
            "router",
            id=router.id,
            name=name,
            external_network_id=p["external_network_id"],
        )

    def _router_interface(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        router = self.sdk.network.get_router(p["router_id"])
        made = self.sdk.network.add_interface_to_router(router, subnet=p["subnet_id"])
        self.ids[r.key] = made["port_id"]
        self.record(
            module,
            "openstack_networking_router_interface_v2",
            "router",
            id=made["port_id"],
            router_id=p["router_id"],
            subnet_id=p["subnet_id"],
        )

    def _port(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        port = self.sdk.network.create_port(
            name=name,
            network_id=p["network_id"],
            security_group_ids=p["security_group_ids"],
            allowed_address_pairs=[{"ip_address": ip} for ip in p["allowed_address_pairs"]],
            **({"fixed_ips": [{"subnet_id": p["subnet_id"]}]} if p.get("subnet_id") else {}),
        )
        self.ids[r.key] = port.id
        self.record(
            module,
            "openstack_networking_port_v2",
            "port",
            id=port.id,
            name=name,
            network_id=p["network_id"],
        )

    def _volume(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        volume = self.sdk.block_storage.create_volume(
            name=name,
            size=p["size"],
            availability_zone=p["availability_zone"],
            volume_type=p["volume_type"],
            metadata=p["metadata"],
            **({"image_id": p["image_id"]} if p.get("image_id") else {}),
            **({"description": p["description"]} if p.get("description") else {}),
        )
        self.sdk.block_storage.wait_for_status(volume, "available", wait=60, interval=0.2)
        self.ids[r.key] = volume.id
        self.record(
            module,
            "openstack_blockstorage_volume_v3",
            "volume",
            id=volume.id,
            name=name,
            availability_zone=p["availability_zone"],
        )

    def _server(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        boot: dict[str, Any] = (
            {
                "block_device_mapping_v2": [
                    {
                        "uuid": p["root_volume_id"],
                        "boot_index": 0,
                        "source_type": "volume",
                        "destination_type": "volume",
                        "delete_on_termination": False,
                    }
                ]
            }
            if p.get("root_volume_id")
            else {"image_id": p["image_id"]}
        )
        server = self.sdk.compute.create_server(
            name=name,
            flavor_id=p["flavor_id"],
            key_name=p["key_name"],
            availability_zone=p["availability_zone"],
            metadata=p["metadata"],
            networks=[{"port": port} for port in p["ports"]],
            user_data=base64.b64encode(USER_DATA.encode()).decode(),
            **boot,
        )
        self.sdk.compute.wait_for_server(server, wait=60, interval=0.2)
        self.ids[r.key] = server.id
        self.record(
            module,
            "openstack_compute_instance_v2",
            "node",
            id=server.id,
            name=name,
            availability_zone=p["availability_zone"],
            user_data=USER_DATA,
            network=[{"port": port, "uuid": "", "name": ""} for port in p["ports"]],
        )

    def _volume_attachment(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        self.sdk.compute.create_volume_attachment(p["server_id"], volume_id=p["volume_id"])
        volume = self.sdk.block_storage.get_volume(p["volume_id"])
        self.sdk.block_storage.wait_for_status(volume, "in-use", wait=60, interval=0.2)
        cloud_id = f"{p['server_id']}/{p['volume_id']}"
        self.ids[r.key] = cloud_id
        self.record(
            module,
            "openstack_compute_volume_attach_v2",
            "kubernetes_data",
            id=cloud_id,
            instance_id=p["server_id"],
            volume_id=p["volume_id"],
        )

    def _floating_ip(self, module: str, r: ResourceDef, p: dict[str, Any], name: str) -> None:
        fip = self.sdk.network.create_ip(
            floating_network_id=p["floating_network_id"], description=name
        )
        self.sdk.network.update_ip(fip, port_id=p["port_id"])
        self.ids[r.key] = fip.id
        self.record(
            module,
            "openstack_networking_floatingip_v2",
            "master",
            id=fip.id,
            floating_network_id=p["floating_network_id"],
        )
        self.record(
            module,
            "openstack_networking_floatingip_associate_v2",
            "master",
            id=fip.id,
            port_id=p["port_id"],
        )


@pytest.fixture
def sdk(os_stack: LocalStack) -> Iterator[Any]:
    conn = connect(endpoint_of(os_stack))
    yield conn
    conn.close()


async def test_adopt_a_terraform_made_cluster_then_apply_makes_nothing(
    os_stack: LocalStack,
    os_worker: tuple[Client, Settings],
    sdk: Any,
    tmp_path: Path,
) -> None:
    client, settings = os_worker
    endpoint = endpoint_of(os_stack)
    prefix, cluster_uuid = f"o{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = config_file(tmp_path, "openstack-standard", prefix, endpoint)
    loaded = load_documents(list(yaml.safe_load_all(path.read_text())), uuid=cluster_uuid)
    layout = defs.define(loaded.document, loaded.cluster, ["nova"])
    terraform = Terraform(sdk, layout)
    # upstream's master port has no name, its floating IPs no description; the router here is
    # named its own way: the layout's finder would not find these
    names = {
        f"{defs.PORT}/{prefix}-master-0@{prefix}": "",
        f"{defs.FLOATING_IP}/{prefix}-master-0@public": "",
        f"{defs.ROUTER}/{prefix}": "kube-router",
    }
    terraform.make(names)
    sources = []
    for module in layout.modules:
        file = tmp_path / f"{module.id}-tf-state.json"
        file.write_text(terraform.state(module.id))
        sources.append(str(file) if module.id == "base" else f"{module.node_name}={file}")
    # deleted after the state was written: the state lists it, the cloud has it no more
    gone_server = f"{defs.SERVER}/{prefix}-front-0"
    sdk.compute.delete_server(terraform.ids[gone_server])
    sdk.compute.wait_for_delete(
        sdk.compute.get_server(terraform.ids[gone_server]), wait=60, interval=0.2
    )

    def input(action: str, **more: Any) -> LayoutInput:
        return LayoutInput(
            action=action,
            provider="openstack",
            source=ConfigSource(file=str(path)),
            cluster=ClusterIdentity(prefix=prefix, uuid=cluster_uuid),
            timings=LayoutTimings(max_attempts=3),
            **more,
        )

    async def run(action: str, **more: Any) -> LayoutResult:
        return await run_layout(
            client, settings.temporal.task_queue, input(action, **more), poll_s=0.2
        )

    # the finder does not see the renamed ones: a plan would create them again
    plan = await run("plan")
    assert counts(plan)["create"] >= len(names) + 1

    requests = Requests(endpoint)
    before = cluster_resources(endpoint.admin_url, prefix)
    requests.reset()
    adopted = await run("adopt", state=state_records(sources, STATE_TYPES))
    assert adopted.unmapped == []
    lookups = {r.key for _, r in terraform.resources() if r.read_only}
    actions = {s.key: s.action for m in adopted.modules for s in m.steps if s.key not in lookups}
    assert actions.pop(gone_server) == "missing", actions
    assert set(actions.values()) == {"adopted"}, actions
    managed = [r for _, r in terraform.resources() if not r.read_only]
    assert len(actions) == len(managed) - 1
    assert [s.changes for m in adopted.modules for s in m.steps if s.changes] == []
    # only names and a description were set; nothing was created
    assert requests.mutating() == {
        "PUT network /v2.0/ports/{id}": 1,
        "PUT network /v2.0/floatingips/{id}": 1,
        "PUT network /v2.0/routers/{id}": 1,
    }, requests.mutating()
    after = cluster_resources(endpoint.admin_url, prefix)
    assert len(after) == len(before) + len(names), (before, after)

    # the adoption is a workflow: its history holds IDs, never the config's or state's secrets
    history = await client.get_workflow_handle(f"layout/{prefix}").fetch_history()
    text = payloads(json.loads(history.to_json()))
    assert terraform.ids[f"{defs.NETWORK}/{prefix}"] in text
    assert USER_DATA not in text and SECRET not in text
    # adopting twice changes nothing
    requests.reset()
    again = await run("adopt", state=state_records(sources, STATE_TYPES))
    assert {s.action for m in again.modules for s in m.steps if s.key not in lookups} == {
        "adopted",
        "missing",
    }
    assert requests.mutating() == {}

    plan = await run("plan")
    assert counts(plan) == {"create": 1, "no-op": len(plan_keys(plan)) - 1}, [
        (r.key, r.action, r.changes) for m in plan.plan for r in m.resources if r.action != "no-op"
    ]
    requests.reset()
    applied = await run("apply")
    created = [s.key for m in applied.modules for s in m.steps if s.action == "created"]
    assert created == [gone_server]
    assert set(requests.mutating()) == {"POST compute /v2.1/servers"}, requests.mutating()
    requests.reset()
    await run("apply")
    assert requests.mutating() == {}
    counted = cluster_resources(endpoint.admin_url, prefix)
    assert len(counted) == len(set(counted))  # nothing twice

    await run("destroy")
    assert cluster_resources(endpoint.admin_url, prefix) == []


def plan_keys(result: LayoutResult) -> list[str]:
    return [r.key for m in result.plan or [] for r in m.resources]
