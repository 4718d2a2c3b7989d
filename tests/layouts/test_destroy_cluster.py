"""Destroy's first phase (``--kubeconfig``): the cluster's LoadBalancer Services and volumes are
deleted through its API and waited for before the layout's resources go (AWS ``WithoutNAT`` on
moto and OpenStack ``Standard`` on the emulator, a real kube-apiserver, the Temporal dev server;
one stack for the module).

Without a kubeconfig the destroy is refused, naming the cluster's load balancer and volume and
saying to pass ``--kubeconfig``; with another cluster's kubeconfig (its
``kube-system/d8-cluster-uuid`` does not name this cluster) nothing is deleted (AWS); with the
right one, the Service and the PVC are deleted, the destroy waits until the cloud objects behind
them are gone, then deletes the layout. A thread here plays the cloud controller and the CSI
driver (the stack runs no kube-controller-manager): on a Service being deleted it deletes its
load balancer and drops the finalizer; on a PVC being deleted, it deletes the disk (EBS, Cinder)
and the PersistentVolume.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from activities.layout import LayoutActivities
from activities.layout_cluster import ClusterResourceActivities
from cloudloop import temporal
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.openstack.settings import OpenStackSettings
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import (
    CONFIG_MAPS,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    SERVICES,
    Resource,
)
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import (
    CLEAR_STEPS,
    LayoutActivity,
    LayoutInput,
    LayoutResult,
    LayoutTimings,
    workflow_id,
)
from cloudloop.settings import TemporalSettings
from devstack.backends.aws import aws_client
from devstack.backends.aws_layouts import cluster_resources
from devstack.backends.openstack import QUICK
from devstack.backends.openstack import connect as os_connect
from devstack.backends.openstack_layouts import cluster_resources as cluster_resources_os
from devstack.kube import KubeOptions
from devstack.local import LocalStack, StackOptions
from devstack.openstack_emulator import OpenStackEmulatorOptions
from starters.layout import LayoutFailed, run_layout
from tests.helpers import eventually_async
from tests.layouts.openstack_support import SECRET
from tests.layouts.openstack_support import config_file as os_config_file
from tests.layouts.support import TEST_MOUNT, config_file, mounted
from tests.support.workers import Workers
from workflows.layout import LAYOUT_WORKFLOWS

pytestmark = pytest.mark.stack

LB_FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(
        StackOptions(
            state_dir=tmp_path_factory.mktemp("destroy"),
            kube=(KubeOptions(),),
            openstack_emulator=OpenStackEmulatorOptions(password=SECRET, delays=QUICK),
        )
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def kubeconfig(stack: LocalStack) -> Path:
    return stack.clusters["main"].kubeconfig


@pytest.fixture(scope="module")
def kube(kubeconfig: Path) -> Kube:
    return Kube(api_client(kubeconfig))


@pytest.fixture(scope="module")
def settings(stack: LocalStack) -> Settings:
    return Settings(
        provider="aws",
        temporal=TemporalSettings(
            address=stack.temporal_address,
            task_queue=f"destroy-{uuid.uuid4().hex[:8]}",
            codec=stack.codec,
        ),
        aws=AwsSettings(endpoint_url=stack.aws_endpoint, timeout_s=5, max_attempts=2),
        openstack=OpenStackSettings(request_timeout_s=10, wait_timeout_s=60, poll_interval_s=0.1),
    )


@pytest.fixture(scope="module")
async def client(settings: Settings) -> Client:
    return await temporal.connect(settings.temporal)


@pytest.fixture(scope="module")
async def worker(client: Client, settings: Settings) -> AsyncIterator[None]:
    activities = [
        *LayoutActivities(mounted(settings)).all(),
        *ClusterResourceActivities(source_dir=TEST_MOUNT).all(),
    ]
    async with temporal.make_worker(
        client,
        settings.temporal.task_queue,
        workflows=LAYOUT_WORKFLOWS,
        activities=activities,  # type: ignore[arg-type]
        graceful_shutdown_s=1,
    ):
        yield


class StandIn:
    """The cloud controller's and the CSI driver's deletions, for this test's objects: a Service
    being deleted loses its load balancer (``delete_lb(name)``, waited for) and then its
    finalizer; a PVC being deleted loses its PersistentVolume's disk (``delete_disk(handle)``)
    and the PersistentVolume."""

    def __init__(
        self, kube: Kube, delete_lb: Callable[[str], None], delete_disk: Callable[[str], None]
    ) -> None:
        self.kube, self.delete_lb, self.delete_disk = kube, delete_lb, delete_disk
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)

    def _loop(self) -> None:
        while not self.stop.wait(0.5):
            for svc in self.kube.list(SERVICES).get("items", []):
                meta = svc["metadata"]
                if meta.get("deletionTimestamp") and LB_FINALIZER in meta.get("finalizers", []):
                    self.delete_lb(meta["annotations"]["test/lb"])
                    self.kube.patch(
                        SERVICES,
                        meta["name"],
                        {"metadata": {"finalizers": None}},
                        meta["namespace"],
                    )
            for pvc in self.kube.list(PERSISTENT_VOLUME_CLAIMS).get("items", []):
                meta = pvc["metadata"]
                if not meta.get("deletionTimestamp"):
                    continue
                self.kube.patch(
                    PERSISTENT_VOLUME_CLAIMS,
                    meta["name"],
                    {"metadata": {"finalizers": None}},
                    meta["namespace"],
                )
                pv = self.kube.get(PERSISTENT_VOLUMES, pvc["spec"]["volumeName"])
                if pv is not None:
                    self.delete_disk(pv["spec"]["csi"]["volumeHandle"])
                    name = pv["metadata"]["name"]
                    self.kube.patch(PERSISTENT_VOLUMES, name, {"metadata": {"finalizers": None}})
                    self.kube.delete(PERSISTENT_VOLUMES, name)


def claim_cluster(kube: Kube, cluster: ClusterIdentity) -> None:
    """The cluster's ``kube-system/d8-cluster-uuid`` names ``cluster`` (as dhctl writes it)."""
    data = {"data": {"cluster-uuid": cluster.uuid}}
    if kube.get(CONFIG_MAPS, "d8-cluster-uuid", "kube-system") is None:
        kube.create(CONFIG_MAPS, {"metadata": {"name": "d8-cluster-uuid"}, **data}, "kube-system")
    else:
        kube.patch(CONFIG_MAPS, "d8-cluster-uuid", data, "kube-system")


