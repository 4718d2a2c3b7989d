"""NodeSync against the real stack: init, lifecycle and address refresh with moto instances."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest
from prometheus_client import REGISTRY

import starters.node
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Event
from cloudloop.kube.informer import Informers
from cloudloop.kube.resources import EVENTS, NODES
from cloudloop.rules import node as rules
from devstack.backends.aws import launch_instances
from starters.node import NodeSync
from tests.helpers import eventually
from tests.node.support import cleanup, get_node, make_node, node_sync, node_when, set_ready

pytestmark = pytest.mark.stack


def describe_calls() -> float:
    return (
        REGISTRY.get_sample_value(
            "cloud_api_requests_total",
            {"provider": "aws", "operation": "DescribeInstances", "outcome": "success"},
        )
        or 0.0
    )


def run_instances(ec2: Any, count: int, instance_type: str = "m5.large") -> list[dict[str, Any]]:
    return launch_instances(
        ec2, count, InstanceType=instance_type, Placement={"AvailabilityZone": "us-east-1b"}
    )


def events_for(kube: Kube, name: str, reason: str) -> list[Event]:
    items = kube.list(EVENTS, "default", fieldSelector=f"involvedObject.name={name}")["items"]
    return [e for e in items if e["reason"] == reason]


async def test_init_burst_is_batched_and_sets_everything(
    kube: Kube, ec2: Any, ccm_settings: Settings, scope: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(starters.node, "INIT_BATCH_MAX_S", 5.0)
    instances = run_instances(ec2, 6)
    by_name = instances[:3]  # kubelet default: node name = private DNS name, no providerID
    by_id = instances[3:]  # kubelet --provider-id
    try:
        # Only initialization may call the cloud here: lifecycle and refresh are pushed out.
        # The batch window is widened (2 s quiet, 5 s at most): six Nodes posted at once reached
        # the watch over more than 0.1 s on a loaded CI runner, and one burst split into three.
        quiet = ccm_settings.ccm.model_copy(
            update={
                "node_monitor_period_s": 3600.0,
                "node_status_update_frequency_s": 3600.0,
                "init_batch_window_s": 2.0,
            }
        )
        async with node_sync(kube, ccm_settings.model_copy(update={"ccm": quiet})):
            before = describe_calls()
            # At once, as a burst comes: made one by one on a loaded machine, a gap between two
            # Nodes longer than the batch window would split the burst into two lookups.
            await asyncio.gather(
                *(asyncio.to_thread(make_node, kube, i["PrivateDnsName"], scope) for i in by_name),
                *(
                    asyncio.to_thread(
                        make_node,
                        kube,
                        f"byid-{inst['InstanceId']}",
                        scope,
                        provider_id=f"aws:///us-east-1b/{inst['InstanceId']}",
                    )
                    for inst in by_id
                ),
            )

            def all_initialized() -> bool:
                items = kube.list(NODES, labelSelector=f"cloudloop-test={scope}")["items"]
                return len(items) == 6 and not any(rules.needs_init(n) for n in items)

            await eventually(all_initialized, what="all six nodes initialized")
            assert describe_calls() - before <= 2  # one by name + one by ID for the burst

        node = get_node(kube, by_name[0]["PrivateDnsName"])
        assert node is not None
        assert node["spec"]["providerID"] == f"aws:///us-east-1b/{by_name[0]['InstanceId']}"
        labels = node["metadata"]["labels"]
        for key, value in (
            ("topology.kubernetes.io/zone", "us-east-1b"),
            ("failure-domain.beta.kubernetes.io/zone", "us-east-1b"),
            ("topology.kubernetes.io/region", "us-east-1"),
            ("failure-domain.beta.kubernetes.io/region", "us-east-1"),
            ("node.kubernetes.io/instance-type", "m5.large"),
            ("beta.kubernetes.io/instance-type", "m5.large"),
        ):
            assert labels[key] == value, key
        addresses = {(a["type"], a["address"]) for a in node["status"]["addresses"]}
        assert ("InternalIP", by_name[0]["PrivateIpAddress"]) in addresses
        assert ("InternalDNS", by_name[0]["PrivateDnsName"]) in addresses
        assert not rules.has_taint(node, rules.UNINITIALIZED_TAINT)
        await eventually(  # recorded after the node's writes, off the write slots
            lambda: events_for(kube, by_name[0]["PrivateDnsName"], "Synced"), what="Synced"
        )
        byid = get_node(kube, f"byid-{by_id[0]['InstanceId']}")
        assert byid is not None
        assert byid["spec"]["providerID"] == f"aws:///us-east-1b/{by_id[0]['InstanceId']}"
    finally:
        cleanup(kube, scope)


async def test_bad_nodes_keep_the_taint_and_get_an_event(
    kube: Kube, ec2: Any, ccm_settings: Settings, scope: str
) -> None:
    (inst,) = run_instances(ec2, 1)
    try:
        async with node_sync(kube, ccm_settings):
            await asyncio.to_thread(make_node, kube, "ip-10-255-255-1.ec2.internal", scope)
            await asyncio.to_thread(
                make_node,
                kube,
                inst["PrivateDnsName"],
                scope,
                annotations={rules.PROVIDED_NODE_IP: "192.0.2.99"},
            )
            await asyncio.to_thread(
                make_node, kube, f"badpid-{scope}", scope, provider_id="gce://project/zone/vm"
            )
            for name in ("ip-10-255-255-1.ec2.internal", inst["PrivateDnsName"], f"badpid-{scope}"):
                warnings = await eventually(
                    lambda n=name: events_for(kube, n, "FailedToInitializeNode"),  # type: ignore[misc]
                    what=f"FailedToInitializeNode on {name}",
                )
                assert warnings[0]["type"] == "Warning"
                node = get_node(kube, name)
                assert node is not None and rules.has_taint(node, rules.UNINITIALIZED_TAINT)
                assert not node["spec"].get("providerID", "").startswith("aws")
    finally:
        cleanup(kube, scope)


async def test_provided_node_ip_orders_addresses(
    kube: Kube, ec2: Any, ccm_settings: Settings, scope: str
) -> None:
    (inst,) = run_instances(ec2, 1)
    name = inst["PrivateDnsName"]
    try:
        async with node_sync(kube, ccm_settings):
            await asyncio.to_thread(
                make_node,
                kube,
                name,
                scope,
                annotations={rules.PROVIDED_NODE_IP: inst["PrivateIpAddress"]},
            )
            node = await eventually(
                node_when(kube, name, lambda n: not rules.needs_init(n)), what="initialized"
            )
        assert node["status"]["addresses"][0] == {
            "type": "InternalIP",
            "address": inst["PrivateIpAddress"],
        }
    finally:
        cleanup(kube, scope)


async def test_lifecycle_deletes_only_gone_instances_and_taints_stopped(
    kube: Kube, ec2: Any, ccm_settings: Settings, scope: str
) -> None:
    running, stopped, terminated = run_instances(ec2, 3)
    ec2.stop_instances(InstanceIds=[stopped["InstanceId"]])
    ec2.terminate_instances(InstanceIds=[terminated["InstanceId"]])
    names = {}
    try:
        for label, inst in (("running", running), ("stopped", stopped), ("terminated", terminated)):
            names[label] = f"{label}-{scope}"
            make_node(
                kube,
                names[label],
                scope,
                tainted=False,
                provider_id=f"aws:///us-east-1b/{inst['InstanceId']}",
            )
            set_ready(kube, names[label], "False")
        names["missing"] = f"missing-{scope}"
        make_node(
            kube,
            names["missing"],
            scope,
            tainted=False,
            provider_id="aws:///us-east-1b/i-0000000000000dead",
        )
        set_ready(kube, names["missing"], "Unknown")

        async with node_sync(kube, ccm_settings):
            await eventually(
                lambda: get_node(kube, names["terminated"]) is None,
                what="node of the terminated instance deleted",
            )
            await eventually(
                lambda: get_node(kube, names["missing"]) is None,
                what="node of the nonexistent instance deleted",
            )
            await eventually(
                node_when(
                    kube, names["stopped"], lambda n: rules.has_taint(n, rules.SHUTDOWN_TAINT)
                ),
                what="shutdown taint on the stopped node",
            )
            running_node = get_node(kube, names["running"])
            assert running_node is not None  # NotReady but running: kept, untainted
            assert not rules.has_taint(running_node, rules.SHUTDOWN_TAINT)
            assert events_for(kube, names["terminated"], "DeletingNode")

            await asyncio.to_thread(set_ready, kube, names["stopped"], "True")
            await eventually(
                lambda: (
                    not rules.has_taint(
                        get_node(kube, names["stopped"]) or {}, rules.SHUTDOWN_TAINT
                    )
                ),
                what="shutdown taint removed once Ready",
            )
    finally:
        cleanup(kube, scope)


async def test_unreachable_cloud_deletes_nothing(
    kube: Kube, ec2: Any, ccm_settings: Settings, scope: str
) -> None:
    (terminated,) = run_instances(ec2, 1)
    ec2.terminate_instances(InstanceIds=[terminated["InstanceId"]])
    name = f"gone-{scope}"
    dead = AWS.section(ccm_settings).model_copy(
        update={"endpoint_url": "http://127.0.0.1:9", "max_attempts": 1, "timeout_s": 1}
    )
    try:
        make_node(
            kube,
            name,
            scope,
            tainted=False,
            provider_id=f"aws:///us-east-1b/{terminated['InstanceId']}",
        )
        set_ready(kube, name, "False")
        async with node_sync(kube, ccm_settings, AwsDriver(dead)) as sync:
            await eventually(lambda: sync.passes >= 4, what="several lifecycle passes")
            assert get_node(kube, name) is not None  # fail closed: the node stays
    finally:
        cleanup(kube, scope)


async def test_address_refresh_patches_changed_addresses(
    kube: Kube, ec2: Any, ccm_settings: Settings, scope: str
) -> None:
    (inst,) = run_instances(ec2, 1)
    name = f"refresh-{scope}"
    try:
        make_node(
            kube, name, scope, tainted=False, provider_id=f"aws:///us-east-1b/{inst['InstanceId']}"
        )
        set_ready(kube, name, "True")
        async with node_sync(kube, ccm_settings):
            node = await eventually(
                node_when(
                    kube,
                    name,
                    lambda n: any(a["type"] == "InternalIP" for a in n["status"]["addresses"]),
                ),
                what="addresses refreshed from the cloud",
            )
        addresses = {(a["type"], a["address"]) for a in node["status"]["addresses"]}
        assert ("InternalIP", inst["PrivateIpAddress"]) in addresses
        assert ("Hostname", inst["PrivateDnsName"]) in addresses
    finally:
        cleanup(kube, scope)


async def test_malformed_provider_id_keeps_the_node_with_a_warning(
    kube: Kube, ccm_settings: Settings, scope: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``aws:///zone/i-garbage`` on a NotReady Node: a failure, never "instance gone"; one
    Warning Event and one warning log line however many passes see it."""
    caplog.set_level(logging.INFO, logger="starters.node")
    name = f"garbage-{scope}"
    try:
        make_node(kube, name, scope, tainted=False, provider_id="aws:///us-east-1b/i-garbage")
        set_ready(kube, name, "False")
        async with node_sync(kube, ccm_settings) as sync:
            await eventually(lambda: sync.passes >= 4, what="several lifecycle passes")
            warnings = await eventually(
                lambda: events_for(kube, name, "InvalidProviderID"), what="InvalidProviderID"
            )
        assert get_node(kube, name) is not None
        assert not events_for(kube, name, "DeletingNode")
        assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
        assert warnings[0]["source"]["component"] == "cloud-node-lifecycle-controller"
        assert warnings[0].get("count", 1) == 1
        said = [
            r
            for r in caplog.records
            if r.name == "starters.node" and r.levelno >= logging.WARNING and name in r.message
        ]
        assert len(said) == 1, [r.message for r in said]
    finally:
        cleanup(kube, scope)


