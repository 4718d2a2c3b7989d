"""The chart against a real kube-apiserver: server-side dry-run, then its processes at work.

A control plane of its own (with Temporal and moto) whose apiserver audits every request of the
release namespace's ServiceAccounts. Every provider's rendered manifests pass
``kubectl apply --dry-run=server`` with the CRDs installed. Then the AWS release is applied (RBAC,
ServiceAccounts, ConfigMap, Secret), and ``cloudloop worker`` and ``cloudloop starter`` run with
the rendered Deployments' args, env and mounted files, each with a token of its own
ServiceAccount: new Nodes get initialized, a Service gets its load balancer, and every request the
two made is one the rendered rules allow (and the apiserver allowed). With Temporal unreachable,
the starter still initializes new Nodes (no bootstrap deadlock).
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from cloudloop.csi.v1 import csi_pb2, csi_pb2_grpc
from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.conditions import get_condition
from cloudloop.kube.resources import (
    CLOUD_PROBES,
    CONFIG_MAPS,
    INSTANCE_TYPES_CATALOGS,
    NODES,
    SECRETS,
    SERVICES,
    STORAGE_CLASSES,
    Resource,
)
from cloudloop.rules.discovery import DISCOVERY_KEY, DISCOVERY_SECRET, encode_document
from devstack import gotools
from devstack.crds import apply_crds
from devstack.kube import KubeOptions
from devstack.local import LocalStack, StackOptions
from devstack.process import free_port
from tests.helpers import eventually, eventually_async
from tests.install.chart import (
    CHART,
    Helm,
    PodProcess,
    Request,
    Rules,
    documents,
    find,
    provider_values,
    render,
    running,
)
from tests.loadbalancer.support import AwsWorld, ingress, make_service
from tests.support.procfs import environment_of, open_files_of, remote_ports_of

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]

NAMESPACE = "cloudloop-install"
#: The chart's metrics.readers default: the scraper allowed `get` on /metrics.
MONITORING_NAMESPACE, SCRAPER = "d8-monitoring", "prometheus"
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
RELEASE = "cl"
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
AUDIT_POLICY = f"""\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts:{NAMESPACE}"]
  - level: None
