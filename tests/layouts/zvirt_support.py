"""What the zVirt layout stack tests share: Temporal and the oVirt Engine emulator (no moto, no
control plane), a config file from the ``zvirt-standard`` example pointed at the emulator's seed
(cluster, template, vNIC profile, storage domain, CA), a worker in the test process."""

from __future__ import annotations

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
from cloudloop.cloud.registry import Settings
from cloudloop.cloud.zvirt.settings import ZvirtSettings
from cloudloop.messages.layout import LayoutResult
from cloudloop.settings import TemporalSettings
from devstack.backends.zvirt import QUICK, QUICK_TIMINGS
from devstack.local import LocalStack, StackOptions
from devstack.ovirt_emulator import OvirtEmulatorEndpoint, OvirtEmulatorOptions
from devstack.ovirt_emulator.engine import seed_id
from tests.layouts import support
from tests.layouts.support import EXAMPLES, layout_worker

#: The engine's admin password in the configs: it must never reach a history or a log.
SECRET = "zvirt-layout-s3cr3t"
STORAGE_DOMAIN_ID = seed_id("storagedomain", "nfs-shared")


@contextmanager
def zvirt_layout_stack(state_dir: Path) -> Iterator[LocalStack]:
    """Temporal and the oVirt Engine emulator (quick transitions), stopped when the block ends."""
    local = LocalStack(
        StackOptions(
            state_dir=state_dir,
            moto=False,
            kube=(),
            ovirt_emulator=OvirtEmulatorOptions(password=SECRET, delays=QUICK),
        )
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def zvirt_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with zvirt_layout_stack(tmp_path_factory.mktemp("zvirt-layouts")) as local:
        yield local


def engine(stack: LocalStack) -> OvirtEmulatorEndpoint:
    assert stack.ovirt is not None
    return stack.ovirt


def zvirt_config(folder: Path, stack: LocalStack, prefix: str, **instance_class: Any) -> Path:
    """The example on the emulator, ``prefix``, one static node group ``worker`` (1 replica);
    ``instance_class`` replaces master instance class fields."""
    ovirt = engine(stack)
    docs = list(yaml.safe_load_all((EXAMPLES / "zvirt-standard.yaml").read_text()))
    for doc in docs:
        if doc["kind"] == "ClusterConfiguration":
            doc["cloud"]["prefix"] = prefix
            continue
        assert ovirt.ca_file is not None
        doc["clusterID"] = ovirt.cluster_id
        doc["provider"] = {
            "server": ovirt.api_url,
            "username": ovirt.username,
            "password": SECRET,
            "caBundle": ovirt.ca_file.read_text(),
        }
        master = doc["masterNodeGroup"]["instanceClass"]
        master.update(
            numCPUs=2,
            memory=2048,
            template=ovirt.template,
            vnicProfileID=ovirt.vnic_profile_id,
            storageDomainID=STORAGE_DOMAIN_ID,
            rootDiskSizeGb=20,
        )
        master.update(instance_class)
        doc["nodeGroups"] = [
            {
                "name": "worker",
                "replicas": 1,
                "instanceClass": {
                    "numCPUs": 1,
                    "memory": 1024,
                    "template": ovirt.template,
                    "vnicProfileID": ovirt.vnic_profile_id,
                },
            }
        ]
    path = folder / f"{prefix}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def zvirt_section() -> ZvirtSettings:
    """The worker's zVirt section: quick requests, waits and polling (the engine and its
    credentials come from the configuration)."""
    return ZvirtSettings(**QUICK_TIMINGS)


@pytest.fixture(scope="module")
def zvirt_layout_settings(zvirt_stack: LocalStack) -> Settings:
    return Settings(
        provider="zvirt",
        temporal=TemporalSettings(
            address=zvirt_stack.temporal_address,
            task_queue=f"zv-layouts-{uuid.uuid4().hex[:8]}",
            codec=zvirt_stack.codec,
        ),
        zvirt=zvirt_section(),
    )


@pytest.fixture(scope="module")
async def zvirt_client(zvirt_stack: LocalStack, zvirt_layout_settings: Settings) -> Client:
    return await temporal.connect(zvirt_layout_settings.temporal)


@pytest.fixture(scope="module")
async def zvirt_worker(
    zvirt_client: Client, zvirt_layout_settings: Settings
) -> AsyncIterator[None]:
    async with layout_worker(zvirt_client, zvirt_layout_settings):
        yield


#: ``cloudloop layout`` inputs and runs of zvirt layouts (:mod:`tests.layouts.support`).
layout_input = functools.partial(support.layout_input, "zvirt")
run = functools.partial(support.run, provider="zvirt")


def plan_actions(result: LayoutResult) -> dict[str, str]:
    return {r.key: r.action for m in result.plan for r in m.resources}
