"""The in-cluster converge on the stack: OpenStack ``Simple`` on the emulator, a real
kube-apiserver, the Temporal dev server, the pass started by its real Schedule.

After an apply, the cluster's Schedule (installed as the CLI and the chart's Job do) runs a pass
on ``trigger``: every module ``ok``, reported in ``d8-system/cloudloop-layout-converge`` with the
Terraform-state Secrets of what it found, no mutating request to the cloud, and the starter's
gauges read from that ConfigMap. A key pair deleted out of band is ``changed`` in the next pass
and made again by it (auto-converge); a second master asked for (replicas 2) is ``absent`` and
made with the bootstrap data the cluster keeps for its group
(``d8-cloud-instance-manager/manual-bootstrap-for-master``), byte for byte; a node removed from
the configuration whose state Secret is still there is ``abandoned``; a pass that cannot reach
the cloud reports ``error``, keeps the last success time and deletes nothing.

The chart's install Job, run as its pod would run it, makes the Schedule. A pass with a repair,
a node to make and an approved replacement, run by real workers SIGKILLed right after each
step's first mutating call, makes each resource once, acts on an approval given twice once, and
leaves nothing for the next pass.
"""

from __future__ import annotations

import asyncio
import base64
import subprocess
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY
from temporalio.client import Client
from temporalio.service import RPCError