"""
#: prometheus-operator's kinds, served without a schema: the dry-run checks the chart's objects
#: reach the API as those kinds, not the operator's validation.
MONITORING_CRDS = [
    ("podmonitors", "PodMonitor"),
    ("prometheusrules", "PrometheusRule"),
]


def key(where: str, rule: dict[str, Any]) -> str:
    return json.dumps([where, rule], sort_keys=True)


def rule(groups: list[str], resources: list[str], verbs: list[str], **extra: Any) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs, **extra}


#: The AWS release's rules the load-balancer run above does not exercise, and the code that
#: needs each (its own tests exercise it with the stack's admin credentials).
NOT_EXERCISED: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "worker": [
        # activities/termination.py: DrainNode taints and cordons, evicts, waits on PDBs and
        # VolumeAttachments (aws provider block of values.yaml).
        ("", rule([""], ["nodes"], ["get", "patch"])),
        ("", rule([""], ["pods"], ["get", "list"])),
        ("", rule([""], ["pods/eviction"], ["create"])),
        ("", rule(["policy"], ["poddisruptionbudgets"], ["list"])),
        ("", rule(["storage.k8s.io"], ["volumeattachments"], ["list"])),
        # activities/loadbalancer.py: a node set past 16 KiB is read from the starter's ConfigMap
        # (this run's three nodes go inline).
        (
            NAMESPACE,
            rule([""], ["configmaps"], ["get"], resourceNames=["cloudloop-starter-lb-nodes"]),
        ),
        # activities/machine.py: AWS node groups (CAPA's kinds); this run makes no machine: the
        # bootstrap data Secret, the AWSMachine's spec, status and finalizer.
        ("", rule([""], ["secrets"], ["get"])),
        (
            "",
            rule(
                ["infrastructure.cluster.x-k8s.io"],
                ["awsclusters", "awsmachines"],
                ["get", "patch"],
            ),
        ),
        (
            "",
            rule(
                ["infrastructure.cluster.x-k8s.io"],
                ["awsclusters/finalizers", "awsmachines/finalizers"],
                ["update"],
            ),
        ),
        (
            "",
            rule(
                ["infrastructure.cluster.x-k8s.io"],
                ["awsclusters/status", "awsmachines/status"],
                ["patch"],
            ),
        ),
    ],
    "starter": [
        # starters/machine: AWS node groups; no AWSMachine in this run (the starter's reports
        # and the finalizer it adds).
        (
            "",
            rule(
                ["infrastructure.cluster.x-k8s.io"],
                ["awsclusters/status", "awsmachines/status"],
                ["patch"],
            ),
        ),
        ("", rule(["infrastructure.cluster.x-k8s.io"], ["awsmachines"], ["get", "patch"])),
        # starters/machine/node_group.py: no NodeGroup in this run (its status, its class's
        # consumers, its templates).
        ("", rule(["cloudloop.io"], ["nodegroups/status"], ["patch"])),
        ("", rule(["deckhouse.io"], ["awsinstanceclasses/status"], ["patch"])),
        (
            "",
            rule(
                ["infrastructure.cluster.x-k8s.io"],
                ["awsmachinetemplates"],
                ["get", "list", "create", "delete"],
            ),
        ),
        # starters/loadbalancer.py: a node set past 16 KiB is written to a ConfigMap beside the
        # Lease before the signal (this run's three nodes go inline).
        (
            NAMESPACE,
            rule(
                [""],
                ["configmaps"],
                ["get", "patch"],
                resourceNames=["cloudloop-starter-lb-nodes"],
            ),
        ),
        (NAMESPACE, rule([""], ["configmaps"], ["create"])),
    ],
}


@dataclass
class InstallStack:
    stack: LocalStack
    audit_log: Path
    kube: Kube
    kubectl: Path

    def apply(self, docs: list[dict[str, Any]], *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                str(self.kubectl),
                "--kubeconfig",
                str(self.stack.kubeconfig),
                "apply",
                *extra,
                "-f",
                "-",
            ],
            input="\n---\n".join(yaml.safe_dump(d) for d in docs),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def token(self, account: str, namespace: str = NAMESPACE) -> str:
        """A fresh token of ``namespace/account``."""
        return subprocess.run(
            [
                str(self.kubectl),
                "--kubeconfig",
                str(self.stack.kubeconfig),
                "create",
                "token",
                account,
                "-n",
                namespace,
                "--duration=1h",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()

    def token_kubeconfig(self, account: str, folder: Path) -> Path:
        """A kubeconfig holding a fresh token of ``account`` (what the pod would mount)."""
        token = self.token(account)
        admin = yaml.safe_load(self.stack.kubeconfig.read_text())
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": admin["clusters"],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [
                {
                    "name": account,
                    "context": {"cluster": admin["clusters"][0]["name"], "user": account},
                }
            ],
            "current-context": account,
        }
        path = folder / f"{account}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path

    def requests_of(self, account: str, since: int = 0) -> list[tuple[Request, int]]:
        """Every resource request ``account`` made (after byte ``since`` of the audit log),
        with the answer's status code."""
        user = f"system:serviceaccount:{NAMESPACE}:{account}"
        found: list[tuple[Request, int]] = []
        with self.audit_log.open("rb") as log:
            log.seek(since)
            text = log.read().decode(errors="replace")
        for line in text.splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            ref = event.get("objectRef")
            if event.get("user", {}).get("username") != user or not ref:
                continue
            request = Request(
                verb=event["verb"],
                group=ref.get("apiGroup", ""),
                resource=ref.get("resource", ""),
                subresource=ref.get("subresource", ""),
                namespace=ref.get("namespace", ""),
                name=ref.get("name", ""),
            )
            found.append((request, int(event.get("responseStatus", {}).get("code", 0))))
        return found


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InstallStack]:
    state = tmp_path_factory.mktemp("install-stack")
    (state / "audit").mkdir()
    policy = state / "audit" / "policy.yaml"
    policy.write_text(AUDIT_POLICY)
    audit_log = state / "audit" / "requests.log"
    stack = LocalStack(
        StackOptions(
            state_dir=state,
            kube=(
                KubeOptions(
                    name="install",
                    extra_apiserver_args=(
                        f"--audit-policy-file={policy}",
                        f"--audit-log-path={audit_log}",
                        "--audit-log-format=json",
                        "--audit-log-mode=blocking",
                    ),
                ),
            ),
        )
    )
    stack.start()
    try:
        kube = Kube(api_client(stack.kubeconfig))
        apply_crds(kube, [*_monitoring_crds(state)])
        apply_crds(kube)
        kube.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
        kube.create(NAMESPACES, {"metadata": {"name": MONITORING_NAMESPACE}})
        kube.create(SERVICE_ACCOUNTS, {"metadata": {"name": SCRAPER}}, MONITORING_NAMESPACE)
        kubectl = gotools.ensure_built(["kubectl"])["kubectl"]
        yield InstallStack(stack, audit_log, kube, kubectl)
    finally:
        stack.stop()


