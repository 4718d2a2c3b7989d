"""Each CAPI provider publishes the node manager's registration Secrets under Deckhouse's names."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest

from cloudloop.cloud.registry import PROVIDERS, Settings
from cloudloop.kube.api import Kube
from cloudloop.kube.bodies import Secret
from cloudloop.kube.resources import SECRETS


@pytest.mark.parametrize(
    "provider", [pytest.param(p, id=p) for p, r in PROVIDERS.items() if r.registration]
)
def test_registration_secrets_per_provider(provider: str) -> None:
    record = PROVIDERS[provider]
    assert record.registration is not None
    bodies = record.registration(record.section(Settings()))
    names = [b["metadata"]["name"] for b in bodies]
    assert names == ["d8-node-manager-cloud-provider", f"d8-node-manager-cloud-provider-{provider}"]
    assert all(b["metadata"]["namespace"] == "kube-system" for b in bodies)
    assert base64.b64decode(bodies[0]["data"]["type"]).decode() == provider


@pytest.mark.parametrize(
    "provider", [pytest.param(p, id=p) for p, r in PROVIDERS.items() if r.registration]
)
def test_every_registration_announces_cluster_api_never_an_mcm_kind(provider: str) -> None:
    """An empty ``machineClassKind`` tells the node manager to use Cluster API: nothing serves
    the Machine Controller Manager's ``<Cloud>MachineClass``, so announcing one would leave
    every node group without machines. The Cluster API kinds are announced instead."""
    record = PROVIDERS[provider]
    assert record.registration is not None
    for body in record.registration(record.section(Settings())):
        data = {k: base64.b64decode(v).decode() for k, v in body["data"].items()}
        assert data["machineClassKind"] == "", (
            f"{provider} announces MCM {data['machineClassKind']}"
        )
        assert data["capiClusterKind"] and data["capiMachineTemplateKind"]
        assert data["capiMachineTemplateAPIVersion"].startswith("infrastructure.cluster.x-k8s.io/")


@pytest.mark.parametrize(
    "provider", [pytest.param(p, id=p) for p, r in PROVIDERS.items() if r.node_templates]
)
def test_registration_publishes_the_machine_template_contract(provider: str) -> None:
    """The starter writes ``d8-cloud-provider-<name>-capi`` (key ``template.yaml``) beside the
    registration Secrets; its template renders the kinds the registration announces."""
    from types import SimpleNamespace
    from typing import cast

    from cloudloop.nodegroup.contract import Contract
    from starters.registration import CloudProviderRegistration

    settings = Settings().model_copy(update={"provider": provider})
    context = cast(Any, SimpleNamespace(settings=settings, kube=None))
    registration = CloudProviderRegistration.from_context(context)
    assert registration is not None
    bodies = {b["metadata"]["name"]: b for b in registration.secrets()}
    capi = bodies[f"d8-cloud-provider-{provider}-capi"]
    labels = capi["metadata"]["labels"]
    assert labels["cloud-provider.deckhouse.io/ephemeral-nodes-templates"] == "capi"
    assert labels["cloud-provider.deckhouse.io/name"] == provider
    contract = Contract.parse(base64.b64decode(capi["data"]["template.yaml"]).decode())
    data = {
        k: base64.b64decode(v).decode()
        for k, v in bodies["d8-node-manager-cloud-provider"]["data"].items()
    }
    record = PROVIDERS[provider]
    assert record.node_templates is not None
    assert data["instanceClassKind"] == record.node_templates.instance_class.kind
    rendered = contract.template.source
    assert data["capiMachineTemplateKind"] in rendered
    assert data["capiMachineTemplateAPIVersion"] in rendered


def test_rewriting_the_secret_drops_the_keys_the_values_no_longer_have(kube: Kube) -> None:
    """On the real kube-apiserver: a Secret another provider's values wrote (its ``aws``
    subtree), then this provider's: only this provider's keys are left (a merge patch alone
    would keep the stale ones)."""
    from starters.registration import write_secrets

    aws, dvp = PROVIDERS["aws"], PROVIDERS["dvp"]
    assert aws.registration is not None and dvp.registration is not None
    name = f"reg-{uuid.uuid4().hex[:6]}"

    def renamed(bodies: list[Secret]) -> list[Secret]:
        first = bodies[0]
        return [{**first, "metadata": {**first["metadata"], "name": name}}]

    try:
        assert write_secrets(kube, renamed(aws.registration(aws.section(Settings())))) == 1
        wanted = renamed(dvp.registration(dvp.section(Settings())))
        assert write_secrets(kube, wanted) == 1
        secret = kube.get(SECRETS, name, "kube-system") or {}
        assert secret["data"] == wanted[0]["data"]
        assert "aws" not in secret["data"]
        assert write_secrets(kube, wanted) == 0
    finally:
        kube.delete(SECRETS, name, "kube-system")
