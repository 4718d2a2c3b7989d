"""Destroy's first phase (``--kubeconfig``): the cluster's LoadBalancer Services and volumes are
deleted through its API and waited for before the layout's resources go (AWS ``WithoutNAT`` on
moto, a real kube-apiserver, the Temporal dev server; one stack for the module).

Without a kubeconfig the destroy is refused, naming the cluster's ELB and volume and saying to
pass ``--kubeconfig``; with another cluster's kubeconfig (its ``kube-system/d8-cluster-uuid``
does not name this cluster) nothing is deleted; with the right one, the Service and the PVC are
deleted, the destroy waits until the cloud objects behind them are gone, then deletes the
layout. A thread here plays the cloud controller and the CSI driver (the stack runs no
kube-controller-manager): on a Service being deleted it deletes its ELB and drops the finalizer;
on a PVC being deleted, it deletes the EBS volume and the PersistentVolume.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.layout import LayoutActivities
from activities.layout_cluster import PVCS, ClusterResourceActivities
from cloudloop import temporal
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import CONFIG_MAPS, PERSISTENT_VOLUMES, SERVICES
from cloudloop.layouts.config import ClusterIdentity
from cloudloop.layouts.model import ConfigSource
from cloudloop.messages.layout import LayoutInput, LayoutResult, LayoutTimings
from cloudloop.settings import Settings, TemporalSettings
from devstack.backends.aws import aws_client
from devstack.backends.aws_layouts import cluster_resources
from devstack.kube import KubeOptions
from devstack.local import LocalStack, StackOptions
from starters.layout import LayoutFailed, run_layout
from tests.layouts.support import config_file
from workflows.layout import LAYOUT_WORKFLOWS

pytestmark = pytest.mark.stack

LB_FINALIZER = "service.kubernetes.io/load-balancer-cleanup"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(
        StackOptions(state_dir=tmp_path_factory.mktemp("destroy"), kube=(KubeOptions(),))
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
            address=stack.temporal_address, task_queue=f"destroy-{uuid.uuid4().hex[:8]}"
        ),
        aws=AwsSettings(endpoint_url=stack.aws_endpoint, timeout_s=5, max_attempts=2),
    )


@pytest.fixture(scope="module")
async def client(settings: Settings) -> Client:
    return await temporal.connect(settings.temporal)


@pytest.fixture(scope="module")
async def worker(client: Client, settings: Settings) -> AsyncIterator[None]:
    activities = [*LayoutActivities(settings).all(), *ClusterResourceActivities().all()]
    async with temporal.make_worker(
        client,
        settings.temporal.task_queue,
        workflows=LAYOUT_WORKFLOWS,
        activities=activities,  # type: ignore[arg-type]
        graceful_shutdown_s=1,
    ):
        yield


class StandIn:
    """The cloud controller's and the CSI driver's deletions, for this test's objects."""

    def __init__(self, kube: Kube, endpoint: str) -> None:
        self.kube, self.endpoint = kube, endpoint
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        elb, ec2 = aws_client("elb", self.endpoint), aws_client("ec2", self.endpoint)
        while not self.stop.wait(0.5):
            for svc in self.kube.list(SERVICES).get("items", []):
                meta = svc["metadata"]
                if meta.get("deletionTimestamp") and LB_FINALIZER in meta.get("finalizers", []):
                    elb.delete_load_balancer(LoadBalancerName=meta["annotations"]["test/elb"])
                    self.kube.patch(
                        SERVICES,
                        meta["name"],
                        {"metadata": {"finalizers": None}},
                        meta["namespace"],
                    )
            for pvc in self.kube.list(PVCS).get("items", []):
                meta = pvc["metadata"]
                if meta.get("deletionTimestamp"):
                    self.kube.patch(
                        PVCS, meta["name"], {"metadata": {"finalizers": None}}, meta["namespace"]
                    )
                    pv = self.kube.get(PERSISTENT_VOLUMES, pvc["spec"]["volumeName"])
                    if pv is not None:
                        ec2.delete_volume(VolumeId=pv["spec"]["csi"]["volumeHandle"])
                        self.kube.patch(
                            PERSISTENT_VOLUMES,
                            pv["metadata"]["name"],
                            {"metadata": {"finalizers": None}},
                        )
                        self.kube.delete(PERSISTENT_VOLUMES, pv["metadata"]["name"])


async def run(
    client: Client,
    settings: Settings,
    action: str,
    path: Path,
    cluster: ClusterIdentity,
    kubeconfig: Path | None = None,
) -> LayoutResult:
    input = LayoutInput(
        action=action,
        provider="aws",
        source=ConfigSource(file=str(path)),
        cluster=cluster,
        timings=LayoutTimings(max_attempts=3, cluster_wait_s=60),
        kubeconfig=str(kubeconfig) if kubeconfig else "",
    )
    return await run_layout(client, settings.temporal.task_queue, input, poll_s=0.2)


def cluster_objects(kube: Kube, endpoint: str, cluster: ClusterIdentity, subnet: str) -> str:
    """An ELB in the layout's subnet behind a LoadBalancer Service, an EBS volume tagged for the
    cluster behind a bound PVC; returns the volume's ID."""
    ns = "default"
    elb = aws_client("elb", endpoint)
    elb.create_load_balancer(
        LoadBalancerName=f"{cluster.prefix}-web",
        Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
        Subnets=[subnet],
    )
    kube.create(
        SERVICES,
        {
            "metadata": {
                "name": "web",
                "finalizers": [LB_FINALIZER],
                "annotations": {"test/elb": f"{cluster.prefix}-web"},
            },
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        },
        ns,
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
    kube.create(
        PERSISTENT_VOLUMES,
        {
            "metadata": {"name": "pv-data"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete",
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": volume},
                "claimRef": {"namespace": ns, "name": "data"},
            },
        },
    )
    kube.create(
        PVCS,
        {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "volumeName": "pv-data",
                "storageClassName": "",
            },
        },
        ns,
    )
    return str(volume)


async def test_destroy_deletes_the_clusters_objects_first(
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
    volume = await asyncio.to_thread(cluster_objects, kube, stack.moto_endpoint, cluster, subnet)

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
    assert kube.get(SERVICES, "web", "default") is not None
    assert kube.get(PVCS, "data", "default") is not None

    kube.create(
        CONFIG_MAPS,
        {"metadata": {"name": "d8-cluster-uuid"}, "data": {"cluster-uuid": cluster.uuid}},
        "kube-system",
    )
    stand_in = StandIn(kube, stack.moto_endpoint)
    stand_in.thread.start()
    try:
        result = await run(client, settings, "destroy", path, cluster, kubeconfig)
    finally:
        stand_in.stop.set()
        stand_in.thread.join(timeout=10)
    assert result.modules
    assert kube.get(SERVICES, "web", "default") is None
    assert kube.get(PERSISTENT_VOLUMES, "pv-data") is None
    assert cluster_resources(stack.moto_endpoint, prefix) == []
    assert (
        ec2.describe_volumes(Filters=[{"Name": "volume-id", "Values": [volume]}])["Volumes"] == []
    )
