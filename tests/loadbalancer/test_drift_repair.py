"""Drift repair against the real stack: a listener, an attribute, a policy, a registered instance
or a rule changed behind the controller's back, and then the whole load balancer deleted, are put
back within one resync period with a ``LoadBalancerDriftRepaired`` Event; an in-sync check costs
a handful of read calls."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError
from prometheus_client import REGISTRY

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.loadbalancers import service_annotations as ann
from cloudloop.cloud.models import LoadBalancerPort, LoadBalancerSpec
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.resources import SERVICES
from tests.helpers import eventually
from tests.loadbalancer.support import (
    AwsWorld,
    events,
    ingress,
    lb_name,
    lb_settings,
    make_service,
)

pytestmark = pytest.mark.stack

PERIOD_S = 4.0
#: Time a repair may take once the period's check has found the drift (ensure + recheck).
REPAIR_S = 20.0


@pytest.fixture
def lb_config(settings: Settings, scope: str) -> Settings:
    """The load-balancer tests' settings (conftest) with a resync period."""
    config = lb_settings(settings, scope)
    ccm = config.ccm.model_copy(update={"load_balancer_resync_period_s": PERIOD_S})
    return config.model_copy(update={"ccm": ccm})


def classic_shape(world: AwsWorld, name: str) -> dict[str, Any] | None:
    """What the driver sets on the ELB, without IDs that change when a part is made again."""
    lb = world.classic(name)
    if lb is None:
        return None
    attributes = world.client("elb").describe_load_balancer_attributes(LoadBalancerName=name)[
        "LoadBalancerAttributes"
    ]
    return {
        "listeners": sorted(
            (
                d["Listener"]["LoadBalancerPort"],
                d["Listener"]["Protocol"],
                d["Listener"]["InstanceProtocol"],
                d["Listener"]["InstancePort"],
                d["Listener"].get("SSLCertificateId", ""),
                tuple(d["PolicyNames"]),
            )
            for d in lb["ListenerDescriptions"]
        ),
        "backends": sorted(
            (b["InstancePort"], tuple(b["PolicyNames"]))
            for b in lb.get("BackendServerDescriptions") or []
        ),
        "instances": sorted(i["InstanceId"] for i in lb.get("Instances") or []),
        "health_check": lb.get("HealthCheck"),
        "groups": sorted(lb["SecurityGroups"]),
        "cross_zone": attributes["CrossZoneLoadBalancing"],
        "idle": attributes["ConnectionSettings"],
        "rules": sorted((r["GroupId"], r["FromPort"], r["CidrIpv4"]) for r in world.rules(name)),
    }


def nlb_shape(world: AwsWorld, name: str) -> dict[str, Any] | None:
    nlbs = world.nlbs(name)
    if not nlbs:
        return None
    v2 = world.client("elbv2")
    groups = {g["TargetGroupArn"]: g for g in world.target_groups(name)}
    listeners = v2.describe_listeners(LoadBalancerArn=nlbs[0]["LoadBalancerArn"])["Listeners"]
    return {
        "listeners": sorted(
            (
                lst["Port"],
                lst["Protocol"],
                groups[lst["DefaultActions"][0]["TargetGroupArn"]]["TargetGroupName"],
                tuple(c["CertificateArn"] for c in lst.get("Certificates") or []),
            )
            for lst in listeners
        ),
        "groups": sorted(
            (
                g["TargetGroupName"],
                g["Protocol"],
                tuple(
                    sorted(
                        d["Target"]["Id"]
                        for d in v2.describe_target_health(TargetGroupArn=arn)[
                            "TargetHealthDescriptions"
                        ]
                    )
                ),
                v2.describe_target_group_attributes(TargetGroupArn=arn)["Attributes"],
            )
            for arn, g in groups.items()
        ),
        "rules": sorted((r["GroupId"], r["FromPort"], r["CidrIpv4"]) for r in world.rules(name)),
    }


async def restored(
    shape: Any, world: AwsWorld, name: str, wanted: dict[str, Any], what: str
) -> float:
    """Seconds until the cloud shows ``wanted`` again (at most a period plus a repair)."""

    def matches() -> bool:
        try:
            return bool(shape(world, name) == wanted)
        except (KeyError, ClientError):  # read in the middle of the repair
            return False

    started = time.monotonic()
    await eventually(matches, timeout=PERIOD_S + REPAIR_S, what=what)
    return time.monotonic() - started


async def repaired_event(kube: Kube, namespace: str, service: str, words: str) -> None:
    found = await eventually(
        lambda: [
            e
            for e in events(kube, namespace, service, "LoadBalancerDriftRepaired")
            if words in e["message"]
        ],
        timeout=PERIOD_S + REPAIR_S,
        what=f"LoadBalancerDriftRepaired naming {words!r}",
    )
    assert found[0]["type"] == "Warning"