from activities.layout import LayoutActivities
from activities.layout_converge import ConvergeActivities
from cloudloop import temporal
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import CONFIG_MAPS, NAMESPACES, SECRETS
from cloudloop.layouts import bootstrap, tfstate
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import LayoutTimings
from cloudloop.messages.layout_converge import ConvergeInput, ConvergeResult, schedule_id
from devstack.backends.openstack import QUICK
from devstack.backends.openstack import connect as os_connect
from devstack.backends.openstack_layouts import cluster_resources
from devstack.kube import KubeOptions
from devstack.local import LocalStack, StackOptions
from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorOptions
from starters.layout_converge import (
    APPROVE_ANNOTATION,
    APPROVED_ANNOTATION,
    STATUS_CONFIG_MAP,
    ConvergeStatusExporter,
    approve,
    approve_from_annotation,
    export,
    install_schedule,
    pass_state,
    read_status,
    running_pass,
    status_of,
    trigger,
)
from tests.install.chart import Helm, PodProcess, find, render
from tests.layouts import support
from tests.layouts.openstack_support import (
    SECRET,
    Requests,
    config_file,
    endpoint_of,
    layout_settings,
)
from tests.layouts.support import mounted
from tests.layouts.test_kill_every_step import openstack_rig
from tests.support.kill_every_step import kill_during, killed_keys
from tests.support.workers import CLI, Workers
from workflows.layout import LAYOUT_WORKFLOWS
from workflows.layout_converge import CONVERGE_WORKFLOWS

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(
        StackOptions(
            state_dir=tmp_path_factory.mktemp("converge"),
            moto=False,
            kube=(KubeOptions(),),
            openstack_emulator=OpenStackEmulatorOptions(password=SECRET, delays=QUICK),
        )
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def kube(stack: LocalStack) -> Kube:
    return Kube(api_client(stack.clusters["main"].kubeconfig))


@pytest.fixture(scope="module")
def settings(stack: LocalStack) -> Settings:
    return layout_settings(stack)


@pytest.fixture(scope="module")
async def client(settings: Settings) -> Client:
    return await temporal.connect(settings.temporal)


@pytest.fixture(scope="module")
async def worker(client: Client, settings: Settings, kube: Kube) -> AsyncIterator[None]:
    activities = [
        *LayoutActivities(mounted(settings), kube).all(),
        *ConvergeActivities(kube).all(),
    ]
    async with temporal.make_worker(
        client,
        settings.temporal.task_queue,
        workflows=[*LAYOUT_WORKFLOWS, *CONVERGE_WORKFLOWS],
        activities=activities,  # type: ignore[arg-type]
        graceful_shutdown_s=1,
    ):
        yield


async def one_pass(client: Client, prefix: str, scope: str = "") -> ConvergeResult:
    """Trigger a pass of the Schedule and wait for its result."""
    handle = client.get_schedule_handle(schedule_id(prefix, scope))
    before = len((await handle.describe()).info.recent_actions)
    await trigger(client, prefix, scope)
    for _ in range(300):
        actions = (await handle.describe()).info.recent_actions
        if len(actions) > before:
            workflow_id = getattr(actions[-1].action, "workflow_id", "")
            run = client.get_workflow_handle(workflow_id, result_type=ConvergeResult)
            result: ConvergeResult = await run.result()
            return result
        await asyncio.sleep(0.1)
    raise AssertionError("the Schedule started no pass")


def keep_master_bootstrap(kube: Kube, data: bytes) -> None:
    """``data`` as the cluster keeps the master group's bootstrap data (dhctl's
    ``manual-bootstrap-for-master``, made anew), in the namespaces a Deckhouse cluster has."""
    for namespace in ("d8-system", bootstrap.CLUSTER_SECRET_NAMESPACE):
        if kube.get(NAMESPACES, namespace) is None:
            kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    name = f"{bootstrap.CLUSTER_SECRET_PREFIX}master"
    kube.delete(SECRETS, name, bootstrap.CLUSTER_SECRET_NAMESPACE)
    kube.create(
        SECRETS,
        {
            "metadata": {"name": name},
            "data": {bootstrap.CLUSTER_SECRET_KEY: base64.b64encode(data).decode()},
        },
        bootstrap.CLUSTER_SECRET_NAMESPACE,
    )


def modules(result: ConvergeResult) -> dict[str, str]:
    return {s.module: s.status for s in result.statuses}


def gauge(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


async def test_a_pass_reports_repairs_makes_nodes_and_changes_nothing_unreachable(
    stack: LocalStack,
    client: Client,
    settings: Settings,
    worker: None,
    kube: Kube,
    tmp_path: Path,
) -> None:
    endpoint = endpoint_of(stack)
    prefix = f"cv{uuid.uuid4().hex[:6]}"
    path = config_file(tmp_path, "openstack-simple", prefix, endpoint)
    cluster_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, prefix))
    await support.run(client, settings, "apply", path, prefix, cluster_uuid, provider="openstack")
    master_data = f"#cloud-config\nbootstrap_token: {uuid.uuid4().hex}\n".encode()
    keep_master_bootstrap(kube, master_data)
    input = ConvergeInput(
        provider="openstack",
        source=ConfigSource(file=str(path)),
        cluster=ClusterIdentity(prefix=prefix, uuid=cluster_uuid),
        timings=LayoutTimings(max_attempts=3),
        auto=True,
        approval_wait_s=30,
    )
    assert await install_schedule(client, settings.temporal.task_queue, input, 3600) == "created"
    assert await install_schedule(client, settings.temporal.task_queue, input, 3600) == "updated"
    requests = Requests(endpoint)

    # nothing changed: ok everywhere, reported, no mutating call
    requests.reset()
    result = await one_pass(client, prefix)
    assert result.status == "ok", result
    assert modules(result) == {"base": "ok", "master-0": "ok"}
    assert requests.mutating() == {}
    status = read_status(kube)
    assert status is not None and status["status"] == "ok"
    assert status["lastSuccess"]
    base_state = kube.get(SECRETS, tfstate.CLUSTER_STATE_SECRET[1], "d8-system")
    assert base_state is not None
    assert kube.get(SECRETS, f"{tfstate.NODE_STATE_PREFIX}{prefix}-master-0", "d8-system")
    export(status)
    assert gauge("candi_converge_cluster_status", status="ok") == 1
    node = {"node_group": "master", "name": f"{prefix}-master-0"}
    assert gauge("candi_converge_node_status", **node, status="ok") == 1

    # a key pair deleted out of band: changed, made again by the pass
    sdk = os_connect(endpoint)
    try:
        sdk.compute.delete_keypair(prefix)
        result = await one_pass(client, prefix)
        assert result.applied == ["base"]
        assert result.status == "ok"
        assert sdk.compute.find_keypair(prefix) is not None
    finally:
        sdk.close()

    # two masters asked for: the second is absent, then made with the cluster's bootstrap data
    docs = list(yaml.safe_load_all(path.read_text()))
    for doc in docs:
        if "masterNodeGroup" in doc:
            doc["masterNodeGroup"]["replicas"] = 2
    path.write_text(yaml.safe_dump_all(docs))
    result = await one_pass(client, prefix)
    assert "master-1" in result.applied
    assert modules(result)["master-1"] == "ok"
    admin = OpenStackEmulatorAdmin(endpoint.admin_url)
    [server] = [s for s in admin.rows("servers") if s["name"] == f"{prefix}-master-1"]
    assert base64.b64decode(server["_user_data"]) == master_data

    # back to one master: the second one's state Secret stays, the node is abandoned (kept)
    for doc in docs:
        if "masterNodeGroup" in doc:
            doc["masterNodeGroup"]["replicas"] = 1
    path.write_text(yaml.safe_dump_all(docs))
    result = await one_pass(client, prefix)
    status = read_status(kube)
    assert status is not None and status["status"] == "abandoned"
    abandoned = [m for m in status["modules"] if m["status"] == "abandoned"]
    assert [m["name"] for m in abandoned] == [f"{prefix}-master-1"]
    assert [s for s in admin.rows("servers") if s["name"] == f"{prefix}-master-1"]

    # the cloud unreachable: error, nothing deleted, the last success kept
    success = status["lastSuccess"]
    docs_broken: list[dict[str, Any]] = [dict(d) for d in docs]
    for doc in docs_broken:
        if "provider" in doc:
            doc["provider"] = {**doc["provider"], "authURL": "http://127.0.0.1:9/v3/"}
    path.write_text(yaml.safe_dump_all(docs_broken))
    result = await one_pass(client, prefix)
    assert result.status == "error"
    status = read_status(kube)
    assert status is not None and status["status"] == "error"
    assert status["lastSuccess"] == success
    assert {m["status"] for m in status["modules"]} == {"error"}
    assert [s for s in admin.rows("servers") if s["name"] == f"{prefix}-master-0"]

    await client.get_schedule_handle(schedule_id(prefix)).delete()
    for doc in docs:
        if "masterNodeGroup" in doc:
            doc["masterNodeGroup"]["replicas"] = 2  # destroy both masters
    path.write_text(yaml.safe_dump_all(docs))
    await support.run(client, settings, "destroy", path, prefix, cluster_uuid, provider="openstack")
    assert cluster_resources(endpoint.admin_url, prefix) == []


