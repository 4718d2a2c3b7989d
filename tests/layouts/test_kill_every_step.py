"""SIGKILL at every resource step of one layout apply and of one destroy, per cloud: a real
``cloudloop worker`` stops dead right after each step's first mutating cloud call and is killed
there (:mod:`tests.support.kill_every_step`). The apply converges with no resource twice, a
re-apply makes no mutating call, the destroy converges with nothing left, and the config's
secret is in no history and no log.

A cloud joins with one :data:`RIGS` entry: how its stack starts, how its worker runs and how its
cloud is looked at. Each rig but AWS's (its stack is the folder's) runs on its cloud's stack,
started by the first of the cloud's tests and stopped when another cloud's starts (or the module
ends), so one cloud's stack is up at a time and a cloud's layouts share one. Small layouts: one
master, at most one static node.

OpenStack's ``Standard`` is killed at every step; its three other layouts only at the steps of
what ``Standard`` has no like of (:data:`OPENSTACK_ONLY`: a subnet without a gateway, ports on
an existing network, a server on a network with no port of its own, a floating IP on a port of
an existing network, a static node's root volume), so every kind of step is killed at least once
across the four in little time.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
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
        # no cluster yet (a bootstrap's layouts): the worker names its claim's identity
        "CLOUDLOOP_CLUSTER_UID": f"layout-rig-{queue}",
        "CLOUDLOOP_LAYOUTS__SOURCE_DIR": str(folder),  # where the rig writes the config
        **stack.codec_env(),
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
        codec=stack.codec,
        config=lambda folder, prefix: config_file(folder, example, prefix),
        env=env,
        resources=lambda prefix, _: aws_layouts.cluster_resources(stack.moto_endpoint, prefix),
        mutating=front.mutating,
        reset=front.reset,
        read_only=READ_ONLY,
        secret=SECRET,
        quiet_destroy_steps=1,  # the ssh-accessible rule set names no other group
    )


OTHER_LAYOUTS = (
    "openstack-standard-with-no-router",
    "openstack-simple",
    "openstack-simple-with-internal-network",
)
#: OpenStack example → the resources (``kind/name`` with ``{p}`` for the prefix) whose steps are
#: killed; an example not named: every step.
OPENSTACK_ONLY: dict[str, tuple[str, ...]] = {
    "openstack-standard-with-no-router": (
        "openstack.subnet/{p}",  # no gateway, no router
        "openstack.port/{p}-master-0@public",  # ports on an existing network, with the group
        "openstack.port/{p}-worker-0@public",
    ),
    "openstack-simple": ("openstack.server/{p}-master-0",),  # on the network, no port
    "openstack-simple-with-internal-network": (
        "openstack.port/{p}-master-0@private-subnet",  # existing network and subnet, no group
        "openstack.port/{p}-worker-0@private",
        "openstack.volume/{p}-worker-0",  # a static node's root volume
        "openstack.floating_ip/{p}-master-0@public",  # on a port of an existing network
    ),
}


#: OpenStack example → its nodes with a port on each of two networks.
OPENSTACK_TWO_PORTS = {"openstack-standard-with-no-router": ("master", "worker")}


def openstack_rig(stack: LocalStack, example: str) -> LayoutRig:
    endpoint = openstack_support.endpoint_of(stack)
    requests = openstack_support.Requests(endpoint)
    only = OPENSTACK_ONLY.get(example, ())
    return LayoutRig(
        provider="openstack",
        temporal_address=stack.temporal_address,
        codec=stack.codec,
        config=lambda folder, prefix: openstack_support.config_file(
            folder, example, prefix, endpoint
        ),
        env=lambda queue, folder: worker_env(
            "openstack", stack, queue, folder, request_timeout_s="10", poll_interval_s="0.1"
        ),
        resources=lambda prefix, _: openstack_layouts.cluster_resources(endpoint.admin_url, prefix),
        mutating=requests.mutating,
        reset=requests.reset,
        read_only=("Get", "List", "Find", "Authenticate"),
        secret=openstack_support.SECRET,
        # the group's rules go with their group: nothing to delete (layouts with a group)
        quiet_destroy_steps=int(example in ("openstack-standard", OTHER_LAYOUTS[0])),
        only=lambda prefix: frozenset(k.format(p=prefix) for k in only),
        # a node's ports share its name, one per network (the emulator counts names)
        repeats=lambda prefix: {
            f"Port/{prefix}-{node}-0": 2 for node in OPENSTACK_TWO_PORTS.get(example, ())
        },
    )


def vsphere_rig(stack: LocalStack) -> LayoutRig:
    assert stack.vcsim is not None
    endpoint = stack.vcsim
    tasks = TaskLog(endpoint)
    return LayoutRig(
        provider="vsphere",
        temporal_address=stack.temporal_address,
        codec=stack.codec,
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
        codec=stack.codec,
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
        codec=stack.codec,
        config=config,
        env=lambda queue, folder: worker_env("dvp", stack, queue, folder, timeout_s="5"),
        resources=lambda prefix, _: dvp_layouts.cluster_resources(parent.kube, namespace, prefix),
        mutating=mutating,
        reset=reset,
        read_only=dvp_layouts.READ_ONLY,
        # the parent's kubeconfig as the config carries it
        secret=base64.b64encode(parent.kubeconfig.read_bytes()).decode()[:60],
    )


class OneStack:
    """At most one cloud's stack up: :meth:`get` gives the one up when it is ``name``'s, else
    stops it and starts ``name``'s (``start`` in a fresh folder); :meth:`close` stops the last."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.name = ""
        self.stack: object = None
        self.up = ExitStack()

    def get(self, name: str, start: Callable[[Path], AbstractContextManager[object]]) -> object:
        if name != self.name:
            self.close()
            self.stack = self.up.enter_context(start(self.factory.mktemp("kill-stack")))
            self.name = name
        return self.stack

    def close(self) -> None:
        self.name, self.stack = "", None
        self.up.close()