async def test_classic_drift_is_repaired(
    kube: Kube, namespace: str, world: AwsWorld, nodes: list[str], running: None
) -> None:
    cert = world.certificate()
    annotations = {
        ann.SSL_CERT: cert,
        ann.SSL_PORTS: "443",
        ann.SSL_NEGOTIATION_POLICY: "ELBSecurityPolicy-TLS-1-2-2017-01",
        ann.PROXY_PROTOCOL: "*",
        ann.CROSS_ZONE_LOAD_BALANCING_ENABLED: "true",
    }
    service = await asyncio.to_thread(
        make_service, kube, namespace, "drift", annotations=annotations, ports=(80, 443)
    )
    name = lb_name(service)
    await eventually(lambda: ingress(kube, namespace, "drift"), what="ingress")
    wanted = classic_shape(world, name)
    assert wanted is not None and len(wanted["instances"]) == 3

    elb = world.client("elb")
    elb.delete_load_balancer_listeners(LoadBalancerName=name, LoadBalancerPorts=[443])
    elb.modify_load_balancer_attributes(
        LoadBalancerName=name,
        LoadBalancerAttributes={"CrossZoneLoadBalancing": {"Enabled": False}},
    )
    elb.deregister_instances_from_load_balancer(
        LoadBalancerName=name, Instances=[{"InstanceId": world.instance_ids[0]}]
    )
    [rule] = [r for r in world.rules(name) if r["FromPort"] == 80]
    world.client("ec2").revoke_security_group_ingress(
        GroupId=rule["GroupId"], SecurityGroupRuleIds=[rule["SecurityGroupRuleId"]]
    )
    assert classic_shape(world, name) != wanted
    await restored(classic_shape, world, name, wanted, "listener, attribute, instance and rule")
    await repaired_event(kube, namespace, "drift", "listener 443 missing")
    message = events(kube, namespace, "drift", "LoadBalancerDriftRepaired")[0]["message"]
    for words in ("CrossZoneLoadBalancing.Enabled", "registered instances", "client security"):
        assert words in message

    elb.delete_load_balancer(LoadBalancerName=name)
    elapsed = await restored(classic_shape, world, name, wanted, "the ELB made again")
    assert elapsed <= PERIOD_S + REPAIR_S
    await repaired_event(kube, namespace, "drift", "the ELB is missing")
    assert ingress(kube, namespace, "drift") == [f"{name}.us-east-1.elb.amazonaws.com"]

    await asyncio.to_thread(kube.delete, SERVICES, "drift", namespace)
    await eventually(lambda: kube.get(SERVICES, "drift", namespace) is None, timeout=60)
    assert world.nothing_left(name)


async def test_nlb_drift_is_repaired(
    kube: Kube, namespace: str, world: AwsWorld, nodes: list[str], running: None
) -> None:
    annotations = {
        ann.TYPE: "nlb",
        ann.SSL_CERT: world.certificate(),
        ann.SSL_PORTS: "443",
        ann.PROXY_PROTOCOL: "*",
    }
    service = await asyncio.to_thread(
        make_service, kube, namespace, "nlbdrift", annotations=annotations, ports=(80, 443)
    )
    name = lb_name(service)
    await eventually(lambda: ingress(kube, namespace, "nlbdrift"), what="ingress")
    wanted = nlb_shape(world, name)
    assert wanted is not None

    v2 = world.client("elbv2")
    [nlb] = world.nlbs(name)
    listeners = v2.describe_listeners(LoadBalancerArn=nlb["LoadBalancerArn"])["Listeners"]
    [plain] = [lst for lst in listeners if lst["Port"] == 80]
    v2.delete_listener(ListenerArn=plain["ListenerArn"])
    group = world.target_groups(name)[0]["TargetGroupArn"]
    v2.modify_target_group_attributes(
        TargetGroupArn=group, Attributes=[{"Key": "proxy_protocol_v2.enabled", "Value": "false"}]
    )
    v2.deregister_targets(TargetGroupArn=group, Targets=[{"Id": world.instance_ids[1]}])
    assert nlb_shape(world, name) != wanted
    await restored(nlb_shape, world, name, wanted, "listener, attribute and target")
    await repaired_event(kube, namespace, "nlbdrift", "listener 80 missing")

    v2.delete_load_balancer(LoadBalancerArn=nlb["LoadBalancerArn"])
    await restored(nlb_shape, world, name, wanted, "the NLB made again")
    await repaired_event(kube, namespace, "nlbdrift", "the NLB is missing")
    [again] = world.nlbs(name)
    assert ingress(kube, namespace, "nlbdrift") == [again["DNSName"]]

    await asyncio.to_thread(kube.delete, SERVICES, "nlbdrift", namespace)
    await eventually(lambda: kube.get(SERVICES, "nlbdrift", namespace) is None, timeout=60)
    assert world.nothing_left(name)


def _aws_requests() -> float:
    total = 0.0
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if sample.name == "cloud_api_requests_total" and sample.labels.get("provider") == "aws":
                total += sample.value
    return total


@pytest.mark.parametrize(
    ("annotations", "budget"),
    [
        pytest.param({}, 5, id="classic"),
        pytest.param({ann.TYPE: "nlb"}, 8, id="nlb-two-ports"),
    ],
)
def test_an_in_sync_check_is_cheap(
    lb_config: Settings, world: AwsWorld, annotations: dict[str, str], budget: int
) -> None:
    driver = AwsDriver(AWS.section(lb_config))
    spec = LoadBalancerSpec(
        name=f"drift{world.vpc_id[-20:]}",
        cluster=lb_config.cluster_name,
        service="default/cheap",
        service_uid=f"uid-{world.vpc_id}",
        ports=[
            LoadBalancerPort(name="http", port=80, node_port=30080),
            LoadBalancerPort(name="https", port=443, node_port=30443),
        ],
        backend_instance_ids=world.instance_ids,
        annotations=annotations,
    )
    driver.load_balancers.ensure_load_balancer(spec)
    before = _aws_requests()
    assert driver.load_balancers.load_balancer_drift(spec) == []
    calls = _aws_requests() - before
    print(f"in-sync drift check of {spec.name}: {calls:.0f} calls")
    assert calls <= budget, calls
    driver.load_balancers.delete_load_balancer(spec.name)
