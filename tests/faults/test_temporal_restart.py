"""The Temporal dev server SIGKILLed mid-flight and restarted on the same database file while
machines are provisioned (zVirt), load balancers ensured, nodes drained and volumes attached
(AWS): all complete, each cloud resource exactly once, nothing orphaned, no Node deleted."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudloop import temporal
from cloudloop.cloud.zvirt.capi import INFRA_KINDS as ZVIRT_KINDS
from cloudloop.csi.operations import VolumeOperations
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import NODES, SERVICES, Resource
from cloudloop.messages.termination import MANAGED_TAG
from cloudloop.messages.volume import (
    AttachVolumeRequest,
    CapacityRange,
    Code,
    CreateVolumeRequest,
)
from devstack import machine_fixtures
from devstack.aws_front import stats
from devstack.backends.aws import create_cluster_network, spot_itn
from devstack.devmode import stack_settings
from devstack.kube import ALL_COMPONENTS, KubeOptions
from devstack.local import LocalStack
from devstack.ovirt_emulator import Delays, OvirtEmulatorAdmin, OvirtEmulatorOptions
from tests.faults.conftest import own_stack
from tests.faults.rig import (
    RUNS,
    Figures,
    Process,
    aws,
    base_env,
    elbs_of,
    lb_service,
    with_ingress,
)
from tests.helpers import eventually
from tests.termination.support import (
    kwok_node,
    node_ready,
    replica_set,
    running_pods,
)

pytestmark = [pytest.mark.stack, pytest.mark.fault]

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
MACHINES, SERVICE_COUNT, DRAINS, ATTACHES = 3, 5, 2, 3
CONVERGE_TIMEOUT = 300.0
GIB = 1024**3


@pytest.fixture(scope="module")
def temporal_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with own_stack(
        tmp_path_factory.mktemp("temporal-restart"),
        kube=(KubeOptions(components=ALL_COMPONENTS, node_monitor_grace_period="8s"),),
        ovirt_emulator=OvirtEmulatorOptions(
            password="restart",
            delays=Delays(clone_s=2.0, boot_s=2.0, guest_ip_s=0.5, shutdown_s=0.5),
        ),
    ) as local:
        machine_fixtures.ensure_capi_crds(Kube(api_client(local.kubeconfig)))
        yield local


def zvirt_env(stack: LocalStack, scope: str) -> dict[str, str]:
    ovirt = stack.ovirt
    assert ovirt is not None
    return base_env(
        stack,
        f"{scope}-z",
        f"{scope}-z",
        CLOUDLOOP_PROVIDER="zvirt",
        CLOUDLOOP_ZVIRT__API_URL=ovirt.api_url,
        CLOUDLOOP_ZVIRT__USERNAME=ovirt.username,
        CLOUDLOOP_ZVIRT__PASSWORD=ovirt.password,
        CLOUDLOOP_ZVIRT__CA_BUNDLE=str(ovirt.ca_file),
        CLOUDLOOP_ZVIRT__CLUSTER_ID=ovirt.cluster_id,
        CLOUDLOOP_ZVIRT__TIMEOUT_S="5",
        CLOUDLOOP_ZVIRT__WAIT_TIMEOUT_S="30",
        CLOUDLOOP_ZVIRT__POLL_INTERVAL_S="0.2",
        CLOUDLOOP_CCM__NODE_SELECTOR="cloudloop-fault=none",
    )


async def attach_until_done(ops: VolumeOperations, request: AttachVolumeRequest) -> Any:
    """CSI's attacher: the same request again until an answer (a dead server is no answer)."""
    while True:
        try:
            result = await ops.attach(request, timeout=60)
        except Exception:
            await asyncio.sleep(1)
            continue
        if result.code == Code.OK:
            return result
        await asyncio.sleep(1)


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("run", RUNS)
async def test_temporal_killed_mid_flight(
    temporal_stack: LocalStack, tmp_path: Path, run: int
) -> None:
    stack = temporal_stack
    scope = f"tmp{run}-{uuid.uuid4().hex[:6]}"
    kube = Kube(api_client(stack.kubeconfig))
    ec2, sqs = aws(stack, "ec2"), aws(stack, "sqs")
    admin = OvirtEmulatorAdmin(stack.ovirt.admin_url if stack.ovirt else "")
    network = create_cluster_network(ec2, scope)
    lb_instances = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=ATTACHES,
        MaxCount=ATTACHES,
        SubnetId=network.subnet_ids[0],
        SecurityGroupIds=[network.node_group_id],
        Placement={"AvailabilityZone": "us-east-1a"},
    )["Instances"]
    drained = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=DRAINS,
        MaxCount=DRAINS,
        SubnetId=network.subnet_ids[0],
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": MANAGED_TAG, "Value": ""}]}
        ],
    )["Instances"]
    queue = sqs.create_queue(QueueName=f"nth-{scope}")["QueueUrl"]
    kube.create(NAMESPACES, {"metadata": {"name": scope}})

    # Nodes: kwok ones for the drains (with pods), plain ones behind the load balancers.
    drain_nodes = [kwok_node(kube, i["PrivateDnsName"], f"{scope}-drain") for i in drained]
    spare = kwok_node(kube, f"spare-{scope}", f"{scope}-drain")
    for instance in lb_instances:
        kube.create(
            NODES,
            {
                "metadata": {
                    "name": instance["PrivateDnsName"],
                    "labels": {"cloudloop-fault": scope},
                },
                "spec": {"providerID": f"aws:///us-east-1a/{instance['InstanceId']}"},
            },
        )
    all_nodes = [*drain_nodes, spare, *(i["PrivateDnsName"] for i in lb_instances)]
    kube.patch(NODES, spare, {"spec": {"unschedulable": True}})  # pods land on the sources first
    await eventually(
        lambda: all(node_ready(kube, n) for n in (*drain_nodes, spare)), timeout=90, what="kwok"
    )
    replica_set(kube, scope, "web", 2 * DRAINS, f"{scope}-drain")
    await eventually(
        lambda: len(running_pods(kube, scope)) == 2 * DRAINS, timeout=90, what="pods running"
    )
    kube.patch(NODES, spare, {"spec": {"unschedulable": False}})

    aws_env = base_env(
        stack,
        scope,
        scope,
        CLOUDLOOP_CCM__NODE_SELECTOR=f"cloudloop-fault={scope}",
        CLOUDLOOP_NTH__QUEUE_URL=queue,
        CLOUDLOOP_NTH__AUTOSCALING_ENDPOINT_URL=stack.aws_endpoint,
        CLOUDLOOP_NTH__WAIT_TIME_S="1",
        CLOUDLOOP_NTH__VISIBILITY_TIMEOUT_S="10",
        CLOUDLOOP_NTH__DRAIN_ROUND_S="5",
        CLOUDLOOP_NTH__ACTIVITY_HEARTBEAT_TIMEOUT_S="5",
        CLOUDLOOP_NTH__NODE_TERMINATION_GRACE_PERIOD_S="240",
        CLOUDLOOP_NTH__EVICTION_RETRY_INTERVAL_S="1",
    )
    processes = [
        Process("worker", aws_env, tmp_path, name="aws-worker").start(),
        Process("starter", aws_env, tmp_path, name="aws-starter").start(),
        Process("worker", zvirt_env(stack, scope), tmp_path, name="zvirt-worker").start(),
        Process("starter", zvirt_env(stack, scope), tmp_path, name="zvirt-starter").start(),
    ]
    settings = stack_settings(stack, task_queue=scope, cluster=scope)
    client = await temporal.connect(settings.temporal)
    ops = VolumeOperations.from_settings(client, settings)
    volumes = []
    for i in range(ATTACHES):
        created = await ops.create(
            CreateVolumeRequest(name=f"{scope}-vol-{i}", capacity=CapacityRange(required_bytes=GIB))
        )
        assert created.code == Code.OK and created.volume is not None, created
        volumes.append(created.volume.id)
    stats(stack.aws_endpoint, reset=True)
    machines = [f"m{i}" for i in range(MACHINES)]
    try:
        # -- everything at once -------------------------------------------------------------
        machine_fixtures.create_cluster(kube, scope, "c1", ZVIRT_KINDS)
        ovirt = stack.ovirt
        assert ovirt is not None
        for name in machines:
            machine_fixtures.create_bootstrap_secret(kube, scope, f"{name}-data", b"#cc\n")
            machine_fixtures.create_machine(
                kube,
                scope,
                name,
                cluster="c1",
                kinds=ZVIRT_KINDS,
                spec={
                    "template": ovirt.template,
                    "vnicProfileID": ovirt.vnic_profile_id,
                    "cpu": {"sockets": 1, "cores": 1, "threads": 1},
                    "memory": 1024,
                    "nicName": "nic1",
                },
                bootstrap_secret=f"{name}-data",
            )
        for i in range(SERVICE_COUNT):
            lb_service(kube, scope, f"svc-{i}")
        for instance in drained:
            sqs.send_message(QueueUrl=queue, MessageBody=spot_itn(instance["InstanceId"]))
        attaches = [
            asyncio.create_task(
                attach_until_done(
                    ops,
                    AttachVolumeRequest(volume_id=v, node_id=lb_instances[i]["InstanceId"]),
                )
            )
            for i, v in enumerate(volumes)
        ]
        await eventually(
            lambda: any(vm["name"] in machines for vm in admin.vms()),
            interval=0.1,
            what="machines being provisioned",
        )
        await asyncio.sleep(1.0)
        killed = time.monotonic()
        await asyncio.to_thread(stack.restart_temporal, down_s=3.0)
        restarted = time.monotonic()

        # -- convergence ----------------------------------------------------------------------
        def machines_ready() -> bool:
            for name in machines:
                obj = kube.get(ZVIRT_KINDS.machine, name, scope) or {}
                if not (obj.get("status") or {}).get("ready"):
                    return False
            return True

        def drained_all() -> bool:
            depth = sqs.get_queue_attributes(
                QueueUrl=queue,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                ],
            )["Attributes"]
            empty = (
                int(depth["ApproximateNumberOfMessages"])
                + int(depth["ApproximateNumberOfMessagesNotVisible"])
                == 0
            )
            left = [
                p for p in running_pods(kube, scope) if p["spec"].get("nodeName") in drain_nodes
            ]
            return empty and not left

        await asyncio.wait_for(asyncio.gather(*attaches), CONVERGE_TIMEOUT)
        await eventually(
            lambda: (
                machines_ready() and with_ingress(kube, scope) == SERVICE_COUNT and drained_all()
            ),
            timeout=CONVERGE_TIMEOUT,
            interval=1.0,
            what="machines, load balancers and drains done",
        )
        converged = time.monotonic() - restarted

        # -- exactly once -----------------------------------------------------------------------
        vms = [vm for vm in admin.vms() if vm["name"] in machines]
        elbs = await asyncio.to_thread(elbs_of, stack, scope)
        described = ec2.describe_volumes(VolumeIds=volumes)["Volumes"]
        attachments = {
            v["VolumeId"]: [a["InstanceId"] for a in v.get("Attachments", [])] for v in described
        }
        expected = {v: [lb_instances[i]["InstanceId"]] for i, v in enumerate(volumes)}
        creates = stats(stack.aws_endpoint)["requests"].get(
            "elasticloadbalancing:CreateLoadBalancer", 0
        )
        nodes_left = [n for n in all_nodes if kube.get(NODES, n) is not None]
        duplicates = (
            (len(vms) - MACHINES)
            + (len(elbs) - SERVICE_COUNT)
            + max(0, creates - SERVICE_COUNT)
            + sum(len(a) - 1 for a in attachments.values() if a)
        )

        # -- teardown through the product: nothing may be left ---------------------------------
        for name in machines:
            kube.delete(ZVIRT_KINDS.machine, name, scope)
        for i in range(SERVICE_COUNT):
            kube.delete(SERVICES, f"svc-{i}", scope)
        await eventually(
            lambda: (
                not [vm for vm in admin.vms() if vm["name"] in machines]
                and not elbs_of(stack, scope)
                and not kube.list(ZVIRT_KINDS.machine, scope)["items"]
            ),
            timeout=CONVERGE_TIMEOUT,
            interval=1.0,
            what="machines and load balancers deleted",
        )
        orphaned_disks = [d for d in admin.disks() if d["attached_to"] is None]
        figures = Figures(
            fault="Temporal dev server SIGKILL + restart (same database)",
            converge_s=converged,
            duplicates=duplicates,
            orphans=len(orphaned_disks),
            deleted_nodes=len(all_nodes) - len(nodes_left),
            extra={
                "run": run,
                "outage_s": round(restarted - killed, 1),
                "vms": len(vms),
                "elb_creates": creates,
                "attachments": sum(len(a) for a in attachments.values()),
                "process_exits": sum(len(p.exits) for p in processes),
            },
        )
        figures.report()
        assert attachments == expected
        assert figures.duplicates == 0 and figures.orphans == 0 and figures.deleted_nodes == 0
    finally:
        for process in processes:
            process.stop()
        for node in all_nodes:
            kube.delete(NODES, node)