def service_and_claim(kube: Kube, ns: str, lb: str, driver: str, handle: str) -> None:
    """A LoadBalancer Service (with the controller's finalizer) for the load balancer ``lb``, a
    PVC bound to a PersistentVolume of the disk ``handle``, in the namespace ``ns``."""
    kube.create(NAMESPACES, {"metadata": {"name": ns}})
    kube.create(
        SERVICES,
        {
            "metadata": {
                "name": "web",
                "finalizers": [LB_FINALIZER],
                "annotations": {"test/lb": lb},
            },
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        },
        ns,
    )
    kube.create(
        PERSISTENT_VOLUMES,
        {
            "metadata": {"name": f"pv-{ns}"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete",
                "csi": {"driver": driver, "volumeHandle": handle},
                "claimRef": {"namespace": ns, "name": "data"},
            },
        },
    )
    kube.create(
        PERSISTENT_VOLUME_CLAIMS,
        {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "volumeName": f"pv-{ns}",
                "storageClassName": "",
            },
        },
        ns,
    )


async def run(
    client: Client,
    settings: Settings,
    action: str,
    path: Path,
    cluster: ClusterIdentity,
    kubeconfig: Path | None = None,
    *,
    provider: str = "aws",
) -> LayoutResult:
    input = LayoutInput(
        action=action,
        provider=provider,
        source=ConfigSource(file=str(path)),
        cluster=cluster,
        timings=LayoutTimings(max_attempts=3, cluster_wait_s=60),
        kubeconfig=str(kubeconfig) if kubeconfig else "",
    )
    return await run_layout(client, settings.temporal.task_queue, input, poll_s=0.2)


