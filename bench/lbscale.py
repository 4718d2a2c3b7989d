"""Load balancers at scale: signal size, signals per unrelated node change, process memory.

5,000 Nodes (kubelet-like: 12 labels, conditions, addresses, images, managed fields) and 1,000
Services ``type: LoadBalancer`` are created in the real kube-apiserver; then the real
``cloudloop worker`` and ``cloudloop starter`` processes run against them (AWS on moto; the
Services carry ``aws-load-balancer-type: external``, so every workflow runs its ``lb.ensure``,
finds the LB handled elsewhere and stays running, idle, with no ELB made in moto).

- ``lb_signal_bytes_5000_nodes``: one Service's signal-with-start as Temporal stored it: the
  start input plus the first ``apply`` signal's input (protobuf payload sizes, from the history).
- ``starter_rss_mb_5000_nodes_1000_services``: the starter process's resident memory once it has
  sent all 1,000 ``apply`` signals (its informers hold the 5,000 Nodes and 1,000 Services).
- ``worker_rss_mb_1000_running_lb_workflows``: the worker process's resident memory once all
  1,000 workflows have run their ``lb.ensure`` and wait (cached, sticky).
- ``lb_signals_per_unrelated_label_change``: one Node label that no annotation names changed →
  ``apply`` signals sent (``cloudloop_workflow_signals_total`` of the starter process).
- ``lb_signals_per_lb_node_change``: one Node excluded from load balancers → signals (the check
  that the figure above can see signals: every LB Service gets one).

The Services are left with their finalizers and running workflows (the stack is thrown away at
the end of the run), and so are the instances (below); the Nodes are removed.

Set-up and teardown are not measured, and kept cheap: the Services are created while moto
launches the instances (~40 s for 5,000 on a quiet machine, most of the module's set-up), and each
launched batch's Nodes while moto launches the next; each Node is one create with its status
(the API server keeps a Node's status on create, as a kubelet registers; one managed-fields
entry where a create and a status PATCH left two, which the starter's informers drop anyway);
the Nodes go in :data:`GROUPS` collection deletes; the instances stay (moto keeps a terminated
instance in its listings too); the two processes are killed once measured. Each phase's
seconds go to stderr (``lbscale phase ...``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType

from bench.context import BenchContext
from cloudloop import codec
from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.models import Instance
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.bodies import Node
from cloudloop.kube.resources import CONFIG_MAPS, NODES, SERVICES, ObjectRef, Resource
from cloudloop.messages.loadbalancer import workflow_id
from cloudloop.net import free_port
from cloudloop.rules import node as rules
from devstack.backends.aws import LAUNCH_BATCH, aws_client, launch_instances
from devstack.csi_deployment import provider_env

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODE_COUNT = 5000
SERVICE_COUNT = 1000
SYNCS = 20
#: Client threads creating the Nodes and Services.
CREATE_THREADS = 16
#: ``node.deckhouse.io/group`` values the Nodes spread over (``pool-<index % GROUPS>``).
GROUPS = 10
TYPE_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-type"
EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
LEASE_NAMESPACE = "default"


def kubelet_node(
    name: str, scope: str, index: int, instance: Instance | None = None
) -> dict[str, Any]:
    """A Node as a kubelet on EC2 registers it (labels, status), providerID set; addresses as
    node sync would write them for ``instance`` (so its refresh finds nothing to change)."""
    zone = instance.zone if instance else "us-east-1" + "abc"[index % 3]
    provider_id = instance.provider_id if instance else f"aws:///{zone}/i-{index:017x}"
    node: Node = {"metadata": {"name": name}, "status": {}}
    addresses = (
        rules.node_addresses(node, instance.addresses)
        if instance
        else [{"type": "InternalIP", "address": f"10.0.{index // 256 % 256}.{index % 256}"}]
    )
    labels = {
        "cloudloop-bench-lbscale": scope,
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": "m5.large",
        "beta.kubernetes.io/os": "linux",
        "failure-domain.beta.kubernetes.io/region": "us-east-1",
        "failure-domain.beta.kubernetes.io/zone": zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": zone,
        "node.deckhouse.io/group": f"pool-{index % GROUPS}",
    }
    now = "2026-01-01T00:00:00Z"
    conditions = [
        {"type": t, "status": "False", "reason": f"Kubelet{t}", "message": f"no {t}"}
        for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
    ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}]
    for condition in conditions:
        condition.update(lastHeartbeatTime=now, lastTransitionTime=now)
    images = [
        {
            "names": [f"registry.example.com/team/image-{i}@sha256:{uuid.uuid4().hex * 2}"],
            "sizeBytes": 10_000_000 + i,
        }
        for i in range(10)
    ]
    resources = {"cpu": "2", "memory": "7934488Ki", "pods": "29", "ephemeral-storage": "50Gi"}
    return {
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"providerID": provider_id},
        "status": {
            "conditions": conditions,
            "addresses": addresses,
            "capacity": resources,
            "allocatable": resources,
            "images": images,
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": str(uuid.uuid4()),
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.1.0-25-cloud-amd64",
                "kubeProxyVersion": "v1.31.0",
                "kubeletVersion": "v1.31.0",
                "machineID": uuid.uuid4().hex,
                "operatingSystem": "linux",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "systemUUID": str(uuid.uuid4()),
            },
        },
    }


def lb_service(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "annotations": {TYPE_ANNOTATION: "external"},
            "labels": {"app": name},
        },
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [
                {"name": "http", "port": 80, "protocol": "TCP"},
                {"name": "https", "port": 443, "protocol": "TCP"},
            ],
        },
    }


def scrape(port: int) -> dict[str, float]:
    """``name{labels}`` → value from a process's ``/metrics`` (empty when not answering)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            try:
                samples[key] = float(value)
            except ValueError:
                continue
    return samples