async def test_the_charts_job_makes_the_schedule_whose_pass_reads_the_workers_mount(
    stack: LocalStack, client: Client, settings: Settings, kube: Kube, tmp_path: Path
) -> None:
    """The chart's post-install Job, run with its rendered args, env and mounted files, makes
    the Schedule (an upgrade's rerun updates it); the pass it starts reads the configuration by
    the key's name under the workers' mount of the same Secret, and changes nothing without
    ``auto``."""
    endpoint = endpoint_of(stack)
    prefix = f"cj{uuid.uuid4().hex[:6]}"
    path = config_file(tmp_path, "openstack-simple", prefix, endpoint)
    cluster_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, prefix))
    queue = f"chart-converge-{uuid.uuid4().hex[:8]}"
    docs = render(
        Helm(tmp_path / "helm"),
        "openstack",
        {
            "temporal.address": stack.temporal_address,
            "temporal.taskQueue": queue,
            "layouts.existingSecret": "cluster-layouts",
            "layouts.converge.enabled": "true",
            "layouts.converge.install.configKey": "cluster.yaml",
            "layouts.converge.install.clusterUUID": cluster_uuid,
            "logFormat": "text",
        },
    )
    docs.append(
        {
            "kind": "Secret",
            "metadata": {"name": "cluster-layouts"},
            "stringData": {"cluster.yaml": path.read_text()},
        }
    )
    job = PodProcess(
        find(docs, "Job", "-layout-converge-install"),
        docs,
        tmp_path / "pod",
        stack.kubeconfig,
        overrides=stack.codec_env(),
    )
    argv, env = job.command()
    scope = queue  # the chart's: its task queue (temporal.workflowIdScope unset)
    schedule = client.get_schedule_handle(schedule_id(prefix, scope))
    for outcome in ("created", "updated"):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert f"Schedule {schedule_id(prefix, scope)} {outcome}" in done.stdout, done.stdout
        if outcome == "created":  # an operator pauses it: the upgrade's rerun keeps it paused
            await schedule.pause(note="held by the operator")
    state = (await schedule.describe()).schedule.state
    assert (state.paused, state.note) == (True, "held by the operator")
    await schedule.unpause()

    mount = tmp_path / "pod" / "etc/cloudloop/layouts"
    on_queue = mounted(
        settings.model_copy(
            update={"temporal": settings.temporal.model_copy(update={"task_queue": queue})}
        ),
        mount,
    )
    activities = [*LayoutActivities(on_queue, kube).all(), *ConvergeActivities(kube).all()]
    requests = Requests(endpoint)
    requests.reset()
    async with temporal.make_worker(
        client,
        queue,
        workflows=[*LAYOUT_WORKFLOWS, *CONVERGE_WORKFLOWS],
        activities=activities,  # type: ignore[arg-type]
        graceful_shutdown_s=1,
    ):
        result = await one_pass(client, prefix, scope)
    await client.get_schedule_handle(schedule_id(prefix, scope)).delete()
    # nothing made yet: the base has creations to make, the master is absent (no apply: plan only)
    assert modules(result) == {"base": "changed", "master-0": "absent"}, result
    assert result.applied == []
    assert requests.mutating() == {}