def aws_objects(kube: Kube, endpoint: str, cluster: ClusterIdentity, subnet: str) -> str:
    """An ELB in the layout's subnet behind a LoadBalancer Service, an EBS volume tagged for the
    cluster behind a bound PVC; returns the volume's ID."""
    elb = aws_client("elb", endpoint)
    elb.create_load_balancer(
        LoadBalancerName=f"{cluster.prefix}-web",
        Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
        Subnets=[subnet],
    )
    ec2 = aws_client("ec2", endpoint)
    zone = ec2.describe_subnets(SubnetIds=[subnet])["Subnets"][0]["AvailabilityZone"]
    volume = ec2.create_volume(
        AvailabilityZone=zone,
        Size=1,
        TagSpecifications=[
            {
                "ResourceType": "volume",
                "Tags": [{"Key": f"kubernetes.io/cluster/{cluster.uuid}", "Value": "owned"}],
            }
        ],
    )["VolumeId"]
    service_and_claim(kube, cluster.prefix, f"{cluster.prefix}-web", "ebs.csi.aws.com", volume)
    return str(volume)


async def test_aws_destroy_deletes_the_clusters_objects_first(
    stack: LocalStack,
    client: Client,
    settings: Settings,
    worker: None,
    kube: Kube,
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    prefix = f"d{uuid.uuid4().hex[:6]}"
    cluster = ClusterIdentity(prefix=prefix, uuid=str(uuid.uuid4()))
    path = config_file(tmp_path, "aws-without-nat", prefix)
    await run(client, settings, "apply", path, cluster)
    ec2 = aws_client("ec2", stack.moto_endpoint)
    [vpc] = [
        v
        for v in ec2.describe_vpcs()["Vpcs"]
        if {"Key": "Name", "Value": prefix} in v.get("Tags", [])
    ]
    subnet = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])[
        "Subnets"
    ][0]["SubnetId"]
    volume = await asyncio.to_thread(aws_objects, kube, stack.moto_endpoint, cluster, subnet)

    # without a kubeconfig: refused, naming them, saying what to do
    with pytest.raises(LayoutFailed) as refused:
        await run(client, settings, "destroy", path, cluster)
    assert refused.value.kind == "DestroyBlocked"
    assert f"ELB {prefix}-web" in str(refused.value) and f"volume {volume}" in str(refused.value)
    assert "--kubeconfig" in str(refused.value)

    # another cluster's kubeconfig (no d8-cluster-uuid naming this one): nothing deleted
    with pytest.raises(LayoutFailed) as wrong:
        await run(client, settings, "destroy", path, cluster, kubeconfig)
    assert wrong.value.kind == "WrongCluster"
    assert kube.get(SERVICES, "web", prefix) is not None
    assert kube.get(PERSISTENT_VOLUME_CLAIMS, "data", prefix) is not None

    claim_cluster(kube, cluster)
    elb, ec2 = aws_client("elb", stack.moto_endpoint), aws_client("ec2", stack.moto_endpoint)
    with StandIn(
        kube,
        lambda name: elb.delete_load_balancer(LoadBalancerName=name),
        lambda handle: ec2.delete_volume(VolumeId=handle),
    ):
        result = await run(client, settings, "destroy", path, cluster, kubeconfig)
    assert result.modules
    assert kube.get(SERVICES, "web", prefix) is None
    assert kube.get(PERSISTENT_VOLUMES, f"pv-{prefix}") is None
    assert cluster_resources(stack.moto_endpoint, prefix) == []
    assert (
        ec2.describe_volumes(Filters=[{"Name": "volume-id", "Values": [volume]}])["Volumes"] == []
    )