def metric(port: int, prefix: str, *contains: str) -> float:
    return sum(
        v for k, v in scrape(port).items() if k.startswith(prefix) and all(c in k for c in contains)
    )


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def memory_breakdown(pid: int) -> str:
    """Where a process's resident memory is: anonymous (heaps) against file-backed (code,
    libraries) pages, and its thread count (each glibc malloc arena belongs to threads)."""
    fields = ("VmRSS", "RssAnon", "RssFile", "Threads")
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in fields:
            found[name] = value.split()[0]
    return " ".join(f"{name}={found.get(name, '?')}" for name in fields)


class Process:
    """``cloudloop <command>`` as a child process with its own metrics port and log."""

    def __init__(self, command: str, env: dict[str, str], log_dir: Path) -> None:
        self.port = free_port()
        self.log = log_dir / f"{command}.log"
        with open(self.log, "w") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "cloudloop.cli", command],
                env={**env, "CLOUDLOOP_METRICS_PORT": str(self.port)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


class Phases:
    """Prints on stderr the seconds since the previous phase ended (where the module's wall
    goes: set-up, the measured waits, teardown)."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        print(f"lbscale phase {name}: {now - self.last:.1f} s", file=sys.stderr, flush=True)
        self.last = now


async def until(check: Any, timeout: float, what: str, interval: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(interval)


async def lb_scale_figures(ctx: BenchContext) -> dict[str, float]:
    kube = ctx.kube
    scope = uuid.uuid4().hex[:8]
    namespace = f"bench-lbscale-{scope}"
    cluster = f"bench-lbscale-{scope}"
    task_queue = f"bench-lbscale-{scope}"
    settings = ctx.settings
    env = {
        **os.environ,
        **provider_env(settings),
        "CLOUDLOOP_PROVIDER": "aws",
        "CLOUDLOOP_CLUSTER_NAME": cluster,
        "CLOUDLOOP_KUBECONFIG": str(settings.kubeconfig),
        "CLOUDLOOP_TEMPORAL__ADDRESS": settings.temporal.address,
        "CLOUDLOOP_TEMPORAL__TASK_QUEUE": task_queue,
        "CLOUDLOOP_TEMPORAL__GRACEFUL_SHUTDOWN_S": "5",
        **codec.process_env(settings.temporal.codec),
        "CLOUDLOOP_METRICS_BIND": "127.0.0.1",
        "CLOUDLOOP_LEADER_ELECTION__NAMESPACE": LEASE_NAMESPACE,
        "CLOUDLOOP_LEADER_ELECTION__NAME": f"starter-{scope}",
        "CLOUDLOOP_CCM__NODE_SELECTOR": f"cloudloop-bench-lbscale={scope}",
        "CLOUDLOOP_CCM__CONCURRENT_SERVICE_SYNCS": str(SYNCS),
        "CLOUDLOOP_CCM__CONFIGURE_CLOUD_ROUTES": "false",
        "CLOUDLOOP_CCM__NODE_MONITOR_PERIOD_S": "3600",
        "CLOUDLOOP_CCM__NODE_STATUS_UPDATE_FREQUENCY_S": "3600",
        "CLOUDLOOP_DISCOVERY__ENABLED": "false",
    }
    phase = Phases()
    kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    # Real instances behind the Nodes: node sync in the starter process would delete Nodes
    # whose instance does not exist.
    driver = AwsDriver(AWS.section(settings).model_copy(update={"timeout_s": 120}))
    ec2 = aws_client("ec2", AWS.section(settings).endpoint_url)
    node_names = [f"lbscale-{scope}-{i:05d}" for i in range(NODE_COUNT)]
    service_names = [f"s{i:04d}" for i in range(SERVICE_COUNT)]

    def create_services() -> None:
        with ThreadPoolExecutor(CREATE_THREADS) as pool:
            list(pool.map(lambda n: kube.create(SERVICES, lb_service(n), namespace), service_names))

    # The Services go to the API server while moto launches the instances (no process watches
    # them yet: the starter starts once everything is there).
    services = asyncio.create_task(asyncio.to_thread(create_services))

    def create_nodes(node_pool: ThreadPoolExecutor, first: int, batch: list[str]) -> None:
        """One launched batch's Nodes, each one create: the API server keeps a Node's status on
        create (a kubelet registers so)."""
        found = driver.instances.list_instances(batch).found
        list(
            node_pool.map(
                lambda offset: kube.create(
                    NODES,
                    kubelet_node(
                        node_names[first + offset], scope, first + offset, found[batch[offset]]
                    ),
                ),
                range(len(batch)),
            )
        )

    # Pipelined: a batch's Nodes go to the API server while moto launches the next batch (moto
    # holds one core, the API server and this client the other).
    with ThreadPoolExecutor(CREATE_THREADS) as node_pool:
        node_batches: list[asyncio.Task[None]] = []
        for first in range(0, NODE_COUNT, LAUNCH_BATCH):
            count = min(LAUNCH_BATCH, NODE_COUNT - first)
            launched = await asyncio.to_thread(
                launch_instances, ec2, count, InstanceType="m5.large"
            )
            batch = [i["InstanceId"] for i in launched]
            node_batches.append(
                asyncio.create_task(asyncio.to_thread(create_nodes, node_pool, first, batch))
            )
        phase("instances")
        await asyncio.gather(*node_batches)
    phase("nodes")
    await services
    phase("services")

    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-lbscale-") as logs:
        worker = Process("worker", env, Path(logs))
        starter = Process("starter", env, Path(logs))
        try:

            def applied() -> float:
                return metric(starter.port, "cloudloop_workflow_signals_total", 'signal="apply"')

            def ensures() -> float:
                return metric(
                    worker.port, "temporal_activity_execution_failed", 'activity_type="lb.ensure"'
                )

            await until(lambda: applied() >= SERVICE_COUNT, 600, "1,000 apply signals")
            phase("signals")
            await asyncio.sleep(2)
            figures["starter_rss_mb_5000_nodes_1000_services"] = rss_mb(starter.popen.pid)
            print(f"starter memory (kB): {memory_breakdown(starter.popen.pid)}", file=sys.stderr)
            await until(lambda: ensures() >= SERVICE_COUNT, 600, "1,000 lb.ensure runs")
            phase("ensures")
            await asyncio.sleep(2)
            figures["worker_rss_mb_1000_running_lb_workflows"] = rss_mb(worker.popen.pid)
            print(f"worker memory (kB): {memory_breakdown(worker.popen.pid)}", file=sys.stderr)

            service = kube.get(SERVICES, service_names[0], namespace) or {}
            figures["lb_signal_bytes_5000_nodes"] = await signal_bytes(ctx, service)

            def quiet() -> bool:
                return metric(starter.port, "workqueue_depth", 'name="service"') == 0

            before = applied()
            kube.patch(NODES, node_names[1], {"metadata": {"labels": {"team.io/owner": "x"}}})
            await asyncio.sleep(3)
            await until(quiet, 120, "the starter's queue drained")
            figures["lb_signals_per_unrelated_label_change"] = applied() - before

            before = applied()
            kube.patch(NODES, node_names[2], {"metadata": {"labels": {EXCLUDE_LABEL: "true"}}})
            await until(
                lambda: applied() - before >= SERVICE_COUNT, 300, "signals for an excluded node"
            )
            await asyncio.sleep(3)
            await until(quiet, 120, "the starter's queue drained")
            figures["lb_signals_per_lb_node_change"] = applied() - before
            phase("node changes")

        finally:
            # Killed: what is measured is done, and a graceful stop is not (the two stopping
            # took 17 s of the module).
            starter.kill()
            worker.kill()
    phase("stop")

    # The instances stay: moto keeps a terminated instance in its listings (state
    # ``terminated``) as long as a running one, so terminating 5,000 would spend moto's time and
    # leave the later modules a cloud as full. None has the cluster's tag, which the later
    # modules' listings filter on.
    await asyncio.to_thread(delete_nodes, kube, scope)
    kube.delete(CONFIG_MAPS, f"starter-{scope}-lb-nodes", LEASE_NAMESPACE)
    kube.delete(NAMESPACES, namespace)
    phase("teardown")
    return figures


def delete_nodes(kube: Kube, scope: str) -> None:
    """The module's Nodes by label, one collection delete per ``node.deckhouse.io/group`` (500
    Nodes each, at once: the API server deletes a collection with one worker, and a request
    answers within 60 s); any left after are deleted one by one."""
    selector = f"cloudloop-bench-lbscale={scope}"

    def delete_group(group: int) -> None:
        query = {"labelSelector": f"{selector},node.deckhouse.io/group=pool-{group}"}
        try:
            kube.request("DELETE", NODES.path(None), query=query, timeout=120)
        except KubeError as error:  # timed out: the one-by-one pass below finishes
            print(f"lbscale: deleting Nodes of pool-{group}: {error}", file=sys.stderr)

    with ThreadPoolExecutor(GROUPS) as pool:
        list(pool.map(delete_group, range(GROUPS)))
        left = kube.list(NODES, labelSelector=selector).get("items", [])
        list(pool.map(lambda n: kube.delete(NODES, n["metadata"]["name"]), left))


async def signal_bytes(ctx: BenchContext, service: Mapping[str, Any]) -> float:
    """Start input + first ``apply`` signal input of the Service's workflow, as stored."""
    handle = ctx.client.get_workflow_handle(workflow_id(ObjectRef.of(SERVICES, service)))
    history = await handle.fetch_history()
    size = 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            size += event.workflow_execution_started_event_attributes.input.ByteSize()
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            size += event.workflow_execution_signaled_event_attributes.input.ByteSize()
            break
    return float(size)
