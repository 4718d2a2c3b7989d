"""The chart's own boundary, rendered by the real helm for every provider (deploy/SECURITY.md).

NetworkPolicies: every long-running pod of the release is isolated and allowed only its peers —
DNS, the API server, Temporal, the cloud API — and only the monitoring namespace reaches the
metrics port (decided on the rendered policies by :mod:`tests.install.netpol`, the API's
semantics; no CNI enforces them in the install stack). Pod Security: every pod but the node
agents meets the ``restricted`` standard (checked here field by field; the real apiserver's
PodSecurity admission decides in ``test_pod_security.py``). ServiceAccount tokens: mounted only
where the process reads the Kubernetes API. Metrics authorization: on by default, with the review
rules and a reader role for the monitoring ServiceAccount.
"""

from __future__ import annotations

import ast
from typing import Any

import pytest
import yaml

from tests.install.chart import CHART, Helm, container, find, provider_values, render
from tests.install.kubecalls import REPO, importers, kube_calls, processes_of_call
from tests.install.netpol import Endpoint, address, allowed, pod, template_endpoint

PROVIDER_NAMES = sorted(provider_values())
#: The API server's address in the renders below (``networkPolicy.apiServer.cidrs``).
API_SERVER = "192.0.2.1"
#: An address of the cloud API (outside the cluster).
CLOUD = "203.0.113.10"
#: The pods that run on every node with the node's privileges: not ``restricted``.
NODE_AGENTS = {"csi-node", "nth-imds"}
#: Components whose process reads the Kubernetes API (their pods mount a token), and why.
READS_THE_API = {
    "worker": "the kube activities (Services, CloudProbes, drains, machines), metrics reviews",
    "starter": "informers, Lease, Node sync, discovery, metrics reviews",
    "csi-controller": "StorageClasses, CSIDriver, its Lease; the sidecars' PVs and attachments",
    "csi-node": "its Node (provider ID and zone)",
    "nth-imds": "its own Node's notices annotation and Events about it",
}
#: Components whose process never reads the Kubernetes API (no token in their pods).
NO_API = {
    "temporal-setup": ("cloudloop.temporal", "setup_namespace"),
    "nth-uninstall": ("starters.termination", "setup_queue"),
    "layout-converge-install": ("starters.layout_converge", "install_schedule"),
}


@pytest.fixture(scope="module")
def manifests(helm: Helm, provider: str) -> list[dict[str, Any]]:
    sets = {
        "networkPolicy.apiServer.cidrs[0]": f"{API_SERVER}/32",
        # every workload: the converge install Job too
        "layouts.converge.enabled": "true",
        "layouts.existingSecret": "cluster-layouts",
        "layouts.converge.install.configKey": "cluster.yaml",
    }
    return render(helm, provider, sets)


