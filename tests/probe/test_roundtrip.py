"""The foundation's round trip against the real stack.

CloudProbe created in kube-apiserver → the starter sees it and starts a workflow with a
deterministic ID → an activity calls moto through boto3 → the result is patched onto the object →
the workflow is found by search attribute → repeated events start no second workflow. And the
failing-cloud case: a clear condition and Warning Event, nothing crashes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import CloudProbe, Event
from cloudloop.kube.conditions import get_condition
from cloudloop.kube.informer import WatchEvent
from cloudloop.kube.resources import CLOUD_PROBES, EVENTS
from starters.probe import CloudProbeStarter
from tests.helpers import eventually, eventually_async
from workers.main import build_worker

pytestmark = pytest.mark.stack


@contextlib.asynccontextmanager
async def running(starter: CloudProbeStarter) -> AsyncIterator[CloudProbeStarter]:
    task = asyncio.create_task(starter.run())
    try:
        yield starter
    finally:
        starter.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def probe(kube: Kube, namespace: str, name: str) -> CloudProbe:
    return kube.create(
        CLOUD_PROBES,
        {"metadata": {"name": name, "namespace": namespace}, "spec": {"provider": "aws"}},
        namespace,
    )


def ready_condition(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    obj = kube.get(CLOUD_PROBES, name, namespace) or {}
    return get_condition(obj, "Ready")


async def workflows_for(client: Client, settings: Settings, name: str, namespace: str) -> list[Any]:
    query = (
        f"CloudloopCluster='{settings.cluster_name}' AND CloudloopKind='CloudProbe' "
        f"AND CloudloopNamespace='{namespace}' AND CloudloopName='{name}'"
    )
    return [wf async for wf in client.list_workflows(query)]


async def test_probe_round_trip(
    kube: Kube, client: Client, settings: Settings, namespace: str, starter: CloudProbeStarter
) -> None:
    worker = build_worker(client, settings, driver=AwsDriver(AWS.section(settings)), kube=kube)
    async with worker, running(starter):
        created = await asyncio.to_thread(probe, kube, namespace, "zones")
        condition = await eventually(
            lambda: ready_condition(kube, namespace, "zones"),
            what="Ready condition on the CloudProbe",
        )
        assert condition["status"] == "True", condition
        assert condition["reason"] == "CloudReachable"

        obj = await asyncio.to_thread(kube.get, CLOUD_PROBES, "zones", namespace)
        assert obj is not None
        status = obj["status"]
        assert "us-east-1a" in status["zones"]  # moto's zones, fetched through boto3
        assert status["observedGeneration"] == 1
        expected_id = f"probe/{namespace}/zones/{created['metadata']['uid']}/g1"
        assert status["workflowID"] == expected_id

        # Findable by search attributes (visibility is eventually consistent).
        found = await eventually_async(
            lambda: workflows_for(client, settings, "zones", namespace),
            what="workflow in visibility",
        )
        assert [wf.id for wf in found] == [expected_id]

        # The same event delivered again, twice at once and after completion: no second run.
        event = WatchEvent("MODIFIED", cast(CloudProbe, {**created, "status": {}}))
        ids = await asyncio.gather(starter.handle(event), starter.handle(event))
        assert list(ids) == [expected_id, expected_id]
        await asyncio.sleep(1)
        assert len(await workflows_for(client, settings, "zones", namespace)) == 1

        # An Event on the object names the workflow.
        events = await asyncio.to_thread(
            kube.list, EVENTS, namespace, fieldSelector="involvedObject.name=zones"
        )
        messages = [e["message"] for e in events["items"] if e["reason"] == "Probed"]
        assert any(expected_id in m for m in messages), messages


async def test_failing_cloud_reports_condition_and_event(
    kube: Kube, client: Client, settings: Settings, namespace: str, starter: CloudProbeStarter
) -> None:
    dead = AWS.section(settings).model_copy(
        update={"endpoint_url": "http://127.0.0.1:9", "max_attempts": 1, "timeout_s": 1}
    )
    worker = build_worker(client, settings, driver=AwsDriver(dead), kube=kube)
    async with worker, running(starter):
        await asyncio.to_thread(probe, kube, namespace, "down")
        condition = await eventually(
            lambda: ready_condition(kube, namespace, "down"),
            timeout=60,
            what="Ready condition on the failing CloudProbe",
        )
        assert condition["status"] == "False"
        assert condition["reason"] == "CloudUnreachable"
        assert "DescribeAvailabilityZones" in condition["message"]

        def warning() -> list[Event]:
            events = kube.list(EVENTS, namespace, fieldSelector="involvedObject.name=down")
            return [
                e
                for e in events["items"]
                if e["type"] == "Warning" and e["reason"] == "ProbeFailed"
            ]

        warnings = await eventually(warning, what="ProbeFailed event")
        assert "workflow probe/" in warnings[0]["message"]

        # The starter and worker survived: a healthy probe on the same pair still completes.
        dead_probe = await asyncio.to_thread(kube.get, CLOUD_PROBES, "down", namespace)
        assert dead_probe is not None and dead_probe["status"]["observedGeneration"] == 1


async def test_unsupported_provider_is_reported(
    kube: Kube, client: Client, settings: Settings, namespace: str, starter: CloudProbeStarter
) -> None:
    """A CloudProbe for a cloud this worker does not drive gets NotSupported, not a crash."""
    worker = build_worker(client, settings, driver=AwsDriver(AWS.section(settings)), kube=kube)
    async with worker, running(starter):
        await asyncio.to_thread(
            kube.create,
            CLOUD_PROBES,
            {
                "metadata": {"name": "vsphere", "namespace": namespace},
                "spec": {"provider": "vsphere"},
            },
            namespace,
        )
        condition = await eventually(
            lambda: ready_condition(kube, namespace, "vsphere"), what="Ready condition"
        )
        assert condition["status"] == "False"
        assert condition["reason"] == "NotSupported"


def test_invalid_probe_is_rejected_by_schema(kube: Kube, namespace: str) -> None:
    from cloudloop.kube.api import KubeError

    with pytest.raises(KubeError) as err:
        kube.create(
            CLOUD_PROBES,
            {"metadata": {"name": "bad", "namespace": namespace}, "spec": {"provider": "nimbus"}},
            namespace,
        )
    assert err.value.status == 422
    assert "provider" in str(err.value)