async def _approve_when_held(client: Client, prefix: str, scope: str) -> list[list[str]]:
    """Wait for the running pass to hold a step, then approve every held step twice (workers
    are being killed meanwhile: a query or Update that finds none is asked again); what each
    approval approved."""
    seen: object = None
    for _ in range(600):
        try:
            handle = await running_pass(client, prefix, scope)
            if handle is not None:
                state = await pass_state(handle)
                seen = state
                if any(h.outcome == "waiting" for h in state.held):
                    first = await approve(handle)
                    second = await approve(handle)
                    return [first.approved, second.approved]
        except RPCError as err:
            seen = err
        await asyncio.sleep(0.25)
    raise AssertionError(f"the pass held no step: {seen!r}")


@pytest.mark.fault
async def test_a_pass_and_its_approved_replacement_killed_at_every_step_converge_once(
    stack: LocalStack,
    client: Client,
    settings: Settings,
    worker: None,
    kube: Kube,
    workers: Workers,
    tmp_path: Path,
) -> None:
    """A pass with work of every kind — a key pair deleted out of band (a repair of the base),
    a second master asked for (a node made with the cluster's bootstrap data) and the first
    master's flavor changed (a replacement, held and approved twice) — run by real workers
    SIGKILLed right after each step's first mutating cloud call: the pass ends ``ok`` with each
    resource once, the approval acted once, and a second pass changes nothing."""
    endpoint = endpoint_of(stack)
    prefix = f"ck{uuid.uuid4().hex[:6]}"
    path = config_file(tmp_path, "openstack-simple", prefix, endpoint)
    cluster_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, prefix))
    await support.run(client, settings, "apply", path, prefix, cluster_uuid, provider="openstack")
    master_data = f"#cloud-config\nbootstrap_token: {uuid.uuid4().hex}\n".encode()
    keep_master_bootstrap(kube, master_data)
    sdk = os_connect(endpoint)
    try:
        sdk.compute.delete_keypair(prefix)
    finally:
        sdk.close()
    docs = list(yaml.safe_load_all(path.read_text()))
    for doc in docs:
        if "masterNodeGroup" in doc:
            doc["masterNodeGroup"]["replicas"] = 2
            doc["masterNodeGroup"]["instanceClass"]["flavorName"] = "m1.xlarge"
    path.write_text(yaml.safe_dump_all(docs))

    queue = f"converge-kill-{uuid.uuid4().hex[:8]}"
    rig = openstack_rig(stack, "openstack-simple")
    plain_env = rig.env

    def env(task_queue: str, folder: Path) -> dict[str, str]:
        # the pass reports to the cluster and reads its bootstrap data: a real kubeconfig
        return {**plain_env(task_queue, folder), "CLOUDLOOP_KUBECONFIG": str(stack.kubeconfig)}

    rig.env = env
    input = ConvergeInput(
        provider="openstack",
        source=ConfigSource(file=str(path)),
        cluster=ClusterIdentity(prefix=prefix, uuid=cluster_uuid),
        timings=LayoutTimings(heartbeat_timeout_s=rig.heartbeat_timeout_s),
        id_scope=queue,
        auto=True,
        approval_wait_s=600,
    )
    await install_schedule(client, queue, input, 3600)
    approvals: list[list[str]] = []

    async def run() -> list[ConvergeResult]:
        passed = asyncio.ensure_future(one_pass(client, prefix, queue))
        approvals.extend(await _approve_when_held(client, prefix, queue))
        return [await passed]

    report = await kill_during(rig, queue, tmp_path, workers, run, name="converge")
    [result] = report.results
    assert result.status == "ok", result
    [held] = result.held
    assert held.resource == f"openstack.server/{prefix}-master-0", held
    assert held.outcome == "done"
    # the flavor as Nova 2.47+ names it (the embedded flavor's original_name, no ID)
    assert [(c.field, c.have, c.want, c.how) for c in held.changes] == [
        ("flavor_name (needs replacement; not repaired)", "m1.large", "m1.xlarge", "replace")
    ]
    assert approvals == [[held.key], []]  # given twice, approved once
    # each step killed once, right after its change: the key pair, master-1's volume, server
    # and attachment, master-0's server deleted and made again with its data disk attached
    assert sorted(killed_keys(report)) == sorted(
        [
            f"openstack.keypair/{prefix}",
            f"openstack.volume/{prefix}-kubernetes-data-1",
            f"openstack.server/{prefix}-master-1",
            f"openstack.volume_attachment/{prefix}-kubernetes-data-1",
            f"openstack.server/{prefix}-master-0",
            f"openstack.server/{prefix}-master-0",
            f"openstack.volume_attachment/{prefix}-kubernetes-data-0",
        ]
    ), report.killed
    counted = Counter(cluster_resources(endpoint.admin_url, prefix))
    assert {n: c for n, c in counted.items() if c > 1} == {}, counted
    admin = OpenStackEmulatorAdmin(endpoint.admin_url)
    servers = {s["name"]: s for s in admin.rows("servers") if s["name"].startswith(prefix)}
    assert sorted(servers) == [f"{prefix}-master-0", f"{prefix}-master-1"]
    for server in servers.values():
        assert base64.b64decode(server["_user_data"]) == master_data

    plain = workers.start(rig.env(queue, tmp_path), module=CLI)
    try:
        rig.reset()
        again = await one_pass(client, prefix, queue)
        assert again.status == "ok", again
        assert again.applied == [] and again.held == []
        assert rig.mutating() == {}
    finally:
        plain.stop()
    await client.get_schedule_handle(schedule_id(prefix, queue)).delete()
    await support.run(client, settings, "destroy", path, prefix, cluster_uuid, provider="openstack")
    assert cluster_resources(endpoint.admin_url, prefix) == []


