"""SIGKILL at every resource step of one layout apply and of one destroy, per cloud: a real
``cloudloop worker`` stops dead right after each step's first mutating cloud call and is killed
there (:mod:`tests.support.kill_every_step`). The apply converges with no resource twice, a
re-apply makes no mutating call, the destroy converges with nothing left, and the config's
secret is in no history and no log.

A cloud joins with one :data:`RIGS` entry: how its stack starts, how its worker runs and how its
cloud is looked at. Each rig but AWS's (its stack is the folder's) starts its own stack and stops
it when its test ends, so one cloud's stack is up at a time. Small layouts: one master, at most
one static node.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from cloudloop import temporal
from cloudloop.cloud.dvp import resources as dvp_resources
from cloudloop.cloud.vsphere.layout_resources import MUTATING as VSPHERE_MUTATING
from cloudloop.settings import TemporalSettings
from devstack.backends import aws_layouts, dvp_layouts, openstack_layouts, zvirt_layouts
from devstack.backends.vsphere_layouts import TaskLog
from devstack.backends.vsphere_layouts import cluster_resources as vsphere_resources
from devstack.backends.zvirt import QUICK_TIMINGS
from devstack.dvp_simulator import DvpParent
from devstack.local import LocalStack
from devstack.ovirt_emulator import OvirtEmulatorAdmin
from tests.layouts import dvp_support, openstack_support, vsphere_support, zvirt_support
from tests.layouts.support import READ_ONLY, SECRET, Front, config_file
from tests.support.kill_every_step import LayoutRig, prove_kill_every_step
from tests.support.workers import Workers

pytestmark = [pytest.mark.stack, pytest.mark.fault]

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def worker_env(
    provider: str, stack: LocalStack, queue: str, folder: Path, **cloud: str
) -> dict[str, str]:
    """A ``provider`` worker for ``queue`` (layouts need no cluster); ``cloud``: its section's
    settings (``CLOUDLOOP_<PROVIDER>__<NAME>``)."""
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    return {
        "CLOUDLOOP_PROVIDER": provider,
        "CLOUDLOOP_KUBECONFIG": str(kubeconfig),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": queue,
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "1",
        **{f"CLOUDLOOP_{provider.upper()}__{k.upper()}": v for k, v in cloud.items()},
    }


def aws_rig(stack: LocalStack, example: str) -> LayoutRig:
    front = Front(stack.aws_endpoint)

    def env(queue: str, folder: Path) -> dict[str, str]:
        return worker_env(
            "aws", stack, queue, folder, endpoint_url=stack.aws_endpoint, timeout_s="5"
        )

    return LayoutRig(
        provider="aws",
        temporal_address=stack.temporal_address,
        config=lambda folder, prefix: config_file(folder, example, prefix),
        env=env,
        resources=lambda prefix, _: aws_layouts.cluster_resources(stack.moto_endpoint, prefix),
        mutating=front.mutating,
        reset=front.reset,
        read_only=READ_ONLY,
        secret=SECRET,
        quiet_destroy_steps=1,  # the ssh-accessible rule set names no other group
    )


def openstack_rig(stack: LocalStack) -> LayoutRig:
    endpoint = openstack_support.endpoint_of(stack)
    requests = openstack_support.Requests(endpoint)
    return LayoutRig(
        provider="openstack",
        temporal_address=stack.temporal_address,
        config=lambda folder, prefix: openstack_support.config_file(
            folder, "openstack-standard", prefix, endpoint
        ),
        env=lambda queue, folder: worker_env(
            "openstack", stack, queue, folder, request_timeout_s="10", poll_interval_s="0.1"
        ),
        resources=lambda prefix, _: openstack_layouts.cluster_resources(endpoint.admin_url, prefix),
        mutating=requests.mutating,
        reset=requests.reset,
        read_only=("Get", "List", "Find", "Authenticate"),
        secret=openstack_support.SECRET,
        quiet_destroy_steps=1,  # the group's rules go with their group: nothing to delete
    )


def vsphere_rig(stack: LocalStack) -> LayoutRig:
    assert stack.vcsim is not None
    endpoint = stack.vcsim
    tasks = TaskLog(endpoint)
    return LayoutRig(
        provider="vsphere",
        temporal_address=stack.temporal_address,
        config=lambda folder, prefix: vsphere_support.config_file(folder, endpoint, prefix),
        env=lambda queue, folder: worker_env(
            "vsphere",
            stack,
            queue,
            folder,
            poll_interval_s="0.05",
            wait_timeout_s="30",
            timeout_s="10",
        ),
        resources=lambda prefix, cluster_uuid: vsphere_resources(endpoint, prefix, cluster_uuid),
        # vCenter's tasks since the mark: every change but a folder's or a pool's is one
        mutating=lambda: {str(t): 1 for t in tasks.since()},
        reset=tasks.mark,
        read_only=(),
        mutating_operations=VSPHERE_MUTATING,
        repeats=lambda prefix: {f"ResourcePool/{prefix}": 2},  # one per zone's cluster
        secret=endpoint.password,
    )


def zvirt_rig(stack: LocalStack) -> LayoutRig:
    engine = zvirt_support.engine(stack)
    return LayoutRig(
        provider="zvirt",
        temporal_address=stack.temporal_address,
        config=lambda folder, prefix: zvirt_support.zvirt_config(folder, stack, prefix),
        env=lambda queue, folder: worker_env(
            "zvirt", stack, queue, folder, **{k: f"{v:g}" for k, v in QUICK_TIMINGS.items()}
        ),
        resources=lambda prefix, _: zvirt_layouts.cluster_resources(engine.admin_url, prefix),
        mutating=lambda: zvirt_layouts.mutating_calls(engine.admin_url),
        reset=OvirtEmulatorAdmin(engine.admin_url).clear_requests,
        read_only=("Get", "List", "Find"),
        secret=zvirt_support.SECRET,
    )


def dvp_rig(stack: LocalStack, parent: DvpParent) -> LayoutRig:
    namespace = parent.new_namespace("layout-kill")
    versions: dict[str, str] = {}
    prefixes: list[str] = []

    def current() -> dict[str, str]:
        """``<Kind>/<name>`` → ``resourceVersion`` of the cluster's objects (a write changes
        it)."""
        found: dict[str, str] = {}
        for resource in (
            dvp_resources.VIRTUAL_MACHINES,
            dvp_resources.VIRTUAL_DISKS,
            dvp_resources.VIRTUAL_MACHINE_BLOCK_DEVICE_ATTACHMENTS,
            dvp_resources.SECRETS,
            dvp_layouts.NETWORK_POLICIES,
        ):
            for obj in parent.kube.list(resource, namespace).get("items") or []:
                meta = obj["metadata"]
                name = str(meta["name"])
                if any(name.startswith(f"{p}-") or name == f"isolated-{p}" for p in prefixes):
                    found[f"{resource.kind}/{name}"] = str(meta["resourceVersion"])
        return found

    def config(folder: Path, prefix: str) -> Path:
        prefixes.append(prefix)
        return dvp_support.dvp_config(folder, parent, namespace, prefix)

    def reset() -> None:
        versions.clear()
        versions.update(current())

    def mutating() -> dict[str, int]:
        now = current()
        return {k: 1 for k in versions.keys() | now.keys() if versions.get(k) != now.get(k)}

    return LayoutRig(
        provider="dvp",
        temporal_address=stack.temporal_address,
        config=config,
        env=lambda queue, folder: worker_env("dvp", stack, queue, folder, timeout_s="5"),
        resources=lambda prefix, _: dvp_layouts.cluster_resources(parent.kube, namespace, prefix),
        mutating=mutating,
        reset=reset,
        read_only=dvp_layouts.READ_ONLY,
        # the parent's kubeconfig as the config carries it
        secret=base64.b64encode(parent.kubeconfig.read_bytes()).decode()[:60],
    )


@contextmanager
def own_stack(
    request: pytest.FixtureRequest,
    start: Callable[[Path], AbstractContextManager[object]],
    rig: Callable[..., LayoutRig],
) -> Iterator[LayoutRig]:
    """A stack of the rig's own for one test (started by ``start`` in a fresh folder)."""
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    with start(factory.mktemp("kill-stack")) as stack:
        yield rig(*stack) if isinstance(stack, tuple) else rig(stack)


