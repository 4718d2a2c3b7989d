"""Heartbeats through slow cloud waits: a zVirt VM whose guest takes longer to shut down than
the activity's heartbeat timeout is deleted by one activity attempt, never timed out mid-wait."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from pydantic import SecretStr
from temporalio.client import Client

from cloudloop.cloud.registry import Settings
from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT_KINDS
from cloudloop.cloud.zvirt.driver import ZvirtDriver
from cloudloop.cloud.zvirt.settings import ZvirtSettings
from cloudloop.kube.api import Kube
from cloudloop.messages.machine import workflow_id
from devstack import machine_fixtures
from devstack.local import LocalStack, StackOptions
from devstack.ovirt_emulator import Delays, OvirtEmulatorEndpoint, OvirtEmulatorOptions
from starters.machine import MachineStarter
from tests.helpers import eventually
from tests.machine.dvp_machines import TEST_TIMINGS
from workers.main import build_worker

pytestmark = [pytest.mark.stack, pytest.mark.fault]

HEARTBEAT_TIMEOUT_S = 2.0
#: The guest shuts down in three heartbeat timeouts.
SHUTDOWN_S = 3 * HEARTBEAT_TIMEOUT_S


@pytest.fixture(scope="module")
def slow_ovirt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OvirtEmulatorEndpoint]:
    local = LocalStack(
        StackOptions(
            state_dir=tmp_path_factory.mktemp("slow-shutdown"),
            temporal=False,
            moto=False,
            kube=(),
            ovirt_emulator=OvirtEmulatorOptions(
                password="slow", delays=Delays(shutdown_s=SHUTDOWN_S)
            ),
        )
    )
    local.start()
    try:
        assert local.ovirt is not None
        yield local.ovirt
    finally:
        local.stop()


async def test_slow_guest_shutdown_is_one_heartbeating_attempt(
    slow_ovirt: OvirtEmulatorEndpoint,
    stack: LocalStack,
    kube: Kube,
    client: Client,
    settings: Settings,
    namespace: str,
    capi_crds: None,
) -> None:
    driver = ZvirtDriver(
        ZvirtSettings(
            api_url=slow_ovirt.api_url,
            username=slow_ovirt.username,
            password=SecretStr(slow_ovirt.password),
            ca_bundle=slow_ovirt.ca_file,
            cluster_id=slow_ovirt.cluster_id,
            timeout_s=5,
            wait_timeout_s=60,
            poll_interval_s=0.05,
            shutdown_timeout_s=60,  # a graceful shutdown is given all the time it takes
        )
    )
    queue = f"slow-{uuid.uuid4().hex[:8]}"
    timings = TEST_TIMINGS.model_copy(update={"heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S})
    worker = build_worker(client, settings, driver=driver, kube=kube, task_queue=queue)
    starter = MachineStarter(
        kube,
        client,
        kinds=ZVIRT_KINDS,
        task_queue=queue,
        cluster="slow",
        namespace=namespace,
        timings=timings,
    )
    spec = {
        "template": slow_ovirt.template,
        "vnicProfileID": slow_ovirt.vnic_profile_id,
        "cpu": {"sockets": 1, "cores": 1, "threads": 1},
        "memory": 1024,
        "nicName": "nic1",
    }
    try:
        async with worker:
            task = asyncio.create_task(starter.run())
            await asyncio.to_thread(
                machine_fixtures.create_cluster, kube, namespace, "c1", ZVIRT_KINDS
            )
            await asyncio.to_thread(
                machine_fixtures.create_bootstrap_secret, kube, namespace, "m1-data", b"#cc\n"
            )
            infra = await asyncio.to_thread(
                machine_fixtures.create_machine,
                kube,
                namespace,
                "m1",
                cluster="c1",
                kinds=ZVIRT_KINDS,
                spec=spec,
                bootstrap_secret="m1-data",
            )

            def ready() -> bool:
                obj = kube.get(ZVIRT_KINDS.machine, "m1", namespace) or {}
                return bool((obj.get("status") or {}).get("ready"))

            await eventually(ready, timeout=90, what="machine provisioned")
            await asyncio.to_thread(kube.delete, ZVIRT_KINDS.machine, "m1", namespace)
            await eventually(
                lambda: kube.get(ZVIRT_KINDS.machine, "m1", namespace) is None,
                timeout=90,
                what="machine deleted",
            )
            starter.stop()
            await asyncio.wait_for(task, 10)
        wf_id = workflow_id(namespace, "m1", infra["metadata"]["uid"])
        history = await client.get_workflow_handle(wf_id).fetch_history()
        timeouts = [
            e for e in history.events if e.HasField("activity_task_timed_out_event_attributes")
        ]
        attempts = [
            e.activity_task_started_event_attributes.attempt
            for e in history.events
            if e.HasField("activity_task_started_event_attributes")
        ]
        assert timeouts == [], "an activity timed out on its heartbeat during a slow wait"
        assert attempts and max(attempts) == 1, attempts
    finally:
        driver.close()
