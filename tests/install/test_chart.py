"""The Helm chart, rendered by the real helm for every provider: what users of a CCM chart expect.

Lint and template per provider values file; then the rendered objects: CRDs, separate
ServiceAccounts, the taints a cloud controller must tolerate, priority, PDBs, anti-affinity,
credentials only from Secrets, least-privilege RBAC, monitoring that names real metrics.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from cloudloop.cloud.registry import PROVIDERS, Settings
from cloudloop.messages.termination import NOTICES_ANNOTATION
from cloudloop.settings import Domain, TaskQueueSettings
from devstack import gotools
from tests.install.chart import (
    CHART,
    Helm,
    Rules,
    container,
    documents,
    find,
    provider_values,
    render,
)

PROVIDER_NAMES = sorted(provider_values())
TAINTS = (
    "node.cloudprovider.kubernetes.io/uninitialized",
    "node-role.kubernetes.io/control-plane",
    "node.kubernetes.io/not-ready",
)
MONITORING = {
    "monitoring.podMonitor.enabled": "true",
    "monitoring.prometheusRule.enabled": "true",
    "monitoring.dashboard.enabled": "true",
}


@pytest.fixture(scope="module")
def manifests(helm: Helm, provider: str) -> list[dict[str, Any]]:
    return render(helm, provider, MONITORING)


def test_every_registered_provider_has_a_values_file_and_a_chart_block() -> None:
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())

    assert sorted(PROVIDERS) == PROVIDER_NAMES
    assert sorted(chart_values["providers"]) == PROVIDER_NAMES


def test_the_node_driver_drops_exactly_the_charts_credential_files() -> None:
    """``Provider.credential_settings`` (what the CSI node plugin is built without) are the
    settings the chart points at the credentials Secret's files."""
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())

    for name, record in PROVIDERS.items():
        files = chart_values["providers"][name]["credentialFiles"]
        assert sorted(record.credential_settings) == sorted(files), name


def test_helm_lint_passes(helm: Helm, provider: str) -> None:
    sets = ["--set", "clusterName=lint", "--set", "cloud.credentials.files.x=y"]
    result = helm.run("lint", "--strict", str(CHART), "-f", str(provider_values()[provider]), *sets)

    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_the_chart_ships_the_crds(manifests: list[dict[str, Any]]) -> None:
    shipped = {
        doc["metadata"]["name"]
        for path in sorted((CHART.parent.parent / "crds").glob("*.yaml"))
        for doc in documents(path.read_text())
        if doc["kind"] == "CustomResourceDefinition"
    }
    rendered = {d["metadata"]["name"] for d in manifests if d["kind"] == "CustomResourceDefinition"}

    assert rendered == shipped
    assert "cloudprobes.cloudloop.io" in rendered
    assert (CHART / "values.schema.json").is_file()
    assert (CHART / "templates" / "NOTES.txt").is_file()


@pytest.mark.parametrize("component", ["worker", "starter"])
def test_pods_run_where_and_how_a_cloud_controller_must(
    manifests: list[dict[str, Any]], component: str
) -> None:
    deployment = find(manifests, "Deployment", f"-{component}")
    pod = deployment["spec"]["template"]["spec"]
    account = find(manifests, "ServiceAccount", f"-{component}")
    pdb = find(manifests, "PodDisruptionBudget", f"-{component}")
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]

    assert {t["key"] for t in pod["tolerations"]} >= set(TAINTS)
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert (
        anti[0]["podAffinityTerm"]["labelSelector"]["matchLabels"]
        == (deployment["spec"]["selector"]["matchLabels"])
    )
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["args"][0] == component


def test_worker_and_starter_have_their_own_service_accounts(
    manifests: list[dict[str, Any]],
) -> None:
    accounts = {
        find(manifests, "Deployment", f"-{c}")["spec"]["template"]["spec"]["serviceAccountName"]
        for c in ("worker", "starter")
    }

    assert len(accounts) == 2