@pytest.fixture(scope="module")
def rig_stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OneStack]:
    stacks = OneStack(tmp_path_factory)
    try:
        yield stacks
    finally:
        stacks.close()


@contextmanager
def own_stack(
    request: pytest.FixtureRequest,
    start: Callable[[Path], AbstractContextManager[object]],
    rig: Callable[..., LayoutRig],
    *examples: str,
) -> Iterator[list[LayoutRig]]:
    """The rig on its cloud's stack (started by ``start`` unless it is up); one per example
    (layouts run at once) when ``examples`` are given."""
    stacks: OneStack = request.getfixturevalue("rig_stacks")
    stack = stacks.get(start.__module__ + "." + start.__name__, start)
    args = stack if isinstance(stack, tuple) else (stack,)
    yield [rig(*args, e) for e in examples] if examples else [rig(*args)]


@contextmanager
def shared_aws(request: pytest.FixtureRequest, example: str) -> Iterator[list[LayoutRig]]:
    yield [aws_rig(request.getfixturevalue("aws_stack"), example)]


#: One entry per cloud (and layout, or layouts at once): its rigs, for the length of one test.
RIGS: dict[str, Callable[[pytest.FixtureRequest], AbstractContextManager[list[LayoutRig]]]] = {
    "aws-with-nat": lambda request: shared_aws(request, "aws-with-nat"),
    "openstack-standard": lambda request: own_stack(
        request, openstack_support.openstack_layout_stack, openstack_rig, "openstack-standard"
    ),
    # the three others at once, killed at the chosen steps only (OPENSTACK_ONLY)
    "openstack-other-layouts": lambda request: own_stack(
        request, openstack_support.openstack_layout_stack, openstack_rig, *OPENSTACK_ONLY
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
    with RIGS[rig_name](request) as rigs:
        queue = f"layout-kill-{uuid.uuid4().hex[:8]}"
        client = await temporal.connect(
            TemporalSettings(
                address=rigs[0].temporal_address, task_queue=queue, codec=rigs[0].codec
            )
        )
        workers = Workers(tmp_path)
        try:
            applied, destroyed = await prove_kill_every_step(rigs, client, queue, tmp_path, workers)
        finally:
            workers.stop_all()
    print(
        f"\n{rig_name}: apply killed at {len(applied.killed)} steps in {applied.kills} kills "
        f"({applied.seconds:.0f}s); destroy at {len(destroyed.killed)} steps in "
        f"{destroyed.kills} kills ({destroyed.seconds:.0f}s)"
    )
    assert destroyed.killed, "the destroy was never killed"