def workloads(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """component -> the rendered workload (Deployment, DaemonSet or Job) running it."""
    found = {}
    for doc in docs:
        if doc["kind"] in ("Deployment", "DaemonSet", "Job"):
            labels = doc["spec"]["template"]["metadata"]["labels"]
            found[labels["app.kubernetes.io/component"]] = doc
    return found


def policies(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "NetworkPolicy"]


def cloud_ports(provider: str) -> list[int]:
    values = yaml.safe_load(provider_values()[provider].read_text())
    default = yaml.safe_load((CHART / "values.yaml").read_text())["networkPolicy"]["cloud"]
    return [int(p) for p in ((values.get("networkPolicy") or {}).get("cloud") or default)["ports"]]


DNS = pod("kube-system", {"k8s-app": "kube-dns"}, ip="10.244.0.2")
TEMPORAL_FRONTEND = pod("temporal", {"app.kubernetes.io/component": "frontend"}, ip="10.244.3.3")
PROMETHEUS = pod("d8-monitoring", {"app.kubernetes.io/name": "prometheus"}, ip="10.244.4.4")
ANY_POD = pod("default", {"app": "web"}, ip="10.244.5.5")
NODE = Endpoint(node=True, ip="10.0.0.1")


# -- NetworkPolicies ------------------------------------------------------------------------
def test_each_pod_reaches_only_what_its_process_needs(
    manifests: list[dict[str, Any]], provider: str
) -> None:
    rules = policies(manifests)
    pods = {c: template_endpoint(w) for c, w in workloads(manifests).items()}
    reaches = {
        "dns": (DNS, 53, "UDP"),
        "api-server": (address(API_SERVER), 6443, "TCP"),
        "temporal": (TEMPORAL_FRONTEND, 7233, "TCP"),
        "cloud": (address(CLOUD), cloud_ports(provider)[0], "TCP"),
        "another pod": (ANY_POD, 8080, "TCP"),
        "temporal's other ports": (TEMPORAL_FRONTEND, 6933, "TCP"),
        "cloud on another port": (address(CLOUD), 22, "TCP"),
    }
    expected = {
        "worker": {"dns", "api-server", "temporal", "cloud"},
        "starter": {"dns", "api-server", "temporal", "cloud"},
        "csi-controller": {"dns", "api-server", "temporal"},
        "csi-node": {"dns", "api-server"},
    }
    found = {
        component: {
            what
            for what, (to, port, protocol) in reaches.items()
            if allowed(rules, pods[component], to, port, protocol)
        }
        for component in expected
    }

    assert found == expected


def test_only_the_monitoring_namespace_reaches_the_metrics_port(
    manifests: list[dict[str, Any]],
) -> None:
    rules = policies(manifests)
    pods = {c: template_endpoint(w) for c, w in workloads(manifests).items()}
    for component in ("worker", "starter"):
        target = pods[component]
        metrics = target.ports["metrics"]
        assert allowed(rules, PROMETHEUS, target, metrics), component
        assert not allowed(rules, ANY_POD, target, metrics), component
        assert not allowed(rules, PROMETHEUS, target, 8080), component
        assert not allowed(rules, TEMPORAL_FRONTEND, target, metrics), component
        assert not allowed(rules, pods["csi-node"], target, metrics), component
        assert allowed(rules, NODE, target, metrics), "the kubelet's probes"
    for component in ("csi-controller", "csi-node"):
        target = pods[component]
        for port in [*target.ports.values(), 9464]:
            assert not allowed(rules, PROMETHEUS, target, port), component
            assert not allowed(rules, ANY_POD, target, port), component


def test_the_hook_jobs_and_the_host_network_agent_are_left_out(
    manifests: list[dict[str, Any]],
) -> None:
    """Hook Jobs run before the release's objects exist (or after): a policy would not be there
    yet on install and would be the old one on an upgrade; the IMDS agent is on the host network,
    where NetworkPolicy does not apply."""
    rules = policies(manifests)
    for component, workload in workloads(manifests).items():
        selected = any(_selects_template(rule, workload) for rule in rules)
        hooks = {"temporal-setup", "nth-uninstall", "layout-converge-install", "nth-imds"}
        assert selected == (component not in hooks), component


def _selects_template(policy: dict[str, Any], workload: dict[str, Any]) -> bool:
    from tests.install.netpol import selects

    labels = workload["spec"]["template"]["metadata"]["labels"]
    return policy["metadata"]["namespace"] == workload["metadata"]["namespace"] and selects(
        policy["spec"]["podSelector"], labels
    )


def test_the_api_server_without_an_address_is_any_address_on_its_ports(helm: Helm) -> None:
    """``helm template`` has no cluster to look the ``kubernetes`` EndpointSlice up in (the live
    test renders against one): the rule then names only the ports."""
    docs = render(helm, "aws")
    policy = find(docs, "NetworkPolicy", "-apiserver")
    (rule,) = policy["spec"]["egress"]
    assert "to" not in rule
    assert rule["ports"] == [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]
    worker = template_endpoint(find(docs, "Deployment", "-worker"))
    csi_node = template_endpoint(find(docs, "DaemonSet", "-csi-node"))
    assert allowed(policies(docs), csi_node, address("198.51.100.7"), 6443)
    assert not allowed(policies(docs), csi_node, address("198.51.100.7"), 80)
    assert allowed(policies(docs), worker, address("198.51.100.7"), 443)


@pytest.mark.parametrize(
    "temporal_address, peer, port",
    [
        pytest.param(
            "temporal-frontend.temporal:7233",
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "temporal"}}},
            7233,
            id="service.namespace",
        ),
        pytest.param(
            "temporal-frontend.tmp.svc.cluster.local:7234",
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tmp"}}},
            7234,
            id="service-fqdn",
        ),
        pytest.param("temporal-frontend:7233", {"podSelector": {}}, 7233, id="same-namespace"),
        pytest.param("10.1.2.3:7235", {"ipBlock": {"cidr": "10.1.2.3/32"}}, 7235, id="ip"),
        pytest.param(
            "prod.a1b2c.tmprl.cloud:7233", {"ipBlock": {"cidr": "0.0.0.0/0"}}, 7233, id="cloud"
        ),
        pytest.param(
            "temporal.example.com", {"ipBlock": {"cidr": "0.0.0.0/0"}}, 7233, id="no-port"
        ),
    ],
)
def test_the_temporal_peer_follows_the_address(
    helm: Helm, temporal_address: str, peer: dict[str, Any], port: int
) -> None:
    docs = render(helm, "aws", {"temporal.address": temporal_address})
    (rule,) = find(docs, "NetworkPolicy", "-temporal")["spec"]["egress"]

    assert rule == {"to": [peer], "ports": [{"port": port, "protocol": "TCP"}]}