@pytest.mark.parametrize(
    "sets, expected",
    [
        pytest.param({"hostNetwork": "true"}, {"hostNetwork": True}, id="host-network"),
        pytest.param(
            {"controlPlane": "true"},
            {"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}},
            id="control-plane",
        ),
        pytest.param(
            {"priorityClassName": "my-class"}, {"priorityClassName": "my-class"}, id="priority"
        ),
    ],
)
def test_placement_options(helm: Helm, sets: dict[str, str], expected: dict[str, Any]) -> None:
    pod = find(render(helm, "aws", sets), "Deployment", "-starter")["spec"]["template"]["spec"]

    assert {k: pod.get(k) for k in expected} == expected
    if "hostNetwork" in expected:
        assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_the_worker_polls_each_domain_queue_with_its_slots_and_rate(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    sets = {
        "temporal.maxConcurrentActivities": "20",
        "temporal.queues.drain.maxConcurrentActivities": "5",
        "temporal.queues.drain.activitiesPerSecond": "2",
        "temporal.queues.volume.activitiesPerSecond": "0",  # unlimited
    }
    docs = render(helm, "aws", sets)
    envs = {
        c: {e["name"]: e.get("value") for e in container(find(docs, "Deployment", f"-{c}"))["env"]}
        for c in ("worker", "starter")
    }
    for name, value in envs["worker"].items():
        if name.startswith("CLOUDLOOP_TEMPORAL__") and value is not None:
            monkeypatch.setenv(name, value)
    temporal = Settings().temporal

    assert "CLOUDLOOP_TEMPORAL__QUEUES" not in envs["starter"]  # only the worker polls them
    assert temporal.max_concurrent_activities == 20
    assert temporal.queue_settings(Domain.DRAIN) == TaskQueueSettings(
        max_concurrent_activities=5, activities_per_second=2
    )
    assert temporal.queue_settings(Domain.VOLUME).activities_per_second is None
    assert {d: temporal.queue_settings(d) for d in (Domain.LOAD_BALANCER, Domain.MACHINE)} == {
        d: TaskQueueSettings(max_concurrent_activities=50, activities_per_second=50)
        for d in (Domain.LOAD_BALANCER, Domain.MACHINE)
    }
    assert sorted(temporal.queues) == sorted(Domain.ALL)


def test_credentials_come_from_the_secret_and_never_reach_config_or_env(
    manifests: list[dict[str, Any]], provider: str
) -> None:
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    files = chart_values["providers"][provider]["credentialFiles"]
    config = find(manifests, "ConfigMap", "cloudloop")
    cloud = yaml.safe_load(config["data"]["cloud.yaml"])
    secret = find(manifests, "Secret", "-credentials")
    worker = find(manifests, "Deployment", "-worker")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in worker["containers"][0]["volumeMounts"]}

    assert {setting: cloud[setting] for setting in files} == {
        setting: f"{mounts['credentials']}/{key}" for setting, key in files.items()
    }
    assert set(secret["stringData"]) == set(files.values())
    assert "placeholder" not in json.dumps([config, worker])


@pytest.mark.parametrize(
    "key",
    [
        "cloud.settings.password",
        "cloud.settings.secret_access_key",
        "config.aws.access_key_id",
        "config.dvp.kubeconfig_base64",
    ],
)
def test_the_schema_refuses_secrets_in_values(helm: Helm, key: str) -> None:
    result = helm.template(
        [provider_values()["aws"]],
        {"clusterName": "x", "cloud.credentials.files.credentials": "y", key: "s3cr3t"},
        check=False,
    )

    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr


@pytest.mark.parametrize(
    "sets, message",
    [
        pytest.param({"provider": "nowhere"}, 'provider "nowhere" has no block', id="unknown"),
        pytest.param({"clusterName": ""}, "clusterName is required", id="no-cluster-name"),
    ],
)
def test_bad_values_fail_with_a_clear_message(
    helm: Helm, sets: dict[str, str], message: str
) -> None:
    base = {"clusterName": "x", "cloud.credentials.files.credentials": "y"}
    result = helm.template([provider_values()["aws"]], {**base, **sets}, check=False)

    assert result.returncode != 0
    assert message in result.stderr


def test_rbac_is_least_privilege(manifests: list[dict[str, Any]]) -> None:
    roles = [d for d in manifests if d["kind"] in ("ClusterRole", "Role")]
    rules = [(d, r) for d in roles for r in d.get("rules") or []]

    for role, rule in rules:
        named = rule.get("resources", []) + rule.get("apiGroups", [])
        assert "*" not in rule["verbs"] + named, role["metadata"]
        assert "deletecollection" not in rule["verbs"]
    # The one non-resource rule: the metrics reader's `get` on /metrics.
    assert [r for _, r in rules if "nonResourceURLs" in r] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
    # In kube-system only `create` (which RBAC cannot limit by name) goes without resourceNames.
    for role, rule in rules:
        if role["kind"] == "Role" and role["metadata"]["namespace"] == "kube-system":
            assert rule.get("resourceNames") or rule["verbs"] == ["create"], rule
    # Nothing cluster-wide reads Secrets but the Cluster API bootstrap data, if any.
    for role, rule in rules:
        if role["kind"] == "ClusterRole" and "secrets" in rule.get("resources", []):
            assert rule["verbs"] == ["get"] and role["metadata"]["name"].endswith("-worker")


def test_the_hook_job_registers_the_search_attributes(manifests: list[dict[str, Any]]) -> None:
    job = find(manifests, "Job", "-temporal-setup")
    spec = job["spec"]["template"]["spec"]

    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert spec["containers"][0]["args"][1:3] == ["temporal", "setup"]
    assert spec["automountServiceAccountToken"] is False


def metric_names(expression: str) -> set[str]:
    """Metric names of a PromQL expression (identifiers followed by ``{`` or ``[``)."""
    return set(re.findall(r"([a-z_][a-z0-9_]*)\s*[{\[]", expression)) - {"by", "rate"}


def project_metrics() -> set[str]:
    names: set[str] = set()
    for collector in REGISTRY.collect():
        names |= {sample.name for sample in collector.samples} | {collector.name}
    return names | {f"{n}_total" for n in names}


def test_alerts_and_dashboard_name_only_metrics_that_exist(
    manifests: list[dict[str, Any]],
) -> None:
    import cloudloop.kube.leader  # noqa: F401  (registers its gauge)

    rule = find(manifests, "PrometheusRule", "cloudloop")
    alerts = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    dashboard = json.loads(find(manifests, "ConfigMap", "-dashboard")["data"]["cloudloop.json"])
    panel_exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    known = project_metrics()

    assert set(alerts) == {
        "CloudloopDrainBlocked",
        "CloudloopLoadBalancerSyncFailing",
        "CloudloopCloudUnreachable",
        "CloudloopNoLeader",
    }
    for expression in [*alerts.values(), *panel_exprs]:
        unknown = {
            m
            for m in metric_names(expression)
            if m not in known and not m.startswith("temporal_") and m not in ("absent", "max")
        }
        assert unknown == set(), expression
    assert find(manifests, "PodMonitor", "cloudloop")["spec"]["podMetricsEndpoints"][0]["port"] == (
        "metrics"
    )


def test_the_dashboard_file_is_valid_json() -> None:
    dashboard = json.loads((CHART / "dashboards" / "cloudloop.json").read_text())

    assert dashboard["uid"] == "cloudloop"
    assert all(p["targets"] for p in dashboard["panels"])


def test_provider_values_files_hold_no_secrets() -> None:
    secret = re.compile(r"(password|secret_access_key|access_key_id|token|api_key)\s*:\s*\S")
    for path in provider_values().values():
        assert not secret.search(Path(path).read_text()), path


# -- CSI pods: the same configuration and credentials as the worker and starter ---------------
def _pod(manifests: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    return dict(find(manifests, kind, suffix)["spec"]["template"]["spec"])


def _main_container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["containers"] if c["name"] == name)


def _config_sources(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """mountPath -> the ConfigMap or Secret mounted there (emptyDir and hostPath left out)."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    sources: dict[str, Any] = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            sources[mount["mountPath"]] = ("ConfigMap", volume["configMap"]["name"])
        elif "secret" in volume:
            sources[mount["mountPath"]] = ("Secret", volume["secret"]["secretName"])
    return sources


CSI_PODS = [
    pytest.param("Deployment", "-csi-controller", "csi-controller", id="csi-controller"),
    pytest.param("DaemonSet", "-csi-node", "csi-node", id="csi-node"),
]


def _duration_s(value: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", value)
    assert match, value
    return float(match.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0}[match.group(2)]


def test_a_hung_csi_controller_is_restarted(manifests: list[dict[str, Any]]) -> None:
    """aws-ebs-csi-driver's shape: the livenessprobe sidecar on the controller's socket serves
    /healthz on the ``healthz`` port of the controller container, whose liveness (and
    readiness) probe asks it; the sidecar answers before the kubelet gives up waiting."""
    pod = _pod(manifests, "Deployment", "-csi-controller")
    controller = _main_container(pod, "csi-controller")
    sidecar = _main_container(pod, "liveness-probe")
    args = dict(a.removeprefix("--").split("=", 1) for a in sidecar["args"])
    socket = next(e["value"] for e in controller["env"] if e["name"] == "CLOUDLOOP_CSI__ENDPOINT")
    assert args["csi-address"] == socket.removeprefix("unix://") == "/csi/csi.sock"
    mounts = {m["name"]: m["mountPath"] for m in sidecar["volumeMounts"]}
    assert mounts == {"socket-dir": "/csi"}
    (port,) = controller["ports"]
    assert (port["name"], port["containerPort"]) == ("healthz", int(args["health-port"]))
    for kind in ("livenessProbe", "readinessProbe"):
        probe = controller[kind]
        assert probe["httpGet"] == {"path": "/healthz", "port": "healthz"}
        assert probe["failureThreshold"] >= 3 and probe["periodSeconds"] > 0
        assert _duration_s(args["probe-timeout"]) < probe["timeoutSeconds"]
    tag = sidecar["image"].rsplit(":", 1)[1]
    assert sidecar["image"].startswith("registry.k8s.io/sig-storage/livenessprobe:")
    assert tag == gotools.LIVENESSPROBE_VERSION
    assert "resources" in sidecar and "--leader-election=true" not in sidecar["args"]


@pytest.mark.parametrize("kind, suffix, name", CSI_PODS)
def test_csi_pods_get_the_cloud_settings_the_worker_gets(
    manifests: list[dict[str, Any]], kind: str, suffix: str, name: str
) -> None:
    """Both CSI processes get the worker's cloud settings and configuration; the controller
    also its credential files, the node plugin (on every node) none (issue 39)."""
    worker_pod = _pod(manifests, "Deployment", "-worker")
    worker = worker_pod["containers"][0]
    pod = _pod(manifests, kind, suffix)
    csi = _main_container(pod, name)
    env = {e["name"]: e.get("value") for e in csi["env"]}
    worker_env = {e["name"]: e.get("value") for e in worker["env"]}
    shared = ("CLOUDLOOP_CLUSTER_NAME", "CLOUDLOOP_PROVIDER", "CLOUDLOOP_CONFIG")
    credentials = ("Secret", find(manifests, "Secret", "-credentials")["metadata"]["name"])
    sources = _config_sources(pod, csi)
    worker_sources = _config_sources(worker_pod, worker)

    assert csi["args"][0] == name
    assert [a for a in csi["args"] if a.startswith("--cloud-config=")] == [
        a for a in worker["args"] if a.startswith("--cloud-config=")
    ]
    assert {k: env[k] for k in shared} == {k: worker_env[k] for k in shared}
    # the same files, but the payload codec's keys only where the process talks to Temporal and
    # the cloud credentials nowhere on a node
    if name == "csi-node":
        assert sources == {
            p: s
            for p, s in worker_sources.items()
            if s != credentials and p != "/etc/cloudloop/codec-keys"
        }
    else:
        assert sources == worker_sources
        assert credentials in sources.values()
    # Credentials are files: no env value carries one, no env reads a Secret key.
    assert "placeholder" not in json.dumps(csi["env"])
    assert not any("secretKeyRef" in (e.get("valueFrom") or {}) for e in csi["env"])


@pytest.mark.parametrize("kind, suffix, name", CSI_PODS)
def test_csi_pods_mount_an_existing_credentials_secret(
    helm: Helm, kind: str, suffix: str, name: str
) -> None:
    """The controller mounts an existing credentials Secret; the node plugin never does."""
    docs = documents(
        helm.template(
            [provider_values()["openstack"]],
            {
                "clusterName": "x",
                "cloud.credentials.create": "false",
                "cloud.credentials.existingSecret": "my-cloud-conf",
            },
        ).stdout
    )
    pod = _pod(docs, kind, suffix)
    cloud = yaml.safe_load(find(docs, "ConfigMap", "cloudloop")["data"]["cloud.yaml"])
    sources = _config_sources(pod, _main_container(pod, name))

    if name == "csi-node":
        assert "/etc/cloudloop/credentials" not in sources
        assert ("Secret", "my-cloud-conf") not in sources.values()
    else:
        assert sources["/etc/cloudloop/credentials"] == ("Secret", "my-cloud-conf")
    assert cloud["cloud_config_file"] == "/etc/cloudloop/credentials/cloud.conf"
    # no credentials Secret: the only one made is the payload codec's key ring
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"] == ["cloudloop-codec"]


# -- node agents: no Temporal, no cloud credential (issue 39) ----------------------------------
#: Everything that would let a node reach the control plane: the Temporal connection's
#: settings and its TLS pair or API key, and the cloud's credentials Secret.
TEMPORAL_AND_CREDENTIALS = {
    "temporal.tls.enabled": "true",
    "temporal.tls.secretName": "temporal-mtls",
    "temporal.apiKey.secretName": "temporal-api-key",
}
NODE_AGENTS = ("-nth-imds", "-csi-node")


def node_agent_pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]
        for d in docs
        if d["kind"] == "DaemonSet" and d["metadata"]["name"].endswith(NODE_AGENTS)
    }


@pytest.mark.parametrize("provider", PROVIDER_NAMES, ids=PROVIDER_NAMES)
def test_node_agent_pods_hold_no_temporal_or_cloud_credential(helm: Helm, provider: str) -> None:
    """For every values file, with Temporal mTLS and an API key configured: the DaemonSets on
    every node (IMDS agent, CSI node plugin) mount no Secret, read no Secret key, get no Temporal
    setting, and what they do mount (the ConfigMap) holds no credential's content."""
    docs = render(helm, provider, TEMPORAL_AND_CREDENTIALS)
    pods = node_agent_pods(docs)
    secrets = {d["metadata"]["name"] for d in docs if d["kind"] == "Secret"}
    secrets |= {"temporal-mtls", "temporal-api-key"}

    assert any(name.endswith("-csi-node") for name in pods)
    assert any(name.endswith("-nth-imds") for name in pods) == (provider == "aws")
    for name, pod in pods.items():
        volumes = pod.get("volumes") or []
        assert not [v for v in volumes if "secret" in v or "projected" in v], name
        for c in pod["containers"] + (pod.get("initContainers") or []):
            text = json.dumps(c)
            env = {e["name"] for e in c.get("env") or []}
            assert not [e for e in env if e.startswith("CLOUDLOOP_TEMPORAL")], (name, env)
            assert not [e for e in env if e.startswith("AWS_") or "PASSWORD" in e], (name, env)
            assert "secretKeyRef" not in text and "envFrom" not in c, name
            assert "/etc/cloudloop/credentials" not in text, name
            assert "temporal" not in text.lower(), (name, c["name"])
            assert not any(s in text for s in secrets), name
    mounted = {
        v["configMap"]["name"]
        for pod in pods.values()
        for v in pod.get("volumes") or []
        if "configMap" in v
    }
    for config in (d for d in docs if d["kind"] == "ConfigMap"):
        if config["metadata"]["name"] in mounted:
            assert "placeholder" not in json.dumps(config), config["metadata"]["name"]


def test_the_imds_agent_may_change_only_its_own_node(helm: Helm) -> None:
    """RBAC: get and patch Nodes, Events in ``default``; the ValidatingAdmissionPolicy (bound,
    Deny) narrows its writes to its own Node's notices annotation and Events about that Node."""
    docs = render(helm, "aws", namespace="kube-system")
    account = find(docs, "DaemonSet", "-nth-imds")["spec"]["template"]["spec"]["serviceAccountName"]
    bound = Rules.bound_to(docs, "kube-system", account)
    policy = find(docs, "ValidatingAdmissionPolicy", "-nth-imds")
    binding = find(docs, "ValidatingAdmissionPolicyBinding", "-nth-imds")

    assert sorted((r["resources"][0], tuple(r["verbs"])) for r in bound.cluster) == [
        ("nodes", ("get", "patch"))
    ]
    assert list(bound.namespaced) == ["default"]
    assert bound.namespaced["default"][0]["resources"] == ["events"]
    (condition,) = policy["spec"]["matchConditions"]
    assert f"system:serviceaccount:kube-system:{account}" in condition["expression"]
    assert "authentication.kubernetes.io/node-name" in json.dumps(policy["spec"]["variables"])
    assert NOTICES_ANNOTATION in json.dumps(policy["spec"]["validations"])
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }


def test_storage_class_exclude_and_default_reach_the_csi_controller(helm: Helm) -> None:
    """Deckhouse's ``storageClass.exclude``/``default`` as chart values, read by the settings."""
    from cloudloop.settings import CsiSettings

    docs = render(
        helm,
        "aws",
        {"csi.storageClasses.exclude[0]": ".*-hdd", "csi.storageClasses.default": "gp2"},
    )
    csi = _main_container(_pod(docs, "Deployment", "-csi-controller"), "csi-controller")
    env = {e["name"]: e.get("value") for e in csi["env"]}
    settings = CsiSettings.model_validate(
        {
            "storage_class_exclude": json.loads(env["CLOUDLOOP_CSI__STORAGE_CLASS_EXCLUDE"]),
            "default_storage_class": env["CLOUDLOOP_CSI__DEFAULT_STORAGE_CLASS"],
        }
    )
    assert settings.excluded("sc1-hdd") and not settings.excluded("gp3")
    assert settings.default_storage_class == "gp2"
    plain = render(helm, "aws", {})
    csi = _main_container(_pod(plain, "Deployment", "-csi-controller"), "csi-controller")
    env = {e["name"]: e.get("value") for e in csi["env"]}
    assert json.loads(env["CLOUDLOOP_CSI__STORAGE_CLASS_EXCLUDE"]) == []


def test_volume_attributes_classes_are_rendered_for_the_driver(helm: Helm) -> None:
    """``csi.volumeAttributesClasses`` become storage.k8s.io/v1 VolumeAttributesClasses of the
    chart's driver, every parameter a string (the API's type), none by default."""
    docs = render(
        helm,
        "aws",
        {
            "csi.volumeAttributesClasses[0].name": "gp3-fast",
            "csi.volumeAttributesClasses[0].parameters.iops": "6000",
            "csi.volumeAttributesClasses[0].parameters.throughput": "500",
        },
    )
    [klass] = [d for d in docs if d.get("kind") == "VolumeAttributesClass"]
    assert klass["apiVersion"] == "storage.k8s.io/v1"
    assert klass["metadata"]["name"] == "gp3-fast"
    assert klass["driverName"] == "csi.cloudloop.io"
    assert klass["parameters"] == {"iops": "6000", "throughput": "500"}
    assert not [d for d in render(helm, "aws", {}) if d.get("kind") == "VolumeAttributesClass"]


def test_deckhouse_aws_settings_reach_the_aws_settings(helm: Helm) -> None:
    """``tags``, ``zones``, the LB security group and the IMDS options as ``cloud.settings``."""
    from cloudloop.cloud.aws.settings import AwsSettings

    docs = render(
        helm,
        "aws",
        {
            "cloud.settings.tags.team": "storage",
            "cloud.settings.zones[0]": "us-east-1b",
            "cloud.settings.load_balancer_security_group": "sg-0123456789abcdef0",
            "cloud.settings.instances.http_tokens": "required",
            "cloud.settings.instances.http_put_response_hop_limit": "1",
        },
    )
    cloud = yaml.safe_load(find(docs, "ConfigMap", "cloudloop")["data"]["cloud.yaml"])
    aws = AwsSettings.model_validate(cloud)
    assert aws.tags == {"team": "storage"} and aws.zone_names() == ["us-east-1b"]
    assert aws.load_balancer_security_group == "sg-0123456789abcdef0"
    assert (aws.instances.http_tokens, aws.instances.http_put_response_hop_limit) == ("required", 1)


def test_the_csi_controller_reaches_temporal_like_the_worker(helm: Helm) -> None:
    sets = {
        "temporal.tls.enabled": "true",
        "temporal.tls.secretName": "temporal-mtls",
        "temporal.apiKey.secretName": "temporal-key",
    }
    docs = render(helm, "aws", sets)
    pod = _pod(docs, "Deployment", "-csi-controller")
    csi = _main_container(pod, "csi-controller")
    worker_pod = _pod(docs, "Deployment", "-worker")
    # The connection; the worker's own activity slots and rates are no concern of the controller
    # (it starts workflows on the queues named after temporal.taskQueue).
    polling = ("CLOUDLOOP_TEMPORAL__MAX_CONCURRENT_ACTIVITIES", "CLOUDLOOP_TEMPORAL__QUEUES")
    temporal = {
        e["name"]: e["value"] for e in csi["env"] if e["name"].startswith("CLOUDLOOP_TEMPORAL__")
    }
    worker_temporal = {
        e["name"]: e["value"]
        for e in worker_pod["containers"][0]["env"]
        if e["name"].startswith("CLOUDLOOP_TEMPORAL__") and e["name"] not in polling
    }

    assert temporal == worker_temporal
    assert "CLOUDLOOP_TEMPORAL__API_KEY_FILE" in temporal
    assert {
        ("Secret", "temporal-mtls"),
        ("Secret", "temporal-key"),
    } <= set(_config_sources(pod, csi).values())


# -- the upstream vsphere CPI's layout: DaemonSets on the control-plane nodes ------------------
def test_vsphere_runs_deployments_by_default(helm: Helm) -> None:
    docs = render(helm, "vsphere")

    assert find(docs, "Deployment", "-worker")["spec"]["replicas"] == 2
    assert find(docs, "Deployment", "-starter")["spec"]["replicas"] == 2
    assert not [
        d
        for d in docs
        if d["kind"] == "DaemonSet" and d["metadata"]["name"].endswith(("-worker", "-starter"))
    ]


def test_vsphere_offers_the_upstream_daemonset_on_control_plane_nodes(helm: Helm) -> None:
    sets = {"worker.kind": "DaemonSet", "starter.kind": "DaemonSet", "hostNetwork": "true"}
    docs = render(helm, "vsphere", sets)
    ports = {}
    for component in ("worker", "starter"):
        daemonset = find(docs, "DaemonSet", f"-{component}")
        pod = daemonset["spec"]["template"]["spec"]
        container = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        ports[component] = container["ports"][0]["containerPort"]

        assert "replicas" not in daemonset["spec"]
        assert daemonset["spec"]["updateStrategy"]["type"] == "RollingUpdate"
        assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
        assert {t["key"] for t in pod["tolerations"]} >= set(TAINTS)
        assert pod["hostNetwork"] is True
        assert "affinity" not in pod
        assert env["CLOUDLOOP_METRICS_PORT"] == str(ports[component])
        assert not [
            d
            for d in docs
            if d["kind"] in ("Deployment", "PodDisruptionBudget")
            and d["metadata"]["name"].endswith(f"-{component}")
        ]
    # Two host-network pods on one node: two ports.
    assert ports == {"worker": 9464, "starter": 9465}


def test_an_unknown_workload_kind_is_refused(helm: Helm) -> None:
    result = helm.template(
        [provider_values()["vsphere"]],
        {
            "clusterName": "x",
            "cloud.credentials.files.password": "y",
            "starter.kind": "StatefulSet",
        },
        check=False,
    )

    assert result.returncode != 0
    assert "starter" in result.stderr and "kind" in result.stderr


# -- tunables: chart values with the settings' defaults ----------------------------------------
#: Settings a user tunes: periods, intervals, concurrency and rate limits.
TUNABLE = re.compile(
    r"(_period_s|(^|_)interval_s|_frequency_s|_window_s|_per_second|graceful_shutdown_s)$"
    r"|^(concurrent_|max_)|^queues$"
)
#: Tunables the chart sets another way: ``csi.node.maxVolumesPerNode``, and the worker's task
#: queues ``temporal.maxConcurrentActivities`` and ``temporal.queues`` (checked below).
TUNED_ELSEWHERE = {
    ("csi", "max_volumes_per_node"),
    ("temporal", "max_concurrent_activities"),
    ("temporal", "queues"),
}
SECTIONS = ("temporal", "ccm", "discovery", "nth", "csi")


def _chart_config() -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "values.yaml").read_text())["config"])


