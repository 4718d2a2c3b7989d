"""Service ``type: LoadBalancer`` → AWS load balancer, against the real stack (kube-apiserver,
Temporal dev server, moto): the starter, the per-Service workflow and the AWS driver together."""

from __future__ import annotations

import asyncio
from functools import partial

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.aws.loadbalancers import service_annotations as ann
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Service
from cloudloop.kube.resources import NODES, SERVICES, ObjectRef
from cloudloop.messages.loadbalancer import (
    LB_FINALIZER,
    LoadBalancerQuery,
    LoadBalancerResult,
    LoadBalancerState,
    workflow_id,
)
from cloudloop.rules.loadbalancer import EXCLUDE_FROM_LB_LABEL
from tests.helpers import eventually, eventually_async
from tests.loadbalancer.support import (
    AwsWorld,
    events,
    ingress,
    lb_name,
    make_service,
    service_starter,
)
from workers.main import build_worker

pytestmark = pytest.mark.stack


def service_ref(service: Service) -> ObjectRef:
    return ObjectRef.of(SERVICES, service)


async def workflow_state(client: Client, service: Service) -> LoadBalancerState:
    handle = client.get_workflow_handle(workflow_id(service_ref(service)))
    state: LoadBalancerState = await handle.query(
        LoadBalancerQuery.STATE, result_type=LoadBalancerState
    )
    return state


async def test_classic_elb_ensure_update_and_delete(
    kube: Kube,
    client: Client,
    lb_config: Settings,
    namespace: str,
    world: AwsWorld,
    nodes: list[str],
    running: None,
) -> None:
    annotations = {
        ann.ADDITIONAL_RESOURCE_TAGS: "team=web, cost-center=42",
        ann.HEALTHCHECK_INTERVAL: "20",
        ann.HEALTHCHECK_HEALTHY_THRESHOLD: "3",
    }
    service = await asyncio.to_thread(
        make_service, kube, namespace, "web", annotations=annotations, ports=(80, 443)
    )
    name = lb_name(service)
    wf_id = workflow_id(service_ref(service))
    hostnames = await eventually(lambda: ingress(kube, namespace, "web"), what="ingress hostname")
    assert hostnames == [f"{name}.us-east-1.elb.amazonaws.com"]

    fresh = await asyncio.to_thread(kube.get, SERVICES, "web", namespace)
    assert fresh is not None and LB_FINALIZER in fresh["metadata"]["finalizers"]
    node_ports = {p["port"]: p["nodePort"] for p in fresh["spec"]["ports"]}
    elb = world.classic(name)
    assert elb is not None
    listeners = {
        d["Listener"]["LoadBalancerPort"]: d["Listener"]["InstancePort"]
        for d in elb["ListenerDescriptions"]
    }
    assert listeners == node_ports
    assert sorted(i["InstanceId"] for i in elb["Instances"]) == sorted(world.instance_ids)
    assert elb["HealthCheck"]["Target"] == f"TCP:{node_ports[80]}"
    assert elb["HealthCheck"]["Interval"] == 20 and elb["HealthCheck"]["HealthyThreshold"] == 3
    assert sorted(elb["Subnets"]) == sorted(world.subnet_ids)
    tags = {
        t["Key"]: t["Value"]
        for t in world.client("elb").describe_tags(LoadBalancerNames=[name])["TagDescriptions"][0][
            "Tags"
        ]
    }
    assert tags[f"kubernetes.io/cluster/{lb_config.cluster_name}"] == "owned"
    assert tags["kubernetes.io/service-name"] == f"{namespace}/web"
    assert tags["cloudloop.io/service-uid"] == service["metadata"]["uid"]
    assert tags["team"] == "web" and tags["cost-center"] == "42"
    # The ELB's own group is open on the listener ports; the nodes admit the cluster's shared
    # backend group, which the ELB carries too (one node rule for all of the cluster's ELBs).
    [own] = world.own_groups(name)
    backend = world.backend_group()
    assert sorted(elb["SecurityGroups"]) == sorted([own["GroupId"], backend])
    assert {(r["GroupId"], r["FromPort"], r["CidrIpv4"]) for r in world.rules(name)} == {
        (own["GroupId"], 80, "0.0.0.0/0"),
        (own["GroupId"], 443, "0.0.0.0/0"),
    }
    [node_rule] = world.node_group_ingress()
    assert node_rule["ReferencedGroupInfo"]["GroupId"] == backend

    for reason in ("EnsuringLoadBalancer", "EnsuredLoadBalancer"):
        found = await eventually(partial(events, kube, namespace, "web", reason), what=reason)
        assert wf_id in found[0]["message"]

    # Findable by search attributes.
    query = (
        f"CloudloopCluster='{lb_config.cluster_name}' AND CloudloopKind='Service' "
        f"AND CloudloopNamespace='{namespace}' AND CloudloopName='web'"
    )

    async def listed() -> list[str]:
        return [wf.id async for wf in client.list_workflows(query)]

    assert await eventually_async(listed, what="workflow in visibility") == [wf_id]

    # A node leaves the LB node set: the backends change, nothing else.
    await asyncio.to_thread(
        kube.patch, NODES, nodes[0], {"metadata": {"labels": {EXCLUDE_FROM_LB_LABEL: "true"}}}
    )

    def registered() -> list[str] | None:
        lb = world.classic(name) or {}
        found = sorted(i["InstanceId"] for i in lb.get("Instances", []))
        return found if found == sorted(world.instance_ids[1:]) else None

    await eventually(registered, what="the excluded node's instance deregistered")
    updated = await eventually(
        lambda: events(kube, namespace, "web", "UpdatedLoadBalancer"), what="UpdatedLoadBalancer"
    )
    assert wf_id in updated[0]["message"]
    assert ingress(kube, namespace, "web") == hostnames
    assert len(events(kube, namespace, "web", "EnsuringLoadBalancer")) == 1

    # Deleting the Service tears everything down, then the finalizer goes.
    await asyncio.to_thread(kube.delete, SERVICES, "web", namespace)
    await eventually(
        lambda: kube.get(SERVICES, "web", namespace) is None, timeout=60, what="Service deleted"
    )
    assert world.nothing_left(name)
    assert world.node_rules_besides_backend() == []
    for reason in ("DeletingLoadBalancer", "DeletedLoadBalancer"):
        found = await eventually(partial(events, kube, namespace, "web", reason), what=reason)
        assert wf_id in found[0]["message"]
    result = await client.get_workflow_handle(wf_id, result_type=LoadBalancerResult).result()
    assert result.deleted