def test_the_temporal_peer_and_cloud_api_can_be_narrowed(helm: Helm) -> None:
    docs = render(
        helm,
        "vsphere",
        {
            "networkPolicy.temporal.to[0].ipBlock.cidr": "10.9.0.0/24",
            "networkPolicy.temporal.ports[0]": "7233",
            "networkPolicy.cloud.cidrs[0]": "10.8.0.5/32",
            "networkPolicy.apiServer.cidrs[0]": f"{API_SERVER}/32",
        },
    )
    rules = policies(docs)
    worker = template_endpoint(find(docs, "Deployment", "-worker"))

    assert allowed(rules, worker, address("10.9.0.7"), 7233)
    assert not allowed(rules, worker, address("10.9.1.7"), 7233)
    assert allowed(rules, worker, address("10.8.0.5"), 443)
    assert not allowed(rules, worker, address(CLOUD), 443)


def test_extra_egress_reaches_the_worker_and_starter(helm: Helm) -> None:
    docs = render(
        helm,
        "aws",
        {
            "networkPolicy.apiServer.cidrs[0]": f"{API_SERVER}/32",
            "networkPolicy.extraEgress[0].to[0].ipBlock.cidr": "169.254.169.254/32",
            "networkPolicy.extraEgress[0].ports[0].port": "80",
        },
    )
    rules = policies(docs)
    imds = address("169.254.169.254")

    assert allowed(rules, template_endpoint(find(docs, "Deployment", "-worker")), imds, 80)
    assert not allowed(rules, template_endpoint(find(docs, "DaemonSet", "-csi-node")), imds, 80)


def test_the_temporal_frontend_policy_admits_the_release_and_temporal_only(helm: Helm) -> None:
    docs = render(
        helm,
        "aws",
        {
            "networkPolicy.temporalFrontend.enabled": "true",
            "networkPolicy.temporalFrontend.from[0].namespaceSelector.matchLabels.team": "ops",
        },
    )
    rules = policies(docs)
    frontend = pod(
        "temporal",
        {"app.kubernetes.io/name": "temporal", "app.kubernetes.io/component": "frontend"},
    )
    history = pod("temporal", {"app.kubernetes.io/component": "history"}, ip="10.244.3.9")
    ops = pod("ops-tools", {"app": "tctl"}, namespace_labels={"team": "ops"}, ip="10.244.6.6")
    worker = template_endpoint(find(docs, "Deployment", "-worker"))

    assert find(docs, "NetworkPolicy", "-temporal-frontend")["metadata"]["namespace"] == "temporal"
    assert allowed(rules, worker, frontend, 7233)
    assert allowed(rules, history, frontend, 6933)  # Temporal's own services, every port
    assert allowed(rules, ops, frontend, 7233)
    assert not allowed(rules, ANY_POD, frontend, 7233)
    assert not allowed(rules, ops, frontend, 6933)