@contextmanager
def shared_aws(request: pytest.FixtureRequest, example: str) -> Iterator[LayoutRig]:
    yield aws_rig(request.getfixturevalue("aws_stack"), example)


#: One entry per cloud (and layout): its rig, for the length of one test.
RIGS: dict[str, Callable[[pytest.FixtureRequest], AbstractContextManager[LayoutRig]]] = {
    "aws-with-nat": lambda request: shared_aws(request, "aws-with-nat"),
    "openstack-standard": lambda request: own_stack(
        request, openstack_support.openstack_layout_stack, openstack_rig
    ),
    "vsphere-standard": lambda request: own_stack(
        request, vsphere_support.vsphere_stack, vsphere_rig
    ),
    "zvirt-standard": lambda request: own_stack(
        request, zvirt_support.zvirt_layout_stack, zvirt_rig
    ),
    "dvp-standard": lambda request: own_stack(request, dvp_support.dvp_layout_stack, dvp_rig),
}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("rig_name", sorted(RIGS))
async def test_sigkill_at_every_resource_step(
    rig_name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with RIGS[rig_name](request) as rig:
        queue = f"layout-kill-{uuid.uuid4().hex[:8]}"
        client = await temporal.connect(
            TemporalSettings(address=rig.temporal_address, task_queue=queue)
        )
        workers = Workers(tmp_path)
        try:
            applied, destroyed = await prove_kill_every_step(rig, client, queue, tmp_path, workers)
        finally:
            workers.stop_all()
    print(
        f"\n{rig_name}: apply killed at {len(applied.killed)} steps in {applied.kills} kills "
        f"({applied.seconds:.0f}s); destroy at {len(destroyed.killed)} steps in "
        f"{destroyed.kills} kills ({destroyed.seconds:.0f}s)"
    )
    assert destroyed.killed, "the destroy was never killed"
