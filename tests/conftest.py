"""Shared fixtures: the real local stack (started once per session), clients, fresh names,
``cloudloop worker`` processes, and a test module's own vcsim.

Stack tests (marked ``stack``, automatically when they use a stack fixture) use the same
:class:`~devstack.local.LocalStack` as ``cloudloop dev``. Each test gets a fresh Kubernetes
namespace, a fresh Temporal task queue and a fresh ``scope``; a feature's own fixtures are in its
folder's ``conftest.py``, the backends' helpers in :mod:`devstack.backends`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import botocore.session
import pytest
from temporalio.client import Client

from cloudloop import codec, temporal
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import Resource
from cloudloop.net import PORT_RANGE_ENV, listen_range
from devstack.audit import eviction_audit_args
from devstack.backends.aws import aws_client
from devstack.backends.vsphere import vcsim_server
from devstack.crds import apply_crds
from devstack.devmode import stack_settings
from devstack.kube import ALL_COMPONENTS, KubeOptions
from devstack.local import LocalStack, StackOptions
from devstack.vcsim import VcsimEndpoint
from devstack.vcsim_inventory import Inventory, NodeVm, ZoneLayout, seed
from tests.support.workers import Workers

if TYPE_CHECKING:
    from devstack.dvp_simulator import DvpParent

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
#: The node VMs ``seeded`` adds to a module's vcsim.
VCSIM_NODES = (
    NodeVm("node-a", "10.0.1.10", cluster="DC0_C0"),
    NodeVm("node-b", "10.0.2.10", cluster="DC0_C1"),
)

#: Fixtures that start real processes: a test using any of them is a ``stack`` test.
STACK_FIXTURES = frozenset({"stack", "stack_dir", "dvp_parent", "ovirt", "vcsim"})


def share_botocore_models() -> None:
    """One botocore data loader per search path for the whole test process.

    moto gives every ``mock_aws`` block a new default boto3 session, and botocore caches the
    service models it reads (EC2's is megabytes of JSON) per session's loader: without this each
    test reads them again. A loader's models are shared by every client of its session already,
    so sharing it between sessions changes nothing else."""
    if getattr(botocore.session.create_loader, "shared", False):
        return
    create = botocore.session.create_loader
    loaders: dict[str | None, Any] = {}

    def create_loader(search_path_string: str | None = None) -> Any:
        if search_path_string not in loaders:
            loaders[search_path_string] = create(search_path_string)
        return loaders[search_path_string]

    create_loader.shared = True  # type: ignore[attr-defined]
    botocore.session.create_loader = create_loader


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``-n N``) each worker process has its own session fixtures, so its own
    stacks; it also picks its ports (and its children theirs, through the environment) from its
    own share of :func:`~cloudloop.net.free_port`'s range, so no stack takes a port another
    worker's stack has picked but not yet bound, or freed for a moment to restart a process."""
    share_botocore_models()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ...
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2 or PORT_RANGE_ENV in os.environ:
        return
    index = int(worker.removeprefix("gw"))
    low, high = listen_range()
    share = (high - low) // count
    os.environ[PORT_RANGE_ENV] = f"{low + index * share}-{low + (index + 1) * share}"


#: Rough seconds a test takes, by kind: only to hand the costliest test files out first.
_COST_S = {"fault": 25.0, "stack": 4.0, "pure": 0.05}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs the real stack, so ``-m "not stack"`` is the fast suite.

    Under pytest-xdist (``--dist loadfile``: a file's tests, and so its module-scoped stacks, stay
    on one worker) the files are also ordered by their estimated cost, costliest first, so no
    long fault file starts last while the other workers sit idle; the tests of a file keep their
    order, and a serial run keeps the collection order."""
    for item in items:
        if STACK_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.stack)
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    cost: dict[str, float] = {}
    for item in items:
        kind = next((m for m in ("fault", "stack") if item.get_closest_marker(m)), "pure")
        path = item.nodeid.split("::", 1)[0]
        cost[path] = cost.get(path, 0.0) + _COST_S[kind]
    items.sort(key=lambda item: -cost[item.nodeid.split("::", 1)[0]])  # stable: files stay whole


@pytest.fixture(scope="session")
def stack_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="session")
def stack(stack_dir: Path) -> Iterator[LocalStack]:
    """Temporal + moto + one control plane with controller-manager, scheduler and kwok."""
    local = LocalStack(
        StackOptions(
            state_dir=stack_dir,
            kube=(
                KubeOptions(
                    components=ALL_COMPONENTS,
                    node_monitor_grace_period="8s",
                    # ConfigMaps bypass the watch cache, so compacting etcd yields a real 410.
                    extra_apiserver_args=(
                        "--watch-cache-sizes=configmaps#0",
                        # Every eviction request lands in an audit log (drain fault tests).
                        *eviction_audit_args(stack_dir),
                    ),
                ),
            ),
            autoscaling_ext=True,  # lifecycle actions answered beside moto
        )
    )
    local.start()
    print(f"\nlocal stack started in {local.started_in_s:.1f}s ({stack_dir})")
    try:
        apply_crds(Kube(api_client(local.kubeconfig)))
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def kube(stack: LocalStack) -> Kube:
    return Kube(api_client(stack.kubeconfig))


@pytest.fixture(scope="session")
async def client(stack: LocalStack) -> Client:
    return await temporal.connect(stack_settings(stack).temporal)


@pytest.fixture
def scope() -> str:
    """A name and label value unique to this test (its Nodes, its cluster name, its objects)."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def codec_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A codec key of this test's own in the environment (``CLOUDLOOP_TEMPORAL__CODEC__*``), for
    a CLI command run in-process whose Temporal side is faked: the codec is on by default and a
    command without a key refuses to run."""
    keys = tmp_path / "codec-keys"
    codec.write_key(keys, "test")
    monkeypatch.setenv(codec.KEY_DIR_ENV, str(keys))
    return keys


@pytest.fixture
def task_queue() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def settings(stack: LocalStack, task_queue: str) -> Settings:
    return stack_settings(stack, task_queue=task_queue, cluster=f"test-{os.getpid()}")


@pytest.fixture
def ec2(settings: Settings) -> Any:
    """EC2 in the stack's moto, for set-up and checks (the code under test makes its own)."""
    return aws_client("ec2", AWS.section(settings).endpoint_url)


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube.create(NAMESPACES, {"metadata": {"name": name}})
    yield name
    kube.delete(NAMESPACES, name)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    """``cloudloop worker`` processes this test starts (logs in its ``tmp_path``), killed at its
    end."""
    started = Workers(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture(scope="session")
def dvp_parent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DvpParent]:
    """A parent DVP cluster (its own kube-apiserver with the virtualization CRDs) and the
    simulator standing in for DVP's controllers; each test takes a namespace of its own."""
    from devstack.dvp_simulator import DvpParent

    parent = DvpParent.start(tmp_path_factory.mktemp("dvp-parent"))
    try:
        yield parent
    finally:
        parent.stop()


@pytest.fixture(scope="module")
def vcsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VcsimEndpoint]:
    """govmomi's simulator alone (no Temporal, no control plane), one per test module."""
    with vcsim_server(tmp_path_factory.mktemp("vcsim")) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def seeded(vcsim: VcsimEndpoint) -> Inventory:
    """Two node VMs (:data:`VCSIM_NODES`) in two tagged zones."""
    return seed(vcsim, VCSIM_NODES, ZoneLayout())


@pytest.fixture(scope="session")
def capi_crds(kube: Kube) -> None:
    """Cluster API's Cluster and Machine CRDs: the real ones if installed, else minimal ones."""
    from devstack.machine_fixtures import ensure_capi_crds

    ensure_capi_crds(kube)
