"""The IMDS node agent as the chart runs it, on the real stack: ``cloudloop termination-imds`` as a
real process with exactly the rendered DaemonSet container's args and env, authenticated as the
chart's ServiceAccount by a pod-bound token (TokenRequest bound to a Pod on its kwok Node), against
amazon-ec2-metadata-mock serving a moto instance. It records the Spot notice on its Node; the
starter's ``ImdsNotices`` (holding Temporal) starts the drain; the chart's RBAC and
ValidatingAdmissionPolicy refuse the agent anything but its own Node's notices; and the live
process holds no Temporal or cloud credential in its environment, its open files or its sockets
(issue 39)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from cloudloop.cloud.aws import PROVIDER as AWS
from cloudloop.cloud.aws.driver import AwsDriver
from cloudloop.cloud.registry import Settings
from cloudloop.kube.api import Kube, KubeError
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import EVENTS, NODES, PODS, Resource
from cloudloop.messages.termination import (
    NOTICES_ANNOTATION,
    TAINT_KEYS,
    DrainResult,
    EventKind,
    drain_workflow_id,
)
from cloudloop.rules.termination import read_node_notices
from devstack import gotools
from devstack.backends.aws import NthCloud
from devstack.local import LocalStack
from devstack.metadata_mock import metadata_mock
from starters.termination_imds import INVALID_NOTICE, ImdsNotices
from tests.helpers import eventually, eventually_async
from tests.install.chart import Helm, documents, find, provider_values
from tests.support.procfs import environment_of, open_files_of, remote_ports_of
from tests.termination.support import delete_nodes, kwok_node, node_events, nth_settings, taints
from tests.termination.test_imds import moto_instance
from workers.main import build_worker

pytestmark = pytest.mark.stack

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
AGENT_KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def agent_manifests(tmp: Path, namespace: str, release: str) -> list[dict[str, Any]]:
    """The chart's AWS render (its example values file) in ``namespace``, release ``release``."""
    helm = Helm(tmp / "helm")
    sets = {"clusterName": "imds-live", "cloud.credentials.files.credentials": "placeholder"}
    return documents(
        helm.template([provider_values()["aws"]], sets, namespace=namespace, release=release).stdout
    )


