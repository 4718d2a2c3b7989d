"""``cloudloop dev``: the local stack, its worker processes and the starter, in the foreground.

It prints where to look (Temporal UI, kubeconfig, kubectl commands), seeds a small demo and
stops everything on Ctrl-C. ``print_status`` backs ``cloudloop status``. When the demo has a
layout, :func:`converge_demo` applies it and makes its converge Schedule run one pass, so the
Temporal UI shows the ``Layout`` run and a ``LayoutConverge`` pass with its steps.

Rules:
- The workers are ``cloudloop worker`` processes, as the chart runs them, started again when one
  dies (:mod:`devstack.dev_workers`); the starter runs in this process.
- The demo's converge never stops the dev stack: a failure is one log line.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from cloudloop import temporal
from cloudloop.cloud.aws.settings import AwsSettings
from cloudloop.cloud.registry import Settings
from cloudloop.codec import key_ring
from cloudloop.codec_server import CodecServer
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import NODES
from cloudloop.net import free_port
from cloudloop.rules import machine as capi
from cloudloop.rules.node import INSTANCE_TYPE_LABELS, ZONE_LABELS
from cloudloop.settings import (
    CodecServerSettings,
    LayoutSettings,
    LeaderElectionSettings,
    TemporalSettings,
)
from devstack import gotools
from devstack.crds import apply_crds
from devstack.demos import DEMOS, Demo
from devstack.dev_workers import DevWorkers
from devstack.kube import ALL_COMPONENTS, CLUSTER_CIDR, KubeOptions
from devstack.local import LocalStack, StackOptions
from devstack.node_joiner import NodeJoiner, publish_workload_kubeconfig

log = logging.getLogger(__name__)


def stack_settings(stack: LocalStack, *, task_queue: str = "", cluster: str = "dev") -> Settings:
    """Settings that point a worker or starter at a running local stack."""
    return Settings(
        cluster_name=cluster,
        provider="aws",
        kubeconfig=stack.kubeconfig,
        metrics_port=free_port(),
        metrics_bind="127.0.0.1",
        temporal=TemporalSettings(
            address=stack.temporal_address,
            task_queue=task_queue,
            graceful_shutdown_s=5,
            codec=stack.codec,
        ),
        aws=AwsSettings(
            endpoint_url=stack.aws_endpoint or stack.moto_endpoint,
            region="us-east-1",
            access_key_id=SecretStr("testing"),
            secret_access_key=SecretStr("testing"),
            timeout_s=20,  # moto answers a big page in seconds on a loaded runner
            max_attempts=2,
        ),
        leader_election=LeaderElectionSettings(
            namespace="kube-system", identity=f"dev-{os.getpid()}"
        ),
    )


def _codec_server(stack: LocalStack, port: int) -> CodecServer:
    """The UI's codec endpoint on loopback (no authorization: the developer's own machine), so
    the dev UI shows the encrypted payloads decrypted."""
    ring = key_ring(stack.codec)
    assert ring is not None
    settings = CodecServerSettings(
        bind="127.0.0.1",
        port=port,
        cors_origins=[stack.temporal_ui_url],
        insecure_no_authorization=True,
    )
    server = CodecServer(ring, settings, namespace="default", guard=None)
    return server.start()


def _banner(stack: LocalStack, kubectl: Path, demo: Demo, workers: DevWorkers) -> str:
    kubeconfig = stack.kubeconfig
    return "\n".join(
        [
            "",
            f"cloudloop dev is up ({demo.name}; stack started in {stack.started_in_s:.1f}s). "
            "Ctrl-C stops everything.",
            f"  Temporal UI : {stack.temporal_ui_url}/namespaces/default/workflows",
            f"  Temporal    : {stack.temporal_address} (payloads encrypted; the UI decodes them "
            f"through the codec server at {stack.options.temporal_ui_codec_endpoint})",
            f"  kubeconfig  : {kubeconfig}",
            *demo.endpoints(stack),
            workers.banner(),
            f"  logs        : {stack.state_dir / 'logs'}",
            "Watch the demo:",
            f"  export KUBECONFIG={kubeconfig}",
            f"  {kubectl} get nodes -L {ZONE_LABELS[0]},{INSTANCE_TYPE_LABELS[0]}",
            *demo.watch(stack, kubectl),
            "",
        ]
    )


#: The prefix of the demo's layout (its resources in the demo cloud are named by it).
DEMO_LAYOUT_PREFIX = "dev-layout"


async def converge_demo(settings: Settings, provider: str, config: Path) -> None:
    """Apply the demo's layout, make its converge Schedule and run one (plan-only) pass; log
    where to see them."""
    from cloudloop.layouts.config import ClusterIdentity
    from cloudloop.layouts.model import ConfigSource
    from cloudloop.messages.layout import LayoutInput
    from cloudloop.messages.layout_converge import ConvergeInput, schedule_id
    from starters.layout import run_layout
    from starters.layout_converge import install_schedule, trigger

    queue, scope = settings.temporal.task_queue, settings.temporal.id_scope
    cluster = ClusterIdentity(prefix=DEMO_LAYOUT_PREFIX, uuid=str(uuid.uuid4()))
    source = ConfigSource(file=str(config))
    try:
        client = await temporal.connect(settings.temporal)
        apply = LayoutInput(
            action="apply", provider=provider, source=source, cluster=cluster, id_scope=scope
        )
        await run_layout(client, queue, apply, poll_s=1.0)
        converge = ConvergeInput(
            provider=provider,
            source=source,
            cluster=cluster,
            id_scope=scope,
            bootstrap_from_cluster=False,
        )
        await install_schedule(client, queue, converge, 3600)
        await trigger(client, DEMO_LAYOUT_PREFIX, scope)
    except Exception:  # the demo's converge is a show; the stack goes on without it
        log.warning("the demo layout's converge did not start", exc_info=True)
        return
    log.info(
        "demo layout %s applied; its converge Schedule %s ran a pass (Temporal UI: Schedules)",
        DEMO_LAYOUT_PREFIX,
        schedule_id(DEMO_LAYOUT_PREFIX, scope),
    )


def _publish_workload_kubeconfigs(kube: Kube, kubeconfig: Path) -> int:
    """Every Cluster API Cluster of the demo reaches its Nodes in the dev cluster itself; how
    many Clusters there are (0 for a demo without Cluster API)."""
    try:
        clusters = kube.list(capi.CLUSTERS).get("items", [])
    except KubeError as exc:
        if exc.not_found:
            return 0
        raise
    for cluster in clusters:
        meta = cluster["metadata"]
        publish_workload_kubeconfig(kube, meta["namespace"], meta["name"], kubeconfig)
    return len(clusters)


async def run_dev(
    state_dir: Path,
    *,
    temporal_port: int,
    ui_port: int,
    fresh: bool,
    provider: str = "aws",
    workers: int = 2,
) -> None:
    from starters.main import run as run_starter

    demo = DEMOS[provider]()
    if fresh:
        shutil.rmtree(state_dir, ignore_errors=True)
    codec_port = free_port()
    stack = LocalStack(
        demo.stack_options(
            StackOptions(
                state_dir=state_dir,
                temporal_port=temporal_port,
                temporal_ui_port=ui_port,
                temporal_ui_codec_endpoint=f"http://127.0.0.1:{codec_port}",
                kube=(KubeOptions(components=ALL_COMPONENTS),),
            )
        )
    )
    await asyncio.to_thread(stack.start)
    codec_server: CodecServer | None = None
    pool: DevWorkers | None = None
    try:
        codec_server = _codec_server(stack, codec_port)
        kube = Kube(api_client(stack.kubeconfig))
        await asyncio.to_thread(apply_crds, kube)
        kubectl = state_dir / "bin" / "kubectl"
        kubectl.parent.mkdir(parents=True, exist_ok=True)
        kubectl.unlink(missing_ok=True)
        kubectl.symlink_to(gotools.binary_path("kubectl"))
        stop = asyncio.Event()
        settings = stack_settings(stack)
        # The demo cluster's pod network: the controller-manager allocates the nodes' pod CIDRs
        # from the same range, and routes sync puts them into the demo cloud's route table.
        settings = settings.model_copy(
            update={"ccm": settings.ccm.model_copy(update={"cluster_cidr": CLUSTER_CIDR})}
        )
        layouts = state_dir / "layouts"
        settings = settings.model_copy(update={"layouts": LayoutSettings(source_dir=layouts)})
        settings = await asyncio.to_thread(demo.seed, stack, kube, settings)
        # The demo's Machines join as kwok Nodes: the dev cluster is its own workload cluster.
        joiner = NodeJoiner(kube)
        joining = (
            asyncio.create_task(joiner.run(), name="node-joiner")
            if await asyncio.to_thread(_publish_workload_kubeconfigs, kube, stack.kubeconfig)
            else None
        )
        pool = DevWorkers(settings, state_dir, workers)
        await asyncio.to_thread(pool.start)
        supervisor = asyncio.create_task(pool.supervise(stop))
        layout = demo.layout_config(layouts, DEMO_LAYOUT_PREFIX)
        converging = (
            asyncio.create_task(converge_demo(settings, demo.name, layout))
            if layout is not None
            else None
        )
        starter = asyncio.create_task(
            run_starter(settings.model_copy(update={"metrics_port": free_port()}), stop=stop)
        )
        print(_banner(stack, kubectl, demo, pool), flush=True)
        done, _ = await asyncio.wait({supervisor, starter}, return_when=asyncio.FIRST_COMPLETED)
        stop.set()
        joiner.stop()
        if joining is not None:
            joining.cancel()
        if converging is not None:
            converging.cancel()
        await asyncio.gather(supervisor, starter, return_exceptions=True)
        for task in done:
            if task.exception() is not None:
                log.error("%s ended with an error", task.get_name(), exc_info=task.exception())
    finally:
        if pool is not None:
            await asyncio.to_thread(pool.stop)
        if codec_server is not None:
            codec_server.stop()
        try:
            await asyncio.to_thread(demo.stop)
        finally:
            await asyncio.to_thread(stack.stop)
            print("cloudloop dev stopped; every process of the stack has exited.", flush=True)


async def print_status(settings: Settings, stack: dict[str, Any] | None) -> bool:
    """Print reachability of Temporal and Kubernetes and the open workflows; True if all answer."""
    ok = True
    address = stack["temporal_address"] if stack else settings.temporal.address
    kubeconfig = stack["kubeconfigs"]["main"] if stack else settings.kubeconfig
    try:
        client = await temporal.connect(
            settings.temporal.model_copy(update={"address": address}), payloads=False
        )
        counts: dict[str, int] = {}
        async for wf in client.list_workflows("ExecutionStatus='Running'"):
            counts[wf.workflow_type] = counts.get(wf.workflow_type, 0) + 1
        print(f"temporal   {address}: ok; running workflows: {counts or 'none'}")
    except Exception as exc:
        ok = False
        print(f"temporal   {address}: unreachable ({exc})")
    try:
        kube = Kube(api_client(kubeconfig))
        version = await asyncio.to_thread(kube.request, "GET", "/version")
        nodes = await asyncio.to_thread(kube.list, NODES)
        print(f"kubernetes {version.get('gitVersion')}: ok; {len(nodes.get('items', []))} nodes")
    except Exception as exc:
        ok = False
        print(f"kubernetes: unreachable ({exc})")
    return ok