async def test_an_approval_by_annotation_reaches_the_pass(
    stack: LocalStack, client: Client, settings: Settings, worker: None, kube: Kube, tmp_path: Path
) -> None:
    """``converge.cloudloop.io/approve`` on the status ConfigMap, read by the starter's exporter
    loop: a starter of other queues refuses the pass, an unknown step is refused with the pass's
    own words, ``all`` approves the held replacement, and each answer replaces the ask
    (``converge.cloudloop.io/approved``)."""
    endpoint = endpoint_of(stack)
    prefix = f"ca{uuid.uuid4().hex[:6]}"
    path = config_file(tmp_path, "openstack-simple", prefix, endpoint)
    cluster_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, prefix))
    await support.run(client, settings, "apply", path, prefix, cluster_uuid, provider="openstack")
    keep_master_bootstrap(kube, b"#cloud-config\n")
    docs = list(yaml.safe_load_all(path.read_text()))
    for doc in docs:
        if "masterNodeGroup" in doc:
            doc["masterNodeGroup"]["instanceClass"]["flavorName"] = "m1.xlarge"
    path.write_text(yaml.safe_dump_all(docs))
    input = ConvergeInput(
        provider="openstack",
        source=ConfigSource(file=str(path)),
        cluster=ClusterIdentity(prefix=prefix, uuid=cluster_uuid),
        timings=LayoutTimings(max_attempts=3),
        auto=True,
        approval_wait_s=120,
    )
    await install_schedule(client, settings.temporal.task_queue, input, 3600)
    passed = asyncio.ensure_future(one_pass(client, prefix))
    namespace, config_map = STATUS_CONFIG_MAP

    def annotations() -> dict[str, str]:
        found = kube.get(CONFIG_MAPS, config_map, namespace) or {}
        return dict((found.get("metadata") or {}).get("annotations") or {})

    def ask(value: str) -> None:
        kube.patch(
            CONFIG_MAPS,
            config_map,
            {"metadata": {"annotations": {APPROVE_ANNOTATION: value}}},
            namespace,
        )

    def reported() -> bool:
        """The pass's report names this layout: the plan marks a step waiting before the
        report is written, and until then the ConfigMap names the previous test's layout."""
        found = kube.get(CONFIG_MAPS, config_map, namespace)
        return (status_of(found) or {}).get("cluster") == prefix

    for _ in range(1200):
        handle = await running_pass(client, prefix)
        if (
            handle is not None
            and any(h.outcome == "waiting" for h in (await pass_state(handle)).held)
            and reported()
        ):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the pass held no step, or did not report it")
    # the ConfigMap names the layout; a starter of another cluster's queues refuses its pass
    ask("all")
    found = kube.get(CONFIG_MAPS, config_map, namespace)
    answer = await approve_from_annotation(kube, client, found, "", "another-clusters-queue")
    assert answer is not None and "is not this cluster's" in answer, answer
    exporter = ConvergeStatusExporter(kube, 0.2, client, "", settings.temporal.task_queue)
    loop = asyncio.ensure_future(exporter.run())
    try:
        ask("openstack.server/nothing-here")
        for _ in range(100):
            if APPROVE_ANNOTATION not in annotations():
                break
            await asyncio.sleep(0.1)
        answer = annotations()[APPROVED_ANNOTATION]
        assert "openstack.server/nothing-here: refused: no step" in answer, answer
        ask("all")
        result = await asyncio.wait_for(passed, timeout=120)
    finally:
        exporter.stop()
        await loop
    answer = annotations()[APPROVED_ANNOTATION]
    assert f"all: approved master-0/openstack.server/{prefix}-master-0" in answer, answer
    assert APPROVE_ANNOTATION not in annotations()
    [step] = result.held
    assert step.outcome == "done", step
    assert result.status == "ok", result
    await client.get_schedule_handle(schedule_id(prefix)).delete()
    await support.run(client, settings, "destroy", path, prefix, cluster_uuid, provider="openstack")
    assert cluster_resources(endpoint.admin_url, prefix) == []