def kubectl_apply(stack: LocalStack, docs: list[dict[str, Any]]) -> None:
    kubectl = gotools.ensure_built(["kubectl"])["kubectl"]
    subprocess.run(
        [str(kubectl), "--kubeconfig", str(stack.kubeconfig), "apply", "-f", "-"],
        input="\n---\n".join(yaml.safe_dump(d) for d in docs),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def kubectl_delete(stack: LocalStack, docs: list[dict[str, Any]]) -> None:
    kubectl = gotools.ensure_built(["kubectl"])["kubectl"]
    subprocess.run(
        [str(kubectl), "--kubeconfig", str(stack.kubeconfig), "delete", "--wait=false", "-f", "-"],
        input="\n---\n".join(yaml.safe_dump(d) for d in docs),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def pod_bound_kubeconfig(
    stack: LocalStack, kube: Kube, namespace: str, account: str, node: str, folder: Path
) -> Path:
    """What the kubelet gives the agent's pod: a token of ``account`` bound to a Pod on
    ``node`` (so it carries the node claim), as a kubeconfig."""
    pod = kube.create(
        PODS,
        {
            # A DaemonSet's pod in the chart, which a drain leaves running; here a mirror pod
            # (also left by the drain, and no controller to replace or collect it), so the
            # test's own drain of the Node does not evict it and void its bound token.
            "metadata": {
                "name": "nth-imds-agent",
                "annotations": {"kubernetes.io/config.mirror": "nth-imds-agent"},
            },
            "spec": {
                "serviceAccountName": account,
                "nodeName": node,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "nth-imds", "image": "cloudloop"}],
            },
        },
        namespace,
    )
    answer = kube.request(
        "POST",
        SERVICE_ACCOUNTS.path(namespace, account, "token"),
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod["metadata"]["name"],
                    "uid": pod["metadata"]["uid"],
                },
            },
        },
    )
    admin = yaml.safe_load(stack.kubeconfig.read_text())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": account, "user": {"token": answer["status"]["token"]}}],
        "contexts": [
            {"name": account, "context": {"cluster": admin["clusters"][0]["name"], "user": account}}
        ],
        "current-context": account,
    }
    path = folder / "nth-imds.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def token_kubeconfig(
    stack: LocalStack, kube: Kube, namespace: str, account: str, folder: Path
) -> Path:
    """A kubeconfig with a token of ``account`` bound to nothing (no node claim)."""
    answer = kube.request(
        "POST",
        SERVICE_ACCOUNTS.path(namespace, account, "token"),
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    config = yaml.safe_load(stack.kubeconfig.read_text())
    config["users"] = [{"name": account, "user": {"token": answer["status"]["token"]}}]
    config["contexts"][0]["context"]["user"] = account
    path = folder / "unbound.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@contextlib.contextmanager
def agent_process(
    daemonset: dict[str, Any], kubeconfig: Path, node: str, imds: str, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``cloudloop`` with the DaemonSet container's args and env, and nothing else of this
    test's environment: a PATH, the pod's token as a kubeconfig (the in-cluster config's stand-in)
    and the mock's endpoint for the host network's 169.254.169.254."""
    (spec,) = daemonset["spec"]["template"]["spec"]["containers"]
    env = {"PATH": "/usr/bin:/bin", "KUBECONFIG": str(kubeconfig)}
    fields = {"spec.nodeName": node}
    for entry in spec.get("env") or []:
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])
        else:
            env[entry["name"]] = fields[entry["valueFrom"]["fieldRef"]["fieldPath"]]
    env["CLOUDLOOP_NTH__IMDS_ENDPOINT"] = imds
    argv = [str(Path(sys.executable).parent / "cloudloop"), *spec["args"]]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def refused(call: Any) -> int:
    """The status of a write the API server refuses (0: it was allowed)."""
    try:
        call()
    except KubeError as exc:
        return exc.status
    return 0


async def test_the_agent_reports_through_its_node_only_and_the_starter_drains(
    stack: LocalStack,
    aws: NthCloud,
    kube: Kube,
    client: Client,
    settings: Settings,
    tmp_path: Path,
) -> None:
    scope = uuid.uuid4().hex[:8]
    namespace, release = f"nth-{scope}", f"nth{scope}"
    docs = agent_manifests(tmp_path, namespace, release)
    daemonset = find(docs, "DaemonSet", "-nth-imds")
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    rbac = [d for d in docs if d["kind"] in AGENT_KINDS and d["metadata"]["name"] == account]
    assert sorted(d["kind"] for d in rbac) == sorted(AGENT_KINDS)
    instance = moto_instance(aws)
    node = kwok_node(kube, instance.hostname, "imds-live")
    other = kwok_node(kube, f"other-{scope}", "imds-live")
    kube.patch(
        NODES, node, {"spec": {"providerID": f"aws:///{instance.zone}/{instance.instance_id}"}}
    )
    kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    config = nth_settings(settings, stack, "", node_termination_grace_period_s=300.0)
    temporal_port = int(config.temporal.address.rsplit(":", 1)[1])
    moto_port = int(str(AWS.section(config).endpoint_url).rsplit(":", 1)[1].split("/")[0])
    try:
        kubectl_apply(stack, rbac)
        kubeconfig = pod_bound_kubeconfig(stack, kube, namespace, account, node, tmp_path)
        as_agent = Kube(api_client(kubeconfig))
        # The policy is enforced once the apiserver has loaded it: a label change is refused
        # (a new value each try: an update that changes nothing is no change to refuse).
        await eventually(
            lambda: (
                refused(
                    lambda: as_agent.patch(
                        NODES, node, {"metadata": {"labels": {"x": uuid.uuid4().hex[:8]}}}
                    )
                )
                in (403, 422)
            ),
            timeout=30,
            what="the ValidatingAdmissionPolicy enforced",
        )
        starter = ImdsNotices(
            kube,
            client,
            config.nth,
            task_queue=config.temporal.task_queue,
            cluster=config.cluster_name,
            provider="aws",
        )
        worker = build_worker(client, config, driver=AwsDriver(AWS.section(config)), kube=kube)
        log = tmp_path / "nth-imds.log"
        with metadata_mock(stack.state_dir, instance, "spot") as endpoint:
            async with worker:
                watch = asyncio.create_task(starter.run())
                try:
                    with agent_process(daemonset, kubeconfig, node, endpoint, log) as process:
                        try:
                            await eventually(
                                lambda: TAINT_KEYS[EventKind.SPOT_ITN] in taints(kube, node),
                                timeout=90,
                                what="the drain tainted the Node",
                            )
                        except AssertionError:
                            print(log.read_text(errors="replace"))
                            raise
                        environment = environment_of(process.pid)
                        files = open_files_of(process.pid)
                        ports = remote_ports_of(process.pid)
                        assert process.poll() is None, log.read_text(errors="replace")
                    drain = drain_workflow_id(node, instance.instance_id, instance.launch_time)
                    result = await client.get_workflow_handle(
                        drain, result_type=DrainResult
                    ).result()

                    # A malformed annotation (the agent may write its own): a Warning, no drain.
                    patch = {"metadata": {"annotations": {NOTICES_ANNOTATION: "{not json"}}}
                    as_agent.patch(NODES, node, patch)
                    await eventually(
                        lambda: node_events(kube, node, INVALID_NOTICE),
                        timeout=30,
                        what="InvalidInterruptionNotice",
                    )
                finally:
                    starter.stop()
                    watch.cancel()
                    await asyncio.gather(watch, return_exceptions=True)

        # The notice on its own Node, an Event from the agent, and the starter's drain.
        assert result.node_found and result.action == "cordon-and-drain", result
        assert (kube.get(NODES, node) or {})["spec"].get("unschedulable") is True
        assert len(node_events(kube, node, "SpotInterruption")) == 1
        found = await eventually_async(
            lambda: _drain_ids(client, config, node, expected=2), timeout=30, what="drains"
        )
        assert sorted(found) == [drain, f"{drain}/cordon"]  # Spot drains, rebalance cordons
        assert await _drain_ids(client, config, other) == []
        # The annotation as the agent wrote it, before the malformed one: the moto instance.
        assert "recorded on the Node" in log.read_text(errors="replace")

        # What the agent may not do: another Node, another field, Events about another Node.
        mine = {"metadata": {"annotations": {NOTICES_ANNOTATION: _valid(kube, node)}}}
        assert refused(lambda: as_agent.patch(NODES, other, mine)) in (403, 422)
        assert refused(lambda: as_agent.patch(NODES, node, {"spec": {"unschedulable": False}}))
        annotation = {"metadata": {"annotations": {"other.io/x": "y"}}}
        assert refused(lambda: as_agent.patch(NODES, node, annotation)) in (403, 422)
        assert refused(lambda: as_agent.patch(NODES, node, {"status": {}}, subresource="status"))
        assert refused(lambda: as_agent.delete(NODES, other)) == 403
        event = _event_about(other)
        assert refused(lambda: as_agent.create(EVENTS, event, "default")) in (403, 422)
        assert refused(lambda: as_agent.list(PODS, "default")) == 403
        assert refused(lambda: as_agent.patch(NODES, node, mine)) == 0  # its own notices: yes
        # A token of the same ServiceAccount not bound to a pod (no node claim): refused.
        unbound = Kube(api_client(token_kubeconfig(stack, kube, namespace, account, tmp_path)))
        assert refused(lambda: unbound.patch(NODES, node, mine)) in (403, 422)

        # The live process: no Temporal setting or cloud credential in its environment, no
        # credential file open, no connection to Temporal or the cloud's API.
        assert not [k for k in environment if k.startswith(("CLOUDLOOP_TEMPORAL", "AWS_"))]
        assert not [k for k in environment if "CREDENTIAL" in k or "API_KEY" in k]
        assert "CLOUDLOOP_CONFIG" not in environment
        assert not [v for v in environment.values() if config.temporal.address in v]
        assert not [f for f in files if "credential" in f or "temporal" in f.lower()], files
        assert temporal_port not in ports and moto_port not in ports, ports
    finally:
        kubectl_delete(stack, rbac)
        kube.delete(NAMESPACES, namespace)
        delete_nodes(kube, node, other)


def _valid(kube: Kube, node: str) -> str:
    """A valid notices document of ``node``'s instance (for the agent's allowed write)."""
    from cloudloop.messages.termination import NodeNotices

    provider_id = (kube.get(NODES, node) or {})["spec"]["providerID"]
    notices = NodeNotices(instance_id=provider_id.rsplit("/", 1)[-1])
    read_node_notices(notices.model_dump_json(), provider_id)
    return notices.model_dump_json()


def _event_about(node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}.forged-{uuid.uuid4().hex[:6]}"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
        "type": "Normal",
        "reason": "Forged",
        "message": "an agent on another node",
    }


async def _drain_ids(
    client: Client, settings: Settings, node: str, *, expected: int = 0
) -> list[str] | None:
    query = (
        f"WorkflowType='DrainNode' AND CloudloopCluster='{settings.cluster_name}' "
        f"AND CloudloopKind='Node' AND CloudloopName='{node}'"
    )
    found = [wf.id async for wf in client.list_workflows(query)]
    return found if len(found) >= expected else None
