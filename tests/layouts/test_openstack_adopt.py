"""Adoption of an OpenStack Standard cluster made by the upstream tooling: every resource made
with raw openstacksdk calls as the Terraform modules make them (the reference's names; the
master's port unnamed and its floating IP without a description, as upstream leaves them; the
router named its own way), its Terraform v4 state written as dhctl keeps it (base state + one
per node, with the server's ``user_data`` secret in it), then the ``adopt`` workflow: every
listed resource found by its ID and made findable (renamed, the floating IP described), the
one deleted since reported missing, nothing created; the plan then creates only that one, the
apply makes only its call, a re-apply none (a second adoption none too), and the histories
never hold the config's password nor the state's secret.

StandardWithNoRouter, Simple and SimpleWithInternalNetwork the same way, lighter: made as upstream
makes them (their masters' ports unnamed, the floating IP without a description), adopted whole,
then an apply makes no mutating call and a destroy leaves nothing.

One stack for the module (Temporal and the OpenStack emulator), the worker in this process; the
upstream cluster is :class:`tests.layouts.openstack_terraform.Terraform`'s.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.cloud.openstack import layout as defs
from cloudloop.cloud.openstack.layout_state import STATE_TYPES
from cloudloop.cloud.registry import Settings
from cloudloop.layouts.config import ClusterIdentity, load_documents
from cloudloop.layouts.model import ConfigSource
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
from tests.layouts.openstack_terraform import USER_DATA, Terraform
from tests.layouts.support import counts, layout_worker, payloads
from tests.support.histories import plain_json

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def os_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with openstack_layout_stack(tmp_path_factory.mktemp("os-adopt")) as stack:
        yield stack


@pytest.fixture(scope="module")
async def os_worker(os_stack: LocalStack) -> AsyncIterator[tuple[Client, Settings]]:
    settings = layout_settings(os_stack)
    client = await temporal.connect(settings.temporal)
    async with layout_worker(client, settings):
        yield client, settings


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
    sources = terraform.write_states(tmp_path)
    # deleted after the state was written: the state lists it, the cloud has it no more
    gone_server = f"{defs.SERVER}/{prefix}-front-0"
    # fetched before the delete: the emulator may have removed it by the time a later GET asks
    server = sdk.compute.get_server(terraform.ids[gone_server])
    sdk.compute.delete_server(server)
    sdk.compute.wait_for_delete(server, wait=60, interval=0.2)

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
    text = payloads(plain_json(history, client))
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


#: The other layouts' example → what upstream leaves unnamed (``{p}``: the prefix): the master's
#: ports, the master's floating IP's description.
UPSTREAM_UNNAMED = {
    "openstack-standard-with-no-router": (
        f"{defs.PORT}/{{p}}-master-0@public",
        f"{defs.PORT}/{{p}}-master-0@{{p}}",
    ),
    "openstack-simple": (f"{defs.FLOATING_IP}/{{p}}-worker-0@public",),
    "openstack-simple-with-internal-network": (
        f"{defs.PORT}/{{p}}-master-0@private-subnet",
        f"{defs.FLOATING_IP}/{{p}}-master-0@public",
    ),
}


#: Node groups laid over an example's (Simple's has none): a static node on an internal network
#: with a floating IP from the external one.
NODE_GROUPS: dict[str, list[dict[str, Any]]] = {
    "openstack-simple": [
        {
            "name": "worker",
            "replicas": 1,
            "instanceClass": {
                "flavorName": "m1.small",
                "imageName": "ubuntu-22.04",
                "mainNetwork": "private",
                "floatingIPPools": ["public"],
            },
            "volumeTypeMap": {"nova": "__DEFAULT__"},
        }
    ]
}


@pytest.mark.parametrize("example", list(UPSTREAM_UNNAMED))
async def test_adopt_the_other_layouts_then_apply_makes_nothing(
    example: str,
    os_stack: LocalStack,
    os_worker: tuple[Client, Settings],
    sdk: Any,
    tmp_path: Path,
) -> None:
    """StandardWithNoRouter, Simple and SimpleWithInternalNetwork made as upstream makes them:
    ``adopt`` finds every resource in the state (naming what upstream leaves unnamed), then an
    apply makes no mutating call and a destroy leaves nothing. Simple gets a static node with a
    floating IP (its example has none)."""
    client, settings = os_worker
    endpoint = endpoint_of(os_stack)
    prefix, cluster_uuid = f"o{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    path = config_file(tmp_path, example, prefix, endpoint)
    docs = list(yaml.safe_load_all(path.read_text()))
    if example in NODE_GROUPS:
        docs[1]["nodeGroups"] = NODE_GROUPS[example]
        path.write_text(yaml.safe_dump_all(docs))
    loaded = load_documents(docs, uuid=cluster_uuid)
    layout = defs.define(loaded.document, loaded.cluster, ["nova"])
    terraform = Terraform(sdk, layout)
    names = {key.format(p=prefix): "" for key in UPSTREAM_UNNAMED[example]}
    terraform.make(names)
    sources = terraform.write_states(tmp_path)

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

    requests = Requests(endpoint)
    requests.reset()
    adopted = await run("adopt", state=state_records(sources, STATE_TYPES))
    assert adopted.unmapped == []
    lookups = {r.key for _, r in terraform.resources() if r.read_only}
    actions = {s.key: s.action for m in adopted.modules for s in m.steps if s.key not in lookups}
    managed = {r.key for _, r in terraform.resources() if not r.read_only}
    assert actions == dict.fromkeys(managed, "adopted"), actions
    assert [s.changes for m in adopted.modules for s in m.steps if s.changes] == []
    # only the unnamed were named; nothing was created
    renamed = {
        "PUT network /v2.0/ports/{id}": sum(1 for k in names if k.startswith(defs.PORT)),
        "PUT network /v2.0/floatingips/{id}": sum(
            1 for k in names if k.startswith(defs.FLOATING_IP)
        ),
    }
    assert requests.mutating() == {k: n for k, n in renamed.items() if n}, requests.mutating()
    history = await client.get_workflow_handle(f"layout/{prefix}").fetch_history()
    text = payloads(plain_json(history, client))
    assert USER_DATA not in text and SECRET not in text

    requests.reset()
    applied = await run("apply")
    assert requests.mutating() == {}, requests.mutating()
    assert {s.action for m in applied.modules for s in m.steps} == {"unchanged"}
    counted = cluster_resources(endpoint.admin_url, prefix)
    await run("destroy")
    assert cluster_resources(endpoint.admin_url, prefix) == [], counted
