"""The chart's payload codec (issue 39): the key Secret made once, mounted into every pod that
talks to Temporal (and no other), and the optional ``cloudloop codec-server``. Rendered by the
real helm."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from cloudloop import codec
from tests.install.chart import CHART, Helm, find, provider_values, render

KEY_DIR = "/etc/cloudloop/codec-keys"
#: The workloads whose processes talk to Temporal (AWS: with the node termination handler).
TEMPORAL_PODS = [
    ("Deployment", "-worker"),
    ("Deployment", "-starter"),
    ("Deployment", "-csi-controller"),
    ("Job", "-nth-uninstall"),
]


def pod(docs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    return dict(find(docs, kind, suffix)["spec"]["template"]["spec"])


def codec_secret(spec: dict[str, Any]) -> str | None:
    """The Secret mounted at the codec key directory by the pod's first container."""
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for mount in spec["containers"][0].get("volumeMounts") or []:
        if mount["mountPath"] == KEY_DIR:
            assert mount.get("readOnly") is True
            return str(volumes[mount["name"]]["secret"]["secretName"])
    return None


def made_secrets(docs: list[dict[str, Any]]) -> list[str]:
    """The codec Secrets the chart makes."""
    return [
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-codec")
    ]


def env(spec: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in spec["containers"][0].get("env") or []}


def test_every_pod_that_talks_to_temporal_holds_the_chart_made_key(
    helm: Helm, tmp_path: Path
) -> None:
    docs = render(helm, "aws")
    secret = find(docs, "Secret", "-codec")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    [(key_id, value)] = secret["data"].items()
    assert key_id == "key-1"
    (tmp_path / key_id).write_bytes(base64.b64decode(value))  # the file a pod sees
    ring = codec.read_key_ring(tmp_path)  # 32 random bytes, in base64, as the product reads
    assert ring.active == "key-1"
    for kind, suffix in TEMPORAL_PODS:
        spec = pod(docs, kind, suffix)
        assert codec_secret(spec) == secret["metadata"]["name"], suffix
        assert env(spec)["CLOUDLOOP_TEMPORAL__CODEC__ENABLED"] == "true"
        assert env(spec)["CLOUDLOOP_TEMPORAL__CODEC__KEY_DIR"] == KEY_DIR
    # the set-up hook runs before the Secret exists and sends no payload: no key there; nor on
    # the node agents (the CSI plugin, the IMDS agent), which never talk to Temporal
    assert codec_secret(pod(docs, "Job", "-temporal-setup")) is None
    assert "CLOUDLOOP_TEMPORAL__CODEC__KEY_DIR" not in env(pod(docs, "Job", "-temporal-setup"))
    assert codec_secret(pod(docs, "DaemonSet", "-csi-node")) is None
    assert codec_secret(pod(docs, "DaemonSet", "-nth-imds")) is None


def test_an_existing_secret_and_an_active_key_for_rotation(helm: Helm) -> None:
    docs = render(
        helm,
        "aws",
        {"temporal.codec.existingSecret": "my-keys", "temporal.codec.activeKeyId": "2026-12"},
    )
    assert not [
        d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-codec")
    ]
    for kind, suffix in TEMPORAL_PODS:
        spec = pod(docs, kind, suffix)
        assert codec_secret(spec) == "my-keys"
        assert env(spec)["CLOUDLOOP_TEMPORAL__CODEC__ACTIVE_KEY_ID"] == "2026-12"


def test_the_codec_can_be_turned_off_explicitly(helm: Helm) -> None:
    docs = render(helm, "aws", {"temporal.codec.enabled": "false"})
    assert not [
        d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-codec")
    ]
    spec = pod(docs, "Deployment", "-worker")
    assert codec_secret(spec) is None
    assert env(spec)["CLOUDLOOP_TEMPORAL__CODEC__ENABLED"] == "false"


def test_the_codec_server_is_optional_and_authorized(helm: Helm) -> None:
    assert not [d for d in render(helm, "aws") if d["metadata"]["name"].endswith("-codec-server")]
    sets = {
        "codecServer.enabled": "true",
        "codecServer.tokens.secretName": "codec-tokens",
        "codecServer.kubernetesAuthorization": "true",
        "codecServer.corsOrigins[0]": "https://temporal.example.com",
    }
    docs = render(helm, "aws", sets)
    spec = pod(docs, "Deployment", "-codec-server")
    assert spec["containers"][0]["args"][0] == "codec-server"
    variables = env(spec)
    assert variables["CLOUDLOOP_CODEC_SERVER__CORS_ORIGINS"] == '["https://temporal.example.com"]'
    assert variables["CLOUDLOOP_CODEC_SERVER__TOKENS_FILE"] == "/etc/cloudloop/codec-tokens/tokens"
    assert variables["CLOUDLOOP_CODEC_SERVER__KUBERNETES_AUTHORIZATION"] == "true"
    assert codec_secret(spec) is not None
    mounted = {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert "cloudloop-credentials" not in mounted  # the keys, never the cloud's credentials
    assert not any(k.startswith("CLOUDLOOP_TEMPORAL__ADDRESS") for k in variables)
    service = find(docs, "Service", "-codec-server")
    assert service["spec"]["ports"][0]["port"] == 8888
    user = find(docs, "ClusterRole", "-codec-user")
    assert user["rules"] == [{"nonResourceURLs": ["/cloudloop/codec"], "verbs": ["post"]}]
    binding = find(docs, "ClusterRoleBinding", "-codec-server-auth-delegator")
    assert binding["roleRef"]["name"] == "system:auth-delegator"


def test_a_codec_server_without_authorization_is_refused(helm: Helm) -> None:
    result = helm.template(
        [provider_values()["aws"]],
        {
            "clusterName": "c",
            "cloud.credentials.files.credentials": "placeholder",
            "codecServer.enabled": "true",
        },
        check=False,
    )
    assert result.returncode != 0
    assert "codecServer needs an authorization check" in result.stderr
    assert (CHART / "templates" / "codec-server.yaml").exists()


def test_the_rendered_codec_env_loads_into_the_settings(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cloudloop.cloud.registry import Settings

    docs = render(helm, "aws", {"temporal.codec.activeKeyId": "key-2"})
    for entry in find(docs, "Deployment", "-worker")["spec"]["template"]["spec"]["containers"][0][
        "env"
    ]:
        if "value" in entry and entry["name"].startswith("CLOUDLOOP_TEMPORAL__"):
            monkeypatch.setenv(entry["name"], entry["value"])

    settings = Settings().temporal.codec

    assert settings.enabled and str(settings.key_dir) == KEY_DIR
    assert settings.active_key_id == "key-2"
