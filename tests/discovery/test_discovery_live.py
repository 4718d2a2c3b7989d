"""CloudDataDiscoverer against the real stack: moto's zones, instance types and EBS volumes,
the Secret, ConfigMap and InstanceTypesCatalog written to the API server, and the gauges."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import (
    INSTANCE_TYPES_CATALOGS,
    PERSISTENT_VOLUMES,
    SECRETS,
)
from cloudloop.rules import discovery as cloud_data
from starters.discovery import CloudDataDiscoverer
from tests.discovery.support import (
    conditions,
    discovery_document,
    gauge,
    persistent_volume,
    put_terraform_output,
)
from tests.helpers import eventually

pytestmark = pytest.mark.stack

TERRAFORM_OUTPUT = {
    "apiVersion": "deckhouse.io/v1",
    "kind": "AWSCloudDiscoveryData",
    "keyName": "cluster-key",
    "instances": {
        "ami": "ami-12c6146b",
        "additionalSecurityGroups": ["sg-1"],
        "associatePublicIPAddress": False,
        "iamProfileName": "node",
    },
    "loadBalancerSecurityGroup": "sg-lb",
    "zones": ["stale-zone"],
    "zoneToSubnetIdMap": {"us-east-1a": "subnet-1"},
}


def patient(aws: AwsSettings) -> AwsSettings:
    """moto builds all ~1400 instance types in one answer; on a busy machine that takes >5 s."""
    return aws.model_copy(update={"timeout_s": 90, "max_attempts": 1})


def dead_endpoint(aws: AwsSettings) -> AwsSettings:
    return aws.model_copy(
        update={"endpoint_url": "http://127.0.0.1:9", "max_attempts": 1, "timeout_s": 1}
    )


def volume(ec2: Any, cluster: str | None) -> str:
    tags = [{"Key": "Name", "Value": f"disk-{uuid.uuid4().hex[:6]}"}]
    if cluster:
        tags.append({"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"})
    answer = ec2.create_volume(
        AvailabilityZone="us-east-1a",
        Size=1,
        TagSpecifications=[{"ResourceType": "volume", "Tags": tags}],
    )
    return str(answer["VolumeId"])


@contextlib.asynccontextmanager
async def discovering(
    kube: Kube, aws: AwsSettings, cluster: str, namespace: str, catalog: str
) -> AsyncIterator[CloudDataDiscoverer]:
    driver = AwsDriver(aws)
    loop = CloudDataDiscoverer(
        kube,
        driver.discovery,
        provider=driver.provider,
        cluster=cluster,
        interval_s=3600,
        namespace=namespace,
        catalog_name=catalog,
        write_attempts=3,
        write_backoff_s=0.1,
    )
    task = asyncio.create_task(loop.run())
    try:
        yield loop
        assert not task.done(), "the discovery loop ended by itself"
    finally:
        loop.stop()
        await asyncio.wait_for(task, 30)


async def test_discovery_writes_data_catalog_conditions_and_orphans(
    kube: Kube, ec2: Any, settings: Settings, namespace: str, scope: str, catalog: str
) -> None:
    cluster = f"{settings.cluster_name}-{scope}"
    used_by_csi, used_in_tree, orphan = (volume(ec2, cluster) for _ in range(3))
    foreign = volume(ec2, None)  # not tagged for the cluster: never reported
    pvs = [f"pv-{scope}-csi", f"pv-{scope}-intree"]
    persistent_volume(
        kube, pvs[0], {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": used_by_csi}}
    )
    persistent_volume(
        kube,
        pvs[1],
        {"awsElasticBlockStore": {"volumeID": f"aws://us-east-1a/{used_in_tree}"}},
    )
    put_terraform_output(kube, namespace, TERRAFORM_OUTPUT)
    try:
        async with discovering(
            kube, patient(AWS.section(settings)), cluster, namespace, catalog
        ) as loop:
            await eventually(lambda: loop.passes >= 1, timeout=240, what="one discovery pass")
            assert loop.last_pass is not None and not loop.last_pass.write_failed

        document = discovery_document(kube, namespace)
        assert document is not None
        for key in ("apiVersion", "kind", "keyName", "instances", "loadBalancerSecurityGroup"):
            assert document[key] == TERRAFORM_OUTPUT[key], key
        assert document["zoneToSubnetIdMap"] == {"us-east-1a": "subnet-1"}
        live_zones = sorted(
            z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]
        )
        assert document["zones"] == live_zones
        assert "instanceTypes" not in document  # the catalog's, as upstream's discoverer

        written = kube.get(INSTANCE_TYPES_CATALOGS, catalog)
        assert written is not None
        assert written["apiVersion"] == "deckhouse.io/v1alpha1"
        assert {"name": "t3.micro", "cpu": "2", "memory": "1024Mi", "rootDisk": "0"} in written[
            "instanceTypes"
        ]

        assert conditions(kube, namespace) == {
            "cloud-credentials-valid": True,
            "cloud-api-reachable": True,
            "zones-available": True,
        }
        for kind in ("instance_types", "discovery_data", "disks_meta"):
            assert gauge("cloud_data_discovery_cloud_request_error", type=kind) == 0
        assert gauge("cloud_data_discovery_update_resource_error") == 0
        assert loop.last_pass.orphans is not None
        assert [d.id for d in loop.last_pass.orphans] == [orphan]
        assert foreign not in {d.id for d in loop.last_pass.orphans}
    finally:
        for name in pvs:
            kube.delete(PERSISTENT_VOLUMES, name)


async def test_orphan_gauge_while_running(
    kube: Kube, ec2: Any, settings: Settings, namespace: str, scope: str, catalog: str
) -> None:
    cluster = f"{settings.cluster_name}-{scope}"
    orphan = volume(ec2, cluster)
    name = next(
        t["Value"]
        for t in ec2.describe_volumes(VolumeIds=[orphan])["Volumes"][0]["Tags"]
        if t["Key"] == "Name"
    )
    async with discovering(
        kube, patient(AWS.section(settings)), cluster, namespace, catalog
    ) as loop:
        await eventually(lambda: loop.passes >= 1, timeout=240, what="one discovery pass")
        assert gauge("cloud_data_discovery_orphaned_disk_info", id=orphan, name=name) == 1
    # a stopped discoverer drops its series
    assert gauge("cloud_data_discovery_orphaned_disk_info", id=orphan, name=name) is None


async def test_unreachable_cloud_writes_no_partial_document(
    kube: Kube, settings: Settings, namespace: str, scope: str, catalog: str
) -> None:
    cluster = f"{settings.cluster_name}-{scope}"
    # No Secret yet and no cloud: nothing is written but the conditions.
    async with discovering(
        kube, dead_endpoint(AWS.section(settings)), cluster, namespace, catalog
    ) as loop:
        await eventually(lambda: loop.passes >= 1, what="one failed pass")
    assert discovery_document(kube, namespace) is None
    assert kube.get(INSTANCE_TYPES_CATALOGS, catalog) is None
    assert conditions(kube, namespace) == {
        "cloud-credentials-valid": True,
        "cloud-api-reachable": False,
        "zones-available": False,
    }
    for kind in ("instance_types", "discovery_data", "disks_meta"):
        assert gauge("cloud_data_discovery_cloud_request_error", type=kind) == 1
    assert loop.last_pass is not None
    assert loop.last_pass.orphans is None

    # The cloud answers (and there is no Terraform output): a complete document.
    async with discovering(
        kube, patient(AWS.section(settings)), cluster, namespace, catalog
    ) as loop:
        await eventually(lambda: loop.passes >= 1, timeout=240, what="one good pass")
    good = kube.get(SECRETS, cloud_data.DISCOVERY_SECRET, namespace)
    assert good is not None
    document = discovery_document(kube, namespace)
    assert document is not None
    assert (document["apiVersion"], document["kind"]) == (
        "deckhouse.io/v1",
        "AWSCloudDiscoveryData",
    )
    assert document["zones"] and kube.get(INSTANCE_TYPES_CATALOGS, catalog) is not None
    assert all((conditions(kube, namespace) or {}).values())

    # The cloud goes away again: the good Secret and catalog stay exactly as they were.
    catalog_before = kube.get(INSTANCE_TYPES_CATALOGS, catalog)
    async with discovering(
        kube, dead_endpoint(AWS.section(settings)), cluster, namespace, catalog
    ) as loop:
        await eventually(lambda: loop.passes >= 1, what="another failed pass")
        failing = [c for c in loop.last_pass.conditions if not c.ok] if loop.last_pass else []
        assert failing
        for c in failing:
            labels = {"name": c.name, "message": c.message}
            assert gauge("cloud_data_discovery_cloud_conditions_error", **labels) == 1
    after = kube.get(SECRETS, cloud_data.DISCOVERY_SECRET, namespace)
    assert after is not None
    assert after["metadata"]["resourceVersion"] == good["metadata"]["resourceVersion"]
    assert kube.get(INSTANCE_TYPES_CATALOGS, catalog) == catalog_before
    assert gauge("cloud_data_discovery_cloud_request_error", type="discovery_data") == 1