def test_network_policies_can_be_turned_off(helm: Helm) -> None:
    docs = render(helm, "aws", {"networkPolicy.enabled": "false"})

    assert policies(docs) == []


# -- Pod Security: restricted for every pod but the node agents --------------------------------
#: The volume types the restricted standard allows.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """What in a pod spec breaks the Pod Security Standards' ``restricted`` level (the
    standard's checks; the apiserver's admission is the live test's judge)."""
    found = []
    pod_context = spec.get("securityContext") or {}
    for field_name in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field_name):
            found.append(field_name)
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume {volume['name']}: {sorted(kinds)}")
    if pod_context.get("sysctls"):
        found.append("sysctls")
    containers = [*spec.get("initContainers", []), *spec["containers"]]
    for c in containers:
        context = c.get("securityContext") or {}
        name = c["name"]
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"{name}: capabilities not dropped")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: capabilities added")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            found.append(f"{name}: runAsNonRoot")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = context.get("seccompProfile") or pod_context.get("seccompProfile") or {}
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            found.append(f"{name}: hostPort")
        # Beyond the standard: the image's file system stays read-only.
        if context.get("readOnlyRootFilesystem") is not True:
            found.append(f"{name}: readOnlyRootFilesystem")
    return found


def test_every_pod_but_the_node_agents_is_restricted(manifests: list[dict[str, Any]]) -> None:
    pods = {c: w["spec"]["template"]["spec"] for c, w in workloads(manifests).items()}
    violations = {c: restricted_violations(spec) for c, spec in pods.items()}

    assert {c: v for c, v in violations.items() if c not in NODE_AGENTS} == {
        c: [] for c in pods if c not in NODE_AGENTS
    }
    # The node agents need the node: privileged mounts on the kubelet's directories, or IMDS
    # through the host's network (their own securityContext says which; deploy/SECURITY.md).
    for agent in set(pods) & NODE_AGENTS:
        assert violations[agent], agent


def test_writable_paths_are_empty_dirs(manifests: list[dict[str, Any]]) -> None:
    """A read-only root file system: the Python processes get /tmp (self-signed metrics pairs,
    CA bundles written for the cloud's TLS) as an emptyDir."""
    for component in ("worker", "starter", "csi-controller"):
        workload = workloads(manifests)[component]
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        main = container(workload, component)
        mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
        assert volumes[mounts["/tmp"]] == {"name": mounts["/tmp"], "emptyDir": {}}, component


def test_host_network_mode_leaves_restricted(helm: Helm) -> None:
    """``hostNetwork: true`` (the vsphere CPI's layout) shares the node's network namespace:
    then the worker and starter are ``restricted`` in everything else, and their namespace must
    admit host networking (deploy/SECURITY.md)."""
    docs = render(
        helm,
        "vsphere",
        {"worker.kind": "DaemonSet", "starter.kind": "DaemonSet", "hostNetwork": "true"},
    )
    for component in ("worker", "starter"):
        spec = workloads(docs)[component]["spec"]["template"]["spec"]
        assert restricted_violations(spec) == ["hostNetwork"], component


# -- ServiceAccount tokens ------------------------------------------------------------------
def test_a_token_is_mounted_only_where_the_process_reads_the_api(
    manifests: list[dict[str, Any]],
) -> None:
    for component, workload in workloads(manifests).items():
        spec = workload["spec"]["template"]["spec"]
        mounted = spec.get("automountServiceAccountToken", True)
        assert component in {**READS_THE_API, **NO_API}, f"{component}: add it to a table"
        assert mounted == (component in READS_THE_API), component