def test_every_tunable_setting_is_a_chart_value() -> None:
    from cloudloop.cloud.registry import Settings

    settings = Settings()
    tunables = {
        (section, name)
        for section in SECTIONS
        for name in type(getattr(settings, section)).model_fields
        if TUNABLE.search(name)
    } - TUNED_ELSEWHERE
    config = _chart_config()

    assert {(s, n) for s, n in tunables if n not in (config.get(s) or {})} == set()


def test_chart_config_defaults_are_the_settings_defaults() -> None:
    from cloudloop.cloud.registry import Settings

    settings = Settings()
    for section, values in _chart_config().items():
        model = getattr(settings, section)
        for name, value in values.items():
            assert name in type(model).model_fields, f"{section}.{name} is no setting"
            assert value == type(model)().model_dump()[name], f"{section}.{name}"


def test_the_rendered_config_loads_into_the_settings(
    helm: Helm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cloudloop.cloud.registry import Settings

    docs = render(helm, "aws", {"config.ccm.load_balancer_resync_period_s": "120"})
    config = tmp_path / "config.yaml"
    config.write_text(find(docs, "ConfigMap", "cloudloop")["data"]["config.yaml"])
    worker = find(docs, "Deployment", "-worker")["spec"]["template"]["spec"]["containers"][0]
    for entry in worker["env"]:
        if "value" in entry:
            monkeypatch.setenv(entry["name"], entry["value"])
    monkeypatch.setenv("CLOUDLOOP_CONFIG", str(config))

    settings = Settings()

    assert settings.ccm.load_balancer_resync_period_s == 120.0
    assert settings.ccm.cluster_cidr == "10.244.0.0/16"  # values/aws.yaml, merged
    assert settings.temporal.graceful_shutdown_s == 30.0
    assert settings.temporal.address == "temporal-frontend.temporal:7233"  # env, beside the file


def test_task_queue_values_default_to_the_settings_defaults() -> None:
    temporal_values = yaml.safe_load((CHART / "values.yaml").read_text())["temporal"]
    defaults = Settings().temporal

    assert temporal_values["maxConcurrentActivities"] == defaults.max_concurrent_activities
    assert {
        domain: {
            "max_concurrent_activities": queue["maxConcurrentActivities"],
            "activities_per_second": queue["activitiesPerSecond"] or None,
        }
        for domain, queue in temporal_values["queues"].items()
    } == {domain: queue.model_dump() for domain, queue in defaults.queues.items()}


@pytest.mark.parametrize("secret", ["", "cloudloop-metrics-tls"], ids=["self-signed", "secret"])
def test_metrics_authorization_serves_https_to_probes_and_scrapes(
    helm: Helm, secret: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``metrics.authorization`` the port serves HTTPS: the kubelet's probes and the
    PodMonitor use it, and a TLS Secret, when named, is the pair the process serves."""
    sets = {
        "metrics.authorization": "true",
        "metrics.tls.secretName": secret,
        "metrics.tokenAudiences[0]": "prometheus",
        "monitoring.podMonitor.enabled": "true",
    }
    docs = render(helm, "aws", sets)
    monitor = find(docs, "PodMonitor")["spec"]["podMetricsEndpoints"][0]
    assert monitor["scheme"] == "https" and monitor["tlsConfig"] == {"insecureSkipVerify": True}
    for component in ("worker", "starter"):
        workload = find(docs, "Deployment", f"-{component}")
        main = container(workload)
        for probe in ("livenessProbe", "readinessProbe"):
            assert main[probe]["httpGet"]["scheme"] == "HTTPS"
        env = {e["name"]: e.get("value") for e in main["env"]}
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        for name, value in env.items():
            if name.startswith("CLOUDLOOP_METRICS_") and value is not None:
                monkeypatch.setenv(name, value)
        settings = Settings()
        assert settings.metrics_authorization and settings.metrics_token_audiences == ["prometheus"]
        if secret:
            assert volumes["metrics-tls"]["secret"]["secretName"] == secret
            mount = next(m for m in main["volumeMounts"] if m["name"] == "metrics-tls")
            assert settings.metrics_tls_cert_file == Path(mount["mountPath"]) / "tls.crt"
            assert settings.metrics_tls_key_file == Path(mount["mountPath"]) / "tls.key"
        else:
            assert "metrics-tls" not in volumes and settings.metrics_tls_cert_file is None


def test_metrics_without_authorization_stay_plain_http(helm: Helm) -> None:
    """``metrics.authorization=false`` (on by default): plain HTTP, no review rules, no reader."""
    docs = render(
        helm, "aws", {"monitoring.podMonitor.enabled": "true", "metrics.authorization": "false"}
    )
    assert "scheme" not in find(docs, "PodMonitor")["spec"]["podMetricsEndpoints"][0]
    probe = container(find(docs, "Deployment", "-worker"))["readinessProbe"]["httpGet"]
    assert probe["scheme"] == "HTTP"
    rules = find(docs, "ClusterRole", "-worker")["rules"]
    assert not [r for r in rules if "tokenreviews" in r["resources"]]
    assert not [d for d in docs if d["metadata"]["name"].endswith("-metrics-reader")]


# -- VolumeSnapshots (issue 29) ---------------------------------------------------------------
SNAPSHOT_API = "snapshot.storage.k8s.io/v1/VolumeSnapshotClass"


def _containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    deployment = find(docs, "Deployment", "-csi-controller")
    return {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}


@pytest.mark.parametrize("provider", PROVIDER_NAMES, ids=PROVIDER_NAMES)
def test_csi_snapshotter_runs_where_the_clouds_driver_has_snapshots(
    helm: Helm, provider: str
) -> None:
    from cloudloop.cloud.driver import Capability
    from devstack.csi_sidecars import SNAPSHOTTER_FLAGS
    from devstack.gotools import CSI_SNAPSHOTTER_VERSION

    record = PROVIDERS[provider]
    has_snapshots = record.driver(record.settings()).supports(Capability.SNAPSHOTS)
    block = yaml.safe_load((CHART / "values.yaml").read_text())["providers"][provider]
    docs = render(helm, provider, api_versions=(SNAPSHOT_API,))
    containers = _containers(docs)
    env = {e["name"]: e.get("value") for e in containers["csi-controller"]["env"]}

    assert bool(block.get("csiSnapshots")) == has_snapshots
    assert ("csi-snapshotter" in containers) == has_snapshots
    # The class is the controller's (from discovery), never a rendered object.
    assert [d for d in docs if d["kind"] == "VolumeSnapshotClass"] == []
    assert (env.get("CLOUDLOOP_CSI__VOLUME_SNAPSHOT_CLASS__ENABLED") == "true") == has_snapshots
    if has_snapshots:
        snapshotter = containers["csi-snapshotter"]
        assert snapshotter["image"].endswith(f"/csi-snapshotter:{CSI_SNAPSHOTTER_VERSION}")
        assert "--csi-address=/csi/csi.sock" in snapshotter["args"]
        assert "--leader-election=true" in snapshotter["args"]
        # The stack's csi-snapshotter (tests/csi) runs with the chart's flags.
        assert set(SNAPSHOTTER_FLAGS) <= set(snapshotter["args"])
        assert snapshotter["volumeMounts"] == containers["csi-provisioner"]["volumeMounts"]


def _snapshot_class_settings(docs: list[dict[str, Any]]) -> Any:
    from cloudloop.settings import VolumeSnapshotClassSettings

    env = {e["name"]: e.get("value") for e in _containers(docs)["csi-controller"]["env"]}
    prefix = "CLOUDLOOP_CSI__VOLUME_SNAPSHOT_CLASS__"
    values: dict[str, Any] = {
        k.removeprefix(prefix).lower(): v for k, v in env.items() if k.startswith(prefix)
    }
    if "parameters" in values:
        values["parameters"] = json.loads(values["parameters"])
    return VolumeSnapshotClassSettings.model_validate(values)


def test_the_volume_snapshot_class_is_the_drivers_default_and_deletes(helm: Helm) -> None:
    """The chart's ``csi.snapshots.volumeSnapshotClass`` reaches the controller, which keeps the
    class (tests/csi/test_storage_class_exclude.py), and its RBAC lets it."""
    from cloudloop.csi.objects import volume_snapshot_class_object
    from cloudloop.settings import CsiSettings

    docs = render(helm, "aws", {"csi.driverName": "ebs.example.io"}, api_versions=(SNAPSHOT_API,))
    wanted = _snapshot_class_settings(docs)
    snapshot_class = volume_snapshot_class_object(
        CsiSettings(driver_name="ebs.example.io", volume_snapshot_class=wanted)
    )
    assert snapshot_class["metadata"]["name"] == "cloudloop"
    assert snapshot_class["driver"] == "ebs.example.io"
    assert snapshot_class["deletionPolicy"] == "Delete"
    assert "parameters" not in snapshot_class
    annotations = snapshot_class["metadata"]["annotations"]
    assert annotations["snapshot.storage.kubernetes.io/is-default-class"] == "true"
    role = find(docs, "ClusterRole", "-csi-controller")
    verbs = {
        v for r in role["rules"] if "volumesnapshotclasses" in r["resources"] for v in r["verbs"]
    }
    assert {"get", "list", "create", "patch", "delete"} <= verbs

    named = render(
        helm,
        "aws",
        {
            "csi.snapshots.volumeSnapshotClass.name": "ebs",
            "csi.snapshots.volumeSnapshotClass.default": "false",
            "csi.snapshots.volumeSnapshotClass.parameters.tagSpecification_1": "team=storage",
        },
        api_versions=(SNAPSHOT_API,),
    )
    other = _snapshot_class_settings(named)
    assert other.enabled and other.name == "ebs" and other.default is False
    assert other.parameters == {"tagSpecification_1": "team=storage"}


def test_without_the_snapshot_crds_no_class_is_rendered_but_the_sidecar_runs(helm: Helm) -> None:
    docs = render(helm, "aws")

    assert [d for d in docs if d["kind"] == "VolumeSnapshotClass"] == []
    assert "csi-snapshotter" in _containers(docs)
    # The controller finds out itself: without the CRDs it makes no class.
    assert _snapshot_class_settings(docs).enabled


@pytest.mark.parametrize(
    "sets",
    [
        {"csi.snapshots.enabled": "false"},
        {"csi.snapshots.volumeSnapshotClass.create": "false"},
    ],
    ids=["snapshots-off", "no-class"],
)
def test_snapshots_can_be_turned_off(helm: Helm, sets: dict[str, str]) -> None:
    docs = render(helm, "aws", sets, api_versions=(SNAPSHOT_API,))
    role = find(docs, "ClusterRole", "-csi-controller")
    snapshot_rules = [
        r
        for r in role["rules"]
        if "snapshot.storage.k8s.io" in r["apiGroups"]
        and (
            "volumesnapshotcontents/status" in r["resources"]
            # csi-snapshotter's watch (the controller's own class rule has none)
            or ("volumesnapshotclasses" in r["resources"] and "watch" in r["verbs"])
        )
    ]

    assert [d for d in docs if d["kind"] == "VolumeSnapshotClass"] == []
    assert not _snapshot_class_settings(docs).enabled
    sidecar_on = sets.get("csi.snapshots.enabled") != "false"
    assert ("csi-snapshotter" in _containers(docs)) == sidecar_on
    assert bool(snapshot_rules) == sidecar_on


def test_the_termination_handler_runs_both_modes_on_aws_by_default(helm: Helm) -> None:
    """AWS: the IMDS DaemonSet (NODE_NAME, host network, its own settings only) and the queue's
    pre-delete uninstall Job; the queue mode makes its own queue (``queue_url`` empty)."""
    docs = render(helm, "aws")
    pod = find(docs, "DaemonSet", "-nth-imds")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][-1] == "termination-imds" and pod["hostNetwork"] is True
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "CLOUDLOOP_TEMPORAL__ADDRESS" not in env and "CLOUDLOOP_CONFIG" not in env
    assert env["CLOUDLOOP_NTH__IMDS_POLL_INTERVAL_S"]["value"] == "2"
    assert "volumeMounts" not in container and "volumes" not in pod
    job = find(docs, "Job", "-nth-uninstall")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert job["spec"]["template"]["spec"]["containers"][0]["args"][-2:] == [
        "termination",
        "uninstall",
    ]
    # The Job only starts a workflow: the worker's credentials Secret is not mounted in it.
    worker_pod = find(docs, "Deployment", "-worker")["spec"]["template"]["spec"]
    (credentials,) = [
        v["secret"]["secretName"] for v in worker_pod["volumes"] if v["name"] == "credentials"
    ]
    job_pod = job["spec"]["template"]["spec"]
    assert all(v.get("secret", {}).get("secretName") != credentials for v in job_pod["volumes"])
    config = yaml.safe_load(find(docs, "ConfigMap", "cloudloop")["data"]["config.yaml"])
    assert config["nth"]["queue_url"] == "" and config["nth"]["manage_queue"] is True

    elsewhere = render(helm, "aws", {"config.nth.queue_url": "https://sqs/q"})
    assert not [d for d in elsewhere if d["metadata"]["name"].endswith("-nth-uninstall")]
    off = render(helm, "aws", {"nth.imds.enabled": "false"})
    assert not [d for d in off if d["metadata"]["name"].endswith("-nth-imds")]
    dvp = render(helm, "dvp")
    assert not [d for d in dvp if "-nth-" in d["metadata"]["name"]]


def test_layout_configs_are_mounted_into_the_worker_only(helm: Helm) -> None:
    """``layouts.existingSecret``: the cluster YAMLs the layout commands name with
    ``--worker-config-path`` reach the worker pods (read-only), never the starter's."""
    plain = render(helm, "aws")
    assert "layouts" not in {v["name"] for v in _pod(plain, "Deployment", "-worker")["volumes"]}
    docs = render(helm, "aws", {"layouts.existingSecret": "cluster-layouts"})
    worker = _pod(docs, "Deployment", "-worker")
    main = container(find(docs, "Deployment", "-worker"))
    assert _config_sources(worker, main)["/etc/cloudloop/layouts"] == ("Secret", "cluster-layouts")
    [mount] = [m for m in main["volumeMounts"] if m["name"] == "layouts"]
    assert mount["readOnly"] is True
    starter = _pod(docs, "Deployment", "-starter")
    assert "layouts" not in {v["name"] for v in starter["volumes"]}
    # the worker reads layout files only under that mount (its layouts.source_dir)
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env["CLOUDLOOP_LAYOUTS__SOURCE_DIR"] == "/etc/cloudloop/layouts"
    moved = render(helm, "aws", {"layouts.existingSecret": "l", "layouts.mountPath": "/srv/l"})
    moved_env = {
        e["name"]: e.get("value") for e in container(find(moved, "Deployment", "-worker"))["env"]
    }
    assert moved_env["CLOUDLOOP_LAYOUTS__SOURCE_DIR"] == "/srv/l"
    assert "CLOUDLOOP_LAYOUTS__SOURCE_DIR" not in {
        e["name"] for e in container(find(docs, "Deployment", "-starter"))["env"]
    }


@pytest.mark.parametrize(
    ("sets", "queue_env", "scope_env"),
    [
        pytest.param({}, None, None, id="derived-from-clusterName"),
        pytest.param({"temporal.taskQueue": "ours"}, "ours", None, id="explicit-queue"),
        pytest.param(
            {"temporal.taskQueue": "cloudloop", "temporal.workflowIdScope": ""},
            "cloudloop",
            "",
            id="pinned-upgrade",
        ),
    ],
)
def test_the_task_queue_derives_from_the_cluster_unless_pinned(
    helm: Helm, sets: dict[str, str], queue_env: str | None, scope_env: str | None
) -> None:
    """A fresh install leaves the queue to the settings (``cloudloop-<clusterName>``); values pin
    it (and the ID scope) for every process alike, and the ConfigMap records what is in use so
    an upgrade keeps it."""
    docs = render(helm, "aws", sets)
    for kind, suffix, name in (
        ("Deployment", "-worker", "worker"),
        ("Deployment", "-starter", "starter"),
        ("Deployment", "-csi-controller", "csi-controller"),
    ):
        env = {
            e["name"]: e.get("value")
            for e in _main_container(_pod(docs, kind, suffix), name)["env"]
        }
        assert env.get("CLOUDLOOP_TEMPORAL__TASK_QUEUE") == queue_env, name
        assert env.get("CLOUDLOOP_TEMPORAL__WORKFLOW_ID_SCOPE") == scope_env, name
        assert env["CLOUDLOOP_CLUSTER_NAME"] == "install-test"
    data = next(
        d["data"]
        for d in docs
        if d["kind"] == "ConfigMap" and "temporal-task-queue" in d.get("data", {})
    )
    assert data["temporal-task-queue"] == (queue_env or "")
    assert data.get("temporal-workflow-id-scope") == scope_env
    settings = Settings(cluster_name="install-test", temporal={"task_queue": queue_env or ""})
    assert settings.temporal.task_queue == (queue_env or "cloudloop-install-test")
