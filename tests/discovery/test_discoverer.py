"""CloudDataDiscoverer passes with a scripted cloud and an in-memory API server: what it writes,
what a cloud or write error keeps, and the gauges."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import uuid
from typing import Any, cast

import pytest
from prometheus_client import REGISTRY
from temporalio.client import Client

from cloudloop.cloud import errors
from cloudloop.cloud.aws.discovery_schema import AwsCloudDiscoveryData
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.discovery_schemas import Open
from cloudloop.cloud.driver import CloudDriver, DiscoveryDefaults
from cloudloop.cloud.models import DiscoveryData, Disk, InstanceType, Zone
from cloudloop.cloud.registry import Settings
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import (
    CONFIG_MAPS,
    INSTANCE_TYPES_CATALOGS,
    PERSISTENT_VOLUMES,
    SECRETS,
)
from cloudloop.rules import discovery as cloud_data
from cloudloop.settings import DiscoverySettings
from starters.context import StarterContext
from starters.discovery import CloudDataDiscoverer
from tests.fakes import MemoryKube

NS = "kube-system"


class ScriptedDiscovery(DiscoveryDefaults):
    """A discovery capability answering as told (``error``: every call raises it)."""

    provider = "scripted"

    def __init__(self) -> None:
        self.error: errors.CloudError | None = None
        self.zones_list = [Zone(name="z-a", region="r"), Zone(name="z-b", region="r")]
        self.types = [InstanceType(name="small", cpu=1, memory_mib=512)]
        self.lost = f"vol-lost-{uuid.uuid4().hex[:8]}"  # gauges are process-wide: unique IDs
        self.disks = [Disk(id="vol-used", name="pv-1"), Disk(id=self.lost, name="lost")]

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def zones(self) -> list[Zone]:
        self._check()
        return list(self.zones_list)

    def instance_types(self) -> list[InstanceType]:
        self._check()
        return list(self.types)

    def discovery_data(self) -> DiscoveryData:
        self._check()
        return DiscoveryData(region="r", zones=self.zones_list, kind="AWSCloudDiscoveryData")

    def list_cluster_disks(self, cluster: str) -> list[Disk]:
        self._check()
        return list(self.disks)


class ScriptedCloud(CloudDriver):
    """A facade with the scripted discovery capability only."""

    provider = "scripted"
    discovery: ScriptedDiscovery

    def __init__(self, discovery: ScriptedDiscovery | None = None) -> None:
        self.discovery = discovery or ScriptedDiscovery()
        self.assembled()


def gauge(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def discoverer(kube: MemoryKube, cloud: ScriptedCloud, **kwargs: Any) -> CloudDataDiscoverer:
    return CloudDataDiscoverer(
        kube,
        cloud.discovery,
        provider=cloud.provider,
        cluster="c",
        interval_s=3600,
        namespace=NS,
        write_attempts=kwargs.pop("write_attempts", 3),
        write_backoff_s=0.0,
        **kwargs,
    )


def secret_document(kube: MemoryKube) -> dict[str, Any] | None:
    secret = kube.get(SECRETS, cloud_data.DISCOVERY_SECRET, NS)
    if secret is None:
        return None
    raw = base64.b64decode(secret["data"][cloud_data.DISCOVERY_KEY])
    document: dict[str, Any] = json.loads(raw)
    return document


def conditions(kube: MemoryKube) -> dict[str, bool]:
    configmap = kube.get(CONFIG_MAPS, cloud_data.CONDITIONS_CONFIGMAP, NS)
    assert configmap is not None
    return {c["name"]: c["ok"] for c in json.loads(configmap["data"]["conditions"])}


def seed(kube: MemoryKube, provider_document: str | None) -> None:
    if provider_document is not None:
        kube.put(
            SECRETS,
            {
                "metadata": {"name": cloud_data.PROVIDER_CONFIGURATION_SECRET, "namespace": NS},
                "data": {
                    cloud_data.PROVIDER_DISCOVERY_KEY: base64.b64encode(
                        provider_document.encode()
                    ).decode()
                },
            },
            NS,
        )
    kube.put(
        PERSISTENT_VOLUMES,
        {"metadata": {"name": "pv-1"}, "spec": {"csi": {"volumeHandle": "vol-used"}}},
    )


async def test_good_pass_then_cloud_outage_keeps_the_documents() -> None:
    kube, cloud = MemoryKube(), ScriptedCloud()
    scripted = cloud.discovery
    seed(kube, json.dumps({"kind": "AWSCloudDiscoveryData", "keyName": "k", "zones": ["old"]}))
    loop = discoverer(kube, cloud)

    result = await loop.discover()
    assert result.wrote_secret and result.wrote_catalog and not result.write_failed
    document = secret_document(kube)
    assert document is not None
    assert document["keyName"] == "k" and document["zones"] == ["z-a", "z-b"]
    assert document["apiVersion"] == "deckhouse.io/v1"
    catalog = kube.get(INSTANCE_TYPES_CATALOGS, cloud_data.CATALOG_NAME)
    assert catalog is not None
    assert catalog["instanceTypes"] == [
        {"name": "small", "cpu": "1", "memory": "512Mi", "rootDisk": "0"}
    ]
    assert all(conditions(kube).values())
    for kind in ("instance_types", "discovery_data", "disks_meta"):
        assert gauge("cloud_data_discovery_cloud_request_error", type=kind) == 0
    assert gauge("cloud_data_discovery_orphaned_disk_info", id=scripted.lost, name="lost") == 1
    assert gauge("cloud_data_discovery_orphaned_disk_info", id="vol-used", name="pv-1") is None
    assert gauge("cloud_data_discovery_update_resource_error") == 0

    secret_before = kube.get(SECRETS, cloud_data.DISCOVERY_SECRET, NS)
    catalog_before = kube.get(INSTANCE_TYPES_CATALOGS, cloud_data.CATALOG_NAME)
    scripted.error = errors.CloudUnreachable("scripted", "Describe", f"refused {scripted.lost}")
    result = await loop.discover()
    assert not result.wrote_secret and not result.wrote_catalog
    assert kube.get(SECRETS, cloud_data.DISCOVERY_SECRET, NS) == secret_before
    assert kube.get(INSTANCE_TYPES_CATALOGS, cloud_data.CATALOG_NAME) == catalog_before
    assert conditions(kube) == {
        "cloud-credentials-valid": True,
        "cloud-api-reachable": False,
        "zones-available": False,
    }
    for kind in ("instance_types", "discovery_data", "disks_meta"):
        assert gauge("cloud_data_discovery_cloud_request_error", type=kind) == 1
    failing = [c for c in result.conditions if not c.ok]
    for c in failing:
        labels = {"name": c.name, "message": c.message}
        assert gauge("cloud_data_discovery_cloud_conditions_error", **labels) == 1
    # the last known orphans stay reported while the cloud cannot be asked
    assert gauge("cloud_data_discovery_orphaned_disk_info", id=scripted.lost, name="lost") == 1

    scripted.error = None
    scripted.disks = [Disk(id="vol-used", name="pv-1")]
    await loop.discover()
    unique = [c for c in failing if scripted.lost in c.message]  # only this test sets these
    assert unique
    for c in unique:
        labels = {"name": c.name, "message": c.message}
        assert gauge("cloud_data_discovery_cloud_conditions_error", **labels) is None
    assert all(conditions(kube).values())
    assert gauge("cloud_data_discovery_orphaned_disk_info", id=scripted.lost, name="lost") is None


async def test_without_the_terraform_secret_a_full_document_is_written() -> None:
    kube, cloud = MemoryKube(), ScriptedCloud()
    seed(kube, None)
    await discoverer(kube, cloud).discover()
    document = secret_document(kube)
    assert document is not None
    assert (document["apiVersion"], document["kind"]) == (
        "deckhouse.io/v1",
        "AWSCloudDiscoveryData",
    )
    assert document["zones"] == ["z-a", "z-b"]


@pytest.mark.parametrize(
    "provider_document",
    [pytest.param("{broken", id="invalid-json"), pytest.param("[]", id="not-an-object")],
)
async def test_unreadable_terraform_secret_writes_no_document(provider_document: str) -> None:
    kube, cloud = MemoryKube(), ScriptedCloud()
    seed(kube, provider_document)
    result = await discoverer(kube, cloud).discover()
    assert secret_document(kube) is None
    assert result.write_failed
    assert gauge("cloud_data_discovery_update_resource_error") == 1


async def test_no_available_zone_keeps_the_previous_document() -> None:
    kube, cloud = MemoryKube(), ScriptedCloud()
    seed(kube, None)
    loop = discoverer(kube, cloud)
    await loop.discover()
    before = secret_document(kube)
    cloud.discovery.zones_list = []
    await loop.discover()
    assert secret_document(kube) == before
    assert conditions(kube)["zones-available"] is False


@pytest.mark.parametrize(
    ("failures", "written"),
    [pytest.param(2, True, id="retried-then-written"), pytest.param(100, False, id="gave-up")],
)
async def test_kube_writes_are_retried(failures: int, written: bool) -> None:
    kube, cloud = MemoryKube(), ScriptedCloud()
    seed(kube, None)
    kube.fail_next = failures
    result = await discoverer(kube, cloud, write_attempts=3).discover()
    assert (secret_document(kube) is not None) is written
    assert result.write_failed is not written
    assert gauge("cloud_data_discovery_update_resource_error") == (0 if written else 1)


async def test_unchanged_documents_are_not_rewritten() -> None:
    kube, cloud = MemoryKube(), ScriptedCloud()
    seed(kube, None)
    loop = discoverer(kube, cloud)
    await loop.discover()
    writes = len(kube.writes)
    await loop.discover()
    assert len(kube.writes) == writes


async def test_pv_listing_error_flags_no_orphan() -> None:
    kube, cloud = MemoryKube(), ScriptedCloud()
    cloud.discovery.disks = [Disk(id="vol-maybe", name="maybe")]
    loop = discoverer(kube, cloud)
    kube.fail_reads = True
    result = await loop.discover()
    assert result.orphans is None
    assert gauge("cloud_data_discovery_orphaned_disk_info", id="vol-maybe", name="maybe") is None


def context(discovery: DiscoverySettings, driver: CloudDriver) -> StarterContext:
    kube = MemoryKube()
    return StarterContext(
        settings=Settings(cluster_name="c", discovery=discovery),
        kube=kube,
        client=cast(Client, None),
        driver=driver,
        informers=Informers(kube),
    )


@pytest.mark.parametrize(
    ("discovery", "driver", "starts"),
    [
        pytest.param(DiscoverySettings(), AwsDriver(AwsSettings()), True, id="aws"),
        pytest.param(
            DiscoverySettings(enabled=False), AwsDriver(AwsSettings()), False, id="turned-off"
        ),
        pytest.param(DiscoverySettings(), CloudDriver(), False, id="no-capability"),
    ],
)
def test_discoverer_starts_only_when_wanted(
    discovery: DiscoverySettings, driver: CloudDriver, starts: bool
) -> None:
    loop = CloudDataDiscoverer.from_context(context(discovery, driver))
    assert (loop is not None) is starts
    if loop is not None:
        assert (loop.interval_s, loop.namespace) == (3600.0, "kube-system")
        # Checked against the provider record's schema of the discoverer's document.
        assert loop.schema is AwsCloudDiscoveryData


async def test_a_document_the_schema_refuses_is_written_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube, cloud = MemoryKube(), ScriptedCloud()
    seed(kube, None)  # no Terraform document: instances, keyName, ... are missing
    with caplog.at_level("WARNING", logger="starters.discovery"):
        result = await discoverer(kube, cloud, schema=AwsCloudDiscoveryData).discover()
    assert result.wrote_secret and secret_document(kube) is not None
    refusals = [r.getMessage() for r in caplog.records if "schema" in r.getMessage()]
    assert len(refusals) == 1
    assert "AWSCloudDiscoveryData" in refusals[0] and "keyName: Field required" in refusals[0]


async def test_a_document_the_schema_admits_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    kube, cloud = MemoryKube(), ScriptedCloud()
    seed(kube, json.dumps({"kind": "AWSCloudDiscoveryData", "apiVersion": "deckhouse.io/v1"}))
    with caplog.at_level("WARNING", logger="starters.discovery"):
        await discoverer(kube, cloud, schema=type("Open", (Open,), {})).discover()
    assert not [r for r in caplog.records if "schema" in r.getMessage()]


class CatalogLessDiscovery(ScriptedDiscovery):
    """Like DVP and zVirt: discovery data, but no instance-type catalog."""

    def instance_types(self) -> list[InstanceType]:
        raise errors.NotSupported(self.provider, "instance_types")


async def test_cloud_without_instance_types_still_gets_its_discovery_data() -> None:
    kube = MemoryKube()
    seed(
        kube,
        json.dumps({"kind": "ZvirtCloudProviderDiscoveryData", "apiVersion": "deckhouse.io/v1"}),
    )
    result = await discoverer(kube, ScriptedCloud(CatalogLessDiscovery())).discover()
    assert result.wrote_secret and not result.wrote_catalog
    document = secret_document(kube)
    assert document is not None
    assert document["kind"] == "ZvirtCloudProviderDiscoveryData"
    assert "instanceTypes" not in document
    assert kube.get(INSTANCE_TYPES_CATALOGS, cloud_data.CATALOG_NAME) is None


async def test_a_failed_pass_is_tried_again_sooner_doubling_until_one_succeeds() -> None:
    """After a pass the cloud failed the next comes in ``retry_interval_s``, then twice that...;
    once a pass succeeds the loop waits the whole interval again."""
    kube, cloud = MemoryKube(), ScriptedCloud()
    scripted = cloud.discovery
    seed(kube, None)
    scripted.error = errors.CloudUnreachable("scripted", "DescribeInstanceTypes", "read timeout")
    loop = discoverer(kube, cloud, retry_interval_s=0.05)
    times: list[float] = []
    discover = loop.discover

    async def timed() -> Any:
        times.append(asyncio.get_running_loop().time())
        if len(times) == 3:
            scripted.error = None  # the third pass succeeds
        return await discover()

    loop.discover = timed  # type: ignore[method-assign]
    task = asyncio.create_task(loop.run())
    try:
        for _ in range(100):
            if loop.passes >= 3:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # an hourly loop makes no fourth pass
    finally:
        loop.stop()
        await asyncio.wait_for(task, 5)
    assert len(times) == 3
    assert loop.last_pass is not None and loop.last_pass.wrote_secret
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[0] >= 0.04 and gaps[1] >= 0.09  # 0.05 s, then 0.1 s