async def test_openstack_destroy_deletes_the_clusters_objects_first(
    stack: LocalStack,
    client: Client,
    settings: Settings,
    worker: None,
    kube: Kube,
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    assert stack.openstack is not None
    prefix = f"o{uuid.uuid4().hex[:6]}"
    cluster = ClusterIdentity(prefix=prefix, uuid=str(uuid.uuid4()))
    path = os_config_file(tmp_path, "openstack-standard", prefix, stack.openstack)
    # the destroy's real worker process, started now (its start overlaps the apply)
    env = {
        **os.environ,
        "CLOUDLOOP_PROVIDER": "openstack",
        "CLOUDLOOP_KUBECONFIG": str(kubeconfig),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_TEMPORAL__ADDRESS": stack.temporal_address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": f"destroy-kill-{prefix}",
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "1",
        **stack.codec_env(),
        "CLOUDLOOP_OPENSTACK__REQUEST_TIMEOUT_S": "10",
        "CLOUDLOOP_OPENSTACK__POLL_INTERVAL_S": "0.1",
        "CLOUDLOOP_LAYOUTS__SOURCE_DIR": str(TEST_MOUNT),  # the config's and kubeconfig's root
    }
    workers = Workers(tmp_path)
    first = workers.start(env, wait=False)
    await run(client, settings, "apply", path, cluster, provider="openstack")
    sdk = os_connect(stack.openstack)
    try:
        subnet = next(sdk.network.subnets(name=prefix))
        lb = sdk.load_balancer.create_load_balancer(name=f"{prefix}-web", vip_subnet_id=subnet.id)
        sdk.load_balancer.wait_for_load_balancer(lb.id, interval=0.1, wait=30)
        volume = sdk.block_storage.create_volume(
            size=1,
            name=f"pvc-{prefix}",
            metadata={"cinder.csi.openstack.org/cluster": cluster.uuid},
        )
        sdk.block_storage.wait_for_status(volume, "available", interval=0.1, wait=30)
        await asyncio.to_thread(
            service_and_claim, kube, prefix, lb.id, "cinder.csi.openstack.org", volume.id
        )

        def delete_lb(lb_id: str) -> None:
            sdk.load_balancer.delete_load_balancer(lb_id)
            sdk.load_balancer.wait_for_delete(lb, interval=0.1, wait=30)

        def delete_disk(volume_id: str) -> None:
            sdk.block_storage.delete_volume(volume_id)
            sdk.block_storage.wait_for_delete(volume, interval=0.1, wait=30)

        # the destroy on real worker processes: the first is SIGKILLed while the phase waits for
        # the Service (its load balancer not deleted yet); the next resumes the wait and goes on
        claim_cluster(kube, cluster)
        try:
            assert first.process is not None
            await asyncio.to_thread(first.process.wait_ready, 120)
            destroy = asyncio.create_task(
                run_layout(
                    client,
                    env["CLOUDLOOP_TEMPORAL__TASK_QUEUE"],
                    LayoutInput(
                        action="destroy",
                        provider="openstack",
                        source=ConfigSource(file=str(path)),
                        cluster=cluster,
                        timings=LayoutTimings(
                            max_attempts=3, cluster_wait_s=120, heartbeat_timeout_s=5
                        ),
                        kubeconfig=str(kubeconfig),
                    ),
                    poll_s=0.2,
                )
            )
            handle = client.get_workflow_handle(workflow_id(prefix))

            async def waiting_for_the_service() -> bool | None:
                svc = await asyncio.to_thread(kube.get, SERVICES, "web", prefix)
                if svc is None or not svc["metadata"].get("deletionTimestamp"):
                    return None
                # The wait step itself has started: ``delete-services`` sets the deletion
                # timestamp and may still show as started, and a kill between its end and the
                # wait's start would leave the wait a first attempt on the next worker.
                history = await handle.fetch_history()
                scheduled = sum(
                    1
                    for e in history.events
                    if e.HasField("activity_task_scheduled_event_attributes")
                    and e.activity_task_scheduled_event_attributes.activity_type.name
                    == LayoutActivity.CLEAR_CLUSTER
                )
                if scheduled != CLEAR_STEPS.index("wait-services") + 1:
                    return None
                pending = (await handle.describe()).raw_description.pending_activities
                return (
                    any(
                        a.activity_type.name == LayoutActivity.CLEAR_CLUSTER
                        and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                        for a in pending
                    )
                    or None
                )

            await eventually_async(waiting_for_the_service, timeout=60, what="the wait step")
            first.kill()
            workers.start(env, wait=False)  # it starts while the heartbeat times out
            with StandIn(kube, delete_lb, delete_disk):
                result = await asyncio.wait_for(destroy, timeout=180)
        finally:
            workers.stop_all()
        assert result.modules
        history = await handle.fetch_history()
        retried = [
            e.activity_task_started_event_attributes.attempt
            for e in history.events
            if e.HasField("activity_task_started_event_attributes")
            and e.activity_task_started_event_attributes.attempt > 1
        ]
        assert retried, "the killed worker's step was not retried"
        assert kube.get(SERVICES, "web", prefix) is None
        assert cluster_resources_os(stack.openstack.admin_url, prefix) == []
        assert list(sdk.block_storage.volumes(name=f"pvc-{prefix}")) == []
    finally:
        workers.stop_all()
        sdk.close()