async def test_nlb_with_annotations_then_type_change(
    kube: Kube,
    client: Client,
    namespace: str,
    world: AwsWorld,
    nodes: list[str],
    running: None,
) -> None:
    await asyncio.to_thread(kube.patch, NODES, nodes[2], {"metadata": {"labels": {"pool": "b"}}})
    annotations = {
        ann.TYPE: "nlb",
        ann.INTERNAL: "true",
        ann.SUBNETS: f"{world.subnet_ids[0]},{world.cluster}-us-east-1b",
        ann.TARGET_NODE_LABELS: "pool=a",
        ann.HEALTHCHECK_PROTOCOL: "http",
        ann.HEALTHCHECK_PATH: "/ready",
        ann.HEALTHCHECK_INTERVAL: "10",
        ann.HEALTHCHECK_TIMEOUT: "5",
    }
    service = await asyncio.to_thread(
        make_service, kube, namespace, "api", annotations=annotations, ports=(80, 8080)
    )
    name = lb_name(service)
    hostnames = await eventually(lambda: ingress(kube, namespace, "api"), what="ingress hostname")
    [nlb] = world.nlbs(name)
    assert hostnames == [nlb["DNSName"]]
    assert nlb["Scheme"] == "internal" and nlb["Type"] == "network"
    assert world.classic(name) is None
    groups = world.target_groups(name)
    assert len(groups) == 2
    fresh = await asyncio.to_thread(kube.get, SERVICES, "api", namespace)
    assert fresh is not None
    assert sorted(g["Port"] for g in groups) == sorted(
        p["nodePort"] for p in fresh["spec"]["ports"]
    )
    v2 = world.client("elbv2")
    for group in groups:
        assert group["HealthCheckProtocol"] == "HTTP" and group["HealthCheckPath"] == "/ready"
        health = v2.describe_target_health(TargetGroupArn=group["TargetGroupArn"])
        targets = sorted(d["Target"]["Id"] for d in health["TargetHealthDescriptions"])
        assert targets == sorted(world.instance_ids[:2])  # pool=a only
    listeners = v2.describe_listeners(LoadBalancerArn=nlb["LoadBalancerArn"])["Listeners"]
    assert sorted(listener["Port"] for listener in listeners) == [80, 8080]
    assert {r["FromPort"] for r in world.rules(name)} == {g["Port"] for g in groups}

    # type: ClusterIP → the LB goes, the status is cleared, the finalizer removed.
    await asyncio.to_thread(
        kube.patch,
        SERVICES,
        "api",
        {
            "spec": {
                "type": "ClusterIP",
                "ports": [{"name": "p80", "port": 80}, {"name": "p8080", "port": 8080}],
            }
        },
        namespace,
        patch_type="merge",
    )

    def torn_down() -> bool:
        svc = kube.get(SERVICES, "api", namespace) or {}
        meta = svc.get("metadata", {})
        return LB_FINALIZER not in (meta.get("finalizers") or []) and not ingress(
            kube, namespace, "api"
        )

    await eventually(torn_down, timeout=60, what="finalizer removed and status cleared")
    assert world.nothing_left(name)
    assert world.node_group_ingress() == []

    # Back to LoadBalancer (same UID): a new run of the same workflow ID, finalizer first.
    await asyncio.to_thread(
        kube.patch, SERVICES, "api", {"spec": {"type": "LoadBalancer"}}, namespace
    )
    await eventually(lambda: ingress(kube, namespace, "api"), what="ingress again")
    again = await asyncio.to_thread(kube.get, SERVICES, "api", namespace)
    assert again is not None and LB_FINALIZER in again["metadata"]["finalizers"]
    assert len(world.nlbs(name)) == 1
    await asyncio.to_thread(kube.delete, SERVICES, "api", namespace)
    await eventually(
        lambda: kube.get(SERVICES, "api", namespace) is None, timeout=60, what="Service deleted"
    )
    assert world.nothing_left(name)