async def test_lookups_above_the_filter_limit(ec2: Any, ccm_settings: Settings) -> None:
    """AWS takes 200 values per filter: 250 nodes are looked up in two calls, not refused."""
    instances = run_instances(ec2, 250, instance_type="t3.nano")
    driver = AwsDriver(AWS.section(ccm_settings))
    by_id = await asyncio.to_thread(
        driver.instances.list_instances, [i["InstanceId"] for i in instances]
    )
    assert len(by_id.found) == 250 and by_id.requests == 2
    names = [i["PrivateDnsName"] for i in instances]
    by_name = await asyncio.to_thread(driver.instances.find_instances_by_name, names)
    assert len(by_name.found) == 250
    ec2.terminate_instances(InstanceIds=[i["InstanceId"] for i in instances])


async def test_large_lookups_list_the_cluster_by_its_tag(ec2: Any, ccm_settings: Settings) -> None:
    """400 nodes of a tagged cluster: one paged listing by the cluster tag; an untagged
    instance among them is still found by ID (never taken for a missing one). A lookup by name
    goes by value (a burst's new nodes are a share of the cluster: no whole-cluster listing)."""
    cluster = f"tagged-{uuid.uuid4().hex[:6]}"
    tagged = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=400,
        MaxCount=400,
        InstanceType="t3.nano",
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [{"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"}],
            }
        ],
    )["Instances"]
    (untagged,) = run_instances(ec2, 1, instance_type="t3.nano")
    # moto pages 400 instances in seconds on a loaded runner: more than the stack's 5 s read
    # timeout (the request counts below are what this test checks, not moto's speed).
    driver = AwsDriver(AWS.section(ccm_settings).model_copy(update={"timeout_s": 60.0}))
    driver.cluster = cluster
    ids = [i["InstanceId"] for i in tagged]
    only_tagged = await asyncio.to_thread(driver.instances.list_instances, ids)
    assert len(only_tagged.found) == 400 and only_tagged.requests == 1
    mixed = await asyncio.to_thread(driver.instances.list_instances, [*ids, untagged["InstanceId"]])
    assert untagged["InstanceId"] in mixed.found and mixed.requests == 2
    # By name (node initialization) by value only: the 400 asked for, in chunks of 150.
    names = list({i["PrivateDnsName"] for i in tagged})
    by_name = await asyncio.to_thread(driver.instances.find_instances_by_name, names)
    assert len(by_name.found) == len(names) and by_name.requests == 3
    ec2.terminate_instances(InstanceIds=[*ids, untagged["InstanceId"]])


