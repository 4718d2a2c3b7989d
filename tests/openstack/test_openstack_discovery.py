"""OpenStack discovery on the real stack: the discoverer writes its own
``OpenStackCloudProviderDiscoveryData`` (image and main network from Terraform's document, live
zones, flavor, network, security group and image names, volume types; valid against Deckhouse's
schema), the InstanceTypesCatalog and the conditions; Cinder volumes of the cluster that no PV
references are orphans; the registration Secret as Deckhouse renders it."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid

import pytest

from cloudloop.cloud.openstack.discovery_schema import OpenStackCloudProviderDiscoveryData
from cloudloop.cloud.openstack.driver import OpenStackDriver
from cloudloop.cloud.openstack.settings import LoadBalancerSettings, NetworkingSettings
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import INSTANCE_TYPES_CATALOGS, PERSISTENT_VOLUMES, SECRETS
from devstack.backends.openstack import connect
from devstack.openstack_emulator import OpenStackEmulatorAdmin, OpenStackEmulatorEndpoint
from starters.discovery import CloudDataDiscoverer
from starters.registration import CloudProviderRegistration
from tests.discovery.support import (
    conditions,
    discovery_document,
    gauge,
    persistent_volume,
    put_terraform_output,
)
from tests.helpers import eventually
from tests.openstack.support import eventually as wait_for
from tests.openstack.support import quick_settings

pytestmark = pytest.mark.stack

TERRAFORM_OUTPUT = {
    "apiVersion": "deckhouse.io/v1",
    "kind": "OpenStackCloudDiscoveryData",
    "layout": "Standard",
    "podNetworkMode": "DirectRoutingWithPortSecurityEnabled",
    "internalNetworkNames": ["private"],
    "instances": {
        "sshKeyPairName": "cluster",
        "securityGroups": ["default"],
        "imageName": "ubuntu-22.04",
        "mainNetwork": "private",
    },
    "zones": ["stale"],
}


async def test_discovery_data_catalog_conditions_and_orphans(
    kube: Kube,
    admin: OpenStackEmulatorAdmin,
    endpoint: OpenStackEmulatorEndpoint,
    settings: Settings,
    namespace: str,
) -> None:
    scope = uuid.uuid4().hex[:8]
    cluster = f"{settings.cluster_name}-{scope}"
    catalog = f"catalog-{scope}"
    sdk = connect(endpoint)
    metadata = {"cinder.csi.openstack.org/cluster": cluster}
    used = sdk.block_storage.create_volume(name=f"pv-{scope}-used", size=1, metadata=metadata)
    orphan = sdk.block_storage.create_volume(name=f"pv-{scope}-orphan", size=1, metadata=metadata)
    foreign = sdk.block_storage.create_volume(name="not-ours", size=1)
    wait_for(
        lambda: all(
            sdk.block_storage.get_volume(v.id).status == "available"
            for v in (used, orphan, foreign)
        )
    )
    pv = f"pv-{scope}-used"
    persistent_volume(
        kube, pv, {"csi": {"driver": "cinder.csi.openstack.org", "volumeHandle": used.id}}
    )
    put_terraform_output(kube, namespace, TERRAFORM_OUTPUT)
    driver = OpenStackDriver(
        quick_settings(
            endpoint,
            load_balancer=LoadBalancerSettings(
                subnet_id="sub-lb", floating_network_id=endpoint.seed.public_network_id
            ),
            networking=NetworkingSettings(internal_network_names=["private"]),
        )
    )
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
        await eventually(lambda: loop.passes >= 1, timeout=120, what="one discovery pass")
        assert loop.last_pass is not None and not loop.last_pass.write_failed
        document = discovery_document(kube, namespace)
        assert document is not None
        OpenStackCloudProviderDiscoveryData.model_validate(document)
        assert document["kind"] == "OpenStackCloudProviderDiscoveryData"
        assert document["defaultImageName"] == "ubuntu-22.04"  # Terraform's instances
        assert document["mainNetwork"] == "private"
        assert document["zones"] == ["nova", "nova-b"]
        assert {"public", "private"} <= set(document["additionalNetworks"])
        assert {t["name"] for t in document["volumeTypes"]} == {"__DEFAULT__", "lvmdriver-1", "ssd"}
        assert document["images"] == ["cirros-0.6.2-x86_64-disk", "ubuntu-22.04"]
        assert "instanceTypes" not in document  # the catalog's
        written = kube.get(INSTANCE_TYPES_CATALOGS, catalog)
        assert written is not None
        by_name = {t["name"]: t for t in written["instanceTypes"]}
        assert by_name["m1.small"] == {
            "name": "m1.small",
            "cpu": "1",
            "memory": "2048Mi",
            "rootDisk": "20Gi",
        }
        assert set(document["flavors"]) >= set(by_name)
        assert conditions(kube, namespace) == {
            "cloud-credentials-valid": True,
            "cloud-api-reachable": True,
            "zones-available": True,
        }
        assert loop.last_pass.orphans is not None
        assert [d.id for d in loop.last_pass.orphans] == [orphan.id]
        assert gauge("cloud_data_discovery_orphaned_disk_info", id=orphan.id, name=orphan.name) == 1
    finally:
        loop.stop()
        await asyncio.wait_for(task, 30)
        driver.close()
        kube.delete(PERSISTENT_VOLUMES, pv)
        kube.delete(INSTANCE_TYPES_CATALOGS, catalog)


async def test_keystone_down_is_a_condition_not_a_document(
    kube: Kube,
    admin: OpenStackEmulatorAdmin,
    endpoint: OpenStackEmulatorEndpoint,
    settings: Settings,
    namespace: str,
) -> None:
    scope = uuid.uuid4().hex[:8]
    admin.service_down("identity")
    driver = OpenStackDriver(quick_settings(endpoint))
    loop = CloudDataDiscoverer(
        kube,
        driver.discovery,
        provider=driver.provider,
        cluster=scope,
        interval_s=3600,
        namespace=namespace,
        catalog_name=f"c-{scope}",
        write_attempts=1,
        write_backoff_s=0.1,
    )
    task = asyncio.create_task(loop.run())
    try:
        await eventually(lambda: loop.passes >= 1, timeout=60, what="one failed pass")
        assert discovery_document(kube, namespace) is None
        found = conditions(kube, namespace)
        assert found is not None and found["cloud-api-reachable"] is False
    finally:
        admin.service_up("identity")
        loop.stop()
        await asyncio.wait_for(task, 30)
        driver.close()


async def test_registration_secret_is_written(kube: Kube, os_settings: Settings) -> None:
    from cloudloop.cloud.openstack import PROVIDER

    section = PROVIDER.section(os_settings).model_copy(update={"zones": ["nova", "nova-b"]})
    build = PROVIDER.registration
    assert build is not None
    registration = CloudProviderRegistration(kube, lambda: build(section))
    task = asyncio.create_task(registration.run())
    try:
        secret = await eventually(
            lambda: kube.get(SECRETS, "d8-node-manager-cloud-provider-openstack", "kube-system"),
            what="Secret",
        )
        data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
        assert data["type"] == "openstack" and json.loads(data["zones"]) == ["nova", "nova-b"]
        assert json.loads(data["openstack"])["connection"]["region"] == "RegionOne"
    finally:
        registration.stop()
        await asyncio.wait_for(task, 10)
        for name in ("d8-node-manager-cloud-provider", "d8-node-manager-cloud-provider-openstack"):
            kube.delete(SECRETS, name, "kube-system")
