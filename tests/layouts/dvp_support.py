"""What the DVP layout stack tests share: Temporal, a parent DVP cluster (its own control plane,
the simulator in a thread), a config file from the ``dvp-standard`` example on the parent's seed
(VM class, cluster image, StorageClasses) in a fresh namespace, a worker in the test process."""

from __future__ import annotations

import base64
import functools
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from cloudloop import temporal
from cloudloop.cloud.dvp.settings import DvpSettings
from cloudloop.cloud.registry import Settings
from cloudloop.settings import TemporalSettings
from devstack.dvp_simulator import CLUSTER_IMAGE, STORAGE_CLASSES, VM_CLASS, DvpParent
from devstack.local import LocalStack, StackOptions
from tests.layouts import support
from tests.layouts.support import EXAMPLES, layout_worker


@contextmanager
def dvp_layout_stack(state_dir: Path) -> Iterator[tuple[LocalStack, DvpParent]]:
    """Temporal and a parent DVP cluster (the simulator in a thread), stopped when the block
    ends."""
    local = LocalStack(StackOptions(state_dir=state_dir / "stack", moto=False, kube=()))
    local.start()
    try:
        parent = DvpParent.start(state_dir / "parent")
        try:
            yield local, parent
        finally:
            parent.stop()
    finally:
        local.stop()


@pytest.fixture(scope="module")
def dvp_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, DvpParent]]:
    with dvp_layout_stack(tmp_path_factory.mktemp("dvp-layouts")) as stack:
        yield stack


def dvp_config(
    folder: Path, parent: DvpParent, namespace: str, prefix: str, **root_image: Any
) -> Path:
    """The example on the parent, ``prefix``, one static node group ``worker`` (1 replica);
    ``root_image`` replaces the master's root image fields."""
    docs = list(yaml.safe_load_all((EXAMPLES / "dvp-standard.yaml").read_text()))
    kubeconfig = base64.b64encode(parent.kubeconfig.read_bytes()).decode()
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            doc["cloud"]["prefix"] = prefix
            continue
        doc["provider"] = {"kubeconfigDataBase64": kubeconfig, "namespace": namespace}
        master = doc["masterNodeGroup"]["instanceClass"]
        master["virtualMachine"].update(virtualMachineClassName=VM_CLASS, memory={"size": "2Gi"})
        master["rootDisk"] = {
            "size": "10Gi",
            "storageClass": STORAGE_CLASSES[0],
            "image": {"kind": "ClusterVirtualImage", "name": CLUSTER_IMAGE, **root_image},
        }
        master["etcdDisk"] = {"size": "10Gi", "storageClass": STORAGE_CLASSES[1]}
        doc["nodeGroups"] = [
            {
                "name": "worker",
                "replicas": 1,
                "instanceClass": {
                    "virtualMachine": {
                        "cpu": {"cores": 1},
                        "memory": {"size": "1Gi"},
                        "virtualMachineClassName": VM_CLASS,
                    },
                    "rootDisk": {
                        "size": "10Gi",
                        "image": {"kind": "ClusterVirtualImage", "name": CLUSTER_IMAGE},
                    },
                },
            }
        ]
    path = folder / f"{prefix}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


@pytest.fixture(scope="module")
def dvp_layout_settings(dvp_stack: tuple[LocalStack, DvpParent]) -> Settings:
    return Settings(
        provider="dvp",
        temporal=TemporalSettings(
            address=dvp_stack[0].temporal_address,
            task_queue=f"dvp-layouts-{uuid.uuid4().hex[:8]}",
            codec=dvp_stack[0].codec,
        ),
        dvp=DvpSettings(timeout_s=5),
    )


@pytest.fixture(scope="module")
async def dvp_client(dvp_layout_settings: Settings) -> Client:
    return await temporal.connect(dvp_layout_settings.temporal)


@pytest.fixture(scope="module")
async def dvp_worker(dvp_client: Client, dvp_layout_settings: Settings) -> AsyncIterator[None]:
    async with layout_worker(dvp_client, dvp_layout_settings):
        yield


#: ``cloudloop layout`` inputs and runs of dvp layouts (:mod:`tests.layouts.support`).
layout_input = functools.partial(support.layout_input, "dvp")
run = functools.partial(support.run, provider="dvp")