def _monitoring_crds(folder: Path) -> list[Path]:
    paths = []
    for plural, kind in MONITORING_CRDS:
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {
                "group": "monitoring.coreos.com",
                "scope": "Namespaced",
                "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        }
        path = folder / f"{plural}.yaml"
        path.write_text(yaml.safe_dump(crd))
        paths.append(path)
    return paths


@pytest.mark.parametrize("provider", sorted(provider_values()), ids=sorted(provider_values()))
def test_the_rendered_chart_passes_a_server_side_dry_run(
    install: InstallStack, helm: Helm, provider: str
) -> None:
    docs = render(
        helm,
        provider,
        {
            "monitoring.podMonitor.enabled": "true",
            "monitoring.prometheusRule.enabled": "true",
            "monitoring.dashboard.enabled": "true",
        },
        namespace=NAMESPACE,
        release=RELEASE,
    )

    result = install.apply(docs, "--dry-run=server")

    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(docs)


@pytest.mark.parametrize(
    "provider, sets",
    [
        pytest.param(
            "vsphere",
            {"worker.kind": "DaemonSet", "starter.kind": "DaemonSet", "hostNetwork": "true"},
            id="vsphere-daemonsets",
        ),
        pytest.param(
            "openstack",
            {"cloud.credentials.create": "false", "cloud.credentials.existingSecret": "cloud-conf"},
            id="openstack-existing-secret",
        ),
    ],
)
def test_the_chart_options_pass_a_server_side_dry_run(
    install: InstallStack, helm: Helm, provider: str, sets: dict[str, str]
) -> None:
    docs = render(helm, provider, sets, namespace=NAMESPACE, release=RELEASE)

    result = install.apply(docs, "--dry-run=server")

    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(docs)


ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")


def test_the_api_server_policy_names_the_addresses_of_the_kubernetes_endpoint_slice(
    install: InstallStack, helm: Helm
) -> None:
    """NetworkPolicy cannot select the API server by label: at install (``helm install``, or
    ``helm template --dry-run=server``) the chart looks up the ``default/kubernetes``
    EndpointSlice the API servers publish and allows exactly those addresses and ports. (This
    stack's apiserver runs with ``--endpoint-reconciler-type=none``: the test publishes one as
    two control-plane nodes' apiservers would.)"""
    port = install.stack.clusters["install"].apiserver_port
    install.kube.create(
        ENDPOINT_SLICES,
        {
            "metadata": {
                "name": "kubernetes",
                "labels": {"kubernetes.io/service-name": "kubernetes"},
            },
            "addressType": "IPv4",
            # Two control-plane nodes (the apiserver refuses loopback endpoints).
            "endpoints": [{"addresses": ["10.0.0.11"]}, {"addresses": ["10.0.0.12"]}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        },
        "default",
    )
    try:
        result = helm.run(
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--values",
            str(provider_values()["dvp"]),
            "--set",
            "clusterName=lookup",
            "--set",
            "cloud.credentials.files.kubeconfig=x",
            "--dry-run=server",
            "--kubeconfig",
            str(install.stack.kubeconfig),
        )
    finally:
        install.kube.delete(ENDPOINT_SLICES, "kubernetes", "default")
    (rule,) = find(documents(result.stdout), "NetworkPolicy", "-apiserver")["spec"]["egress"]

    assert rule["to"] == [
        {"ipBlock": {"cidr": "10.0.0.11/32"}},
        {"ipBlock": {"cidr": "10.0.0.12/32"}},
    ]
    assert {p["port"] for p in rule["ports"]} == {443, 6443, port}


# -- the release at work --------------------------------------------------------------------
@dataclass
class Release:
    docs: list[dict[str, Any]]
    world: AwsWorld
    folder: Path

    def process(self, install: InstallStack, component: str, **overrides: str) -> PodProcess:
        deployment = find(self.docs, "Deployment", f"-{component}")
        account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        root = self.folder / component
        root.mkdir(exist_ok=True)
        return PodProcess(
            deployment,
            self.docs,
            root,
            install.token_kubeconfig(account, self.folder),
            overrides={"CLOUDLOOP_METRICS_PORT": str(free_port()), **overrides},
        )

    def csi_process(
        self, install: InstallStack, kind: str, name: str, **overrides: str
    ) -> PodProcess:
        """The CSI container ``name`` of the rendered ``kind`` (its sidecars are not run)."""
        workload = find(self.docs, kind, f"-{name}")
        account = workload["spec"]["template"]["spec"]["serviceAccountName"]
        root = self.folder / name
        root.mkdir(exist_ok=True)
        return PodProcess(
            workload,
            self.docs,
            root,
            install.token_kubeconfig(account, self.folder),
            overrides=overrides,
            container_name=name,
        )


def aws_release(install: InstallStack, helm: Helm, folder: Path, cluster: str) -> Release:
    world = AwsWorld.create(install.stack.moto_endpoint, cluster, instances=2)
    credentials = folder / "aws-credentials"
    credentials.write_text(
        "[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
    )
    docs = documents(
        helm.template(
            [provider_values()["aws"]],
            {
                "clusterName": cluster,
                "temporal.address": install.stack.temporal_address,
                "cloud.settings.region": "us-east-1",
                "cloud.settings.endpoint_url": install.stack.moto_endpoint,
                # moto's DescribeInstanceTypes (every type, one page) outlasted the default 10 s
                # on a loaded runner: discovery then waited out its backoff past the test's wait.
                "cloud.settings.timeout_s": "60",
                "config.ccm.configure_cloud_routes": "false",
                "logFormat": "text",
            },
            files={"cloud.credentials.files.credentials": credentials},
            namespace=NAMESPACE,
            release=RELEASE,
        ).stdout
    )
    applied = [
        d for d in docs if d["kind"] not in ("Deployment", "Job", "CustomResourceDefinition")
    ]
    result = install.apply(applied, "--server-side")
    assert result.returncode == 0, result.stderr
    return Release(docs, world, folder)


def scrape(port: str, token: str | None) -> int:
    """The status of ``GET /metrics`` on a local process's HTTPS metrics port (self-signed)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def add_nodes(install: InstallStack, world: AwsWorld, prefix: str) -> list[str]:
    """Uninitialized Nodes named like the kubelet names them (private DNS names)."""
    ec2 = world.client("ec2")
    reservations = ec2.describe_instances(InstanceIds=world.instance_ids)["Reservations"]
    names = []
    for instance in [i for r in reservations for i in r["Instances"]]:
        name = instance["PrivateDnsName"]
        install.kube.create(
            NODES,
            {
                "metadata": {"name": name, "labels": {"cloudloop-install": prefix}},
                "spec": {
                    "taints": [{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]
                },
            },
        )
        names.append(name)
    return names


def initialized(install: InstallStack, names: list[str]) -> bool:
    nodes = [install.kube.get(NODES, name) or {} for name in names]
    return all(
        n.get("spec", {}).get("providerID", "").startswith("aws://")
        and UNINITIALIZED not in [t["key"] for t in n["spec"].get("taints") or []]
        for n in nodes
    )


def remove_nodes(install: InstallStack, names: list[str]) -> None:
    for name in names:
        install.kube.delete(NODES, name)


async def test_the_rendered_processes_initialize_nodes_and_give_a_service_its_load_balancer(
    install: InstallStack, helm: Helm, tmp_path: Path
) -> None:
    cluster = f"install-{uuid.uuid4().hex[:6]}"
    release = aws_release(install, helm, tmp_path, cluster)
    worker = release.process(install, "worker")
    starter = release.process(install, "starter")
    web = f"web-{uuid.uuid4().hex[:6]}"
    install.kube.create(NAMESPACES, {"metadata": {"name": web}})
    names = add_nodes(install, release.world, cluster)
    try:
        with running(worker, starter):
            try:
                await eventually(lambda: initialized(install, names), timeout=120, what="node init")
                make_service(install.kube, web, "frontend")
                probe = {
                    "metadata": {"name": "zones", "namespace": web},
                    "spec": {"provider": "aws"},
                }
                install.kube.create(CLOUD_PROBES, probe, web)
                hostname = await eventually(
                    lambda: ingress(install.kube, web, "frontend"), timeout=240, what="LB ingress"
                )
                await eventually(
                    lambda: get_condition(
                        install.kube.get(CLOUD_PROBES, "zones", web) or {}, "Ready"
                    ),
                    timeout=120,
                    what="CloudProbe Ready",
                )
                await eventually(
                    lambda: install.kube.get(
                        CONFIG_MAPS, "d8-cloud-provider-conditions", "kube-system"
                    ),
                    timeout=120,
                    what="discovery's conditions ConfigMap",
                )
                # The discoverer's first pass is done (on a loaded machine it may come after
                # the LB): its rules are then exercised before they are checked below.
                await eventually(
                    lambda: install.kube.get(INSTANCE_TYPES_CATALOGS, "for-cluster-autoscaler"),
                    timeout=240,
                    what="discovery's InstanceTypesCatalog",
                )
            except AssertionError as exc:
                raise AssertionError(
                    f"{exc}\n--- worker:\n{worker.tail()}\n--- starter:\n{starter.tail()}"
                ) from None
            assert hostname[0].endswith(".elb.amazonaws.com")
            # metrics.authorization (on by default): the chart's reader gets /metrics, another
            # ServiceAccount is forbidden, no token is unauthenticated.
            scraper, outsider = (
                install.token(SCRAPER, MONITORING_NAMESPACE),
                install.token(
                    find(release.docs, "ServiceAccount", "-csi-node")["metadata"]["name"]
                ),
            )
            answers = {
                process.name: [
                    scrape(process.overrides["CLOUDLOOP_METRICS_PORT"], token)
                    for token in (scraper, outsider, None)
                ]
                for process in (worker, starter)
            }
            assert answers == {"worker": [200, 403, 401], "starter": [200, 403, 401]}
            install.kube.delete(SERVICES, "frontend", web)
            await eventually(
                lambda: install.kube.get(SERVICES, "frontend", web) is None,
                timeout=240,
                what="Service deleted (finalizer removed)",
            )
    finally:
        remove_nodes(install, names)
        install.kube.delete(NAMESPACES, web)

    for component in ("worker", "starter"):
        account = find(release.docs, "ServiceAccount", f"-{component}")["metadata"]["name"]
        rules = Rules.bound_to(release.docs, NAMESPACE, account)
        made = install.requests_of(account)
        refused = sorted({r for r, code in made if code == 403}, key=str)
        not_allowed = sorted({r for r, _ in made if not rules.allows(r)}, key=str)
        used = {key(where, rule) for req, _ in made for where, rule in rules.matching(req)}
        unused = sorted(
            key(where, rule) for where, rule in rules.all() if key(where, rule) not in used
        )
        assert made, f"no request of {account} in the audit log"
        assert refused == [], f"{component}: the apiserver refused {refused}"
        assert not_allowed == [], f"{component}: the rendered rules do not allow {not_allowed}"
        # A rule this run did not need is one a named feature needs (else it must go).
        assert unused == sorted(key(*entry) for entry in NOT_EXERCISED[component]), unused


async def test_the_starter_initializes_nodes_while_temporal_is_unreachable(
    install: InstallStack, helm: Helm, tmp_path: Path
) -> None:
    cluster = f"boot-{uuid.uuid4().hex[:6]}"
    release = aws_release(install, helm, tmp_path, cluster)
    nowhere = f"127.0.0.1:{free_port()}"
    starter = release.process(install, "starter", CLOUDLOOP_TEMPORAL__ADDRESS=nowhere)
    names = add_nodes(install, release.world, cluster)
    try:
        with running(starter):
            try:
                await eventually(lambda: initialized(install, names), timeout=120, what="node init")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n--- starter:\n{starter.tail()}") from None
            assert starter.process is not None and starter.process.poll() is None
    finally:
        remove_nodes(install, names)


async def _plugin_info(endpoint: str) -> tuple[str, str]:
    """(driver name, node ID or "") from a CSI socket: GetPluginInfo, and NodeGetInfo if served."""
    async with grpc.aio.insecure_channel(endpoint) as channel:
        info = await csi_pb2_grpc.IdentityStub(channel).GetPluginInfo(
            csi_pb2.GetPluginInfoRequest(), timeout=5
        )
        try:
            node = await csi_pb2_grpc.NodeStub(channel).NodeGetInfo(
                csi_pb2.NodeGetInfoRequest(), timeout=5
            )
        except grpc.aio.AioRpcError:
            return info.name, ""
        return info.name, node.node_id


async def test_the_rendered_csi_processes_run_on_the_cloud_config_with_their_own_accounts(
    install: InstallStack, helm: Helm, tmp_path: Path
) -> None:
    cluster = f"csi-{uuid.uuid4().hex[:6]}"
    release = aws_release(install, helm, tmp_path, cluster)
    worker = release.process(install, "worker")
    starter = release.process(install, "starter")
    names = add_nodes(install, release.world, cluster)
    # A unix socket's path must stay short (108 bytes): not under tmp_path.
    sockets = Path(tempfile.mkdtemp(prefix="cl-csi-", dir="/tmp"))
    controller_socket = f"unix://{sockets}/controller.sock"
    node_socket = f"unix://{sockets}/node.sock"
    controller = release.csi_process(
        install, "Deployment", "csi-controller", CLOUDLOOP_CSI__ENDPOINT=controller_socket
    )
    node = release.csi_process(
        install, "DaemonSet", "csi-node", CLOUDLOOP_CSI__ENDPOINT=node_socket, NODE_NAME=names[0]
    )
    node_spec = install.kube.get(NODES, names[0]) or {}
    driver = find(release.docs, "CSIDriver")["metadata"]["name"]

    def storage_classes() -> list[str]:
        return [
            sc["metadata"]["name"]
            for sc in install.kube.list(STORAGE_CLASSES)["items"]
            if sc.get("provisioner") == driver
        ]

    # The discoverer writes the discovery data once its cloud calls answer; the StorageClasses
    # only need it to exist (AWS's come from the driver), so a slow discovery does not count.
    if install.kube.get(SECRETS, DISCOVERY_SECRET, "kube-system") is None:
        install.kube.create(
            SECRETS,
            {
                "metadata": {"name": DISCOVERY_SECRET},
                "data": {DISCOVERY_KEY: base64.b64encode(encode_document({}).encode()).decode()},
            },
            "kube-system",
        )
    try:
        with running(worker, starter):
            await eventually(lambda: initialized(install, names), timeout=120, what="node init")
            node_spec = install.kube.get(NODES, names[0]) or {}
            with running(controller, node):
                try:
                    served_node = await eventually_async(
                        lambda: _served(node_socket), timeout=240, what="csi-node serving"
                    )
                    served_controller = await eventually_async(
                        lambda: _served(controller_socket),
                        timeout=240,
                        what="csi-controller serving",
                    )
                    classes = await eventually(
                        storage_classes, timeout=120, what="the cloud's StorageClasses"
                    )
                    assert node.process is not None
                    node_env = environment_of(node.process.pid)
                    node_files = open_files_of(node.process.pid)
                    node_ports = remote_ports_of(node.process.pid)
                except AssertionError as exc:
                    raise AssertionError(
                        f"{exc}\n--- csi-controller:\n{controller.tail()}"
                        f"\n--- csi-node:\n{node.tail()}\n--- starter:\n{starter.tail()}"
                    ) from None
    finally:
        remove_nodes(install, names)
        for name in storage_classes():
            install.kube.delete(STORAGE_CLASSES, name)
        shutil.rmtree(sockets, ignore_errors=True)

    instance_id = node_spec["spec"]["providerID"].rsplit("/", 1)[-1]
    assert served_node == (driver, instance_id)
    # The node plugin (on every node) holds no Temporal setting or cloud credential: none in
    # its environment, no credential file mounted or open, no connection to Temporal or the
    # cloud's API (issue 39); it learned its instance from its Node (above).
    temporal_port = int(install.stack.temporal_address.rsplit(":", 1)[1])
    cloud_port = int(install.stack.aws_endpoint.rsplit(":", 1)[1].split("/")[0])
    assert not [k for k in node_env if k.startswith("CLOUDLOOP_TEMPORAL")], node_env
    assert not [k for k in node_env if k.startswith("CLOUDLOOP_AWS__")], node_env
    assert not [f for f in node_files if "credentials" in f], node_files
    assert not (node.root / "etc" / "cloudloop" / "credentials").exists()
    assert temporal_port not in node_ports and cloud_port not in node_ports, node_ports
    assert served_controller[0] == driver
    assert classes
    for name in ("csi-controller", "csi-node"):
        account = find(release.docs, "ServiceAccount", f"-{name}")["metadata"]["name"]
        rules = Rules.bound_to(release.docs, NAMESPACE, account)
        made = install.requests_of(account)
        refused = sorted({r for r, code in made if code == 403}, key=str)
        not_allowed = sorted({r for r, _ in made if not rules.allows(r)}, key=str)
        assert made, f"no request of {account} in the audit log"
        assert refused == [], f"{name}: the apiserver refused {refused}"
        assert not_allowed == [], f"{name}: the rendered rules do not allow {not_allowed}"


async def _served(endpoint: str) -> tuple[str, str] | None:
    try:
        return await _plugin_info(endpoint)
    except grpc.aio.AioRpcError:
        return None