async def test_invalid_annotation_warns_and_changes_nothing(
    kube: Kube,
    client: Client,
    namespace: str,
    world: AwsWorld,
    nodes: list[str],
    running: None,
) -> None:
    service = await asyncio.to_thread(
        make_service,
        kube,
        namespace,
        "bad",
        annotations={ann.HEALTHCHECK_INTERVAL: "often", ann.SECURITY_GROUPS: "web-sg"},
    )
    name = lb_name(service)
    warnings = await eventually(
        lambda: events(kube, namespace, "bad", "SyncLoadBalancerFailed"), what="Warning Event"
    )
    assert warnings[0]["type"] == "Warning"
    assert workflow_id(service_ref(service)) in warnings[0]["message"]
    assert "often" in warnings[0]["message"]
    assert world.nothing_left(name)
    assert ingress(kube, namespace, "bad") == []
    state = await workflow_state(client, service)
    assert state.rejected is not None and state.applied is None

    # Fixing the annotation is the next change: the LB appears.
    await asyncio.to_thread(
        kube.patch,
        SERVICES,
        "bad",
        {"metadata": {"annotations": {ann.HEALTHCHECK_INTERVAL: "30", ann.SECURITY_GROUPS: None}}},
        namespace,
    )
    await eventually(lambda: ingress(kube, namespace, "bad"), what="ingress after the fix")
    assert world.classic(name) is not None


async def test_handled_elsewhere_and_other_classes_are_left_alone(
    kube: Kube,
    client: Client,
    namespace: str,
    world: AwsWorld,
    nodes: list[str],
    running: None,
) -> None:
    external = await asyncio.to_thread(
        make_service, kube, namespace, "ext", annotations={ann.TYPE: "external"}
    )
    classed = await asyncio.to_thread(
        make_service, kube, namespace, "classed", lb_class="example.com/other"
    )
    control = await asyncio.to_thread(make_service, kube, namespace, "control")
    await eventually(lambda: ingress(kube, namespace, "control"), what="control Service ingress")

    async def handled() -> LoadBalancerState | None:
        try:
            state = await workflow_state(client, external)
        except RPCError:  # not started yet
            return None
        return state if state.applied is not None else None

    await eventually_async(handled, what="external Service marked handled elsewhere")
    assert world.nothing_left(lb_name(external))
    assert ingress(kube, namespace, "ext") == []
    assert events(kube, namespace, "ext", "SyncLoadBalancerFailed") == []

    # A Service with a loadBalancerClass gets no finalizer and no workflow.
    current = await asyncio.to_thread(kube.get, SERVICES, "classed", namespace)
    assert current is not None and not current["metadata"].get("finalizers")
    with pytest.raises(RPCError):
        await client.get_workflow_handle(workflow_id(service_ref(classed))).describe()
    assert world.nothing_left(lb_name(classed))
    assert world.classic(lb_name(control)) is not None


async def test_continue_as_new_keeps_the_load_balancer(
    kube: Kube,
    client: Client,
    lb_config: Settings,
    namespace: str,
    world: AwsWorld,
    nodes: list[str],
) -> None:
    worker = build_worker(client, lb_config, driver=AwsDriver(AWS.section(lb_config)), kube=kube)
    async with worker, service_starter(kube, client, lb_config, namespace, history_limit=20):
        service = await asyncio.to_thread(make_service, kube, namespace, "can")
        name = lb_name(service)
        await eventually(lambda: ingress(kube, namespace, "can"), what="ingress")
        handle = client.get_workflow_handle(workflow_id(service_ref(service)))
        first_run = (await handle.describe()).run_id
        for round_ in range(4):  # node-set flips grow the history past the limit
            value = "true" if round_ % 2 == 0 else "false"
            await asyncio.to_thread(
                kube.patch,
                NODES,
                nodes[0],
                {"metadata": {"labels": {EXCLUDE_FROM_LB_LABEL: value}}},
            )
            wanted = sorted(world.instance_ids[1:] if value == "true" else world.instance_ids)

            def backends(wanted: list[str] = wanted) -> bool:
                lb = world.classic(name) or {}
                return sorted(i["InstanceId"] for i in lb.get("Instances", [])) == wanted

            await eventually(backends, what=f"backends after round {round_}")

        async def new_run() -> str | None:
            run_id = (await handle.describe()).run_id
            return run_id if run_id != first_run else None

        await eventually_async(new_run, what="a continued-as-new run")
        state = await workflow_state(client, service)
        assert state.applied is not None and state.ingress == ingress(kube, namespace, "can")
        assert world.classic(name) is not None and len(world.nlbs(name)) == 0
        await asyncio.to_thread(kube.delete, SERVICES, "can", namespace)
        await eventually(
            lambda: kube.get(SERVICES, "can", namespace) is None, timeout=60, what="deleted"
        )
        assert world.nothing_left(name)