def test_the_api_readers_are_the_processes_with_kubernetes_calls() -> None:
    """The source scan (tests/install/kubecalls.py) finds Kubernetes calls in the worker, the
    starter and both CSI processes; the IMDS agent records Events; the Jobs' commands make
    none."""
    by_process: dict[str, set[str]] = {}
    for call in kube_calls():
        for process in processes_of_call(call):
            by_process.setdefault(process, set()).add(call.module)
    assert {"worker", "starter", "csi-controller", "csi-node"} <= set(by_process)
    # The IMDS agent records Events on its Node (cloudloop.kube.events, run with its token).
    assert "cloudloop.nodeagents.termination_imds" in importers()["cloudloop.kube.events"]
    for module, function in NO_API.values():
        path = REPO / (module.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text())
        (node,) = [
            n
            for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function
        ]
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
        assert not {n for n in names if "kube" in n.lower()}, f"{module}.{function}"
        assert not [c for c in kube_calls() if (c.module, c.function) == (module, function)]


# -- metrics authorization --------------------------------------------------------------------
@pytest.mark.parametrize("kubernetes_authorization", [False, True], ids=["tokens", "tokenreview"])
def test_the_codec_server_is_reached_on_its_port_and_reads_the_api_only_to_review(
    helm: Helm, kubernetes_authorization: bool
) -> None:
    """The codec server (issue 39, item 3) answers on its port only (from
    ``codecServer.networkPolicyFrom`` when given), reaches the API server only when it reviews
    Kubernetes tokens, and mounts a token only then."""
    sets = {
        "codecServer.enabled": "true",
        "codecServer.tokens.secretName": "codec-tokens",
        "codecServer.kubernetesAuthorization": str(kubernetes_authorization).lower(),
        "networkPolicy.apiServer.cidrs[0]": f"{API_SERVER}/32",
    }
    docs = render(helm, "aws", sets)
    rules = policies(docs)
    server = workloads(docs)["codec-server"]
    target = template_endpoint(server)
    port = target.ports["codec"]
    assert allowed(rules, ANY_POD, target, port)
    assert not allowed(rules, ANY_POD, target, 9464)
    reaches_api = allowed(rules, target, address(API_SERVER), 6443)
    assert reaches_api == kubernetes_authorization
    assert not allowed(rules, target, TEMPORAL_FRONTEND, 7233)
    assert not allowed(rules, target, address(CLOUD), 443)
    spec = server["spec"]["template"]["spec"]
    assert spec.get("automountServiceAccountToken", True) == kubernetes_authorization
    assert restricted_violations(spec) == []

    narrowed = render(
        helm,
        "aws",
        {**sets, "codecServer.networkPolicyFrom[0].namespaceSelector.matchLabels.team": "ui"},
    )
    ui = pod("ui", {"app": "temporal-ui"}, namespace_labels={"team": "ui"})
    target = template_endpoint(workloads(narrowed)["codec-server"])
    assert allowed(policies(narrowed), ui, target, port)
    assert not allowed(policies(narrowed), ANY_POD, target, port)


def test_metrics_authorization_is_on_by_default(manifests: list[dict[str, Any]]) -> None:
    reader = find(manifests, "ClusterRole", "-metrics-reader")
    binding = find(manifests, "ClusterRoleBinding", "-metrics-reader")

    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert binding["roleRef"]["name"] == reader["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus", "namespace": "d8-monitoring"}
    ]
    for component in ("worker", "starter"):
        main = container(find(manifests, "Deployment", f"-{component}"))
        env = {e["name"]: e.get("value") for e in main["env"]}
        assert env["CLOUDLOOP_METRICS_AUTHORIZATION"] == "true", component
        assert main["readinessProbe"]["httpGet"]["scheme"] == "HTTPS", component
        rules = find(manifests, "ClusterRole", f"-{component}")["rules"]
        reviews = {
            (g, r)
            for rule in rules
            if rule["verbs"] == ["create"]
            for g in rule["apiGroups"]
            for r in rule["resources"]
        }
        assert {
            ("authentication.k8s.io", "tokenreviews"),
            ("authorization.k8s.io", "subjectaccessreviews"),
        } <= reviews, component