async def test_init_from_a_stale_informer_copy_keeps_what_changed_meanwhile(
    kube: Kube, ec2: Any, ccm_settings: Settings, scope: str
) -> None:
    """A node is initialized from the informer's copy (no read); a change made after that copy
    (a label) is neither lost nor in the way."""
    instance = run_instances(ec2, 1)[0]
    name = instance["PrivateDnsName"]
    driver = AwsDriver(AWS.section(ccm_settings))
    try:
        stale = make_node(kube, name, scope)
        kube.patch(NODES, name, {"metadata": {"labels": {"added-meanwhile": "yes"}}})
        found = driver.instances.find_instances_by_name([name]).found[name]
        informers = Informers(kube)
        sync = NodeSync(kube, driver.instances, informers.nodes(), ccm_settings.ccm)
        for attempt in range(2):  # the second: the node is initialized already, nothing to do
            await asyncio.to_thread(sync._initialize_node, name, found, stale)
            node = get_node(kube, name)
            assert node is not None, attempt
            assert not rules.needs_init(node)
            assert node["metadata"]["labels"]["added-meanwhile"] == "yes"
            assert node["spec"]["providerID"] == found.provider_id
            await eventually(
                lambda: len(events_for(kube, name, "Synced")) == 1, what="one Synced Event"
            )
    finally:
        cleanup(kube, scope)
