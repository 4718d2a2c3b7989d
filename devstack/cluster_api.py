"""The Cluster API core manager on a local control plane, wired the way controller-runtime's
envtest wires webhooks: no cert-manager, no Service.

Before the manager starts, its CRDs (``config/crd/bases`` of the module) are installed with the
conversion webhook, and ``config/webhook/manifests.yaml`` with every ``clientConfig.service``
replaced by ``url: https://127.0.0.1:<port>/<path>``; ``caBundle`` is the plane's CA, which also
issues the webhook server's certificate. The manager runs with the admin kubeconfig (no RBAC) and
leader election off; readiness is its ``/readyz``, which waits for the webhook server.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

from cloudloop.kube.api import Kube
from cloudloop.kube.client import api_client
from cloudloop.kube.resources import Resource
from devstack import gotools, pki
from devstack.crds import apply_crds
from devstack.process import ManagedProcess, free_port, http_ok

#: The GoTool (and control-plane component) name of the manager.
MANAGER = "cluster-api-manager"
_WRAPPER_MODULE = "cluster-api"
_MODULE_PATH = "sigs.k8s.io/cluster-api"
#: Prefix of the webhook configurations' names, so they cannot clash with a provider's.
_WEBHOOK_CONFIG_PREFIX = "capi-"

_WEBHOOK_CONFIGURATIONS = {
    "MutatingWebhookConfiguration": Resource(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        namespaced=False,
    ),
    "ValidatingWebhookConfiguration": Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        namespaced=False,
    ),
}


def module_source() -> Path:
    """The Cluster API module's source folder (CRDs, webhook manifests)."""
    return gotools.module_source(_WRAPPER_MODULE, _MODULE_PATH)


def crds_with_conversion(
    source: Path, webhook_base_url: str, ca_bundle: str
) -> list[dict[str, Any]]:
    """The CRDs, each multi-version one converting through the manager's ``/convert``."""
    documents: list[dict[str, Any]] = []
    for path in sorted((source / "config" / "crd" / "bases").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            if len(doc["spec"]["versions"]) > 1:
                doc["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "conversionReviewVersions": ["v1", "v1beta1"],
                        "clientConfig": {
                            "url": f"{webhook_base_url}/convert",
                            "caBundle": ca_bundle,
                        },
                    },
                }
            documents.append(doc)
    return documents


def webhook_configurations(
    source: Path, webhook_base_url: str, ca_bundle: str
) -> list[dict[str, Any]]:
    """``config/webhook/manifests.yaml`` with each webhook calling ``webhook_base_url`` directly."""
    configurations: list[dict[str, Any]] = []
    text = (source / "config" / "webhook" / "manifests.yaml").read_text()
    for doc in yaml.safe_load_all(text):
        if not doc or doc.get("kind") not in _WEBHOOK_CONFIGURATIONS:
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": _WEBHOOK_CONFIG_PREFIX + doc["metadata"]["name"]}
        for webhook in doc.get("webhooks") or []:
            service = webhook["clientConfig"].pop("service")
            webhook["clientConfig"] = {
                "url": f"{webhook_base_url}{service.get('path', '')}",
                "caBundle": ca_bundle,
            }
        configurations.append(doc)
    return configurations


def install(kube: Kube, plane_dir: Path, webhook_port: int, ca_cert: Path) -> list[str]:
    """Install the CRDs and webhook configurations for a manager on ``webhook_port``."""
    source = module_source()
    base_url = f"https://127.0.0.1:{webhook_port}"
    ca_bundle = base64.b64encode(ca_cert.read_bytes()).decode()
    crd_file = plane_dir / "cluster-api-crds.yaml"
    crd_file.write_text(
        yaml.safe_dump_all(crds_with_conversion(source, base_url, ca_bundle), sort_keys=False)
    )
    names = apply_crds(kube, [crd_file], timeout_s=60)
    for config in webhook_configurations(source, base_url, ca_bundle):
        resource = _WEBHOOK_CONFIGURATIONS[config["kind"]]
        name = config["metadata"]["name"]
        existing = kube.get(resource, name)
        if existing is None:
            kube.create(resource, config)
        else:
            config["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            kube.request("PUT", resource.path(None, name), body=config)
    return names


def start_manager(
    binary: Path, plane_dir: Path, kubeconfig: Path, ca: pki.CertificateAuthority
) -> ManagedProcess:
    """Install the CRDs and webhooks, then start the manager (readiness: its ``/readyz``)."""
    serving = ca.issue(
        "cluster-api-webhook",
        common_name="cluster-api-webhook",
        server_hosts=("127.0.0.1", "localhost"),
    )
    webhook_port, health_port, metrics_port = free_port(), free_port(), free_port()
    install(Kube(api_client(kubeconfig)), plane_dir, webhook_port, ca.pair.cert)
    process = ManagedProcess(
        MANAGER,
        [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            f"--webhook-port={webhook_port}",
            f"--webhook-cert-dir={serving.cert.parent}",
            f"--webhook-cert-name={serving.cert.name}",
            f"--webhook-key-name={serving.key.name}",
            f"--health-addr=127.0.0.1:{health_port}",
            f"--diagnostics-address=127.0.0.1:{metrics_port}",
            "--insecure-diagnostics",
        ],
        log_dir=plane_dir / "logs",
        ready=lambda: http_ok(f"http://127.0.0.1:{health_port}/readyz"),
    )
    process.start()
    return process
